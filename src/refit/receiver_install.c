/* The install's copy: every staged parameter's shadow into its bound
 * storage, once the lease is confirmed. The bytes are cut into pieces of
 * INSTALL_PIECE across parameters (a large parameter into several, small
 * ones together) that run on the executor's threads, idle once the run has
 * ended, each with streaming stores (core/copy_stream.h): the bound storage
 * is not read until the engine next runs, so its lines need not be read
 * before they are overwritten, nor kept in the caches. */
#include <stdlib.h>

#include "core/copy_stream.h"
#include "exec/exec_tasks.h"
#include "refit/receiver_impl.h"

/* Large enough that a piece's start and the pool's hand-off are noise,
 * small enough that the threads share a model of a few hundred MiB. */
#define INSTALL_PIECE ((uint64_t)8 << 20)

typedef struct install_job {
    const rs__receiver_bind_t *binds;
    const uint64_t *start; /* start[p]: staged bytes before param p;
                            * start[n]: all of them */
    size_t n;
} install_job_t;

static uint64_t staged_bytes(const rs__receiver_bind_t *b)
{
    return b->shadow != NULL ? b->nbytes : 0;
}

/* The param holding staged byte `at` (< start[n]): the p with
 * start[p] <= at < start[p + 1]. */
static size_t param_at(const install_job_t *j, uint64_t at)
{
    size_t lo = 0, hi = j->n; /* start[lo] <= at < start[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (j->start[mid] <= at)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Piece k: staged bytes [k * INSTALL_PIECE, (k + 1) * INSTALL_PIECE). */
static void copy_piece(void *ctx, size_t k)
{
    const install_job_t *j = ctx;
    const uint64_t total = j->start[j->n];
    const uint64_t lo = (uint64_t)k * INSTALL_PIECE;
    const uint64_t hi = total - lo > INSTALL_PIECE ? lo + INSTALL_PIECE : total;
    for (size_t p = param_at(j, lo); p < j->n && j->start[p] < hi; p++) {
        const rs__receiver_bind_t *b = &j->binds[p];
        uint64_t from = lo > j->start[p] ? lo : j->start[p];
        uint64_t to = hi < j->start[p + 1] ? hi : j->start[p + 1];
        if (to > from)
            rs__copy_stream((unsigned char *)b->base + (from - j->start[p]),
                            (const unsigned char *)b->shadow +
                                (from - j->start[p]),
                            (size_t)(to - from));
    }
}

uint64_t rs__receiver_install_copy(rs_receiver_h r, rs_exec_h exec)
{
    uint64_t *start = malloc((r->nparams + 1) * sizeof(*start));
    uint64_t total = 0;
    if (start == NULL) { /* one thread then: the copy itself cannot fail */
        for (size_t p = 0; p < r->nparams; p++) {
            const rs__receiver_bind_t *b = &r->binds[p];
            if (b->shadow != NULL)
                rs__copy_stream(b->base, b->shadow, (size_t)b->nbytes);
            total += staged_bytes(b);
        }
        return total;
    }
    for (size_t p = 0; p < r->nparams; p++) {
        start[p] = total;
        total += staged_bytes(&r->binds[p]);
    }
    start[r->nparams] = total;
    install_job_t job = {r->binds, start, r->nparams};
    size_t pieces = (size_t)((total + INSTALL_PIECE - 1) / INSTALL_PIECE);
    rs__exec_run_tasks(exec, copy_piece, &job, pieces);
    free(start);
    return total;
}
