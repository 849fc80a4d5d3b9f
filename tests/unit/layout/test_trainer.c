/* Tests of trainer layouts (fsdp, megatron): every element of every tensor
 * is covered exactly as many times as it has replicas, dp replicas publish
 * identical boxes, pipeline stages take the layers they should, each rank's
 * shards are packed, aligned and disjoint, hand-computed boxes for chosen
 * tensors, the written shard tables load back to the same shards, and
 * publishing every rank of Kimi-K2 gives the expected bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/sources_impl.h"
#include "layout_env.h"
#include "reshard_layout/layout.h"

static const char qwen2_moe_cfg[] =
    "{\"model_type\": \"qwen2_moe\", \"hidden_size\": 64,"
    " \"num_hidden_layers\": 3, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 4, \"intermediate_size\": 128,"
    " \"moe_intermediate_size\": 16, \"shared_expert_intermediate_size\": 64,"
    " \"num_experts\": 4, \"num_experts_per_tok\": 2, \"vocab_size\": 999,"
    " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";

static const char deepseek_cfg[] =
    "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 64,"
    " \"num_hidden_layers\": 4, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 4, \"intermediate_size\": 128,"
    " \"moe_intermediate_size\": 32, \"n_routed_experts\": 8,"
    " \"n_shared_experts\": 1, \"first_k_dense_replace\": 1,"
    " \"num_experts_per_tok\": 2, \"q_lora_rank\": 32, \"kv_lora_rank\": 16,"
    " \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, \"v_head_dim\": 16,"
    " \"vocab_size\": 1000, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\"}";

#define SPAN ((uint64_t)1 << 44)

/* ---- collecting shards ---- */

typedef struct rec {
    long tensor; /* manifest index */
    int64_t rank, device;
    uint64_t addr, nbytes;
    int ndim;
    int64_t off[2], shape[2];
} rec_t;

typedef struct recs {
    rs_model_h model;
    int64_t rank;
    rec_t *v;
    size_t n, cap;
} recs_t;

static rs_status_t collect(void *ctx, const rs_shard_desc_t *d)
{
    recs_t *rs = ctx;
    char want[32];
    rec_t r = {0};
    int64_t numel = 1;

    r.tensor = rs_model_find(rs->model, d->tensor);
    assert_true(r.tensor >= 0);
    rs_tensor_info_t t;
    rs_model_tensor(rs->model, (size_t)r.tensor, &t);
    assert_int_equal(d->ndim, t.ndim);
    assert_true(d->ndim <= 2);
    assert_int_equal(d->dtype, t.dtype);
    assert_int_equal(d->elsize, rs_dtype_size(t.dtype));
    assert_memory_equal(d->full_shape, t.shape, (size_t)t.ndim * 8);
    snprintf(want, sizeof(want), "trainer-%lld", (long long)rs->rank);
    assert_string_equal(d->session, want);
    assert_null(d->digest);
    r.rank = rs->rank;
    r.device = d->device_id;
    r.addr = d->addr;
    r.ndim = d->ndim;
    for (int i = 0; i < d->ndim; i++) {
        r.off[i] = d->offset[i];
        r.shape[i] = d->shape[i];
        numel *= d->shape[i];
    }
    assert_true(numel > 0); /* empty shards are never published */
    r.nbytes = (uint64_t)numel * d->elsize;
    if (rs->n == rs->cap) {
        rs->cap = rs->cap ? 2 * rs->cap : 256;
        rs->v = realloc(rs->v, rs->cap * sizeof(rec_t));
        assert_non_null(rs->v);
    }
    rs->v[rs->n++] = r;
    return RS_OK;
}

static void collect_rank(rs_model_h m, const rs_layout_t *l, int64_t rank,
                         recs_t *out)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    out->model = m;
    out->rank = rank;
    rs_status_t st = rs_layout_trainer_shards(m, l, rank, collect, out, &d);
    if (st != RS_OK)
        fail_msg("rank %lld: %s: %s", (long long)rank, rs_status_str(st),
                 d.msg);
}

/* ---- independent ground truth ---- */

/* How many copies of each element of `name` a layout publishes, from the
 * rules a conversion-aware megatron adapter follows. */
