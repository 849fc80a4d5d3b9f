/* Tests of vllm captures: for tiny models and many vllm layouts, every
 * rank's capture, replayed over deterministic full tensors by the ground
 * truth in gt_tensor.h, must give exactly the parameters an independent
 * plain-loop implementation of vLLM's loaders (tests/support/vllm_direct.c)
 * builds (padding untouched and counted), deterministically, identically
 * across dp replicas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "layout_env.h"
#include "gt_tensor.h"
#include "reshard_layout/layout.h"
#include "reshard_layout/model.h"
#include "vllm_direct.h"

#define SENTINEL 0xA5

/* ---- applying a capture ---------------------------------------------- */

/* A quantized copy's scales: the blocks of the 2-D source its view
 * touches (read off the element indices the ground truth gives), each
 * block's scale (the value of element gr * grid_cols + gc of the tensor
 * "<src>_scale_inv") written row-major over the touched grid into the
 * scale region, which must be shaped as that grid. */
static void replay_scales(vd_expect_t *x, rs_capture_h cap,
                          const rs_copy_desc_t *d, const rs_quant_desc_t *q,
                          const rs_tensor_info_t *t, const gt_tensor_t *v,
                          uint8_t **got, uint8_t **written)
{
    char want[256], sname[256];
    assert_int_equal(q->scheme, RS_QUANT_FP8_BLOCK);
    assert_int_equal(q->block_ndim, 2);
    assert_int_equal(q->block[0], x->bn);
    assert_int_equal(q->block[1], x->bk);
    assert_int_equal(t->ndim, 2);
    snprintf(want, sizeof(want), "%s_scale_inv", d->param);
    assert_string_equal(q->scale_param, want);
    long si = rs_capture_find_param(cap, q->scale_param);
    assert_true(si >= 0);
    rs_param_info_t sp;
    rs_capture_param(cap, (size_t)si, &sp);
    assert_int_equal(sp.dtype, RS_DTYPE_F32);
    int64_t C = t->shape[1], gcols = (C + x->bk - 1) / x->bk;
    int64_t lo[2] = {INT64_MAX, INT64_MAX}, hi[2] = {-1, -1};
    for (int64_t j = 0; j < v->numel; j++) {
        int64_t g[2] = {v->idx[j] / C / x->bn, v->idx[j] % C / x->bk};
        for (int k = 0; k < 2; k++) {
            lo[k] = g[k] < lo[k] ? g[k] : lo[k];
            hi[k] = g[k] + 1 > hi[k] ? g[k] + 1 : hi[k];
        }
    }
    assert_int_equal(q->scale_ndim, 2);
    assert_int_equal(q->scale_shape[0], hi[0] - lo[0]);
    assert_int_equal(q->scale_shape[1], hi[1] - lo[1]);
    snprintf(sname, sizeof(sname), "%s_scale_inv", d->src);
    uint64_t h = vd_name_hash(sname);
    for (int64_t r = lo[0]; r < hi[0]; r++) {
        for (int64_t c = lo[1]; c < hi[1]; c++) {
            int64_t e = q->scale_offset + (r - lo[0]) * q->scale_stride[0] +
                        (c - lo[1]) * q->scale_stride[1];
            assert_true(e >= 0 && (uint64_t)e * 4 < sp.nbytes);
            if (written[si][(size_t)e * 4])
                fail_msg("copy of %s writes scale %lld of %s twice", d->src,
                         (long long)e, q->scale_param);
            memset(written[si] + (size_t)e * 4, 1, 4);
            vd_put_value(got[si] + (size_t)e * 4, RS_DTYPE_F32, h,
                         r * gcols + c);
        }
    }
}

/* Replays every copy with the ground truth into the matching expected
 * parameter's shape, then compares bytes. Returns the unwritten bytes. */
