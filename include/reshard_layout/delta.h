/* Delta estimates for the simulator (docs/simulator.md#deltas): what a
 * receiver holding the previous version is expected to read for one run of
 * a served shard when each element changed with a given share, and whether
 * the cost model takes the delta or the full bytes for it. The rule is the
 * one a receiver applies (docs/cost-model.md).
 * Threads: one estimator per thread. */
#ifndef RESHARD_LAYOUT_DELTA_H
#define RESHARD_LAYOUT_DELTA_H

#include <stdint.h>
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_delta_estimator *rs_delta_estimator_h;

/* An estimator for shards of esize-byte elements (1, 2 or 4) whose
 * elements each changed with probability share (0 to 1), in chunks of the
 * codec's default size. RS_ERR_INVALID_ARG names a bad esize or share,
 * RS_ERR_NO_MEMORY. */
RS_API rs_status_t rs_delta_estimator_create(uint32_t esize, double share,
                                             rs_diag_t *diag,
                                             rs_delta_estimator_h *est_p);
RS_API void rs_delta_estimator_destroy(rs_delta_estimator_h est);

/* The estimate's assumption about the codec's relative kinds (steps, step
 * map; docs/delta.md): of the changed elements, the share step1 whose bits
 * moved by one as an integer of their bytes (+1 or -1), and of the others
 * the share escape whose step does not fit a signed byte. Each 0 to 1; the
 * defaults, bf16 as measured at lr 1e-6, are in docs/simulator.md#deltas.
 * RS_ERR_INVALID_ARG names a share outside 0 .. 1. */
RS_API rs_status_t rs_delta_estimator_set_steps(rs_delta_estimator_h est,
                                                double step1, double escape,
                                                rs_diag_t *diag);

/* Expected bytes of a delta read of elements [a, b) (a < b <= n) of a
 * shard of n elements: header, index entries, payload. 0 for an empty or
 * out-of-range run. */
RS_API double rs_delta_estimate_range(rs_delta_estimator_h est, uint64_t n,
                                      uint64_t a, uint64_t b);

/* Reads a delta read of one run takes (header, index, payload). */
RS_API uint32_t rs_delta_range_reads(void);

/* 1 when the cost model (nic_gbps, descriptor_ns as in rs_plan_params_t)
 * reads a run of full_bytes faster as a delta of delta_bytes. */
RS_API int rs_delta_pays(uint64_t full_bytes, double delta_bytes,
                         double nic_gbps, double descriptor_ns);

#ifdef __cplusplus
}
#endif

#endif
