/* The registry of backends, in the order their names are listed. */
#include <stddef.h>
#include <string.h>

#include "exec/backend.h"

static const rs__backend_t *const backends[] = {
    &rs__backend_local,
    &rs__backend_local_mt,
    &rs__backend_cma,
    &rs__backend_ucx,
};

const rs__backend_t *rs__backend_find(const char *name)
{
    size_t n = sizeof(backends) / sizeof(backends[0]);
    for (size_t i = 0; name != NULL && i < n; i++) {
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    }
    return NULL;
}