static int64_t expected_replicas(const char *name, const rs_layout_t *l,
                                 int64_t kv_heads)
{
    int64_t plane;
    if (l->kind == RS_LAYOUT_FSDP)
        return 1;
    plane = l->tp * l->dp;
    if (strstr(name, ".experts.") != NULL)
        return plane / (l->ep * l->etp);
    if ((strstr(name, ".k_proj.") || strstr(name, ".v_proj.")) &&
        kv_heads < l->tp)
        return (l->tp / kv_heads) * l->dp;
    if (strstr(name, "norm") || strstr(name, "mlp.gate.") ||
        strstr(name, "q_a_proj") || strstr(name, "kv_a_proj_with_mqa") ||
        strstr(name, "shared_expert_gate"))
        return plane;
    return l->dp;
}

/* Pipeline stage of a tensor: the even split with earlier stages taking
 * the extra layer, computed by walking stage sizes. */
static int64_t expected_stage(const char *name, int64_t layers, int64_t pp)
{
    long layer;
    if (sscanf(name, "model.layers.%ld.", &layer) != 1)
        return strstr(name, "embed_tokens") ? 0 : pp - 1;
    int64_t first = 0;
    for (int64_t s = 0; s < pp; s++) {
        int64_t size = layers / pp + (s < layers % pp ? 1 : 0);
        if (layer < first + size)
            return s;
        first += size;
    }
    fail_msg("layer %ld past the last stage", layer);
    return -1;
}

