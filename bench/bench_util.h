/* What every benchmark needs: a monotonic clock and a fatal check that
 * names the failed call. Header-only: each bench is one program. */
#ifndef RS_BENCH_UTIL_H
#define RS_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "reshard/status.h"

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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
