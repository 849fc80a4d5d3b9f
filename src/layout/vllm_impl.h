/* Internal state of a vllm capture being built (one inference rank), shared
 * by the entry point and the per-part builders: embeddings and head
 * (vllm.c), attention (vllm_attn.c) and MLPs and experts (vllm_mlp.c). */
#ifndef RS_LAYOUT_VLLM_IMPL_H
#define RS_LAYOUT_VLLM_IMPL_H

#include <stdint.h>

#include "core/diag.h"
#include "reshard/capture.h"
#include "reshard/quant.h"
#include "reshard_layout/layout.h"
#include "reshard_layout/model.h"

/* Longest tensor or parameter name we build ("model.layers.N.mlp.experts.
 * E.gate_proj.weight" and the like are far shorter). */
#define RS_VLLM_NAME_MAX 160

typedef struct rs__vllm_builder {
    rs_model_h model;
    const rs_model_config_t *cfg;
    rs_capture_h cap;
    rs_diag_t *diag;
    int64_t rank;
    int64_t tp, pp, dp, ep;
    int64_t tp_rank, pp_rank, dp_rank;
    int64_t layer_begin, layer_end; /* this stage's decoder layers */
    uint64_t padding;               /* parameter bytes never written */
    /* The checkpoint's FP8 block spec (scheme RS_QUANT_NONE: none); its
     * weights are loaded as FP8 params with their weight_scale_inv. */
    rs_quant_desc_t quant;
    int64_t quant_block[2];
} rs__vllm_builder_t;

/* Canonical ops (every argument marked given, as the JSON loader does). */
rs_op_t rs__vllm_narrow(int64_t dim, int64_t start, int64_t length);
rs_op_t rs__vllm_select(int64_t dim, int64_t index);
rs_op_t rs__vllm_unsqueeze(int64_t dim);

/* "model.layers.<layer>.<suffix>" into buf. */
void rs__vllm_lname(char *buf, int64_t layer, const char *suffix);

/* Declares a parameter whose dtype is that of manifest tensor `like`. */
rs_status_t rs__vllm_param(rs__vllm_builder_t *b, const char *name, const char *like,
                         int ndim, const int64_t *shape);

/* One copy of manifest tensor `src` (checked to exist with the expected
 * full shape) through `ops` into `param`, landing at dest_offset with
 * dest_shape and the parameter's own row-major strides for those dims. */
rs_status_t rs__vllm_copy(rs__vllm_builder_t *b, const char *src, int src_ndim,
                        const int64_t *src_shape, const rs_op_t *ops,
                        size_t nops, const char *param, int64_t dest_offset,
                        int ndim, const int64_t *dest_shape);

/* A replicated parameter: the whole source, same name and shape. */
rs_status_t rs__vllm_whole(rs__vllm_builder_t *b, const char *name);
/* Same with a layer's suffix. */
rs_status_t rs__vllm_whole_layer(rs__vllm_builder_t *b, int64_t layer, const char *suffix);

/* Shape of a manifest tensor (RS_ERR_INPUT naming it when absent). */
rs_status_t rs__vllm_src_shape(rs__vllm_builder_t *b, const char *name, int *ndim_p,
                             int64_t *shape_p);

/* FP8 checkpoints (vllm_quant.c). 1 when manifest tensor `src` is
 * loaded as FP8 (quant_impl.h's rule under the layout's spec). */
int rs__vllm_quantized(rs__vllm_builder_t *b, const char *src);
/* Declares FP8 weight `name` (ndim 2 or 3, shape) and its float32
 * "<name>_scale_inv" over the block grid of its two trailing dims. */
rs_status_t rs__vllm_quant_params(rs__vllm_builder_t *b, const char *name, int ndim,
                                const int64_t *shape);
/* Appends copy `c` of source `t` into FP8 param `p` as a quantized copy
 * whose scales land in the matching blocks of "<param>_scale_inv",
 * refusing (RS_ERR_INPUT naming the tensor, its dims and the block) a view
 * or a destination that cuts a block. */
rs_status_t rs__vllm_quant_copy(rs__vllm_builder_t *b, const rs_tensor_info_t *t,
                              const rs_copy_desc_t *c,
                              const rs_param_info_t *p);

/* RS_ERR_INPUT "vllm layout, rank R: <message>": the message set, then
 * the rank put in front of it. */
#define rs__vllm_fail(b, ...)                                                  \
    rs__vllm_failed((b), rs__diag_set((b)->diag, RS_ERR_INPUT, __VA_ARGS__))
static inline rs_status_t rs__vllm_failed(const rs__vllm_builder_t *b, rs_status_t st)
{
    rs__diag_prefix(b->diag, "vllm layout, rank %lld: ", (long long)b->rank);
    return st;
}

/* One source's rows in a parameter fused along dim 0. */
typedef struct rs__vllm_part {
    const char *suffix;  /* manifest tensor after "model.layers.N." */
    int64_t src_rows;    /* its dim 0 */
    int64_t start, rows; /* the rows taken */
    int split;           /* 1: a narrow picks them; 0: the whole tensor */
} rs__vllm_part_t;

/* A parameter "model.layers.N.<suffix>" of [sum of parts' rows, cols]
 * (cols 0: 1-D, a bias) filled part after part, as vLLM's merged and qkv
 * column-parallel loaders do. */
rs_status_t rs__vllm_fused_rows(rs__vllm_builder_t *b, int64_t layer, const char *suffix,
                              const rs__vllm_part_t *parts, int nparts, int64_t cols);

/* A row-parallel parameter [rows, cols]: columns [start, start + cols) of
 * the source of the same name, [rows, src_cols]. */
rs_status_t rs__vllm_split_cols(rs__vllm_builder_t *b, int64_t layer, const char *suffix,
                              int64_t rows, int64_t src_cols, int64_t start,
                              int64_t cols);

/* Per-layer parts. */
rs_status_t rs__vllm_gqa_attention(rs__vllm_builder_t *b, int64_t layer);
rs_status_t rs__vllm_mla_attention(rs__vllm_builder_t *b, int64_t layer);
/* A gate/up/down MLP under `prefix` ("mlp", "mlp.shared_experts"), fused
 * into gate_up_proj and split by tp. */
rs_status_t rs__vllm_dense_mlp(rs__vllm_builder_t *b, int64_t layer, const char *prefix);
/* The MLP of a layer: dense, or router, fused experts and shared experts. */
rs_status_t rs__vllm_layer_mlp(rs__vllm_builder_t *b, int64_t layer);

#endif
