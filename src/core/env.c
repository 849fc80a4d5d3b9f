/* RESHARD_* environment variables: parsed strictly, refused by name. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "core/env.h"

rs_status_t rs__env_count(const char *name, uint64_t deflt, uint64_t max,
                          rs_diag_t *diag, uint64_t *value_p)
{
    const char *env = getenv(name);
    char *end = NULL;
    unsigned long long v = 0;

    if (env == NULL || *env == '\0') {
        *value_p = deflt;
        return RS_OK;
    }
    errno = 0;
    if (*env >= '0' && *env <= '9')
        v = strtoull(env, &end, 10);
    if (end == NULL || *end != '\0' || errno != 0 || v == 0 || v > max)
        return rs__diag_set(diag, RS_ERR_INPUT, "environment variable "
                            "%s='%.40s%s' is not a whole number from 1 to "
                            "%llu", name, env,
                            strlen(env) > 40 ? "..." : "",
                            (unsigned long long)max);
    *value_p = v;
    return RS_OK;
}
