/* Internal model of trainer layouts: each manifest tensor's parallel role and
 * pipeline stage, computed once per (model, layout) so that walking the
 * shards of hundreds of ranks does not re-read tensor names. */
#ifndef RS_LAYOUT_TRAINER_IMPL_H
#define RS_LAYOUT_TRAINER_IMPL_H

#include <stdint.h>
#include "reshard/cuts.h"
#include "reshard_layout/layout.h"

/* How megatron splits a tensor across the tp ranks of its stage. */
typedef enum rs_tensor_role {
    RS_ROLE_REPLICATED = 0, /* norms, routers, MLA down-projections */
    RS_ROLE_COLUMN,         /* dim 0 in tp equal parts */
    RS_ROLE_KV,             /* column, kv heads replicated when fewer than tp */
    RS_ROLE_ROW,            /* dim 1 in tp equal parts */
    RS_ROLE_VOCAB,          /* dim 0 in tp near-equal parts (real vocab) */
    RS_ROLE_EXPERT_WHOLE,   /* a routed expert's tensor, never etp-split */
    RS_ROLE_EXPERT_COLUMN,  /* a routed expert's gate/up: dim 0 by etp */
    RS_ROLE_EXPERT_ROW,     /* a routed expert's down: dim 1 by etp */
} rs_tensor_role_t;

typedef struct rs_trainer_tensor {
    uint8_t role;  /* rs_tensor_role_t */
    int32_t stage; /* pipeline stage holding it (megatron) */
} rs_trainer_tensor_t;

typedef struct rs_trainer_plan {
    rs_model_h model;
    rs_layout_t layout;          /* checked: world and dp filled */
    rs_trainer_tensor_t *tensors; /* per manifest tensor */
    size_t num_tensors;
    /* Borrowed. When set, each shard is published as its sub-boxes at
     * these cuts (rs_cuts_split), one after another from where the whole
     * shard would start, each on a 64-byte boundary; NULL publishes whole
     * shards. */
    rs_cuts_h cuts;
} rs_trainer_plan_t;

/* Checks a copy of `layout` against the model (a trainer layout only) and
 * classifies every tensor; cuts start NULL. */
rs_status_t rs__trainer_plan_init(rs_trainer_plan_t *plan, rs_model_h model,
                                  const rs_layout_t *layout, rs_diag_t *diag);
void rs__trainer_plan_free(rs_trainer_plan_t *plan);

/* Calls cb for every non-empty shard of `rank` (or, with plan->cuts, every
 * sub-box of one), in manifest order, with its packed address. */
rs_status_t rs__trainer_plan_walk(const rs_trainer_plan_t *plan, int64_t rank,
                                  rs_shard_cb cb, void *ctx, rs_diag_t *diag);

/* Pipeline stage of decoder layer `layer` when `layers` are split across
 * `pp` stages as evenly as possible, earlier stages taking the extra one. */
int64_t rs__layout_stage_of_layer(int64_t layers, int64_t pp, int64_t layer);

#endif
