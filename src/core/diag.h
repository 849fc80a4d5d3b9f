/* Internal helpers that fill an rs_diag_t where an error is found. */
#ifndef RS_CORE_DIAG_H
#define RS_CORE_DIAG_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/status.h"

#if defined(__GNUC__)
#define RS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RS_PRINTF(a, b)
#endif

/* Sets status and a formatted message (diag may be NULL); returns status. */
rs_status_t rs__diag_set(rs_diag_t *diag, rs_status_t status, const char *fmt,
                         ...) RS_PRINTF(3, 4);

/* clang's analyzer reads one file at a time and does not follow calls into
 * variadic functions, so it cannot see that the error helpers return the
 * status they set; it then explores "error reported, yet RS_OK returned"
 * paths that cannot happen (and reports the null pointer such a path leaves
 * behind). Under analysis only, each helper's call is spelled so that its
 * value is visibly that status: RS__RETURNS(status, call) for helpers whose
 * status is fixed. Statement expressions, so that a call used as a statement
 * draws no unused-value warning. The helpers are defined as (name) to keep
 * these macros out of the way. */
#if defined(__clang_analyzer__)
#define RS__RETURNS(status, call) __extension__({ (void)(call); (status); })
#define rs__diag_set(diag, status, ...)                                      \
    __extension__({                                                          \
        rs_status_t rs__diag_st = (status);                                  \
        (void)(rs__diag_set)((diag), rs__diag_st, __VA_ARGS__);              \
        rs__diag_st;                                                         \
    })
#endif

/* Prepends context ("file.json: ") to the message already in diag; returns
 * the status already in diag. */
rs_status_t rs__diag_prefix(rs_diag_t *diag, const char *fmt, ...)
    RS_PRINTF(2, 3);

/* Writes a shape as "[a, b, c]" into buf (cut short to fit len >= 1);
 * returns buf, for use in messages. */
const char *rs__format_dims(char *buf, size_t len, const int64_t *dims,
                            int ndim);


#endif
