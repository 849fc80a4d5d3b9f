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

static vd_param_t *new_param_dt(vd_expect_t *x, const char *name,
                                rs_dtype_t dtype, int ndim, int64_t d0,
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
    p->dtype = dtype;
    size_t nb = (size_t)p->numel * rs_dtype_size(p->dtype);
    p->bytes = malloc(nb ? nb : 1);
    assert_non_null(p->bytes);
    memset(p->bytes, x->fill, nb);
    return p;
}

static vd_param_t *new_param(vd_expect_t *x, const char *name,
                             const char *like, int ndim, int64_t d0,
                             int64_t d1, int64_t d2)
{
    return new_param_dt(x, name, dtype_of(x, like), ndim, d0, d1, d2);
}

/* ---- FP8 checkpoints -------------------------------------------------- */

/* `entry` is a run of whole dot-separated components of `module`,
 * compared component by component. */
static int covers(const char *module, const char *entry)
{
    size_t m = strlen(module), e = strlen(entry);
    for (size_t at = 0; at + e <= m; at++) {
        if ((at == 0 || module[at - 1] == '.') &&
            (at + e == m || module[at + e] == '.') &&
            strncmp(module + at, entry, e) == 0)
            return 1;
    }
    return 0;
}

/* The checkpoint stores src in FP8: a layer's linear weight. */
static int is_fp8(const vd_expect_t *x, const char *src)
{
    char module[VD_NAME_MAX];
    size_t n = strlen(src);
    if (x->bn == 0 || n < 7 || strcmp(src + n - 7, ".weight") != 0 ||
        strncmp(src, "model.layers.", 13) != 0 ||
        strstr(src, "layernorm") != NULL || strstr(src, "_norm.") != NULL ||
        strstr(src, ".mlp.gate.") != NULL ||
        strstr(src, "shared_expert_gate") != NULL)
        return 0;
    snprintf(module, sizeof(module), "%.*s", (int)(n - 7), src);
    for (size_t i = 0; i < x->nskip; i++)
        if (covers(module, x->skip[i]))
            return 0;
    return 1;
}

