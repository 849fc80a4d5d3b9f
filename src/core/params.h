/* Option structs that grow without breaking binaries. Every public
 * rs_X_params_t starts with `size_t size`, set by its init macro to the
 * caller's sizeof: a program built against older headers passes a smaller
 * struct, and the library takes defaults for the fields past its size; a
 * struct larger than the library's own (newer headers, older library) or
 * smaller than the first version's is refused. */
#ifndef RS_CORE_PARAMS_H
#define RS_CORE_PARAMS_H

#include <stddef.h>
#include <string.h>

#include "core/diag.h"

/* Bytes of a params struct up to and including `last`, the last field of
 * its first version: the smallest size a caller may pass. */
#define RS__PARAMS_V1(type, last) \
    (offsetof(type, last) + sizeof(((type *)0)->last))

/* For rs_X_params_init_sized: writes the defaults (lib_size bytes, size
 * field included) over the caller's `size` bytes, as far as both reach,
 * zeroes what lies beyond the library's struct, and sets params->size to
 * `size`. A size too small to hold the size field writes nothing. */
void rs__params_init(void *params, size_t size, const void *defaults,
                     size_t lib_size);

/* Copies the caller's params over `defaults` into `out` (lib_size bytes):
 * the first given->size bytes are the caller's, the rest the defaults;
 * out->size becomes lib_size. NULL `given` means the defaults.
 * RS_ERR_INVALID_ARG naming `name` when given->size is below v1_size or
 * above lib_size; `out` is untouched then. */
rs_status_t rs__params_take(const void *given, const void *defaults,
                            size_t lib_size, size_t v1_size, const char *name,
                            rs_diag_t *diag, void *out);

/* The prototype of rs__<x>_params_take, for files that take params a
 * neighbour defines. */
#define RS__PARAMS_DECLARE(x)                                               \
    rs_status_t rs__##x##_params_take(const rs_##x##_params_t *given,       \
                                      rs_diag_t *diag,                      \
                                      rs_##x##_params_t *out)

/* Defines, for rs_<x>_params_t, rs_<x>_params_init_sized over
 * `defaults_fn` (a function filling every field but size) and
 * rs__<x>_params_take (rs__params_take with those defaults; `out` must not
 * be `given`). v1_last is the last field of the struct's first version. */
#define RS__PARAMS_DEFINE(x, defaults_fn, v1_last)                          \
    void rs_##x##_params_init_sized(rs_##x##_params_t *params, size_t size) \
    {                                                                       \
        rs_##x##_params_t d;                                                \
        memset(&d, 0, sizeof(d));                                           \
        defaults_fn(&d);                                                    \
        rs__params_init(params, size, &d, sizeof(d));                       \
    }                                                                       \
    RS__PARAMS_DECLARE(x);                                                  \
    RS__PARAMS_DECLARE(x)                                                   \
    {                                                                       \
        rs_##x##_params_t d;                                                \
        memset(&d, 0, sizeof(d));                                           \
        defaults_fn(&d);                                                    \
        return rs__params_take(given, &d, sizeof(d),                        \
                               RS__PARAMS_V1(rs_##x##_params_t, v1_last),   \
                               "rs_" #x "_params_t", diag, out);            \
    }

#endif
