/* Qwen mixture-of-experts layers (qwen2_moe, qwen3_moe): a router and
 * per-expert gated MLPs on the layers decoder_sparse_step and
 * mlp_only_layers select, plus qwen2_moe's gated shared expert. The routed
 * experts are shared with the DeepSeek builder. */
#include <string.h>

#include "core/diag.h"
#include "layout/model_impl.h"

#define RS_MODEL_MAX_EXPERTS ((int64_t)1 << 16)
#define RS_MODEL_MAX_WIDTH ((int64_t)1 << 31)

static rs_status_t alloc_moe_layers(rs__json_ctx_t *c, rs_model_h m)
{
    m->moe_layer = rs__arena_alloc(&m->arena, (size_t)m->cfg.layers);
    if (m->moe_layer == NULL)
        return rs__diag_set(c->diag, RS_ERR_NO_MEMORY, "%s: out of memory",
                            c->origin);
    return RS_OK;
}

/* Marks the layers mlp_only_layers lists as dense (moe_layer[i] = 2). */
static rs_status_t read_mlp_only(rs__json_ctx_t *c, const json_t *root,
                                 rs_model_h m)
{
    json_t *list = NULL;
    rs_status_t st = rs__json_field(c, root, "mlp_only_layers", 0, JSON_ARRAY,
                                   &list);
    for (size_t i = 0; st == RS_OK && list != NULL && i < json_array_size(list);
         i++) {
        int64_t layer = 0;
        size_t mark = rs__json_push_key(c, "mlp_only_layers");
        rs__json_push_index(c, i);
        st = rs__json_as_int(c, json_array_get(list, i), 0, &layer);
        if (st == RS_OK && layer >= m->cfg.layers)
            st = rs__json_fail(c, "layer %lld is past the last layer (%lld "
                              "layers)", (long long)layer,
                              (long long)m->cfg.layers);
        rs__json_pop(c, mark);
        if (st == RS_OK)
            m->moe_layer[layer] = 2;
    }
    return st;
}

/* Hugging Face's rule: layer i is sparse when it is not in mlp_only_layers,
 * there are experts, and (i + 1) is a multiple of decoder_sparse_step. */
static void mark_sparse(rs_model_h m, int64_t step)
{
    rs_model_config_t *g = &m->cfg;
    int leading = 1;

    g->first_dense = 0;
    for (int64_t i = 0; i < g->layers; i++) {
        int dense = m->moe_layer[i] == 2 || g->experts == 0 ||
                    (i + 1) % step != 0;
        m->moe_layer[i] = (uint8_t)!dense;
        leading = leading && dense;
        g->first_dense += leading;
    }
}

rs_status_t rs__model_moe_keys(rs__json_ctx_t *c, const json_t *root,
                               rs_model_h m)
{
    rs_model_config_t *g = &m->cfg;
    int64_t step = 1;
    rs_status_t st = rs__model_dense_keys(c, root, m);

    if (st == RS_OK)
        st = rs__model_read_int(c, root, "num_experts", 1, 0,
                                RS_MODEL_MAX_EXPERTS, &g->experts);
    if (st == RS_OK)
        st = rs__model_read_int(c, root, "moe_intermediate_size", 1, 1,
                                RS_MODEL_MAX_WIDTH, &g->moe_intermediate);
    if (st == RS_OK)
        st = rs__model_read_int(c, root, "decoder_sparse_step", 0, 1,
                                g->layers, &step);
    if (st == RS_OK && (m->flags & RS_FAM_SHARED_EXPERT)) {
        g->shared_experts = 1;
        st = rs__model_read_int(c, root, "shared_expert_intermediate_size", 1,
                                1, RS_MODEL_MAX_WIDTH,
                                &g->shared_expert_intermediate);
    }
    if (st == RS_OK)
        st = alloc_moe_layers(c, m);
    if (st == RS_OK)
        st = read_mlp_only(c, root, m);
    if (st == RS_OK)
        mark_sparse(m, step);
    return st;
}

rs_status_t rs__model_router_and_experts(rs_model_h m, int64_t layer)
{
    static const char *const projs[3] = {"gate_proj", "up_proj", "down_proj"};
    const rs_model_config_t *g = &m->cfg;
    rs_status_t st = rs__model_add_layer(m, layer, "mlp.gate.weight", 2,
                                         g->experts, g->hidden);

    if (st == RS_OK && g->arch == RS_ARCH_DEEPSEEK)
        /* The router's score bias is kept in f32 in the checkpoint. */
        st = rs__model_add(m, layer, -1, RS_DTYPE_F32, 1, g->experts, 0,
                           "model.layers.%lld.mlp.gate.e_score_correction_bias",
                           (long long)layer);
    for (int64_t e = 0; st == RS_OK && e < g->experts; e++) {
        for (int p = 0; st == RS_OK && p < 3; p++)
            st = rs__model_add(m, layer, e, g->dtype, 2,
                               p < 2 ? g->moe_intermediate : g->hidden,
                               p < 2 ? g->hidden : g->moe_intermediate,
                               "model.layers.%lld.mlp.experts.%lld.%s.weight",
                               (long long)layer, (long long)e, projs[p]);
    }
    return st;
}

static rs_status_t moe_mlp(rs_model_h m, int64_t layer)
{
    const rs_model_config_t *g = &m->cfg;
    rs_status_t st = rs__model_router_and_experts(m, layer);

    if (st == RS_OK && (m->flags & RS_FAM_SHARED_EXPERT))
        st = rs__model_dense_mlp(m, layer, "mlp.shared_expert",
                                 g->shared_expert_intermediate);
    if (st == RS_OK && (m->flags & RS_FAM_SHARED_EXPERT))
        st = rs__model_add_layer(m, layer, "mlp.shared_expert_gate.weight", 2,
                                 1, g->hidden);
    return st;
}

/* Routed experts where the config puts them, a dense MLP elsewhere. */
static rs_status_t layer_mlp(rs_model_h m, int64_t layer)
{
    return m->moe_layer[layer]
               ? moe_mlp(m, layer)
               : rs__model_dense_mlp(m, layer, "mlp", m->cfg.intermediate);
}

rs_status_t rs__model_moe_layer(rs_model_h m, int64_t layer)
{
    return rs__model_decoder_layer(m, layer, rs__model_gqa_attention,
                                   layer_mlp);
}