static int cmp_addr(const void *a, const void *b)
{
    const rec_t *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Packed, aligned, disjoint and inside the rank's range; device = r % 8. */
static void check_addresses(recs_t *rs)
{
    uint64_t base = (uint64_t)(rs->rank + 1) << 44, prev_end = base;
    qsort(rs->v, rs->n, sizeof(rec_t), cmp_addr);
    for (size_t i = 0; i < rs->n; i++) {
        const rec_t *r = &rs->v[i];
        assert_int_equal(r->device, rs->rank % 8);
        assert_int_equal(r->addr % 256, 0);
        if (r->addr < prev_end)
            fail_msg("rank %lld: shard at %llx overlaps the previous one "
                     "(ends %llx)", (long long)rs->rank,
                     (unsigned long long)r->addr,
                     (unsigned long long)prev_end);
        prev_end = r->addr + r->nbytes;
        assert_true(prev_end <= base + SPAN);
    }
    if (rs->n > 0)
        assert_int_equal(rs->v[0].addr, base);
}

/* Megatron coordinates of a rank and the rank of the first replica
 * holding the same boxes: dp 0 for dense tensors, the first position of
 * the (tp x dp) plane with the same (ep, etp) ranks for experts. */
static int64_t replica_leader(const rs_layout_t *l, int64_t rank, int expert)
{
    int64_t tp = rank % l->tp, dp = (rank / l->tp) % l->dp;
    int64_t pp = rank / (l->tp * l->dp);
    int64_t k = tp + l->tp * dp;
    if (expert)
        k %= l->ep * l->etp;
    else
        k = tp;
    return k + l->tp * l->dp * pp;
}

static int same_box(const rec_t *a, const rec_t *b)
{
    return a->tensor == b->tensor && a->ndim == b->ndim &&
           memcmp(a->off, b->off, sizeof(a->off)) == 0 &&
           memcmp(a->shape, b->shape, sizeof(a->shape)) == 0;
}

static void check_replicas(rs_model_h m, const rs_layout_t *l,
                           const recs_t *all, const recs_t *ranks)
{
    if (l->kind != RS_LAYOUT_MEGATRON)
        return;
    for (size_t i = 0; i < all->n; i++) {
        const rec_t *r = &all->v[i];
        rs_tensor_info_t t;
        rs_model_tensor(m, (size_t)r->tensor, &t);
        int64_t lead = replica_leader(l, r->rank, t.expert >= 0);
        const recs_t *lr = &ranks[lead];
        size_t j = 0;
        while (j < lr->n && !same_box(&lr->v[j], r))
            j++;
        if (j == lr->n)
            fail_msg("%s: rank %lld's box has no twin on rank %lld", t.name,
                     (long long)r->rank, (long long)lead);
        int64_t stage = r->rank / (l->tp * l->dp);
        assert_int_equal(stage, expected_stage(t.name,
                                               rs_model_config(m)->layers,
                                               l->pp));
    }
}

/* Every element of every tensor is covered expected_replicas() times. */
static void check_coverage(rs_model_h m, const rs_layout_t *l,
                           const recs_t *all)
{
    size_t nt = rs_model_num_tensors(m);
    size_t *start = calloc(nt + 1, sizeof(size_t));
    assert_non_null(start);
    for (size_t i = 0; i < nt; i++) {
        rs_tensor_info_t t;
        rs_model_tensor(m, i, &t);
        size_t numel = 1;
        for (int d = 0; d < t.ndim; d++)
            numel *= (size_t)t.shape[d];
        start[i + 1] = start[i] + numel;
    }
    uint16_t *count = calloc(start[nt] ? start[nt] : 1, sizeof(uint16_t));
    assert_non_null(count);
    for (size_t i = 0; i < all->n; i++) {
        const rec_t *r = &all->v[i];
        rs_tensor_info_t t;
        rs_model_tensor(m, (size_t)r->tensor, &t);
        int64_t cols = t.ndim == 2 ? t.shape[1] : 1;
        int64_t rows = r->shape[0], w = t.ndim == 2 ? r->shape[1] : 1;
        int64_t c0 = t.ndim == 2 ? r->off[1] : 0;
        for (int64_t y = 0; y < rows; y++)
            for (int64_t x = 0; x < w; x++)
                count[start[r->tensor] + (size_t)((r->off[0] + y) * cols +
                                                  c0 + x)]++;
    }
    int64_t kv = rs_model_config(m)->kv_heads;
    for (size_t i = 0; i < nt; i++) {
        rs_tensor_info_t t;
        rs_model_tensor(m, i, &t);
        int64_t want = expected_replicas(t.name, l, kv);
        for (size_t e = start[i]; e < start[i + 1]; e++)
            if (count[e] != want)
                fail_msg("%s: element %zu covered %d times, wanted %lld",
                         t.name, e - start[i], count[e], (long long)want);
    }
    free(count);
    free(start);
}

static void check_layout(rs_model_h m, const char *spec)
{
    rs_layout_t l = lx_layout(m, spec);
    recs_t *ranks = calloc((size_t)l.world, sizeof(recs_t));
    recs_t all = {0};
    assert_non_null(ranks);
    for (int64_t r = 0; r < l.world; r++) {
        collect_rank(m, &l, r, &ranks[r]);
        for (size_t i = 0; i < ranks[r].n; i++) {
            recs_t *a = &all;
            if (a->n == a->cap) {
                a->cap = a->cap ? 2 * a->cap : 1024;
                a->v = realloc(a->v, a->cap * sizeof(rec_t));
                assert_non_null(a->v);
            }
            a->v[a->n++] = ranks[r].v[i];
        }
        check_addresses(&ranks[r]);
    }
    check_coverage(m, &l, &all);
    check_replicas(m, &l, &all, ranks);
    for (int64_t r = 0; r < l.world; r++)
        free(ranks[r].v);
    free(ranks);
    free(all.v);
}

static void test_coverage_dense(void **state)
{
    (void)state;
    rs_model_h m = lx_model_json(lx_dense_cfg);
    static const char *const specs[] = {
        "fsdp:1", "fsdp:4", "fsdp:48", "megatron", "megatron:tp=2,pp=2",
        "megatron:tp=4,pp=2,dp=2", "megatron:tp=4,pp=3", "megatron:pp=5",
        "megatron:tp=2,dp=3,pp=4",
    };
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
        check_layout(m, specs[i]);
    rs_model_destroy(m);
    m = lx_model_file("tiny-llama.json"); /* tied embeddings */
    check_layout(m, "megatron:tp=4,pp=2");
    check_layout(m, "fsdp:3");
    rs_model_destroy(m);
}

static void test_coverage_moe(void **state)
{
    (void)state;
    rs_model_h m = lx_model_json(lx_moe_cfg);
    static const char *const specs[] = {
        "fsdp:3", "megatron:tp=2,ep=4", "megatron:tp=2,ep=2,etp=2,pp=2",
        "megatron:tp=4,ep=2,dp=2", "megatron:ep=8,pp=3", "megatron:tp=2,ep=8",
        "megatron:tp=4,etp=2,dp=2", "megatron:tp=2,ep=2,dp=4,pp=2",
    };
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
        check_layout(m, specs[i]);
    rs_model_destroy(m);
    m = lx_model_json(qwen2_moe_cfg);
    check_layout(m, "megatron:tp=2,ep=2,pp=2");
    check_layout(m, "megatron:tp=4,ep=4,dp=2");
    check_layout(m, "fsdp:5");
    rs_model_destroy(m);
}

static void test_coverage_deepseek(void **state)
{
    (void)state;
    rs_model_h m = lx_model_json(deepseek_cfg);
    check_layout(m, "megatron:tp=2,pp=3,ep=2");
    check_layout(m, "megatron:tp=4,ep=4,etp=2");
    check_layout(m, "megatron:tp=2,ep=8,pp=2");
    check_layout(m, "fsdp:5");
    rs_model_destroy(m);
    m = lx_model_file("tiny-deepseek.json");
    check_layout(m, "megatron:tp=2,ep=4,pp=3");
    rs_model_destroy(m);
}

/* ---- hand-computed boxes ---- */

/* The box rank publishes of `name`, or fails; returns its address. */
static uint64_t expect_box(rs_model_h m, const char *spec, int64_t rank,
                           const char *name, int64_t o0, int64_t o1,
                           int64_t s0, int64_t s1)
{
    rs_layout_t l = lx_layout(m, spec);
    recs_t rs = {0};
    long want = rs_model_find(m, name);
    uint64_t addr = 0;
    int found = 0;
    assert_true(want >= 0);
    collect_rank(m, &l, rank, &rs);
    for (size_t i = 0; i < rs.n; i++) {
        const rec_t *r = &rs.v[i];
        if (r->tensor != want)
            continue;
        assert_false(found);
        found = 1;
        addr = r->addr;
        if (r->off[0] != o0 || r->shape[0] != s0 ||
            (r->ndim == 2 && (r->off[1] != o1 || r->shape[1] != s1)))
            fail_msg("%s rank %lld %s: offset [%lld, %lld] shape [%lld, %lld]"
                     ", wanted [%lld, %lld] [%lld, %lld]", spec,
                     (long long)rank, name, (long long)r->off[0],
                     (long long)(r->ndim == 2 ? r->off[1] : -1),
                     (long long)r->shape[0],
                     (long long)(r->ndim == 2 ? r->shape[1] : -1),
                     (long long)o0, (long long)o1, (long long)s0,
                     (long long)s1);
    }
    free(rs.v);
    if (!found && s0 >= 0)
        fail_msg("%s rank %lld publishes nothing of %s", spec,
                 (long long)rank, name);
    if (found && s0 < 0)
        fail_msg("%s rank %lld publishes %s", spec, (long long)rank, name);
    return addr;
}

#define ABSENT -1, -1, -1, -1

static void test_boxes_dense(void **state)
{
    (void)state;
    rs_model_h m = lx_model_json(lx_dense_cfg);
    const char *s = "megatron:tp=4,pp=2,dp=2"; /* rank = tp + 4 (dp + 2 pp) */
    /* Vocab 1001 in 4 parts: 251, 250, 250, 250. */
    uint64_t a0 = expect_box(m, s, 0, "model.embed_tokens.weight", 0, 0, 251,
                             64);
    assert_int_equal(a0, (uint64_t)1 << 44);
    expect_box(m, s, 5, "model.embed_tokens.weight", 251, 0, 250, 64);
    expect_box(m, s, 15, "lm_head.weight", 751, 0, 250, 64);
    expect_box(m, s, 12, "lm_head.weight", 0, 0, 251, 64);
    expect_box(m, s, 3, "lm_head.weight", ABSENT);
    expect_box(m, s, 8, "model.embed_tokens.weight", ABSENT);
    /* 2 kv heads of 16 rows over tp 4: ranks 0,1 head 0; 2,3 head 1. */
    expect_box(m, s, 1, "model.layers.0.self_attn.k_proj.weight", 0, 0, 16,
               64);
    expect_box(m, s, 6, "model.layers.2.self_attn.v_proj.weight", 16, 0, 16,
               64);
    expect_box(m, s, 3, "model.layers.1.self_attn.k_proj.bias", 16, 0, 16, 0);
    expect_box(m, s, 2, "model.layers.0.self_attn.q_proj.weight", 32, 0, 16,
               64);
    expect_box(m, s, 3, "model.layers.0.self_attn.o_proj.weight", 0, 48, 64,
               16);
    expect_box(m, s, 1, "model.layers.0.mlp.gate_proj.weight", 32, 0, 32, 64);
    expect_box(m, s, 1, "model.layers.0.mlp.down_proj.weight", 0, 32, 64, 32);
    expect_box(m, s, 2, "model.layers.2.input_layernorm.weight", 0, 0, 64, 0);
    /* Layers 0-2 on stage 0, 3-4 on stage 1. */
    expect_box(m, s, 0, "model.layers.3.self_attn.q_proj.weight", ABSENT);
    expect_box(m, s, 9, "model.layers.3.self_attn.q_proj.weight", 16, 0, 16,
               64);
    expect_box(m, s, 9, "model.layers.2.self_attn.q_proj.weight", ABSENT);
    expect_box(m, s, 15, "model.norm.weight", 0, 0, 64, 0);
    /* The shard after the embedding starts at the next 256-byte boundary:
     * 251 * 64 * 2 = 32128 -> 32256. */
    uint64_t a1 = expect_box(m, s, 0, "model.layers.0.input_layernorm.weight",
                             0, 0, 64, 0);
    assert_int_equal(a1, ((uint64_t)1 << 44) + 32256);
    uint64_t a2 = expect_box(m, s, 0, "model.layers.0.self_attn.q_proj.weight",
                             0, 0, 16, 64);
    assert_int_equal(a2, a1 + 256);
    rs_model_destroy(m);
}

static void test_boxes_fsdp(void **state)
{
    (void)state;
    rs_model_h m = lx_model_json(lx_dense_cfg);
    /* torch.chunk: ceil(1001 / 4) = 251 rows, the last rank 248. */
    expect_box(m, "fsdp:4", 3, "model.embed_tokens.weight", 753, 0, 248, 64);
    uint64_t a = expect_box(m, "fsdp:4", 2, "model.embed_tokens.weight", 502,
                            0, 251, 64);
    assert_int_equal(a, (uint64_t)3 << 44);
    /* 64 rows over 48: chunks of 2, ranks 32 and up hold nothing. */
    expect_box(m, "fsdp:48", 31, "model.norm.weight", 62, 0, 2, 0);
    expect_box(m, "fsdp:48", 32, "model.norm.weight", ABSENT);
    expect_box(m, "fsdp:48", 40, "model.layers.0.mlp.down_proj.weight", ABSENT);
    /* 1001 rows over 48: chunks of 21, the last rank 14. */
    expect_box(m, "fsdp:48", 47, "lm_head.weight", 987, 0, 14, 64);
    expect_box(m, "fsdp:48", 47, "model.layers.0.self_attn.q_proj.bias",
               ABSENT);
    rs_model_destroy(m);
}

static void test_boxes_experts(void **state)
{
    (void)state;
    rs_model_h m = lx_model_json(lx_moe_cfg);
    /* tp=2, ep=4, dp 2: plane position k = rank; 2 experts per ep rank. */
    const char *s = "megatron:tp=2,ep=4";
    expect_box(m, s, 3, "model.layers.1.mlp.experts.6.gate_proj.weight", 0, 0,
               32, 64);
    expect_box(m, s, 3, "model.layers.1.mlp.experts.7.down_proj.weight", 0, 0,
               64, 32);
    expect_box(m, s, 3, "model.layers.1.mlp.experts.5.up_proj.weight", ABSENT);
    expect_box(m, s, 1, "model.layers.0.mlp.experts.2.up_proj.weight", 0, 0,
               32, 64);
    expect_box(m, s, 2, "model.layers.0.mlp.gate.weight", 0, 0, 8, 64);
    /* tp=2, ep=2, etp=2 (dp 2): k = rank % 4, etp rank k % 2, ep rank
     * k / 2; rank 3 holds the second halves of experts 4..7. */
    s = "megatron:tp=2,ep=2,etp=2";
    expect_box(m, s, 3, "model.layers.2.mlp.experts.4.gate_proj.weight", 16,
               0, 16, 64);
    expect_box(m, s, 3, "model.layers.2.mlp.experts.7.down_proj.weight", 0,
               16, 64, 16);
    expect_box(m, s, 3, "model.layers.2.mlp.experts.3.down_proj.weight",
               ABSENT);
    expect_box(m, s, 0, "model.layers.2.mlp.experts.3.up_proj.weight", 0, 0,
               16, 64);
    expect_box(m, s, 1, "model.layers.2.mlp.experts.3.up_proj.weight", 16, 0,
               16, 64);
    expect_box(m, s, 1, "model.layers.2.mlp.experts.4.up_proj.weight",
               ABSENT);
    expect_box(m, s, 2, "model.layers.0.mlp.experts.4.down_proj.weight", 0, 0,
               64, 16);
    /* tp=4, ep=2, etp=2, dp=1 (plane 4, no expert replicas) and dp=2 (rank
     * 5 = tp 1 of dp 1: k = 5, replica of k = 1). */
    expect_box(m, "megatron:tp=4,ep=2,etp=2,dp=2", 5,
               "model.layers.1.mlp.experts.2.gate_proj.weight", 16, 0, 16, 64);
    expect_box(m, "megatron:tp=4,ep=2,etp=2,dp=2", 6,
               "model.layers.1.mlp.experts.7.gate_proj.weight", 0, 0, 16, 64);
    rs_model_destroy(m);

    m = lx_model_json(deepseek_cfg);
    s = "megatron:tp=2,pp=2,ep=2"; /* layers 0,1 | 2,3; dp 1 */
    expect_box(m, s, 1, "model.layers.0.self_attn.q_a_proj.weight", 0, 0, 32,
               64);
    expect_box(m, s, 1, "model.layers.0.self_attn.q_b_proj.weight", 48, 0, 48,
               32);
    expect_box(m, s, 1, "model.layers.1.self_attn.kv_b_proj.weight", 64, 0,
               64, 16);
    expect_box(m, s, 0, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight",
               0, 0, 24, 64);
    expect_box(m, s, 0, "model.layers.1.self_attn.o_proj.weight", 0, 0, 64,
               32);
    expect_box(m, s, 1, "model.layers.0.mlp.down_proj.weight", 0, 64, 64, 64);
    expect_box(m, s, 3, "model.layers.3.mlp.shared_experts.up_proj.weight", 16,
               0, 16, 64);
    expect_box(m, s, 3, "model.layers.3.mlp.gate.e_score_correction_bias", 0,
               0, 8, 0);
    expect_box(m, s, 3, "model.layers.3.mlp.experts.5.gate_proj.weight", 0, 0,
               32, 64);
    expect_box(m, s, 2, "model.layers.3.mlp.experts.5.gate_proj.weight",
               ABSENT);
    rs_model_destroy(m);
}

/* ---- written tables load back ---- */

static void load_rank_table(rs_model_h m, const rs_layout_t *l, int64_t rank,
                            rs_sources_h s)
{
    char *text = NULL;
    size_t len = 0;
    rs_diag_t d;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    rs_diag_clear(&d);
    rs_status_t st = rs_layout_write_table(m, l, rank, f, &d);
    if (st != RS_OK)
        fail_msg("write rank %lld: %s", (long long)rank, d.msg);
    fclose(f);
    st = rs_sources_load_string(s, text, len, "table.json", &d);
    if (st != RS_OK)
        fail_msg("load rank %lld: %s\n%.400s", (long long)rank, d.msg, text);
    if (strstr(text, "\"name\"") != NULL)
        assert_non_null(strstr(text, "\"dtype\": \"torch.bfloat16\""));
    free(text);
}

/* Shard j of tensor t (rs_sources_shard walks from the first tensor on
 * every call, too slow for a whole model's shards). */
static void shard_at(rs_sources_h s, size_t t, size_t j, rs_shard_desc_t *d)
{
    const rs__source_tensor_t *tensor = &s->tensors[t];
    const rs__source_shard_t *sh = &tensor->shards[j];
    d->tensor = tensor->name;
    d->dtype = tensor->dtype;
    d->elsize = tensor->elsize;
    d->ndim = tensor->ndim;
    d->full_shape = tensor->shape;
    d->session = s->sessions[sh->session];
    d->device_id = sh->device_id;
    d->addr = sh->addr;
    d->offset = sh->offset;
    d->shape = sh->shape;
}

static void expect_same_sources(rs_sources_h a, rs_sources_h b)
{
    assert_int_equal(rs_sources_num_tensors(a), rs_sources_num_tensors(b));
    assert_int_equal(rs_sources_num_shards(a), rs_sources_num_shards(b));
    assert_int_equal(rs_sources_num_tables(a), rs_sources_num_tables(b));
    for (size_t t = 0; t < a->tensors_len; t++) {
        assert_int_equal(a->tensors[t].shards_len, b->tensors[t].shards_len);
        for (size_t j = 0; j < a->tensors[t].shards_len; j++) {
            rs_shard_desc_t x, y;
            shard_at(a, t, j, &x);
            shard_at(b, t, j, &y);
            assert_string_equal(x.tensor, y.tensor);
            assert_string_equal(x.session, y.session);
            assert_int_equal(x.dtype, y.dtype);
            assert_int_equal(x.ndim, y.ndim);
            assert_int_equal(x.device_id, y.device_id);
            assert_int_equal(x.addr, y.addr);
            size_t dims = (size_t)x.ndim * sizeof(int64_t);
            assert_memory_equal(x.full_shape, y.full_shape, dims);
            assert_memory_equal(x.offset, y.offset, dims);
            assert_memory_equal(x.shape, y.shape, dims);
        }
    }
    for (size_t i = 0; i < rs_sources_num_tables(a); i++) {
        rs_table_info_t x, y;
        rs_sources_table(a, i, &x);
        rs_sources_table(b, i, &y);
        assert_string_equal(x.agent_name, y.agent_name);
        assert_int_equal(x.publisher_step, 0);
        assert_int_equal(y.publisher_step, 0);
    }
}

static rs_status_t add_to(void *ctx, const rs_shard_desc_t *d)
{
    return rs_sources_add_shard(ctx, d, NULL);
}

static void check_roundtrip(rs_model_h m, const char *spec)
{
    rs_layout_t l = lx_layout(m, spec);
    rs_sources_h loaded = NULL, published = NULL, walked = NULL;
    rs_diag_t d;
    assert_int_equal(rs_sources_create(&loaded), RS_OK);
    assert_int_equal(rs_sources_create(&published), RS_OK);
    assert_int_equal(rs_sources_create(&walked), RS_OK);
    for (int64_t r = 0; r < l.world; r++) {
        char name[32];
        rs_table_info_t info = {0};
        load_rank_table(m, &l, r, loaded);
        assert_int_equal(rs_layout_trainer_shards(m, &l, r, add_to, walked,
                                                  NULL), RS_OK);
        rs_layout_trainer_session(r, name, sizeof(name));
        info.agent_name = name;
        assert_int_equal(rs_sources_add_table(walked, &info, NULL), RS_OK);
    }
    rs_diag_clear(&d);
    if (rs_layout_publish_all(m, &l, published, &d) != RS_OK)
        fail_msg("%s: %s", spec, d.msg);
    assert_int_equal(rs_sources_num_tables(published), l.world);
    expect_same_sources(loaded, published);
    expect_same_sources(walked, published);
    rs_sources_destroy(loaded);
    rs_sources_destroy(published);
    rs_sources_destroy(walked);
}

static void test_roundtrip(void **state)
{
    (void)state;
    rs_model_h m = lx_model_json(lx_dense_cfg);
    check_roundtrip(m, "fsdp:4");
    check_roundtrip(m, "fsdp:1100"); /* ranks 1001 and up publish nothing */
    check_roundtrip(m, "megatron:tp=4,pp=2,dp=2");
    rs_model_destroy(m);
    m = lx_model_json(lx_moe_cfg);
    check_roundtrip(m, "megatron:tp=2,ep=2,etp=2,pp=2");
    rs_model_destroy(m);
    m = lx_model_json(deepseek_cfg);
    check_roundtrip(m, "megatron:tp=2,ep=4,pp=2");
    rs_model_destroy(m);
}

/* A rank with no shards still writes a valid, empty table. */
static void test_empty_table(void **state)
{
    (void)state;
    rs_model_h m = lx_model_json(lx_dense_cfg);
    rs_layout_t l = lx_layout(m, "fsdp:2000");
    rs_sources_h s = NULL;
    rs_table_info_t info;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    load_rank_table(m, &l, 1999, s);
    assert_int_equal(rs_sources_num_shards(s), 0);
    assert_int_equal(rs_sources_num_tables(s), 1);
    rs_sources_table(s, 0, &info);
    assert_string_equal(info.agent_name, "trainer-1999");
    rs_sources_destroy(s);
    rs_model_destroy(m);
}

/* ---- errors ---- */

static rs_status_t stop_at_third(void *ctx, const rs_shard_desc_t *d)
{
    (void)d;
    int *n = ctx;
    return ++*n == 3 ? RS_ERR_TIMEOUT : RS_OK;
}

static void test_errors(void **state)
{
    (void)state;
    rs_model_h m = lx_model_json(lx_dense_cfg);
    rs_layout_t l = lx_layout(m, "megatron:tp=2,pp=2");
    rs_diag_t d;
    int n = 0;
    assert_int_equal(rs_layout_trainer_shards(m, &l, 0, stop_at_third, &n,
                                              NULL), RS_ERR_TIMEOUT);
    assert_int_equal(n, 3);
    rs_diag_clear(&d);
    assert_int_equal(rs_layout_trainer_shards(m, &l, 4, stop_at_third, &n,
                                              &d), RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "trainer rank 4 outside 0..3"));
    assert_int_equal(rs_layout_trainer_shards(m, &l, -1, stop_at_third, &n,
                                              &d), RS_ERR_INVALID_ARG);
    rs_layout_t v = lx_layout(m, "vllm:tp=2");
    assert_int_equal(rs_layout_trainer_shards(m, &v, 0, stop_at_third, &n,
                                              &d), RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "not vllm"));
    /* An unchecked layout is checked on the way in. */
    rs_layout_t bad;
    assert_int_equal(rs_layout_parse("megatron:tp=8", NULL, &bad), RS_OK);
    assert_int_equal(rs_layout_write_table(m, &bad, 0, stdout, &d),
                     RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "attention heads (4)"));
    /* Unchecked but valid: dp derived inside. */
    rs_layout_t raw;
    assert_int_equal(rs_layout_parse("megatron:tp=2,pp=2", NULL, &raw), RS_OK);
    n = 0;
    assert_int_equal(rs_layout_trainer_shards(m, &raw, 3, stop_at_third, &n,
                                              NULL), RS_ERR_TIMEOUT);
    assert_int_equal(rs_layout_write_table(m, &l, 0, NULL, &d),
                     RS_ERR_INVALID_ARG);
    rs_model_destroy(m);
}

