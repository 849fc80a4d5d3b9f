/* The one copy of the option-struct size rule (see params.h). */
#include <string.h>

#include "core/params.h"

void rs__params_init(void *params, size_t size, const void *defaults,
                     size_t lib_size)
{
    if (params == NULL || size < sizeof(size_t))
        return;
    memcpy(params, defaults, size < lib_size ? size : lib_size);
    if (size > lib_size) /* fields this library does not know */
        memset((char *)params + lib_size, 0, size - lib_size);
    memcpy(params, &size, sizeof(size));
}

rs_status_t rs__params_take(const void *given, const void *defaults,
                            size_t lib_size, size_t v1_size, const char *name,
                            rs_diag_t *diag, void *out)
{
    size_t size;

    if (given == NULL) {
        memmove(out, defaults, lib_size);
        memcpy(out, &lib_size, sizeof(lib_size));
        return RS_OK;
    }
    memcpy(&size, given, sizeof(size));
    if (size < v1_size || size > lib_size)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "%s: size %zu is not one this library knows "
                            "(%zu to %zu bytes); fill the struct with its "
                            "params_init macro", name, size, v1_size,
                            lib_size);
    if (out != defaults)
        memmove(out, defaults, lib_size);
    memmove(out, given, size);
    memcpy(out, &lib_size, sizeof(lib_size));
    return RS_OK;
}
