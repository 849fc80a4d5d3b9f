/* vllm captures: what one inference rank's weight loaders record under
 * vllm:tp=T,pp=P,ep=E,dp=D. This file holds the entry point, the rank and
 * stage arithmetic, the layer walk and the vocab-parallel embedding and LM
 * head; docs/layouts.md describes every parameter. */
#include <stdint.h>
#include <string.h>

#include "core/checked.h"
#include "layout/quant_impl.h"
#include "layout/vllm_impl.h"

/* A vocab-parallel parameter [Vp, H] (Vp = round_up(V, 64 T) / T) filled
 * from rows [r Vp, r Vp + n) of `src`; rows n..Vp are padding. */
static rs_status_t vocab_parallel(rs__vllm_builder_t *b, const char *param, const char *src)
{
    int64_t V = b->cfg->vocab, H = b->cfg->hidden, align;
    if (!rs__mul_i64(64, b->tp, &align) || V > INT64_MAX - align)
        return rs__vllm_fail(b, "tp=%lld is too large", (long long)b->tp);
    int64_t vp = (V + align - 1) / align * align / b->tp;
    int64_t start = b->tp_rank * vp;
    int64_t n = V - start < 0 ? 0 : (V - start < vp ? V - start : vp);
    int64_t shape[2] = {vp, H}, src_shape[2] = {V, H}, dest[2] = {n, H};
    rs_param_info_t p;
    rs_status_t st = rs__vllm_param(b, param, src, 2, shape);

    if (st != RS_OK)
        return st;
    rs_capture_param(b->cap, (size_t)rs_capture_find_param(b->cap, param), &p);
    b->padding += (uint64_t)((vp - n) * H) * rs_dtype_size(p.dtype);
    if (n == 0) /* a rank past the vocabulary holds padding only */
        return RS_OK;
    rs_op_t op = rs__vllm_narrow(0, start, n);
    return rs__vllm_copy(b, src, 2, src_shape, &op, 1, param, 0, 2, dest);
}

/* The last stage's final norm and LM head. With tied embeddings the head is
 * the embedding itself when one stage holds both; a last stage without the
 * embedding loads its head from the embedding tensor. */
static rs_status_t last_stage(rs__vllm_builder_t *b)
{
    rs_status_t st = rs__vllm_whole(b, "model.norm.weight");
    if (st != RS_OK)
        return st;
    if (!b->cfg->tie_embeddings)
        return vocab_parallel(b, "lm_head.weight", "lm_head.weight");
    if (b->pp > 1)
        return vocab_parallel(b, "lm_head.weight", "model.embed_tokens.weight");
    return RS_OK;
}

static rs_status_t layer(rs__vllm_builder_t *b, int64_t l)
{
    rs_status_t st = rs__vllm_whole_layer(b, l, "input_layernorm.weight");
    if (st == RS_OK)
        st = b->cfg->arch == RS_ARCH_DEEPSEEK ? rs__vllm_mla_attention(b, l)
                                              : rs__vllm_gqa_attention(b, l);
    if (st == RS_OK)
        st = rs__vllm_whole_layer(b, l, "post_attention_layernorm.weight");
    if (st == RS_OK)
        st = rs__vllm_layer_mlp(b, l);
    return st;
}

static rs_status_t build(rs__vllm_builder_t *b)
{
    rs_status_t st = RS_OK;
    if (b->pp_rank == 0)
        st = vocab_parallel(b, "model.embed_tokens.weight",
                            "model.embed_tokens.weight");
    for (int64_t l = b->layer_begin; l < b->layer_end && st == RS_OK; l++)
        st = layer(b, l);
    if (st == RS_OK && b->pp_rank == b->pp - 1)
        st = last_stage(b);
    return st;
}

/* Degrees of the layout, the rank's coordinates and its stage's layers
 * (as even as possible, earlier stages taking the extra layer). */
static rs_status_t place(rs__vllm_builder_t *b, const rs_layout_t *layout, int64_t rank)
{
    int64_t world;
    b->tp = layout->tp;
    b->pp = layout->pp;
    b->ep = layout->ep;
    b->dp = layout->dp > 0 ? layout->dp : 1;
    b->rank = rank;
    if (b->tp < 1 || b->pp < 1 || b->ep < 1 ||
        !rs__mul_i64(b->tp, b->pp, &world) || !rs__mul_i64(world, b->dp, &world))
        return rs__vllm_fail(b, "tp, pp, ep and dp must be >= 1");
    if (rank < 0 || rank >= world)
        return rs__diag_set(b->diag, RS_ERR_INVALID_ARG, "vllm layout: rank "
                            "%lld outside 0..%lld", (long long)rank,
                            (long long)world - 1);
    b->tp_rank = rank % b->tp;
    b->pp_rank = rank / b->tp % b->pp;
    b->dp_rank = rank / (b->tp * b->pp);
    int64_t L = b->cfg->layers, base = L / b->pp, extra = L % b->pp;
    int64_t s = b->pp_rank;
    b->layer_begin = s * base + (s < extra ? s : extra);
    b->layer_end = b->layer_begin + base + (s < extra ? 1 : 0);
    return RS_OK;
}

rs_status_t rs_layout_capture(rs_model_h model, const rs_layout_t *layout,
                              int64_t rank, rs_diag_t *diag,
                              rs_capture_h *capture_p,
                              uint64_t *padding_bytes_p)
{
    rs_layout_t checked;
    rs__vllm_builder_t b;
    rs_status_t st;

    if (model == NULL || layout == NULL || capture_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    if (layout->kind != RS_LAYOUT_VLLM)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_layout_capture "
                            "takes a vllm layout");
    /* The spec checks name the failing constraint the way every layout
     * reports it; the builders below still guard their own arithmetic. */
    checked = *layout;
    if ((st = rs_layout_check(&checked, model, diag)) != RS_OK)
        return st;
    memset(&b, 0, sizeof(b));
    b.model = model;
    b.cfg = rs_model_config(model);
    b.diag = diag;
    if ((st = place(&b, &checked, rank)) != RS_OK ||
        (st = rs__layout_fp8_spec(model, b.quant_block, diag, &b.quant)) !=
            RS_OK)
        return st;
    if (rs_capture_create(&b.cap) != RS_OK)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    st = build(&b);
    if (st != RS_OK) {
        rs_capture_destroy(b.cap);
        return st;
    }
    *capture_p = b.cap;
    if (padding_bytes_p != NULL)
        *padding_bytes_p = b.padding;
    return RS_OK;
}
