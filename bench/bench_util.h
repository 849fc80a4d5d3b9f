/* What every benchmark needs: the library's monotonic clock
 * (rs_clock_seconds) and a fatal check that names the failed call.
 * Header-only: each bench is one program. */
#ifndef RS_BENCH_UTIL_H
#define RS_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "reshard/status.h"
#include "reshard/units.h"

/* Exits 1 with "<bench>: <what>: <status>: <message>" unless st is RS_OK.
 * Each bench defines BENCH_NAME before including this header. */
static inline void check(rs_status_t st, const rs_diag_t *diag,
                         const char *what)
{
    if (st == RS_OK)
        return;
    fprintf(stderr, "%s: %s: %s: %s\n", BENCH_NAME, what, rs_status_str(st),
            diag->msg);
    exit(1);
}

#endif