static int64_t up(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* A weight parameter: FP8 with its "<name>_scale_inv" (vLLM's block
 * scale shapes: ceil(rows / bn) x ceil(cols / bk) per expert, w13 two
 * halves of ceil(I / bn) rows) when `like` is FP8 in the checkpoint. */
static void new_weight(vd_expect_t *x, const char *name, const char *like,
                       int ndim, int64_t d0, int64_t d1, int64_t d2,
                       int64_t halves)
{
    if (!is_fp8(x, like)) {
        new_param(x, name, like, ndim, d0, d1, d2);
        return;
    }
    char scale[VD_NAME_MAX + 16];
    snprintf(scale, sizeof(scale), "%s_scale_inv", name);
    new_param_dt(x, name, x->fp8, ndim, d0, d1, d2);
    if (ndim == 2)
        new_param_dt(x, scale, RS_DTYPE_F32, 2, up(d0, x->bn), up(d1, x->bk), 0);
    else
        new_param_dt(x, scale, RS_DTYPE_F32, 3, d0,
                     halves * up(d1 / halves, x->bn), up(d2, x->bk));
}

static vd_param_t *find_mut(vd_expect_t *x, const char *name)
{
    for (size_t k = 0; k < x->n; k++)
        if (strcmp(x->p[k].name, name) == 0)
            return &x->p[k];
    fail_msg("test: no expected parameter %s", name);
    return NULL;
}

static void put_block(vd_param_t *p, int64_t base, int64_t width,
                      const char *src, int64_t src_cols, int64_t row0,
                      int64_t col0, int64_t nrows);

/* Rows [r0, r0 + n) and columns [c0, c0 + w) of weight src [R, C] into
 * whole rows of parameter `name` from row `at` of expert slot `e`, and,
 * when it is FP8, the scales of those blocks from block row
 * ceil(at / bn) of the slot, as the block-scale loaders narrow them. */
static void put_weight(vd_expect_t *x, const char *name, int64_t e,
                       int64_t at, const char *src, int64_t R, int64_t C,
                       int64_t r0, int64_t c0, int64_t n, int64_t w)
{
    vd_param_t *p = find_mut(x, name);
    int nd = p->ndim;
    int64_t prows = p->shape[nd - 2], pcols = p->shape[nd - 1];
    assert_int_equal(w, pcols);
    put_block(p, (e * prows + at) * pcols, w, src, C, r0, c0, n);
    if (p->dtype != x->fp8 || !is_fp8(x, src))
        return;
    char scale[VD_NAME_MAX + 16], sname[VD_NAME_MAX + 16];
    snprintf(scale, sizeof(scale), "%s_scale_inv", name);
    snprintf(sname, sizeof(sname), "%s_scale_inv", src);
    vd_param_t *s = find_mut(x, scale);
    int64_t srows = s->shape[nd - 2], scols = s->shape[nd - 1];
    (void)R;
    put_block(s, (e * srows + up(at, x->bn)) * scols, scols, sname,
              up(C, x->bk), r0 / x->bn, c0 / x->bk, up(n, x->bn));
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
    if (t.ndim == 2 && is_fp8(x, name)) { /* a replicated FP8 weight */
        new_weight(x, name, name, 2, t.shape[0], t.shape[1], 0, 1);
        put_weight(x, name, 0, 0, name, t.shape[0], t.shape[1], 0, 0,
                   t.shape[0], t.shape[1]);
        return;
    }
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
        if (b == 0) {
            int64_t qr = g->heads * hd, kr = g->kv_heads * hd;
            new_weight(x, name, q, 2, (qh + 2 * kh) * hd, H, 0, 1);
            put_weight(x, name, 0, 0, q, qr, H, x->tp * qh * hd, 0, qh * hd, H);
            put_weight(x, name, 0, qh * hd, k, kr, H, k0 * hd, 0, kh * hd, H);
            put_weight(x, name, 0, (qh + kh) * hd, v, kr, H, k0 * hd, 0,
                       kh * hd, H);
            continue;
        }
        vd_param_t *p = new_param(x, name, q, 1, (qh + 2 * kh) * hd, 0, 0);
        put_block(p, 0, w, q, w, x->tp * qh * hd, 0, qh * hd);
        put_block(p, qh * hd * w, w, k, w, k0 * hd, 0, kh * hd);
        put_block(p, (qh + kh) * hd * w, w, v, w, k0 * hd, 0, kh * hd);
    }
    lname(name, l, "self_attn.o_proj.weight");
    new_weight(x, name, name, 2, H, qh * hd, 0, 1);
    put_weight(x, name, 0, 0, name, H, g->heads * hd, 0, x->tp * qh * hd, H,
               qh * hd);
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
    new_weight(x, name, name, 2, local, in, 0, 1);
    put_weight(x, name, 0, 0, name, x->g->heads * per, in, x->tp * local, 0,
               local, in);
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
        new_weight(x, name, a, 2, g->q_lora_rank + kva, H, 0, 1);
        put_weight(x, name, 0, 0, a, g->q_lora_rank, H, 0, 0, g->q_lora_rank,
                   H);
        put_weight(x, name, 0, g->q_lora_rank, b, kva, H, 0, 0, kva, H);
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
    new_weight(x, name, name, 2, H, vl, 0, 1);
    put_weight(x, name, 0, 0, name, H, g->heads * g->v_head_dim, 0, x->tp * vl,
               H, vl);
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
    new_weight(x, name, gate, 2, 2 * il, H, 0, 1);
    put_weight(x, name, 0, 0, gate, inter, H, x->tp * il, 0, il, H);
    put_weight(x, name, 0, il, up, inter, H, x->tp * il, 0, il, H);
    snprintf(sfx, sizeof(sfx), "%s.down_proj.weight", prefix);
    lname(name, l, sfx);
    new_weight(x, name, name, 2, H, il, 0, 1);
    put_weight(x, name, 0, 0, name, H, inter, 0, x->tp * il, H, il);
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
    new_weight(x, w13, src, 3, n, 2 * it, H, 2);
    new_weight(x, w2, src, 3, n, H, it, 1);
    for (int64_t e = 0; e < n; e++) {
        snprintf(sfx, sizeof(sfx), "mlp.experts.%lld.gate_proj.weight",
                 (long long)(first + e));
        lname(src, l, sfx);
        put_weight(x, w13, e, 0, src, I, H, col0, 0, it, H);
        snprintf(sfx, sizeof(sfx), "mlp.experts.%lld.up_proj.weight",
                 (long long)(first + e));
        lname(src, l, sfx);
        put_weight(x, w13, e, it, src, I, H, col0, 0, it, H);
        snprintf(sfx, sizeof(sfx), "mlp.experts.%lld.down_proj.weight",
                 (long long)(first + e));
        lname(src, l, sfx);
        put_weight(x, w2, e, 0, src, H, I, 0, col0, H, it);
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
    const rs_model_quant_t *q = rs_model_quantization(model);
    if (q != NULL && q->weight_block[0] > 0) {
        x->bn = q->weight_block[0];
        x->bk = q->weight_block[1];
        x->fp8 = q->weight_dtype;
        x->skip = q->not_converted;
        x->nskip = q->modules_not_converted;
    }
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
