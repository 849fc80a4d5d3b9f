/* vLLM's weight loaders rebuilt with plain loops (see vllm_direct.h): each
 * parameter is filled element by element from the full tensors' values, with
 * no op chains, views or layout code involved. */
#include "vllm_direct.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- deterministic full tensors -------------------------------------- */

uint64_t vd_name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static inline uint64_t mix(uint64_t h, int64_t idx)
{
    uint64_t z = h + (uint64_t)idx * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Clears the lowest exponent bit when the exponent would be all ones, so
 * that floats stay finite: NaN payloads would make float comparisons
 * meaningless wherever a value is compared as a number. */
static inline uint64_t keep_finite(uint64_t z, rs_dtype_t dtype)
{
    switch (dtype) {
    case RS_DTYPE_BF16:
        return (z & 0x7f80u) == 0x7f80u ? z ^ 0x0080u : z;
    case RS_DTYPE_F16:
        return (z & 0x7c00u) == 0x7c00u ? z ^ 0x0400u : z;
    case RS_DTYPE_F32:
        return (z & 0x7f800000u) == 0x7f800000u ? z ^ 0x00800000u : z;
    case RS_DTYPE_F64:
        return (z & 0x7ff0000000000000ull) == 0x7ff0000000000000ull
                   ? z ^ 0x0010000000000000ull : z;
    case RS_DTYPE_F8E4M3:
        return (z & 0x7fu) == 0x7fu ? z ^ 0x08u : z;
    case RS_DTYPE_F8E5M2:
        return (z & 0x7cu) == 0x7cu ? z ^ 0x04u : z;
    default:
        return z;
    }
}

/* The element is the low bytes of one mixed 64-bit word (little-endian). */
void vd_put_value(uint8_t *dst, rs_dtype_t dtype, uint64_t h, int64_t idx)
{
    uint64_t z = keep_finite(mix(h, idx), dtype);
    size_t es = rs_dtype_size(dtype);
    for (size_t k = 0; k < es; k++)
        dst[k] = (uint8_t)(z >> (8 * k));
}

void vd_put_run(uint8_t *dst, rs_dtype_t dtype, uint64_t h, int64_t idx,
                int64_t n)
{
    if (dtype != RS_DTYPE_BF16) {
        size_t es = rs_dtype_size(dtype);
        for (int64_t j = 0; j < n; j++)
            vd_put_value(dst + (size_t)j * es, dtype, h, idx + j);
        return;
    }
    for (int64_t j = 0; j < n; j++) { /* the common case, kept tight */
        uint64_t z = mix(h, idx + j);
        if ((z & 0x7f80u) == 0x7f80u)
            z ^= 0x0080u;
        dst[2 * j] = (uint8_t)z;
        dst[2 * j + 1] = (uint8_t)(z >> 8);
    }
}

/* ---- expected parameters, built with plain loops --------------------- */

static rs_dtype_t dtype_of(vd_expect_t *x, const char *src)
{
    long i = rs_model_find(x->model, src);
    rs_tensor_info_t t;
    if (i < 0)
        fail_msg("test: manifest lacks %s", src);
    rs_model_tensor(x->model, (size_t)i, &t);
    return t.dtype;
}

static vd_param_t *new_param(vd_expect_t *x, const char *name,
                             const char *like, int ndim, int64_t d0,
                             int64_t d1, int64_t d2)
{
    if (x->n == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 64;
        x->p = realloc(x->p, x->cap * sizeof(vd_param_t));
        assert_non_null(x->p);
    }
    vd_param_t *p = &x->p[x->n++];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->shape[2] = d2;
    p->numel = 1;
    for (int i = 0; i < ndim; i++)
        p->numel *= p->shape[i];
    p->dtype = dtype_of(x, like);
    size_t nb = (size_t)p->numel * rs_dtype_size(p->dtype);
    p->bytes = malloc(nb ? nb : 1);
    assert_non_null(p->bytes);
    memset(p->bytes, x->fill, nb);
    return p;
}

/* Rows [row0, row0 + nrows) and columns [col0, col0 + width) of the full
 * source (src_cols columns; 1 for a vector), row after row into the param
 * from element `base` on, `width` elements per row. */
static void put_block(vd_param_t *p, int64_t base, int64_t width,
                      const char *src, int64_t src_cols, int64_t row0,
                      int64_t col0, int64_t nrows)
{
    uint64_t h = vd_name_hash(src);
    size_t es = rs_dtype_size(p->dtype);
    assert_true(base >= 0 && base + nrows * width <= p->numel);
    for (int64_t i = 0; i < nrows; i++)
        vd_put_run(p->bytes + (size_t)(base + i * width) * es, p->dtype, h,
                   (row0 + i) * src_cols + col0, width);
}

static void lname(char *buf, int64_t l, const char *suffix)
{
    snprintf(buf, VD_NAME_MAX, "model.layers.%lld.%s", (long long)l, suffix);
}

/* A replicated tensor of any shape: its elements in order. */
static void e_whole(vd_expect_t *x, const char *name)
{
    long i = rs_model_find(x->model, name);
    rs_tensor_info_t t;
    assert_true(i >= 0);
    rs_model_tensor(x->model, (size_t)i, &t);
    vd_param_t *p = new_param(x, name, name, t.ndim, t.shape[0],
                            t.ndim > 1 ? t.shape[1] : 0, 0);
    put_block(p, 0, 1, name, 1, 0, 0, p->numel);
}

static void e_whole_l(vd_expect_t *x, int64_t l, const char *suffix)
{
    char n[VD_NAME_MAX];
    lname(n, l, suffix);
    e_whole(x, n);
}

static void e_vocab(vd_expect_t *x, const char *name, const char *src)
{
    int64_t V = x->g->vocab, H = x->g->hidden;
    int64_t per = 64;                      /* rows per rank, a multiple of 64 */
    while (per * x->T < V)
        per += 64;
    int64_t first = x->tp * per, n = 0;
    while (n < per && first + n < V)
        n++;
    vd_param_t *p = new_param(x, name, src, 2, per, H, 0);
    put_block(p, 0, H, src, H, first, 0, n);
    p->padding = (per - n) * H;
}

static void e_gqa(vd_expect_t *x, int64_t l)
{
    const rs_model_config_t *g = x->g;
    int64_t hd = g->head_dim, H = g->hidden, qh = g->heads / x->T;
    int64_t kh = g->kv_heads >= x->T ? g->kv_heads / x->T : 1;
    /* kv head of this rank: ranks share a head in groups when kv < tp */
    int64_t k0 = g->kv_heads >= x->T ? x->tp * kh
                                     : x->tp * g->kv_heads / x->T;
    char name[VD_NAME_MAX], q[VD_NAME_MAX], k[VD_NAME_MAX], v[VD_NAME_MAX];
    const char *kinds[2] = {"weight", "bias"};

    for (int b = 0; b < (g->qkv_bias ? 2 : 1); b++) {
        int64_t w = b == 0 ? H : 1;
        char suffix[64];
        snprintf(suffix, sizeof(suffix), "self_attn.qkv_proj.%s", kinds[b]);
        lname(name, l, suffix);
        snprintf(suffix, sizeof(suffix), "self_attn.q_proj.%s", kinds[b]);
        lname(q, l, suffix);
        snprintf(suffix, sizeof(suffix), "self_attn.k_proj.%s", kinds[b]);
        lname(k, l, suffix);
        snprintf(suffix, sizeof(suffix), "self_attn.v_proj.%s", kinds[b]);
        lname(v, l, suffix);
        vd_param_t *p = new_param(x, name, q, b == 0 ? 2 : 1,
                                (qh + 2 * kh) * hd, b == 0 ? H : 0, 0);
        put_block(p, 0, w, q, w, x->tp * qh * hd, 0, qh * hd);
        put_block(p, qh * hd * w, w, k, w, k0 * hd, 0, kh * hd);
        put_block(p, (qh + kh) * hd * w, w, v, w, k0 * hd, 0, kh * hd);
    }
    lname(name, l, "self_attn.o_proj.weight");
    vd_param_t *p = new_param(x, name, name, 2, H, qh * hd, 0);
    put_block(p, 0, qh * hd, name, g->heads * hd, 0, x->tp * qh * hd, H);
    if (g->qk_norm) {
        e_whole_l(x, l, "self_attn.q_norm.weight");
        e_whole_l(x, l, "self_attn.k_norm.weight");
    }
}

/* Rows of this rank's heads of a column-parallel projection. */
static void e_heads(vd_expect_t *x, int64_t l, const char *suffix,
                    int64_t per, int64_t in)
{
    char name[VD_NAME_MAX];
    int64_t local = x->g->heads / x->T * per;
    lname(name, l, suffix);
    vd_param_t *p = new_param(x, name, name, 2, local, in, 0);
    put_block(p, 0, in, name, in, x->tp * local, 0, local);
}

static void e_mla(vd_expect_t *x, int64_t l)
{
    const rs_model_config_t *g = x->g;
    int64_t H = g->hidden, qk = g->qk_nope_dim + g->qk_rope_dim;
    int64_t kva = g->kv_lora_rank + g->qk_rope_dim;
    char name[VD_NAME_MAX], a[VD_NAME_MAX], b[VD_NAME_MAX];

    if (g->q_lora_rank > 0) {
        lname(name, l, "self_attn.fused_qkv_a_proj.weight");
        lname(a, l, "self_attn.q_a_proj.weight");
        lname(b, l, "self_attn.kv_a_proj_with_mqa.weight");
        vd_param_t *p = new_param(x, name, a, 2, g->q_lora_rank + kva, H, 0);
        put_block(p, 0, H, a, H, 0, 0, g->q_lora_rank);
        put_block(p, g->q_lora_rank * H, H, b, H, 0, 0, kva);
        e_whole_l(x, l, "self_attn.q_a_layernorm.weight");
        e_heads(x, l, "self_attn.q_b_proj.weight", qk, g->q_lora_rank);
    } else {
        e_heads(x, l, "self_attn.q_proj.weight", qk, H);
        e_whole_l(x, l, "self_attn.kv_a_proj_with_mqa.weight");
    }
    e_whole_l(x, l, "self_attn.kv_a_layernorm.weight");
    e_heads(x, l, "self_attn.kv_b_proj.weight", g->qk_nope_dim + g->v_head_dim,
            g->kv_lora_rank);
    int64_t vl = g->heads / x->T * g->v_head_dim;
    lname(name, l, "self_attn.o_proj.weight");
    vd_param_t *p = new_param(x, name, name, 2, H, vl, 0);
    put_block(p, 0, vl, name, g->heads * g->v_head_dim, 0, x->tp * vl, H);
}

static void e_mlp(vd_expect_t *x, int64_t l, const char *prefix,
                  int64_t inter)
{
    int64_t H = x->g->hidden, il = inter / x->T;
    char name[VD_NAME_MAX], gate[VD_NAME_MAX], up[VD_NAME_MAX], sfx[96];
    snprintf(sfx, sizeof(sfx), "%s.gate_up_proj.weight", prefix);
    lname(name, l, sfx);
    snprintf(sfx, sizeof(sfx), "%s.gate_proj.weight", prefix);
    lname(gate, l, sfx);
    snprintf(sfx, sizeof(sfx), "%s.up_proj.weight", prefix);
    lname(up, l, sfx);
    vd_param_t *p = new_param(x, name, gate, 2, 2 * il, H, 0);
    put_block(p, 0, H, gate, H, x->tp * il, 0, il);
    put_block(p, il * H, H, up, H, x->tp * il, 0, il);
    snprintf(sfx, sizeof(sfx), "%s.down_proj.weight", prefix);
    lname(name, l, sfx);
    p = new_param(x, name, name, 2, H, il, 0);
    put_block(p, 0, il, name, inter, 0, x->tp * il, H);
}

static void e_experts(vd_expect_t *x, int64_t l)
{
    const rs_model_config_t *g = x->g;
    int64_t H = g->hidden, I = g->moe_intermediate;
    int64_t first = 0, n = g->experts, it = I / x->T, col0 = x->tp * it;
    if (x->E > 1) { /* whole experts, spread over the tp x dp plane */
        n = g->experts / x->E;
        first = ((x->tp + x->T * x->dp) % x->E) * n;
        it = I;
        col0 = 0;
    }
    char w13[VD_NAME_MAX], w2[VD_NAME_MAX], src[VD_NAME_MAX], sfx[96];
    lname(w13, l, "mlp.experts.w13_weight");
    lname(w2, l, "mlp.experts.w2_weight");
    lname(src, l, "mlp.experts.0.gate_proj.weight");
    vd_param_t *a = new_param(x, w13, src, 3, n, 2 * it, H);
    vd_param_t *b = new_param(x, w2, src, 3, n, H, it);
    for (int64_t e = 0; e < n; e++) {
        snprintf(sfx, sizeof(sfx), "mlp.experts.%lld.gate_proj.weight",
                 (long long)(first + e));
        lname(src, l, sfx);
        put_block(a, e * 2 * it * H, H, src, H, col0, 0, it);
        snprintf(sfx, sizeof(sfx), "mlp.experts.%lld.up_proj.weight",
                 (long long)(first + e));
        lname(src, l, sfx);
        put_block(a, (e * 2 + 1) * it * H, H, src, H, col0, 0, it);
        snprintf(sfx, sizeof(sfx), "mlp.experts.%lld.down_proj.weight",
                 (long long)(first + e));
        lname(src, l, sfx);
        put_block(b, e * H * it, it, src, I, 0, col0, H);
    }
}

static void e_layer(vd_expect_t *x, int64_t l)
{
    const rs_model_config_t *g = x->g;
    e_whole_l(x, l, "input_layernorm.weight");
    if (g->arch == RS_ARCH_DEEPSEEK)
        e_mla(x, l);
    else
        e_gqa(x, l);
    e_whole_l(x, l, "post_attention_layernorm.weight");
    char gate[VD_NAME_MAX];
    lname(gate, l, "mlp.gate.weight"); /* the manifest says which are MoE */
    if (rs_model_find(x->model, gate) < 0) {
        e_mlp(x, l, "mlp", g->intermediate);
        return;
    }
    e_whole_l(x, l, "mlp.gate.weight");
    if (g->arch == RS_ARCH_DEEPSEEK)
        e_whole_l(x, l, "mlp.gate.e_score_correction_bias");
    e_experts(x, l);
    if (g->arch == RS_ARCH_DEEPSEEK)
        e_mlp(x, l, "mlp.shared_experts",
              g->moe_intermediate * g->shared_experts);
    if (g->shared_expert_intermediate > 0) { /* qwen2_moe */
        e_mlp(x, l, "mlp.shared_expert", g->shared_expert_intermediate);
        e_whole_l(x, l, "mlp.shared_expert_gate.weight");
    }
}

void vd_expect_rank(vd_expect_t *x, int64_t rank)
{
    const rs_model_config_t *g = x->g;
    x->tp = rank % x->T;
    x->pp = (rank / x->T) % x->P;
    x->dp = rank / (x->T * x->P);
    int64_t begin = 0, count = 0;
    for (int64_t s = 0; s <= x->pp; s++) { /* stage sizes, earlier first */
        begin += count;
        count = g->layers / x->P + (s < g->layers % x->P ? 1 : 0);
    }
    if (x->pp == 0)
        e_vocab(x, "model.embed_tokens.weight", "model.embed_tokens.weight");
    for (int64_t l = begin; l < begin + count; l++)
        e_layer(x, l);
    if (x->pp == x->P - 1) {
        e_whole(x, "model.norm.weight");
        if (!g->tie_embeddings)
            e_vocab(x, "lm_head.weight", "lm_head.weight");
        else if (x->P > 1)
            e_vocab(x, "lm_head.weight", "model.embed_tokens.weight");
    }
}

void vd_free(vd_expect_t *x)
{
    for (size_t i = 0; i < x->n; i++)
        free(x->p[i].bytes);
    free(x->p);
    x->p = NULL;
    x->n = x->cap = 0;
}

void vd_init(vd_expect_t *x, rs_model_h model, const rs_layout_t *vllm,
             uint8_t fill)
{
    memset(x, 0, sizeof(*x));
    x->model = model;
    x->g = rs_model_config(model);
    x->T = vllm->tp;
    x->P = vllm->pp;
    x->D = vllm->dp;
    x->E = vllm->ep;
    x->fill = fill;
}

const vd_param_t *vd_find(const vd_expect_t *x, const char *name)
{
    for (size_t k = 0; k < x->n; k++)
        if (strcmp(x->p[k].name, name) == 0)
            return &x->p[k];
    return NULL;
}

/* Element values of a box of a full tensor, row-major over the box: the
 * value of each element depends on the tensor and its global index only,
 * so every replica holds the same bytes. */
void vd_fill_box(uint8_t *dst, const rs_shard_desc_t *s)
{
    int nd = s->ndim;
    int64_t gstride[RS_MAX_DIMS], m[RS_MAX_DIMS] = {0}, rows = 1;
    int64_t last = nd > 0 ? s->shape[nd - 1] : 1;
    uint64_t h = vd_name_hash(s->tensor);
    for (int d = nd - 1; d >= 0; d--)
        gstride[d] = d == nd - 1 ? 1 : gstride[d + 1] * s->full_shape[d + 1];
    for (int d = 0; d < nd - 1; d++)
        rows *= s->shape[d];
    for (int64_t r = 0; r < rows; r++) {
        int64_t g = 0;
        for (int d = 0; d < nd; d++)
            g += (s->offset[d] + m[d]) * gstride[d];
        vd_put_run(dst, s->dtype, h, g, last);
        dst += (size_t)last * s->elsize;
        for (int d = nd - 2; d >= 0; d--) { /* next row of the box */
            if (++m[d] < s->shape[d])
                break;
            m[d] = 0;
        }
    }
}
