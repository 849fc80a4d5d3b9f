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

/* How a checkpoint stores its weights (config.json's quantization_config).
 * The manifest and every plan built from it stay in the config's dtype
 * (torch_dtype): this records what the checkpoint ships so that a tool can
 * say so, and so that a quantized refit can build on it. */
typedef enum rs_quant_method {
    RS_MODEL_QUANT_NONE = 0, /* no quantization_config: weights in the dtype */
    RS_MODEL_QUANT_FP8 = 1,  /* quant_method "fp8": fp8 weights, per-block scales */
} rs_quant_method_t;

typedef struct rs_model_quant {
    rs_quant_method_t method;
    const char *method_name;       /* "fp8" (static storage) */
    rs_dtype_t weight_dtype;       /* fmt: RS_DTYPE_F8E4M3 or F8E5M2 */
    const char *fmt;               /* "e4m3" or "e5m2" (default "e4m3") */
    const char *activation_scheme; /* "dynamic" (default) or "static" */
    /* weight_block_size: rows and columns of the weight blocks that share
     * one scale; {0, 0} when absent or null (one scale per tensor). */
    int64_t weight_block[2];
    size_t modules_not_converted;  /* entries of modules_to_not_convert */
    /* Those entries (owned by the model). A module is left in the config's
     * dtype when an entry equals a run of whole dot-separated components
     * of its name: "lm_head", "model.layers.3", "self_attn.kv_b_proj"
     * (docs/layouts.md, "FP8 checkpoints"). */
    const char *const *not_converted;
} rs_model_quant_t;

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
/* The checkpoint's quantization_config, owned by the model (valid until it
 * is destroyed), or NULL when the config has none (absent or null). A
 * present one was validated by the loader: RS_ERR_INPUT naming
 * quantization_config.<field> for a bad type or value (a block size that
 * is not two positive integers, an unknown fmt or activation_scheme),
 * RS_ERR_UNSUPPORTED naming quantization_config.quant_method for a method
 * other than "fp8". */
RS_API const rs_model_quant_t *rs_model_quantization(rs_model_h model);
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
