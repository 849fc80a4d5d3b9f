/* Internal model of trainer layouts: each manifest tensor's parallel role and
 * pipeline stage, computed once per (model, layout) so that walking the
 * shards of hundreds of ranks does not re-read tensor names. */
#ifndef RS_LAYOUT_TRAINER_IMPL_H
#define RS_LAYOUT_TRAINER_IMPL_H

#include <stdint.h>
#include "reshard/cuts.h"
#include "reshard/quant.h"
#include "reshard_layout/layout.h"

/* How megatron splits a tensor across the tp ranks of its stage. */
typedef enum rs__tensor_role {
    RS_ROLE_REPLICATED = 0, /* norms, routers, MLA down-projections */
    RS_ROLE_COLUMN,         /* dim 0 in tp equal parts */
    RS_ROLE_KV,             /* column, kv heads replicated when fewer than tp */
    RS_ROLE_ROW,            /* dim 1 in tp equal parts */
    RS_ROLE_VOCAB,          /* dim 0 in tp near-equal parts (real vocab) */
    RS_ROLE_EXPERT_WHOLE,   /* a routed expert's tensor, never etp-split */
    RS_ROLE_EXPERT_COLUMN,  /* a routed expert's gate/up: dim 0 by etp */
    RS_ROLE_EXPERT_ROW,     /* a routed expert's down: dim 1 by etp */
} rs__tensor_role_t;

typedef struct rs__trainer_tensor {
    uint8_t role;  /* rs__tensor_role_t */
    uint8_t fp8;   /* the checkpoint stores it in FP8 (quant_impl.h) */
    int32_t stage; /* pipeline stage holding it (megatron) */
} rs__trainer_tensor_t;

typedef struct rs__trainer_plan {
    rs_model_h model;
    rs_layout_t layout;          /* checked: world and dp filled */
    rs__trainer_tensor_t *tensors; /* per manifest tensor */
    size_t num_tensors;
    /* Borrowed. When set, each shard is published as its sub-boxes at
     * these cuts (rs_cuts_split), one after another from where the whole
     * shard would start, each on a 64-byte boundary; NULL publishes whole
     * shards. */
    rs_cuts_h cuts;
    /* RS_LAYOUT_FP8_COPIES: each shard of an FP8 tensor is followed by
     * its FP8 copy and scales under `quant` (trainer_fp8.c). */
    unsigned flags;
    rs_quant_desc_t quant;
    int64_t quant_block[2];
} rs__trainer_plan_t;

/* Checks a copy of `layout` against the model (a trainer layout only),
 * classifies every tensor and keeps cuts (may be NULL) and flags; with
 * RS_LAYOUT_FP8_COPIES reads the model's FP8 spec (a model without one
 * publishes no copies). */
rs_status_t rs__trainer_plan_init(rs__trainer_plan_t *plan, rs_model_h model,
                                  const rs_layout_t *layout, rs_cuts_h cuts,
                                  unsigned flags, rs_diag_t *diag);
void rs__trainer_plan_free(rs__trainer_plan_t *plan);

/* Calls cb for every non-empty shard of `rank` (or, with plan->cuts, every
 * sub-box of one), in manifest order, with its packed address. */
rs_status_t rs__trainer_plan_walk(const rs__trainer_plan_t *plan, int64_t rank,
                                  rs_shard_cb cb, void *ctx, rs_diag_t *diag);

/* Places one box of a tensor (whole, or as its sub-boxes at the plan's
 * cuts) at the walk's cursor (trainer_walk.c). */
struct walk;
rs_status_t rs__trainer_emit(struct walk *w, const rs_tensor_info_t *t,
                             const int64_t *off, const int64_t *shape);
/* After shard [off, off + shape) of FP8 tensor t: its FP8 copy
 * "<src>#<spec>" over the blocks lying wholly inside the shard and its
 * scales "<src>#<spec>#scale" over their block grid; nothing when no
 * block lies wholly inside (trainer_fp8.c). */
rs_status_t rs__trainer_emit_fp8(struct walk *w, const rs__trainer_plan_t *plan,
                                 const rs_tensor_info_t *t,
                                 const int64_t *off, const int64_t *shape,
                                 rs_diag_t *diag);

/* Pipeline stage of decoder layer `layer` when `layers` are split across
 * `pp` stages as evenly as possible, earlier stages taking the extra one. */
int64_t rs__layout_stage_of_layer(int64_t layers, int64_t pp, int64_t layer);

#endif