static uint64_t apply_and_compare(vd_expect_t *x, rs_capture_h cap)
{
    size_t np = rs_capture_num_params(cap);
    uint8_t **got = calloc(np, sizeof(uint8_t *));
    uint8_t **written = calloc(np, sizeof(uint8_t *));
    uint64_t unwritten = 0;

    assert_int_equal(np, x->n);
    for (size_t i = 0; i < np; i++) {
        rs_param_info_t p;
        rs_capture_param(cap, i, &p);
        got[i] = malloc(p.nbytes ? p.nbytes : 1);
        written[i] = calloc(p.nbytes ? p.nbytes : 1, 1);
        memset(got[i], SENTINEL, p.nbytes);
    }
    for (size_t c = 0; c < rs_capture_num_copies(cap); c++) {
        rs_copy_desc_t d;
        rs_tensor_info_t t;
        rs_param_info_t p;
        gt_tensor_t v;
        char why[128] = "";
        rs_capture_copy(cap, c, &d);
        long si = rs_model_find(x->model, d.src);
        long pi = rs_capture_find_param(cap, d.param);
        assert_true(si >= 0 && pi >= 0);
        rs_model_tensor(x->model, (size_t)si, &t);
        rs_capture_param(cap, (size_t)pi, &p);
        rs_quant_desc_t q;
        int quant = rs_capture_copy_quant(cap, c, &q);
        assert_int_equal(d.dest_dtype, quant ? q.format : t.dtype);
        if (quant)
            assert_int_equal(d.dest_dtype, x->fp8);
        if (gt_replay(t.ndim, t.shape, d.ops, d.nops, &v, why, sizeof(why)) !=
            GT_OK)
            fail_msg("copy %zu of %s: %s", c, d.src, why);
        assert_int_equal(v.ndim, d.ndim);
        for (int k = 0; k < v.ndim; k++)
            assert_int_equal(v.shape[k], d.dest_shape[k]);
        size_t es = rs_dtype_size(p.dtype);
        uint64_t h = vd_name_hash(d.src);
        int64_t m[RS_MAX_DIMS];
        for (int64_t j = 0; j < v.numel; j++) {
            gt_unravel(j, v.ndim, v.shape, m);
            int64_t e = d.dest_offset;
            for (int k = 0; k < v.ndim; k++)
                e += m[k] * d.dest_stride[k];
            assert_true(e >= 0 && (uint64_t)e * es < p.nbytes);
            if (written[pi][(size_t)e * es])
                fail_msg("copy %zu of %s writes element %lld of %s twice", c,
                         d.src, (long long)e, d.param);
            memset(written[pi] + (size_t)e * es, 1, es);
            vd_put_value(got[pi] + (size_t)e * es, p.dtype, h, v.idx[j]);
        }
        if (quant)
            replay_scales(x, cap, &d, &q, &t, &v, got, written);
        gt_free(&v);
    }
    for (size_t i = 0; i < np; i++) {
        rs_param_info_t p;
        rs_capture_param(cap, i, &p);
        const vd_param_t *e = vd_find(x, p.name);
        if (e == NULL)
            fail_msg("unexpected parameter %s", p.name);
        assert_int_equal(p.ndim, e->ndim);
        for (int k = 0; k < p.ndim; k++)
            assert_int_equal(p.shape[k], e->shape[k]);
        assert_int_equal(p.dtype, e->dtype);
        if (memcmp(got[i], e->bytes, p.nbytes) != 0)
            fail_msg("parameter %s differs from vLLM's loader", p.name);
        uint64_t un = 0;
        for (uint64_t b = 0; b < p.nbytes; b++)
            un += written[i][b] == 0;
        assert_int_equal(un, (uint64_t)e->padding * rs_dtype_size(p.dtype));
        unwritten += un;
        free(got[i]);
        free(written[i]);
    }
    free(got);
    free(written);
    return unwritten;
}

/* ---- drivers --------------------------------------------------------- */

static char *capture_text(rs_capture_h cap)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(rs_capture_write_json(cap, f, NULL), RS_OK);
    fclose(f);
    return text;
}

