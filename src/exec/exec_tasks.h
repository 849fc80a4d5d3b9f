/* The executor's threads lent to a job of its owner's: the receiver's
 * install copies its staging into the bound parameters on them, after the
 * run, while they are idle. */
#ifndef RS_EXEC_EXEC_TASKS_H
#define RS_EXEC_EXEC_TASKS_H

#include <stddef.h>

#include "core/pool.h"
#include "reshard/exec.h"

/* Runs fn(ctx, k) for every k < ntasks and returns when all have run: on
 * the executor's pool (made here if the run did not need one) and the
 * calling thread, or on the calling thread alone when the transport has no
 * worker threads to match or the pool's threads cannot start. Not while a
 * run is in flight; tasks may run in any order and at once. */
void rs__exec_run_tasks(rs_exec_h x, rs__pool_task_fn fn, void *ctx,
                        size_t ntasks);

#endif
