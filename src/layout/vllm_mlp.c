/* vllm MLP parameters: the dense gate_up_proj / down_proj pair split by tp,
 * and MoE layers: the replicated router, the fused experts w13_weight /
 * w2_weight written expert by expert as the fused-MoE loader does, and
 * shared experts. Which layers are MoE is read off the manifest. */
#include <stdio.h>

#include "layout/vllm_impl.h"

static int has_tensor(rs__vllm_builder_t *b, int64_t layer, const char *suffix)
{
    char name[RS_VLLM_NAME_MAX];
    rs__vllm_lname(name, layer, suffix);
    return rs_model_find(b->model, name) >= 0;
}

rs_status_t rs__vllm_dense_mlp(rs__vllm_builder_t *b, int64_t layer, const char *prefix)
{
    char gate[RS_VLLM_NAME_MAX], up[RS_VLLM_NAME_MAX], fused[RS_VLLM_NAME_MAX],
        down[RS_VLLM_NAME_MAX], name[RS_VLLM_NAME_MAX];
    int64_t shape[RS_MAX_DIMS], H = b->cfg->hidden;
    int ndim = 0;

    snprintf(gate, sizeof(gate), "%s.gate_proj.weight", prefix);
    snprintf(up, sizeof(up), "%s.up_proj.weight", prefix);
    snprintf(fused, sizeof(fused), "%s.gate_up_proj.weight", prefix);
    snprintf(down, sizeof(down), "%s.down_proj.weight", prefix);
    rs__vllm_lname(name, layer, gate);
    rs_status_t st = rs__vllm_src_shape(b, name, &ndim, shape);
    if (st != RS_OK)
        return st;
    int64_t inter = shape[0], local = inter / b->tp;
    if (inter % b->tp != 0)
        return rs__vllm_fail(b, "'%s': intermediate size %lld is not divisible "
                           "by tp=%lld", name, (long long)inter,
                           (long long)b->tp);
    rs__vllm_part_t parts[2] = {{gate, inter, b->tp_rank * local, local, 1},
                          {up, inter, b->tp_rank * local, local, 1}};
    st = rs__vllm_fused_rows(b, layer, fused, parts, 2, H);
    if (st == RS_OK)
        st = rs__vllm_split_cols(b, layer, down, H, inter, b->tp_rank * local,
                               local);
    return st;
}

/* Which experts this rank holds and how their intermediate dim is cut. */
typedef struct experts {
    int64_t first, local; /* experts [first, first + local) */
    int64_t inter;        /* I_tp: intermediate rows per expert here */
    int split;            /* tensor-split by tp (only without ep) */
} experts_t;

static rs_status_t place_experts(rs__vllm_builder_t *b, experts_t *x)
{
    int64_t E = b->cfg->experts, I = b->cfg->moe_intermediate, T = b->tp;
    if (b->ep > 1) {
        int64_t plane = T * b->dp;
        if (plane % b->ep != 0 || E % b->ep != 0)
            return rs__vllm_fail(b, "ep=%lld must divide tp*dp=%lld and the "
                               "%lld experts", (long long)b->ep,
                               (long long)plane, (long long)E);
        /* The expert group is the stage's tp x dp plane. */
        int64_t ep_rank = (b->tp_rank + T * b->dp_rank) % b->ep;
        x->local = E / b->ep;
        x->first = ep_rank * x->local;
        x->inter = I;
        x->split = 0;
        return RS_OK;
    }
    if (I % T != 0)
        return rs__vllm_fail(b, "moe_intermediate_size=%lld is not divisible by "
                           "tp=%lld", (long long)I, (long long)T);
    x->first = 0;
    x->local = E;
    x->inter = I / T;
    x->split = 1;
    return RS_OK;
}

