/* The executor's own worker threads: runs a job of independent tasks
 * (replays, casts, digests) across them while the calling thread goes on
 * with the wire, then joins. One job at a time; started and joined by the
 * one thread that uses the executor. */
#ifndef RS_EXEC_POOL_H
#define RS_EXEC_POOL_H

#include <stddef.h>
#include "reshard/status.h"

typedef struct rs__pool rs__pool_t;

/* Runs task `task` of a job; tasks of one job may run at once on any
 * thread, in any order. */
typedef void (*rs__pool_task_fn)(void *ctx, size_t task);

/* Starts `workers` (>= 1) threads. RS_ERR_NO_MEMORY when they cannot all
 * be started (none are left running then). */
rs_status_t rs__pool_create(unsigned workers, rs_diag_t *diag,
                            rs__pool_t **pool_p);
/* Joins the threads; the pool must be idle (no job started and not
 * joined). NULL is ignored. */
void rs__pool_destroy(rs__pool_t *pool);
unsigned rs__pool_workers(const rs__pool_t *pool);

/* Hands tasks [0, ntasks) of fn(ctx, .) to the workers and returns at
 * once; ctx must stay valid until rs__pool_join. */
void rs__pool_start(rs__pool_t *pool, rs__pool_task_fn fn, void *ctx,
                    size_t ntasks);
/* Runs what is left of the job on the calling thread too, and returns
 * when every task has finished (its writes are then visible here). */
void rs__pool_join(rs__pool_t *pool);

#endif
