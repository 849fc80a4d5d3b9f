/* Settings read from RESHARD_* environment variables. A variable that is
 * set but does not parse is an error naming it and its value, never a
 * silent fallback to the default: an operator who typed it meant it. */
#ifndef RS_CORE_ENV_H
#define RS_CORE_ENV_H

#include <stdint.h>

#include "reshard/status.h"

/* A whole number from 1 to max. Unset or empty: *value_p = deflt. Set to
 * anything else (sign, fraction, trailing text, 0, over max):
 * RS_ERR_INPUT, "environment variable NAME='VALUE' is not a whole number
 * from 1 to MAX", and *value_p untouched. */
rs_status_t rs__env_count(const char *name, uint64_t deflt, uint64_t max,
                          rs_diag_t *diag, uint64_t *value_p);

#endif
