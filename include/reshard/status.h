/* reshard status codes and the diagnostic record that carries the detail.
 * Every fallible public function returns an rs_status_t; when the caller passes
 * an rs_diag_t, it receives a message naming what is wrong (file, tensor, op,
 * field).
 * Threads: an rs_diag_t belongs to the call it is passed to; rs_status_str
 * returns constant strings and may be called from any thread. */
#ifndef RESHARD_STATUS_H
#define RESHARD_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(RS_BUILDING_LIBRARY) && defined(__GNUC__)
#define RS_API __attribute__((visibility("default")))
#else
#define RS_API
#endif

/* A name kept for one release after it was renamed: using it warns, naming
 * the new one. */
#if defined(__GNUC__)
#define RS_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define RS_DEPRECATED(msg)
#endif

/* Errors are grouped by what is broken; the value ranges are stable. */
typedef enum rs_status {
    RS_OK = 0,
    RS_ERR_INVALID_ARG = -1,  /* the caller broke an API precondition */
    RS_ERR_INPUT = -10,       /* malformed or inconsistent input data */
    RS_ERR_IO = -11,          /* a file could not be read or written */
    RS_ERR_UNSUPPORTED = -20, /* geometry or operation outside what we support */
    RS_ERR_INCOMPLETE = -30,  /* bytes required by the caller are not covered */
    RS_ERR_VERIFY = -31,      /* installed bytes failed a check */
    RS_ERR_TRANSPORT = -40,   /* a transport failed to move bytes */
    RS_ERR_TIMEOUT = -50,     /* a bounded wait expired */
    RS_ERR_NO_MEMORY = -60,   /* an allocation or a configured limit failed */
    RS_ERR_CANCELLED = -51,   /* the caller cancelled a wait (rs_cancel_t) */
} rs_status_t;

/* Short constant name of a status ("RS_ERR_INPUT"); never NULL. */
RS_API const char *rs_status_str(rs_status_t status);

#define RS_DIAG_MSG_MAX 1024

/* Detail of the last failure of a call that was handed this record. */
typedef struct rs_diag {
    rs_status_t status;
    char msg[RS_DIAG_MSG_MAX];
} rs_diag_t;

/* Resets a diag to RS_OK with an empty message. Accepts NULL. */
RS_API void rs_diag_clear(rs_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