static rs_capture_h capture(rs_model_h m, const rs_layout_t *l, int64_t rank,
                            uint64_t *pad)
{
    rs_diag_t d;
    rs_capture_h cap = NULL;
    rs_diag_clear(&d);
    if (rs_layout_capture(m, l, rank, &d, &cap, pad) != RS_OK)
        fail_msg("rank %lld: %s", (long long)rank, d.msg);
    return cap;
}

/* Every rank of `spec` against the expected parameters; dp replicas (with
 * ep == 1) capture the same text; capturing twice gives the same text; a
 * written capture loads back to the same text. */
static void check_layout(rs_model_h m, const char *spec)
{
    rs_layout_t l = lx_layout(m, spec);
    rs_diag_t d;
    vd_expect_t x;
    vd_init(&x, m, &l, SENTINEL);
    int64_t world = l.tp * l.pp * l.dp, plane = l.tp * l.pp;
    assert_int_equal(l.world, world);
    for (int64_t r = 0; r < world; r++) {
        uint64_t pad = 12345;
        rs_capture_h cap = capture(m, &l, r, &pad);
        vd_expect_rank(&x, r);
        uint64_t unwritten = apply_and_compare(&x, cap);
        if (unwritten != pad)
            fail_msg("%s rank %lld: %llu bytes unwritten, padding says %llu",
                     spec, (long long)r, (unsigned long long)unwritten,
                     (unsigned long long)pad);
        vd_free(&x);

        char *text = capture_text(cap);
        rs_capture_h again = capture(m, &l, r, NULL);
        char *text2 = capture_text(again);
        assert_string_equal(text, text2);
        rs_capture_h back = NULL;
        assert_int_equal(rs_capture_load_string(text, strlen(text), spec, &d,
                                                &back), RS_OK);
        char *text3 = capture_text(back);
        assert_string_equal(text, text3);
        if (l.ep == 1 && r >= plane) { /* a dp replica of rank r % plane */
            rs_capture_h first = capture(m, &l, r % plane, NULL);
            char *t0 = capture_text(first);
            assert_string_equal(text, t0);
            free(t0);
            rs_capture_destroy(first);
        }
        free(text);
        free(text2);
        free(text3);
        rs_capture_destroy(cap);
        rs_capture_destroy(again);
        rs_capture_destroy(back);
    }
}

static void test_tiny_llama(void **state)
{
    (void)state;
    rs_model_h m = lx_model_file("tiny-llama.json");
    const char *specs[] = {"vllm:tp=1", "vllm:tp=2", "vllm:tp=4",
                           "vllm:tp=2,dp=2", "vllm:tp=2,pp=2",
                           "vllm:tp=4,pp=3", "vllm:pp=4,dp=2"};
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
        check_layout(m, specs[i]);
    rs_model_destroy(m);
}

static void test_tiny_moe(void **state)
{
    (void)state;
    rs_model_h m = lx_model_file("tiny-moe.json");
    const char *specs[] = {"vllm:tp=1",      "vllm:tp=2",
                           "vllm:tp=4",      "vllm:tp=2,ep=2",
                           "vllm:tp=2,dp=2", "vllm:tp=2,ep=4,dp=2",
                           "vllm:tp=1,ep=2,dp=2", "vllm:tp=2,pp=2,ep=2",
                           "vllm:tp=4,ep=8,dp=2"};
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
        check_layout(m, specs[i]);
    rs_model_destroy(m);
}

static void test_tiny_deepseek(void **state)
{
    (void)state;
    rs_model_h m = lx_model_file("tiny-deepseek.json");
    const char *specs[] = {"vllm:tp=1", "vllm:tp=2", "vllm:tp=4",
                           "vllm:tp=2,ep=2", "vllm:tp=2,dp=2,ep=4",
                           "vllm:tp=2,pp=2", "vllm:tp=1,pp=3,ep=2,dp=2"};
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
        check_layout(m, specs[i]);
    rs_model_destroy(m);
}

