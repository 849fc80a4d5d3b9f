/* Dense decoder layers (llama, qwen2, qwen3) and the pieces MoE models
 * share with them: grouped-query attention with optional q/k/v bias and
 * q/k norms, and the gated MLP. */
#include <stdio.h>

#include "core/diag.h"
#include "layout/model_impl.h"

#define RS_MODEL_MAX_HEAD_DIM ((int64_t)1 << 20)

/* head_dim (default hidden / heads), heads divisible by kv heads, and the
 * biases the manifest does not model refused rather than left out. */
rs_status_t rs__model_dense_keys(rs__json_ctx_t *c, const json_t *root,
                                 rs_model_h m)
{
    rs_model_config_t *g = &m->cfg;
    int attention_bias = 0, mlp_bias = 0;
    rs_status_t st;

    if (g->hidden % g->heads != 0 && json_object_get(root, "head_dim") == NULL)
        return rs__json_fail(c, "hidden_size %lld is not a multiple of "
                            "num_attention_heads %lld and head_dim is not "
                            "given", (long long)g->hidden, (long long)g->heads);
    g->head_dim = g->hidden / g->heads;
    if ((st = rs__model_read_int(c, root, "head_dim", 0, 1,
                                 RS_MODEL_MAX_HEAD_DIM, &g->head_dim)) != RS_OK ||
        (st = rs__model_read_bool(c, root, "attention_bias",
                                  &attention_bias)) != RS_OK ||
        (st = rs__model_read_bool(c, root, "mlp_bias", &mlp_bias)) != RS_OK)
        return st;
    if (g->heads % g->kv_heads != 0)
        return rs__json_fail(c, "num_attention_heads %lld is not a multiple "
                            "of num_key_value_heads %lld", (long long)g->heads,
                            (long long)g->kv_heads);
    /* qwen2 always has q/k/v biases and never reads attention_bias. */
    if (attention_bias && !(m->flags & RS_FAM_QKV_BIAS))
        return rs__model_unsupported(c, "attention_bias", "true is not "
                                     "supported (it adds q/k/v and o_proj "
                                     "biases)");
    if (mlp_bias)
        return rs__model_unsupported(c, "mlp_bias", "true is not supported");
    g->qkv_bias = (m->flags & RS_FAM_QKV_BIAS) != 0;
    g->qk_norm = (m->flags & RS_FAM_QK_NORM) != 0;
    return RS_OK;
}

/* A projection's weight and, when asked, its bias. */
static rs_status_t add_proj(rs_model_h m, int64_t layer, const char *proj,
                            int64_t out, int64_t in, int bias)
{
    char suffix[96];
    snprintf(suffix, sizeof(suffix), "self_attn.%s.weight", proj);
    rs_status_t st = rs__model_add_layer(m, layer, suffix, 2, out, in);
    if (st == RS_OK && bias) {
        snprintf(suffix, sizeof(suffix), "self_attn.%s.bias", proj);
        st = rs__model_add_layer(m, layer, suffix, 1, out, 0);
    }
    return st;
}

rs_status_t rs__model_gqa_attention(rs_model_h m, int64_t layer)
{
    const rs_model_config_t *g = &m->cfg;
    int64_t q = g->heads * g->head_dim, kv = g->kv_heads * g->head_dim;
    rs_status_t st = add_proj(m, layer, "q_proj", q, g->hidden, g->qkv_bias);

    if (st == RS_OK)
        st = add_proj(m, layer, "k_proj", kv, g->hidden, g->qkv_bias);
    if (st == RS_OK)
        st = add_proj(m, layer, "v_proj", kv, g->hidden, g->qkv_bias);
    if (st == RS_OK)
        st = add_proj(m, layer, "o_proj", g->hidden, q, 0);
    if (st == RS_OK && g->qk_norm)
        st = rs__model_add_layer(m, layer, "self_attn.q_norm.weight", 1,
                                 g->head_dim, 0);
    if (st == RS_OK && g->qk_norm)
        st = rs__model_add_layer(m, layer, "self_attn.k_norm.weight", 1,
                                 g->head_dim, 0);
    return st;
}

rs_status_t rs__model_dense_mlp(rs_model_h m, int64_t layer,
                                const char *prefix, int64_t inter)
{
    static const char *const projs[3] = {"gate_proj", "up_proj", "down_proj"};
    int64_t hidden = m->cfg.hidden;
    rs_status_t st = RS_OK;

    for (int p = 0; st == RS_OK && p < 3; p++) {
        char suffix[96];
        snprintf(suffix, sizeof(suffix), "%s.%s.weight", prefix, projs[p]);
        st = rs__model_add_layer(m, layer, suffix, 2, p < 2 ? inter : hidden,
                                 p < 2 ? hidden : inter);
    }
    return st;
}

rs_status_t rs__model_decoder_layer(rs_model_h m, int64_t layer,
                                    rs__model_block_fn attention,
                                    rs__model_block_fn mlp)
{
    int64_t hidden = m->cfg.hidden;
    rs_status_t st = rs__model_add_layer(m, layer, "input_layernorm.weight", 1,
                                         hidden, 0);
    if (st == RS_OK)
        st = attention(m, layer);
    if (st == RS_OK)
        st = rs__model_add_layer(m, layer, "post_attention_layernorm.weight",
                                 1, hidden, 0);
    if (st == RS_OK)
        st = mlp(m, layer);
    return st;
}

static rs_status_t dense_mlp(rs_model_h m, int64_t layer)
{
    return rs__model_dense_mlp(m, layer, "mlp", m->cfg.intermediate);
}

rs_status_t rs__model_dense_layer(rs_model_h m, int64_t layer)
{
    return rs__model_decoder_layer(m, layer, rs__model_gqa_attention,
                                   dense_mlp);
}
