/* Internal helpers that fill an rs_diag_t where an error is found. */
#ifndef RS_CORE_DIAG_H
#define RS_CORE_DIAG_H

#include "reshard/status.h"

#if defined(__GNUC__)
#define RS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RS_PRINTF(a, b)
#endif

/* Sets status and a formatted message (diag may be NULL); returns status. */
rs_status_t rs__diag_set(rs_diag_t *diag, rs_status_t status, const char *fmt,
                         ...) RS_PRINTF(3, 4);

/* Prepends context ("file.json: ") to the message already in diag; returns
 * the status already in diag. */
rs_status_t rs__diag_prefix(rs_diag_t *diag, const char *fmt, ...)
    RS_PRINTF(2, 3);

#endif