/* Edge cases the bundled tiny configs do not reach: ranks holding vocab
 * padding only, one kv head shared by all ranks, q/k norms, an untied head
 * on a five-layer stack split unevenly, MLA without a q LoRA, and qwen2_moe
 * (qkv biases, a gated shared expert, a dense layer among MoE layers). */
static void test_edges(void **state)
{
    (void)state;
    static const char qwen3[] =
        "{\"model_type\": \"qwen3\", \"hidden_size\": 32, \"num_hidden_layers\":"
        " 5, \"num_attention_heads\": 8, \"num_key_value_heads\": 1,"
        " \"head_dim\": 8, \"intermediate_size\": 64, \"vocab_size\": 100,"
        " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";
    static const char mla[] =
        "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 32,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
        " \"num_key_value_heads\": 4, \"intermediate_size\": 64,"
        " \"moe_intermediate_size\": 16, \"n_routed_experts\": 4,"
        " \"n_shared_experts\": 2, \"first_k_dense_replace\": 1,"
        " \"moe_layer_freq\": 1, \"kv_lora_rank\": 8, \"q_lora_rank\": null,"
        " \"qk_nope_head_dim\": 8, \"qk_rope_head_dim\": 4,"
        " \"v_head_dim\": 8, \"vocab_size\": 130, \"num_experts_per_tok\": 2,"
        " \"tie_word_embeddings\": true, \"torch_dtype\": \"float32\"}";
    static const char qwen2_moe[] =
        "{\"model_type\": \"qwen2_moe\", \"hidden_size\": 32,"
        " \"num_hidden_layers\": 3, \"num_attention_heads\": 4,"
        " \"num_key_value_heads\": 2, \"intermediate_size\": 64,"
        " \"moe_intermediate_size\": 16, \"num_experts\": 4,"
        " \"shared_expert_intermediate_size\": 48, \"decoder_sparse_step\": 1,"
        " \"mlp_only_layers\": [1], \"num_experts_per_tok\": 2,"
        " \"vocab_size\": 200, \"tie_word_embeddings\": false}";
    rs_diag_t d;
    rs_model_h m = NULL;
    rs_diag_clear(&d);
    if (rs_model_load_string(qwen2_moe, strlen(qwen2_moe), "qwen2_moe", &d,
                             &m) != RS_OK)
        fail_msg("%s", d.msg);
    const char *qspecs[] = {"vllm:tp=2", "vllm:tp=4,ep=2", "vllm:tp=2,pp=2",
                            "vllm:tp=1,ep=4,dp=4"};
    for (size_t i = 0; i < sizeof(qspecs) / sizeof(qspecs[0]); i++)
        check_layout(m, qspecs[i]);
    rs_model_destroy(m);
    if (rs_model_load_string(qwen3, strlen(qwen3), "qwen3", &d, &m) != RS_OK)
        fail_msg("%s", d.msg);
    const char *specs[] = {"vllm:tp=4", "vllm:tp=8,pp=2", "vllm:tp=2,pp=3",
                           "vllm:tp=4,pp=5"};
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
        check_layout(m, specs[i]);
    rs_model_destroy(m);
    if (rs_model_load_string(mla, strlen(mla), "mla", &d, &m) != RS_OK)
        fail_msg("%s", d.msg);
    const char *mspecs[] = {"vllm:tp=2", "vllm:tp=4,pp=2", "vllm:tp=2,ep=4,dp=2"};
    for (size_t i = 0; i < sizeof(mspecs) / sizeof(mspecs[0]); i++)
        check_layout(m, mspecs[i]);
    rs_model_destroy(m);
}

/* FP8 checkpoints: the tiny FP8 DeepSeek (16x16 blocks, a 24-row
 * kv_a_proj_with_mqa ending on a short block) under every layout that
 * slices on block boundaries, and a qwen3 with 8x8 blocks where one kv
 * head is shared by all ranks: weights and scales land where vLLM's FP8
 * loaders put them. */
