/* DeepSeek-V3-style layers (deepseek_v3, kimi_k2): multi-head latent
 * attention (low-rank q and compressed kv with a decoupled rope part), and
 * after first_k_dense_replace dense layers, routed experts with a score
 * correction bias plus always-on shared experts. */
#include "core/diag.h"
#include "layout/model_impl.h"

#define RS_MODEL_MAX_RANK ((int64_t)1 << 20)
#define RS_MODEL_MAX_EXPERTS ((int64_t)1 << 16)
#define RS_MODEL_MAX_WIDTH ((int64_t)1 << 31)

static rs_status_t read_mla(rs__json_ctx_t *c, const json_t *root,
                            rs_model_config_t *g)
{
    rs_status_t st;
    /* q_lora_rank null (DeepSeek-V2-Lite style) means a plain q_proj. */
    if ((st = rs__model_read_int(c, root, "q_lora_rank", 0, 1,
                                 RS_MODEL_MAX_RANK, &g->q_lora_rank)) != RS_OK ||
        (st = rs__model_read_int(c, root, "kv_lora_rank", 1, 1,
                                 RS_MODEL_MAX_RANK, &g->kv_lora_rank)) != RS_OK ||
        (st = rs__model_read_int(c, root, "qk_nope_head_dim", 1, 1,
                                 RS_MODEL_MAX_RANK, &g->qk_nope_dim)) != RS_OK ||
        (st = rs__model_read_int(c, root, "qk_rope_head_dim", 1, 1,
                                 RS_MODEL_MAX_RANK, &g->qk_rope_dim)) != RS_OK ||
        (st = rs__model_read_int(c, root, "v_head_dim", 1, 1,
                                 RS_MODEL_MAX_RANK, &g->v_head_dim)) != RS_OK)
        return st;
    g->head_dim = g->qk_nope_dim + g->qk_rope_dim; /* of q and k */
    return RS_OK;
}

static rs_status_t read_moe(rs__json_ctx_t *c, const json_t *root,
                            rs_model_config_t *g, int64_t *freq_p)
{
    rs_status_t st;
    if ((st = rs__model_read_int(c, root, "n_routed_experts", 1, 1,
                                 RS_MODEL_MAX_EXPERTS, &g->experts)) != RS_OK ||
        (st = rs__model_read_int(c, root, "moe_intermediate_size", 1, 1,
                                 RS_MODEL_MAX_WIDTH,
                                 &g->moe_intermediate)) != RS_OK ||
        (st = rs__model_read_int(c, root, "n_shared_experts", 1, 0, 1024,
                                 &g->shared_experts)) != RS_OK ||
        (st = rs__model_read_int(c, root, "first_k_dense_replace", 1, 0,
                                 RS_MODEL_MAX_EXPERTS, &g->first_dense)) != RS_OK)
        return st;
    return rs__model_read_int(c, root, "moe_layer_freq", 0, 1, g->layers,
                              freq_p);
}

rs_status_t rs__model_deepseek_keys(rs__json_ctx_t *c, const json_t *root,
                                    rs_model_h m)
{
    rs_model_config_t *g = &m->cfg;
    int64_t freq = 1;
    int attention_bias = 0;
    rs_status_t st = read_mla(c, root, g);

    if (st == RS_OK)
        st = read_moe(c, root, g, &freq);
    if (st == RS_OK)
        st = rs__model_read_bool(c, root, "attention_bias", &attention_bias);
    if (st != RS_OK)
        return st;
    if (attention_bias)
        return rs__model_unsupported(c, "attention_bias", "true is not "
                                     "supported");
    if (g->first_dense > g->layers)
        g->first_dense = g->layers;
    m->moe_layer = rs__arena_alloc(&m->arena, (size_t)g->layers);
    if (m->moe_layer == NULL)
        return rs__diag_set(c->diag, RS_ERR_NO_MEMORY, "%s: out of memory",
                            c->origin);
    for (int64_t i = 0; i < g->layers; i++)
        m->moe_layer[i] = i >= g->first_dense && i % freq == 0;
    return RS_OK;
}

static rs_status_t mla_query(rs_model_h m, int64_t layer)
{
    const rs_model_config_t *g = &m->cfg;
    int64_t q = g->heads * (g->qk_nope_dim + g->qk_rope_dim);
    rs_status_t st;

    if (g->q_lora_rank == 0)
        return rs__model_add_layer(m, layer, "self_attn.q_proj.weight", 2, q,
                                   g->hidden);
    st = rs__model_add_layer(m, layer, "self_attn.q_a_proj.weight", 2,
                             g->q_lora_rank, g->hidden);
    if (st == RS_OK)
        st = rs__model_add_layer(m, layer, "self_attn.q_a_layernorm.weight", 1,
                                 g->q_lora_rank, 0);
    if (st == RS_OK)
        st = rs__model_add_layer(m, layer, "self_attn.q_b_proj.weight", 2, q,
                                 g->q_lora_rank);
    return st;
}

static rs_status_t mla_attention(rs_model_h m, int64_t layer)
{
    const rs_model_config_t *g = &m->cfg;
    rs_status_t st = mla_query(m, layer);

    if (st == RS_OK)
        st = rs__model_add_layer(m, layer, "self_attn.kv_a_proj_with_mqa.weight",
                                 2, g->kv_lora_rank + g->qk_rope_dim, g->hidden);
    if (st == RS_OK)
        st = rs__model_add_layer(m, layer, "self_attn.kv_a_layernorm.weight",
                                 1, g->kv_lora_rank, 0);
    if (st == RS_OK)
        st = rs__model_add_layer(m, layer, "self_attn.kv_b_proj.weight", 2,
                                 g->heads * (g->qk_nope_dim + g->v_head_dim),
                                 g->kv_lora_rank);
    if (st == RS_OK)
        st = rs__model_add_layer(m, layer, "self_attn.o_proj.weight", 2,
                                 g->hidden, g->heads * g->v_head_dim);
    return st;
}

static rs_status_t deepseek_moe(rs_model_h m, int64_t layer)
{
    const rs_model_config_t *g = &m->cfg;
    rs_status_t st = rs__model_router_and_experts(m, layer);
    /* The shared experts are one MLP whose width is their sum. */
    if (st == RS_OK && g->shared_experts > 0)
        st = rs__model_dense_mlp(m, layer, "mlp.shared_experts",
                                 g->moe_intermediate * g->shared_experts);
    return st;
}

/* MoE layers (moe_layer[]) take the routed experts, the others a dense
 * MLP. */
static rs_status_t deepseek_mlp(rs_model_h m, int64_t layer)
{
    if (m->moe_layer[layer])
        return deepseek_moe(m, layer);
    return rs__model_dense_mlp(m, layer, "mlp", m->cfg.intermediate);
}

rs_status_t rs__model_deepseek_layer(rs_model_h m, int64_t layer)
{
    return rs__model_decoder_layer(m, layer, mla_attention, deepseek_mlp);
}