/* Expert e's gate (half 0) or up (half 1) into its slot of w13_weight. */
static rs_status_t w13_half(rs__vllm_builder_t *b, int64_t layer, const experts_t *x,
                            int64_t l, int half, const char *param)
{
    static const char *const projs[2] = {"gate_proj", "up_proj"};
    char src[RS_VLLM_NAME_MAX], suffix[RS_VLLM_NAME_MAX];
    int64_t I = b->cfg->moe_intermediate, H = b->cfg->hidden, it = x->inter;
    int64_t src_shape[2] = {I, H}, dest[2] = {it, H};
    rs_op_t ops[3] = {rs__vllm_unsqueeze(0), rs__vllm_select(0, 0),
                      rs__vllm_narrow(0, b->tp_rank * it, it)};

    int64_t expert = x->first + l;
    snprintf(suffix, sizeof(suffix), "mlp.experts.%lld.%s.weight",
             (long long)expert, projs[half]);
    rs__vllm_lname(src, layer, suffix);
    return rs__vllm_copy(b, src, 2, src_shape, ops, x->split ? 3 : 2, param,
                       (2 * l + half) * it * H, 2, dest);
}

static rs_status_t w2_expert(rs__vllm_builder_t *b, int64_t layer, const experts_t *x,
                             int64_t l, const char *param)
{
    char src[RS_VLLM_NAME_MAX], suffix[RS_VLLM_NAME_MAX];
    int64_t I = b->cfg->moe_intermediate, H = b->cfg->hidden, it = x->inter;
    int64_t src_shape[2] = {H, I}, dest[2] = {H, it};
    rs_op_t op = rs__vllm_narrow(1, b->tp_rank * it, it);

    int64_t expert = x->first + l;
    snprintf(suffix, sizeof(suffix), "mlp.experts.%lld.down_proj.weight",
             (long long)expert);
    rs__vllm_lname(src, layer, suffix);
    return rs__vllm_copy(b, src, 2, src_shape, &op, x->split ? 1 : 0, param,
                       l * H * it, 2, dest);
}

static rs_status_t fused_experts(rs__vllm_builder_t *b, int64_t layer)
{
    char w13[RS_VLLM_NAME_MAX], w2[RS_VLLM_NAME_MAX], like[RS_VLLM_NAME_MAX];
    int64_t H = b->cfg->hidden;
    experts_t x = {0, 0, 0, 0};
    rs_status_t st = place_experts(b, &x);

    if (st != RS_OK)
        return st;
    int64_t w13_shape[3] = {x.local, 2 * x.inter, H};
    int64_t w2_shape[3] = {x.local, H, x.inter};
    rs__vllm_lname(w13, layer, "mlp.experts.w13_weight");
    rs__vllm_lname(w2, layer, "mlp.experts.w2_weight");
    rs__vllm_lname(like, layer, "mlp.experts.0.gate_proj.weight");
    st = rs__vllm_param(b, w13, like, 3, w13_shape);
    if (st == RS_OK)
        st = rs__vllm_param(b, w2, like, 3, w2_shape);
    for (int64_t l = 0; l < x.local && st == RS_OK; l++) {
        st = w13_half(b, layer, &x, l, 0, w13);
        if (st == RS_OK)
            st = w13_half(b, layer, &x, l, 1, w13);
        if (st == RS_OK)
            st = w2_expert(b, layer, &x, l, w2);
    }
    return st;
}

static rs_status_t moe(rs__vllm_builder_t *b, int64_t layer)
{
    rs_status_t st = rs__vllm_whole_layer(b, layer, "mlp.gate.weight");
    if (st == RS_OK && has_tensor(b, layer, "mlp.gate.e_score_correction_bias"))
        st = rs__vllm_whole_layer(b, layer, "mlp.gate.e_score_correction_bias");
    if (st == RS_OK)
        st = fused_experts(b, layer);
    if (st == RS_OK &&
        has_tensor(b, layer, "mlp.shared_experts.gate_proj.weight"))
        st = rs__vllm_dense_mlp(b, layer, "mlp.shared_experts");
    if (st == RS_OK && has_tensor(b, layer, "mlp.shared_expert.gate_proj.weight"))
        st = rs__vllm_dense_mlp(b, layer, "mlp.shared_expert");
    if (st == RS_OK && has_tensor(b, layer, "mlp.shared_expert_gate.weight"))
        st = rs__vllm_whole_layer(b, layer, "mlp.shared_expert_gate.weight");
    return st;
}

rs_status_t rs__vllm_layer_mlp(rs__vllm_builder_t *b, int64_t layer)
{
    if (has_tensor(b, layer, "mlp.gate.weight"))
        return moe(b, layer);
    return rs__vllm_dense_mlp(b, layer, "mlp");
}
