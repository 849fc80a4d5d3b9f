/* The FP8 rule of the layouts (quant_impl.h): the block spec of a model's
 * quantization_config and which of its tensors the checkpoint stores in
 * FP8. vLLM quantizes every LinearBase and FusedMoE layer of a decoder
 * layer and leaves the embedding, the LM head, the norms and the routers
 * (built without a quantization config) alone; DeepSeek-V3's and
 * Kimi-K2's checkpoints ship weight_scale_inv for exactly those weights. */
#include <stdio.h>
#include <string.h>

#include "core/diag.h"
#include "layout/quant_impl.h"

rs_status_t rs__layout_fp8_spec(rs_model_h model, int64_t *block,
                                rs_diag_t *diag, rs_quant_desc_t *q)
{
    const rs_model_quant_t *mq = rs_model_quantization(model);
    memset(q, 0, sizeof(*q));
    if (mq == NULL || mq->method != RS_MODEL_QUANT_FP8)
        return RS_OK;
    if (mq->weight_block[0] <= 0 || mq->weight_block[1] <= 0)
        return rs__diag_set(diag, RS_ERR_UNSUPPORTED, "quantization_config."
                            "weight_block_size: FP8 with one scale per tensor "
                            "is not supported by the layouts (give a block "
                            "size, as DeepSeek-V3's [128, 128])");
    block[0] = mq->weight_block[0];
    block[1] = mq->weight_block[1];
    q->scheme = RS_QUANT_FP8_BLOCK;
    q->format = mq->weight_dtype;
    q->block_ndim = 2;
    q->block = block;
    return RS_OK;
}

/* `entry` equals a run of whole components of `module`. */
static int names_module(const char *module, const char *entry)
{
    size_t n = strlen(entry);
    if (n == 0)
        return 0;
    for (const char *p = strstr(module, entry); p != NULL;
         p = strstr(p + 1, entry)) {
        int starts = p == module || p[-1] == '.';
        int ends = p[n] == '\0' || p[n] == '.';
        if (starts && ends)
            return 1;
    }
    return 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Layers' 2-D weights that stay in the config's dtype. */
static int unquantized_layer_weight(const char *name)
{
    return ends_with(name, ".mlp.gate.weight") ||
           ends_with(name, ".mlp.shared_expert_gate.weight");
}

int rs__layout_fp8_tensor(rs_model_h model, const char *name)
{
    const rs_model_quant_t *mq = rs_model_quantization(model);
    char module[256];
    long idx;
    rs_tensor_info_t t;
    if (mq == NULL || mq->method != RS_MODEL_QUANT_FP8 ||
        (idx = rs_model_find(model, name)) < 0)
        return 0;
    rs_model_tensor(model, (size_t)idx, &t);
    if (t.ndim != 2 || t.layer < 0 || !ends_with(name, ".weight") ||
        unquantized_layer_weight(name))
        return 0;
    size_t n = strlen(name) - strlen(".weight");
    if (n >= sizeof(module))
        return 0;
    memcpy(module, name, n);
    module[n] = '\0';
    for (size_t i = 0; i < mq->modules_not_converted; i++)
        if (names_module(module, mq->not_converted[i]))
            return 0;
    return 1;
}

int rs__layout_quant_name(const rs_quant_desc_t *q, const char *src,
                          int scale, char *out, size_t cap)
{
    char spec[64];
    size_t n = rs_quant_spec_format(q, spec, sizeof(spec));
    if (n == 0 || n >= sizeof(spec))
        return 0;
    int w = snprintf(out, cap, "%s%c%s%s", src, RS_QUANT_NAME_SEP, spec,
                     scale ? RS_QUANT_SCALE_SUFFIX : "");
    return w > 0 && (size_t)w < cap;
}