static void test_fp8(void **state)
{
    (void)state;
    rs_model_h m = lx_model_file("tiny-deepseek-fp8.json");
    const char *specs[] = {"vllm:tp=1", "vllm:tp=2", "vllm:tp=2,ep=2",
                           "vllm:tp=2,dp=2,ep=4", "vllm:tp=2,pp=2",
                           "vllm:tp=1,pp=3,ep=2,dp=2"};
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
        check_layout(m, specs[i]);
    /* the capture really is quantized: an FP8 weight and its scales */
    rs_layout_t l;
    rs_diag_t d;
    assert_int_equal(rs_layout_parse("vllm:tp=2", &d, &l), RS_OK);
    assert_int_equal(rs_layout_check(&l, m, &d), RS_OK);
    rs_capture_h cap = capture(m, &l, 1, NULL);
    long w = rs_capture_find_param(cap, "model.layers.1.mlp.experts.w13_weight");
    long sc = rs_capture_find_param(
        cap, "model.layers.1.mlp.experts.w13_weight_scale_inv");
    long emb = rs_capture_find_param(cap, "model.layers.1.mlp.gate.weight");
    assert_true(w >= 0 && sc >= 0 && emb >= 0);
    rs_param_info_t p;
    rs_capture_param(cap, (size_t)w, &p);
    assert_int_equal(p.dtype, RS_DTYPE_F8E4M3);
    rs_capture_param(cap, (size_t)sc, &p);
    assert_int_equal(p.dtype, RS_DTYPE_F32);
    assert_int_equal(p.ndim, 3); /* 8 experts, 2 x 16/16 rows, 64/16 cols */
    assert_int_equal(p.shape[0], 8);
    assert_int_equal(p.shape[1], 2);
    assert_int_equal(p.shape[2], 4);
    rs_capture_param(cap, (size_t)emb, &p);
    assert_int_equal(p.dtype, RS_DTYPE_BF16);
    rs_capture_destroy(cap);
    rs_model_destroy(m);

    static const char qwen3[] =
        "{\"model_type\": \"qwen3\", \"hidden_size\": 32, \"num_hidden_layers\":"
        " 2, \"num_attention_heads\": 8, \"num_key_value_heads\": 1,"
        " \"head_dim\": 8, \"intermediate_size\": 64, \"vocab_size\": 100,"
        " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
        " \"quantization_config\": {\"quant_method\": \"fp8\","
        " \"fmt\": \"e5m2\", \"weight_block_size\": [8, 8]}}";
    rs_diag_clear(&d);
    if (rs_model_load_string(qwen3, strlen(qwen3), "qwen3", &d, &m) != RS_OK)
        fail_msg("%s", d.msg);
    const char *qspecs[] = {"vllm:tp=1", "vllm:tp=4", "vllm:tp=2,pp=2"};
    for (size_t i = 0; i < sizeof(qspecs) / sizeof(qspecs[0]); i++)
        check_layout(m, qspecs[i]);
    rs_model_destroy(m);
}

/* A tiny-deepseek-fp8 config with quantization_config replaced by `q`. */
static rs_model_h fp8_variant(const char *q)
{
    const char *dir = getenv("RESHARD_SOURCE_DIR");
    char path[1024];
    rs_diag_t d;
    json_error_t je;
    snprintf(path, sizeof(path), "%s/examples/models/tiny-deepseek-fp8.json",
             dir ? dir : ".");
    json_t *root = json_load_file(path, 0, &je);
    json_t *qv = json_loads(q, 0, &je);
    assert_non_null(root);
    assert_non_null(qv);
    json_object_set_new(root, "quantization_config", qv);
    char *text = json_dumps(root, 0);
    rs_model_h m = NULL;
    rs_diag_clear(&d);
    if (rs_model_load_string(text, strlen(text), "fp8 variant", &d, &m) !=
        RS_OK)
        fail_msg("%s", d.msg);
    free(text);
    json_decref(root);
    return m;
}

