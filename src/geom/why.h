/* The geometry layer's refusals: geometry reports why a chain or a copy is
 * refused into a caller's text buffer (the planner turns it into a
 * fallback reason or a diag), not into an rs_diag_t. */
#ifndef RS_GEOM_WHY_H
#define RS_GEOM_WHY_H

#include <stddef.h>

#include "reshard/status.h"

/* Formats the reason into why[n] (when why is not NULL and n > 0) and
 * returns st (view.c). */
rs_status_t rs__geom_why(rs_status_t st, char *why, size_t n, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));

#endif
