/* Stopping a wait from another thread or from a signal handler. A caller
 * raises an rs_cancel_t; every wait of the library that was handed it (the
 * `cancel` field of rs_dir_params_t, rs_transport_params_t and
 * rs_exec_params_t, or a handle owning one: rs_receiver_cancel,
 * rs_publisher_cancel) looks at it at least every RS_CANCEL_POLL_S seconds
 * and then returns RS_ERR_CANCELLED, cleaning up as for a failure of the
 * same call. It stays raised until cleared, so a raise that comes just
 * before a wait starts still stops it.
 * Threads: raising, clearing and reading are lock-free atomic operations
 * on the flag, safe from any thread and from a signal handler. */
#ifndef RESHARD_CANCEL_H
#define RESHARD_CANCEL_H

#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest a wait handed a raised rs_cancel_t goes on, in seconds. */
#define RS_CANCEL_POLL_S 0.1

/* Zero-initialised: not raised. Touch `raised` only through the functions
 * below (they access it atomically). */
typedef struct rs_cancel {
    int raised;
} rs_cancel_t;

/* Raises the flag. NULL: no-op. */
RS_API void rs_cancel_raise(rs_cancel_t *cancel);
/* Clears the flag. NULL: no-op. */
RS_API void rs_cancel_clear(rs_cancel_t *cancel);
/* 1 when raised; 0 when not, or NULL. */
RS_API int rs_cancel_raised(const rs_cancel_t *cancel);

#ifdef __cplusplus
}
#endif
#endif
