/* The one worker pool: a fixed set of threads that runs a job of
 * independent numbered tasks while the calling thread goes on with other
 * work, then joins, plainly or by a deadline, and may cancel what has not
 * started. Used by the executor's stages and the local-mt transport. */
#ifndef RS_CORE_POOL_H
#define RS_CORE_POOL_H

#include <stddef.h>
#include <time.h>

#include "reshard/status.h"

/* Threads: one job at a time, started and joined (or joined by a
 * deadline) by one owning thread. rs__pool_cancel may be called from any
 * thread, a task included. */
typedef struct rs__pool rs__pool_t;

/* Runs task `task` of a job; tasks of one job may run at once on any
 * thread, in any order. */
typedef void (*rs__pool_task_fn)(void *ctx, size_t task);

/* Starts `workers` (>= 1) threads. RS_ERR_NO_MEMORY when they cannot all
 * be started (none are left running then); the message starts with
 * `who`. */
rs_status_t rs__pool_create(unsigned workers, const char *who,
                            rs_diag_t *diag, rs__pool_t **pool_p);
/* Joins the threads; the pool must be idle (no job started and not
 * joined). NULL is ignored. */
void rs__pool_destroy(rs__pool_t *pool);
unsigned rs__pool_workers(const rs__pool_t *pool);

/* Hands tasks [0, ntasks) of fn(ctx, .) to the workers and returns at
 * once; ctx must stay valid until the job is joined. */
void rs__pool_start(rs__pool_t *pool, rs__pool_task_fn fn, void *ctx,
                    size_t ntasks);
/* Runs what is left of the job on the calling thread too, and returns
 * when every task has finished (its writes are then visible here). */
void rs__pool_join(rs__pool_t *pool);

/* Stops handing out the job's tasks. Returns the first task that will
 * never run: tasks [that, ntasks) did not run, and every task below it has
 * run or is running (a join waits for those). A second call returns the
 * same number; after the job has been handed out whole it returns
 * ntasks. */
size_t rs__pool_cancel(rs__pool_t *pool);

/* Waits, without running tasks itself, for the job to finish by `until`
 * (CLOCK_MONOTONIC, e.g. rs__mono_after). RS_OK when it has: every task
 * has run or was cancelled, and their writes are visible here. Otherwise
 * RS_ERR_TIMEOUT, and the tasks still running at the deadline are listed
 * in late[0 .. *nlate_p) (late holds rs__pool_workers entries; it and
 * nlate_p may be NULL); the job is still open then: cancel it or not, and
 * join it (plainly or by a later deadline) before ctx goes. */
rs_status_t rs__pool_join_until(rs__pool_t *pool,
                                const struct timespec *until, size_t *late,
                                size_t *nlate_p);

#endif
