/* vllm attention parameters: the fused qkv_proj of grouped-query attention
 * (each rank's head slice, kv heads replicated when there are fewer than
 * tp), o_proj split on its input dim, and DeepSeek's MLA projections with
 * the replicated fused q_a/kv_a projection. */
#include <stdio.h>

#include "layout/vllm_impl.h"

static rs_status_t check_heads(rs__vllm_builder_t *b, int64_t heads, int64_t kv)
{
    if (heads % b->tp != 0)
        return rs__vllm_fail(b, "num_attention_heads=%lld is not divisible by "
                           "tp=%lld", (long long)heads, (long long)b->tp);
    if (kv > 0 && (kv >= b->tp ? kv % b->tp : b->tp % kv) != 0)
        return rs__vllm_fail(b, "num_key_value_heads=%lld and tp=%lld: one must "
                           "divide the other", (long long)kv,
                           (long long)b->tp);
    return RS_OK;
}

/* q, k and v parts of a rank: its q heads, and its kv heads (one head shared
 * by tp / kv ranks when kv < tp). `w` is "weight" or "bias". */
static void qkv_parts(rs__vllm_builder_t *b, const char *w, char names[3][48], rs__vllm_part_t *p)
{
    const rs_model_config_t *g = b->cfg;
    int64_t hd = g->head_dim, T = b->tp, r = b->tp_rank;
    int64_t q_local = g->heads / T;
    int64_t kv_local = g->kv_heads >= T ? g->kv_heads / T : 1;
    int64_t kv_first = g->kv_heads >= T ? r * kv_local
                                        : r / (T / g->kv_heads);
    static const char *const projs[3] = {"q_proj", "k_proj", "v_proj"};

    for (int i = 0; i < 3; i++) {
        snprintf(names[i], 48, "self_attn.%s.%s", projs[i], w);
        p[i].suffix = names[i];
        p[i].split = 1;
        p[i].src_rows = (i == 0 ? g->heads : g->kv_heads) * hd;
        p[i].start = (i == 0 ? r * q_local : kv_first) * hd;
        p[i].rows = (i == 0 ? q_local : kv_local) * hd;
    }
}

rs_status_t rs__vllm_gqa_attention(rs__vllm_builder_t *b, int64_t layer)
{
    const rs_model_config_t *g = b->cfg;
    char names[3][48];
    rs__vllm_part_t parts[3];
    int64_t q_local = g->heads / b->tp * g->head_dim;
    rs_status_t st = check_heads(b, g->heads, g->kv_heads);

    if (st == RS_OK) {
        qkv_parts(b, "weight", names, parts);
        st = rs__vllm_fused_rows(b, layer, "self_attn.qkv_proj.weight", parts, 3,
                        g->hidden);
    }
    if (st == RS_OK && g->qkv_bias) {
        qkv_parts(b, "bias", names, parts);
        st = rs__vllm_fused_rows(b, layer, "self_attn.qkv_proj.bias", parts, 3, 0);
    }
    if (st == RS_OK)
        st = rs__vllm_split_cols(b, layer, "self_attn.o_proj.weight", g->hidden,
                        g->heads * g->head_dim, b->tp_rank * q_local, q_local);
    if (st == RS_OK && g->qk_norm)
        st = rs__vllm_whole_layer(b, layer, "self_attn.q_norm.weight");
    if (st == RS_OK && g->qk_norm)
        st = rs__vllm_whole_layer(b, layer, "self_attn.k_norm.weight");
    return st;
}

/* One rank's heads of a column-parallel MLA projection [heads * per, in]. */
static rs_status_t head_rows(rs__vllm_builder_t *b, int64_t layer, const char *suffix,
                             int64_t per, int64_t in)
{
    int64_t heads = b->cfg->heads, local = heads / b->tp * per;
    rs__vllm_part_t p = {suffix, heads * per, b->tp_rank * local, local, 1};
    return rs__vllm_fused_rows(b, layer, suffix, &p, 1, in);
}

/* With a q LoRA: the replicated fused_qkv_a_proj (q_a_proj rows, then
 * kv_a_proj_with_mqa), q_a_layernorm and the head-split q_b_proj.
 * Without: a head-split q_proj and a replicated kv_a_proj_with_mqa. */
static rs_status_t mla_q(rs__vllm_builder_t *b, int64_t layer)
{
    const rs_model_config_t *g = b->cfg;
    int64_t qk = g->qk_nope_dim + g->qk_rope_dim;
    int64_t kv_a = g->kv_lora_rank + g->qk_rope_dim;

    if (g->q_lora_rank <= 0) {
        rs_status_t st = head_rows(b, layer, "self_attn.q_proj.weight", qk,
                                   g->hidden);
        return st != RS_OK ? st : rs__vllm_whole_layer(
            b, layer, "self_attn.kv_a_proj_with_mqa.weight");
    }
    rs__vllm_part_t parts[2] = {
        {"self_attn.q_a_proj.weight", g->q_lora_rank, 0, g->q_lora_rank, 0},
        {"self_attn.kv_a_proj_with_mqa.weight", kv_a, 0, kv_a, 0},
    };
    rs_status_t st = rs__vllm_fused_rows(b, layer, "self_attn.fused_qkv_a_proj.weight",
                                parts, 2, g->hidden);
    if (st == RS_OK)
        st = rs__vllm_whole_layer(b, layer, "self_attn.q_a_layernorm.weight");
    if (st == RS_OK)
        st = head_rows(b, layer, "self_attn.q_b_proj.weight", qk,
                       g->q_lora_rank);
    return st;
}

rs_status_t rs__vllm_mla_attention(rs__vllm_builder_t *b, int64_t layer)
{
    const rs_model_config_t *g = b->cfg;
    int64_t v_local = g->heads / b->tp * g->v_head_dim;
    rs_status_t st = check_heads(b, g->heads, 0);

    if (st == RS_OK)
        st = mla_q(b, layer);
    if (st == RS_OK)
        st = rs__vllm_whole_layer(b, layer, "self_attn.kv_a_layernorm.weight");
    if (st == RS_OK)
        st = head_rows(b, layer, "self_attn.kv_b_proj.weight",
                       g->qk_nope_dim + g->v_head_dim, g->kv_lora_rank);
    if (st == RS_OK)
        st = rs__vllm_split_cols(b, layer, "self_attn.o_proj.weight", g->hidden,
                        g->heads * g->v_head_dim, b->tp_rank * v_local,
                        v_local);
    return st;
}
