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

#include "gt_tensor.h"
#include "reshard_layout/layout.h"
#include "reshard_layout/model.h"
#include "vllm_direct.h"

#define SENTINEL 0xA5

/* ---- applying a capture ---------------------------------------------- */

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
        assert_int_equal(d.dest_dtype, t.dtype);
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

static rs_model_h load_example(const char *file)
{
    const char *dir = getenv("RESHARD_SOURCE_DIR");
    char path[1024];
    rs_diag_t d;
    rs_model_h m = NULL;
    snprintf(path, sizeof(path), "%s/examples/models/%s", dir ? dir : ".",
             file);
    rs_diag_clear(&d);
    if (rs_model_load(path, &d, &m) != RS_OK)
        fail_msg("%s: %s", path, d.msg);
    return m;
}

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
    rs_layout_t l;
    rs_diag_t d;
    rs_diag_clear(&d);
    if (rs_layout_parse(spec, &d, &l) != RS_OK ||
        rs_layout_check(&l, m, &d) != RS_OK)
        fail_msg("%s: %s", spec, d.msg);
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
    rs_model_h m = load_example("tiny-llama.json");
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
    rs_model_h m = load_example("tiny-moe.json");
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
    rs_model_h m = load_example("tiny-deepseek.json");
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

/* Bad requests are refused with a message naming the cause. */
static void test_errors(void **state)
{
    (void)state;
    rs_model_h m = load_example("tiny-llama.json");
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
    m = load_example("tiny-moe.json");
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
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