/* publish_all leaves the sources as they were when any shard is refused. */
static void test_publish_all_or_nothing(void **state)
{
    (void)state;
    rs_model_h m = lx_model_json(lx_dense_cfg);
    rs_layout_t l = lx_layout(m, "megatron:tp=2,pp=2");
    rs_sources_h s = NULL;
    rs_diag_t d;
    int64_t full = 65, off = 0, shape = 65; /* model.norm is [64] */
    rs_shard_desc_t pre = {"model.norm.weight", RS_DTYPE_BF16, 2, 1, &full,
                           "other", 0, 4096, &off, &shape, NULL};
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_add_shard(s, &pre, NULL), RS_OK);
    rs_diag_clear(&d);
    assert_int_equal(rs_layout_publish_all(m, &l, s, &d), RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "model.norm.weight"));
    assert_int_equal(rs_sources_num_tensors(s), 1);
    assert_int_equal(rs_sources_num_shards(s), 1);
    assert_int_equal(rs_sources_num_tables(s), 0);
    rs_sources_destroy(s);
    rs_model_destroy(m);
}

/* ---- real sizes ---- */

/* Bytes every rank together must publish: each tensor times its replicas. */
static uint64_t expected_bytes(rs_model_h m, const rs_layout_t *l)
{
    uint64_t total = 0;
    int64_t kv = rs_model_config(m)->kv_heads;
    for (size_t i = 0; i < rs_model_num_tensors(m); i++) {
        rs_tensor_info_t t;
        rs_model_tensor(m, i, &t);
        uint64_t bytes = rs_dtype_size(t.dtype);
        for (int d = 0; d < t.ndim; d++)
            bytes *= (uint64_t)t.shape[d];
        total += bytes * (uint64_t)expected_replicas(t.name, l, kv);
    }
    return total;
}

