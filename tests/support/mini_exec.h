/* A small in-memory executor for tests: runs a built plan against
 * registered shard and parameter buffers, checking that every read lies in
 * a published shard and every write in its parameter or staging buffer. */
#ifndef RS_TEST_MINI_EXEC_H
#define RS_TEST_MINI_EXEC_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/plan.h"

typedef struct mini_exec mini_exec_t;

/* The executor reads the plan's capture through rs_plan_capture. */
mini_exec_t *mini_exec_create(rs_plan_h plan);
void mini_exec_destroy(mini_exec_t *mx);

/* Registers nbytes of buf as what session publishes at addr. A read may
 * span registered buffers that are adjacent in the session's addresses. */
void mini_exec_add_shard(mini_exec_t *mx, const char *session, uint64_t addr,
                         const void *buf, uint64_t nbytes);

/* Registers the storage of capture parameter `param` (its full nbytes). */
void mini_exec_set_param(mini_exec_t *mx, size_t param, void *buf);

/* Executes segments, then full pulls, then converts. Returns 0, or -1 with
 * a message in err on the first violation (read outside a shard, write
 * outside a parameter or staging buffer, a staging byte written twice, an
 * unsupported cast). */
int mini_exec_run(mini_exec_t *mx, char *err, size_t errlen);

/* How many times each byte of a parameter was written by the run, over
 * every mechanism (exact segments, full-pull replays, converts); saturates
 * at 255. NULL for an unregistered parameter. */
const uint8_t *mini_exec_param_writes(mini_exec_t *mx, size_t param);

/* Staging elements of converts left unwritten (uncovered) and skipped. */
uint64_t mini_exec_skipped_elements(mini_exec_t *mx);

/* Casts one element; 0 for a pair the executor does not support. Equal
 * dtypes copy; bf16->f32, f16->f32 and f32->bf16 (round to nearest even). */
int mini_exec_cast(rs_dtype_t from, const void *src, rs_dtype_t to, void *dst);

#endif
