/* Internal layout of a model manifest, shared by the config loader
 * (model.c, model_keys.c) and the per-architecture manifest builders
 * (model_dense.c, model_moe.c, model_deepseek.c). */
#ifndef RS_LAYOUT_MODEL_IMPL_H
#define RS_LAYOUT_MODEL_IMPL_H

#include <jansson.h>

#include "core/arena.h"
#include "core/json.h"
#include "core/strmap.h"
#include "core/vec.h"
#include "reshard_layout/model.h"

/* A manifest never has more tensors than this (Kimi-K2 has ~70k); a config
 * implying more is refused before anything is allocated. */
#define RS_MODEL_MAX_TENSORS ((int64_t)1 << 21)

/* One tensor: its name lives in the model's arena, its shape inline (every
 * manifest tensor has one or two dims), so 70k tensors stay a few MB. */
typedef struct rs__model_record {
    const char *name;
    int64_t shape[2];
    int32_t layer;  /* -1 outside the decoder layers */
    int32_t expert; /* -1 unless a routed expert's tensor */
    uint8_t ndim;
    uint8_t dtype;  /* rs_dtype_t */
} rs__model_record_t;

/* Variations within an architecture, set by the model_type table. */
enum {
    RS_FAM_QKV_BIAS = 1u << 0,      /* q/k/v projections carry a bias */
    RS_FAM_QK_NORM = 1u << 1,       /* per-head RMSNorm of q and k */
    RS_FAM_SHARED_EXPERT = 1u << 2, /* qwen2_moe: gated shared expert */
};

struct rs_model {
    rs_model_config_t cfg;
    rs_model_quant_t quant; /* method RS_MODEL_QUANT_NONE: no quantization_config */
    rs__arena_t arena;
    RS_VEC(rs__model_record_t, tensors);
    rs__strmap_t index;
    uint64_t params, bytes;
    /* Only while loading. */
    rs__json_ctx_t *ctx;
    unsigned flags;        /* RS_FAM_* */
    uint8_t *moe_layer;    /* per layer: 1 when its MLP is a routed MoE */
};

/* Reads the keys every architecture shares into m->cfg (model_keys.c). */
rs_status_t rs__model_read_common(rs__json_ctx_t *c, const json_t *root,
                                  rs_model_h m);
/* Reads and checks quantization_config into m->quant (model_quant.c). */
rs_status_t rs__model_read_quant(rs__json_ctx_t *c, const json_t *root,
                                 rs_model_h m);
/* Reads an integer key with bounds; absent or null leaves *out_p alone
 * unless required. */
rs_status_t rs__model_read_int(rs__json_ctx_t *c, const json_t *root,
                               const char *key, int required, int64_t min,
                               int64_t max, int64_t *out_p);
/* Reads a boolean key; absent or null leaves *out_p alone. */
rs_status_t rs__model_read_bool(rs__json_ctx_t *c, const json_t *root,
                                const char *key, int *out_p);
/* RS_ERR_UNSUPPORTED "<origin>: <key>: <message>": the message set, then
 * the origin and key put in front of it. */
#define rs__model_unsupported(c, key, ...)                                   \
    rs__model_prefixed((c), (key),                                           \
                       rs__diag_set((c)->diag, RS_ERR_UNSUPPORTED,           \
                                    __VA_ARGS__))
static inline rs_status_t rs__model_prefixed(const rs__json_ctx_t *c,
                                             const char *key, rs_status_t st)
{
    rs__diag_prefix(c->diag, "%s: %s: ", c->origin, key);
    return st;
}

/* Appends a tensor (ndim 1 or 2) named by a printf format; checks that its
 * size fits and that the name is new; keeps the totals. */
rs_status_t rs__model_add(rs_model_h m, int64_t layer, int64_t expert,
                          rs_dtype_t dtype, int ndim, int64_t d0, int64_t d1,
                          const char *fmt, ...) RS_PRINTF(8, 9);
/* "model.layers.<layer>.<suffix>" in the model's dtype. */
rs_status_t rs__model_add_layer(rs_model_h m, int64_t layer, const char *suffix,
                                int ndim, int64_t d0, int64_t d1);

/* Dense building blocks (model_dense.c). */
rs_status_t rs__model_gqa_attention(rs_model_h m, int64_t layer);
rs_status_t rs__model_dense_mlp(rs_model_h m, int64_t layer,
                                const char *prefix, int64_t inter);

/* The router (mlp.gate, with DeepSeek's score bias) and every routed
 * expert's gate/up/down projections (model_moe.c). */
rs_status_t rs__model_router_and_experts(rs_model_h m, int64_t layer);

/* Per-architecture key readers and layer builders. A key reader checks the
 * architecture's own keys and fills m->moe_layer. */
rs_status_t rs__model_dense_keys(rs__json_ctx_t *c, const json_t *root,
                                 rs_model_h m);
rs_status_t rs__model_dense_layer(rs_model_h m, int64_t layer);
/* One part of a layer (attention or MLP) that a builder adds. */
typedef rs_status_t (*rs__model_block_fn)(rs_model_h m, int64_t layer);
/* The decoder layer every architecture shares: input_layernorm, `attention`,
 * post_attention_layernorm, then `mlp` (model_dense.c). */
rs_status_t rs__model_decoder_layer(rs_model_h m, int64_t layer,
                                    rs__model_block_fn attention,
                                    rs__model_block_fn mlp);
rs_status_t rs__model_moe_keys(rs__json_ctx_t *c, const json_t *root,
                               rs_model_h m);
rs_status_t rs__model_moe_layer(rs_model_h m, int64_t layer);
rs_status_t rs__model_deepseek_keys(rs__json_ctx_t *c, const json_t *root,
                                    rs_model_h m);
rs_status_t rs__model_deepseek_layer(rs_model_h m, int64_t layer);

#endif
