/* Model manifests: the full tensors of a model (Hugging Face checkpoint
 * names, shapes, dtype), derived from its Hugging Face config.json. Layout
 * generators turn a manifest into what trainers publish and what inference
 * loaders capture.
 * Threads: a model is used by one thread at a time (a tool and test
 * library: concurrent use is not claimed). */
#ifndef RESHARD_MODEL_H
#define RESHARD_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/capture.h"
#include "reshard/dtype.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_model *rs_model_h;

typedef enum rs_arch {
    RS_ARCH_DENSE = 1, /* llama, qwen2, qwen3 */
    RS_ARCH_QWEN_MOE,  /* qwen2_moe, qwen3_moe */
    RS_ARCH_DEEPSEEK,  /* deepseek_v3, kimi_k2: MLA attention, shared experts */
} rs_arch_t;

/* The hyperparameters layouts need; 0 where the architecture has none. */
typedef struct rs_model_config {
    const char *model_type;
    rs_arch_t arch;
    rs_dtype_t dtype;
    int64_t hidden, layers, heads, kv_heads, head_dim, intermediate, vocab;
    int tie_embeddings;
    int qkv_bias;          /* qwen2: q/k/v carry a bias */
    int qk_norm;           /* qwen3: q_norm and k_norm per layer */
    int64_t experts;       /* routed experts per MoE layer */
    int64_t moe_intermediate;
    int64_t shared_experts;
    int64_t first_dense;   /* leading layers with a dense MLP */
    int64_t shared_expert_intermediate; /* qwen2_moe style, 0 otherwise */
    /* MLA (deepseek) */
    int64_t q_lora_rank, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim;
} rs_model_config_t;

typedef struct rs_tensor_info {
    const char *name;
    int ndim;
    const int64_t *shape;
    rs_dtype_t dtype;
    int64_t layer;  /* decoder layer, -1 for embeddings, final norm, head */
    int64_t expert; /* routed expert index, -1 otherwise */
} rs_tensor_info_t;

/* Loads a config.json (the real Hugging Face format). RS_ERR_INPUT names the
 * file and the missing or bad key; RS_ERR_UNSUPPORTED an unknown
 * model_type. */
RS_API rs_status_t rs_model_load(const char *config_path, rs_diag_t *diag,
                                 rs_model_h *model_p);
RS_API rs_status_t rs_model_load_string(const char *json, size_t len,
                                        const char *origin, rs_diag_t *diag,
                                        rs_model_h *model_p);
RS_API void rs_model_destroy(rs_model_h model);

RS_API const rs_model_config_t *rs_model_config(rs_model_h model);
/* Tensors in checkpoint order (layer by layer). */
RS_API size_t rs_model_num_tensors(rs_model_h model);
RS_API void rs_model_tensor(rs_model_h model, size_t index,
                            rs_tensor_info_t *info_p);
/* Index of a tensor by name, or -1. */
RS_API long rs_model_find(rs_model_h model, const char *name);
/* Parameters (elements) and bytes of the whole manifest. */
RS_API uint64_t rs_model_num_params(rs_model_h model);
RS_API uint64_t rs_model_num_bytes(rs_model_h model);

#ifdef __cplusplus
}
#endif
#endif