/* modules_to_not_convert leaves the modules it names (by whole name
 * components) in bf16, everywhere else FP8, as the expectation built from
 * the same list independently says. */
static void test_fp8_not_converted(void **state)
{
    (void)state;
    rs_model_h m = fp8_variant(
        "{\"quant_method\": \"fp8\", \"weight_block_size\": [16, 16],"
        " \"modules_to_not_convert\": [\"self_attn.kv_b_proj\","
        " \"model.layers.2.mlp\", \"layers.0.mlp.down_proj\", \"gate\"]}");
    check_layout(m, "vllm:tp=2");
    check_layout(m, "vllm:tp=2,ep=4,dp=2");
    rs_layout_t l;
    rs_diag_t d;
    assert_int_equal(rs_layout_parse("vllm:tp=2", &d, &l), RS_OK);
    assert_int_equal(rs_layout_check(&l, m, &d), RS_OK);
    rs_capture_h cap = capture(m, &l, 0, NULL);
    struct { const char *name; rs_dtype_t dtype; } want[] = {
        {"model.layers.0.self_attn.kv_b_proj.weight", RS_DTYPE_BF16},
        {"model.layers.1.self_attn.kv_b_proj.weight", RS_DTYPE_BF16},
        {"model.layers.1.self_attn.q_b_proj.weight", RS_DTYPE_F8E4M3},
        {"model.layers.2.mlp.experts.w13_weight", RS_DTYPE_BF16},
        {"model.layers.1.mlp.experts.w13_weight", RS_DTYPE_F8E4M3},
        {"model.layers.0.mlp.down_proj.weight", RS_DTYPE_BF16},
        {"model.layers.0.mlp.gate_up_proj.weight", RS_DTYPE_F8E4M3},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        long k = rs_capture_find_param(cap, want[i].name);
        rs_param_info_t p;
        assert_true(k >= 0);
        rs_capture_param(cap, (size_t)k, &p);
        if (p.dtype != want[i].dtype)
            fail_msg("%s is %s", want[i].name, rs_dtype_name(p.dtype));
        char scale[256];
        snprintf(scale, sizeof(scale), "%s_scale_inv", want[i].name);
        assert_int_equal(rs_capture_find_param(cap, scale) >= 0,
                         want[i].dtype == RS_DTYPE_F8E4M3);
    }
    rs_capture_destroy(cap);
    rs_model_destroy(m);
}

/* Expects rank `rank` of `spec` refused with every fragment in the
 * message, nothing captured. */
static void expect_refused(rs_model_h m, const char *spec, int64_t rank,
                           rs_status_t want, const char *const *frags)
{
    rs_layout_t l;
    rs_diag_t d;
    rs_capture_h cap = NULL;
    uint64_t pad = 7;
    assert_int_equal(rs_layout_parse(spec, &d, &l), RS_OK);
    assert_int_equal(rs_layout_check(&l, m, &d), RS_OK);
    rs_diag_clear(&d);
    assert_int_equal(rs_layout_capture(m, &l, rank, &d, &cap, &pad), want);
    assert_null(cap);
    assert_int_equal(pad, 7);
    for (; *frags != NULL; frags++)
        if (strstr(d.msg, *frags) == NULL)
            fail_msg("%s rank %lld: '%s' lacks '%s'", spec, (long long)rank,
                     d.msg, *frags);
}

/* Layouts whose slices cut blocks, merged weights whose parts would, and
 * merged weights split by modules_to_not_convert are refused naming the
 * tensor, its dims and the block, on every rank (not only those whose
 * slice ends mid-block). */