static void check_published_bytes(const char *file, const char *spec,
                                  int64_t world)
{
    rs_model_h m = lx_model_file(file);
    rs_layout_t l = lx_layout(m, spec);
    rs_sources_h s = NULL;
    rs_diag_t d;
    uint64_t total = 0;
    assert_int_equal(l.world, world);
    assert_int_equal(rs_sources_create(&s), RS_OK);
    rs_diag_clear(&d);
    if (rs_layout_publish_all(m, &l, s, &d) != RS_OK)
        fail_msg("%s %s: %s", file, spec, d.msg);
    assert_int_equal(rs_sources_num_tables(s), world);
    assert_int_equal(rs_sources_num_tensors(s), rs_model_num_tensors(m));
    for (size_t t = 0; t < s->tensors_len; t++) {
        for (size_t j = 0; j < s->tensors[t].shards_len; j++) {
            rs_shard_desc_t sh;
            shard_at(s, t, j, &sh);
            uint64_t bytes = sh.elsize;
            for (int k = 0; k < sh.ndim; k++)
                bytes *= (uint64_t)sh.shape[k];
            total += bytes;
        }
    }
    assert_int_equal(total, expected_bytes(m, &l));
    rs_sources_destroy(s);
    rs_model_destroy(m);
}

static void test_real_models(void **state)
{
    (void)state;
    check_published_bytes("kimi-k2.json", "megatron:tp=8,pp=16,ep=16", 256);
    check_published_bytes("llama-3.1-70b.json", "megatron:tp=8,pp=4", 32);
    check_published_bytes("qwen3-30b-a3b.json", "megatron:tp=4,ep=8,etp=2",
                          16);
    check_published_bytes("qwen2.5-0.5b.json", "fsdp:8", 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coverage_dense),
        cmocka_unit_test(test_coverage_moe),
        cmocka_unit_test(test_coverage_deepseek),
        cmocka_unit_test(test_boxes_dense),
        cmocka_unit_test(test_boxes_fsdp),
        cmocka_unit_test(test_boxes_experts),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_empty_table),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_publish_all_or_nothing),
        cmocka_unit_test(test_real_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