static void test_fp8_refused(void **state)
{
    (void)state;
    rs_model_h m = lx_model_file("tiny-deepseek-fp8.json");
    /* tp=4: q_b_proj [96, 32] gives 24 rows a rank, 1.5 blocks */
    const char *qb[] = {"model.layers.0.self_attn.q_b_proj.weight",
                        "[96, 32]", "16x16", "rows [24, 48)", NULL};
    expect_refused(m, "vllm:tp=4", 1, RS_ERR_INPUT, qb);
    const char *qb3[] = {"q_b_proj.weight", "rows [72, 96)", NULL};
    expect_refused(m, "vllm:tp=4", 3, RS_ERR_INPUT, qb3);
    rs_model_destroy(m);

    /* 8x12 blocks: tp=2 gives o_proj 32 of its 64 input columns */
    m = fp8_variant("{\"quant_method\": \"fp8\", \"weight_block_size\": "
                    "[8, 12]}");
    const char *cols[] = {"o_proj.weight", "[64, 64]", "8x12",
                          "columns [0, 32)", NULL};
    expect_refused(m, "vllm:tp=2", 0, RS_ERR_INPUT, cols);
    rs_model_destroy(m);
    m = fp8_variant("{\"quant_method\": \"fp8\", \"weight_block_size\": "
                    "[12, 16]}");
    /* 12x16 blocks: q_a_proj's 32 rows end mid-block inside
     * fused_qkv_a_proj, so kv_a_proj_with_mqa would start mid-block */
    const char *merged[] = {"fused_qkv_a_proj", "q_a_proj", "[32, 64]",
                            "12x16", "rows [0, 32)", NULL};
    expect_refused(m, "vllm:tp=1", 0, RS_ERR_INPUT, merged);
    rs_model_destroy(m);

    /* q_a_proj left in bf16 but kv_a_proj_with_mqa FP8: one fused weight */
    m = fp8_variant("{\"quant_method\": \"fp8\", \"weight_block_size\": "
                    "[16, 16], \"modules_to_not_convert\": "
                    "[\"self_attn.q_a_proj\"]}");
    const char *mixed[] = {"fused_qkv_a_proj", "kv_a_proj_with_mqa",
                           "modules_to_not_convert", NULL};
    expect_refused(m, "vllm:tp=2", 0, RS_ERR_INPUT, mixed);
    rs_model_destroy(m);

    /* one scale per tensor is not expressed */
    m = fp8_variant("{\"quant_method\": \"fp8\"}");
    const char *tensor[] = {"quantization_config.weight_block_size", NULL};
    expect_refused(m, "vllm:tp=2", 0, RS_ERR_UNSUPPORTED, tensor);
    rs_model_destroy(m);
}

/* Bad requests are refused with a message naming the cause. */
static void test_errors(void **state)
{
    (void)state;
    rs_model_h m = lx_model_file("tiny-llama.json");
    rs_layout_t l;
    rs_diag_t d;
    rs_capture_h cap = NULL;
    uint64_t pad = 7;

    assert_int_equal(rs_layout_parse("vllm:tp=3", &d, &l), RS_OK);
    l.world = 3;
    assert_int_equal(rs_layout_capture(m, &l, 0, &d, &cap, &pad),
                     RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "tp=3"));
    assert_null(cap);
    assert_int_equal(pad, 7);
    assert_int_equal(rs_layout_parse("vllm:tp=2", &d, &l), RS_OK);
    assert_int_equal(rs_layout_capture(m, &l, 2, &d, &cap, &pad),
                     RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "rank 2"));
    assert_int_equal(rs_layout_parse("fsdp:2", &d, &l), RS_OK);
    assert_int_equal(rs_layout_capture(m, &l, 0, &d, &cap, &pad),
                     RS_ERR_INVALID_ARG);
    assert_null(cap);
    rs_model_destroy(m);

    /* ep must divide the experts */
    m = lx_model_file("tiny-moe.json");
    assert_int_equal(rs_layout_parse("vllm:tp=2,ep=2,dp=3", &d, &l), RS_OK);
    l.ep = 3;
    assert_int_equal(rs_layout_capture(m, &l, 0, &d, &cap, &pad),
                     RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "ep=3"));
    rs_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_llama),
        cmocka_unit_test(test_tiny_moe),
        cmocka_unit_test(test_tiny_deepseek),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_fp8_not_converted),
        cmocka_unit_test(test_fp8_refused),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
