/* Tests of model manifests: every bundled config loads, parameter counts
 * match both the published totals (within 1%) and a closed-form count
 * written independently here, exact names and shapes of chosen tensors,
 * checkpoint order, tied heads, the name index, quantization_config read
 * and refused field by field, and errors naming the file and the key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "reshard_layout/model.h"

static char *model_path(const char *file)
{
    const char *dir = getenv("RESHARD_SOURCE_DIR");
    static char buf[4096];
    snprintf(buf, sizeof(buf), "%s/examples/models/%s", dir ? dir : ".", file);
    return buf;
}

static rs_model_h load(const char *file)
{
    rs_diag_t d;
    rs_model_h m = NULL;
    rs_diag_clear(&d);
    rs_status_t st = rs_model_load(model_path(file), &d, &m);
    if (st != RS_OK)
        fail_msg("%s: %s: %s", file, rs_status_str(st), d.msg);
    return m;
}

/* Asserts tensor `name` exists with the given dtype and 1-D or 2-D shape
 * (d1 < 0 for 1-D); returns its index. */
static long expect_tensor(rs_model_h m, const char *name, rs_dtype_t dtype,
                          int64_t d0, int64_t d1)
{
    rs_tensor_info_t t;
    long i = rs_model_find(m, name);
    if (i < 0)
        fail_msg("tensor %s not in the manifest", name);
    rs_model_tensor(m, (size_t)i, &t);
    assert_string_equal(t.name, name);
    if (t.ndim != (d1 < 0 ? 1 : 2) || t.shape[0] != d0 ||
        (d1 >= 0 && t.shape[1] != d1) || t.dtype != dtype)
        fail_msg("%s: ndim %d shape [%lld, %lld] dtype %s; wanted [%lld, "
                 "%lld] %s", name, t.ndim, (long long)t.shape[0],
                 t.ndim > 1 ? (long long)t.shape[1] : -1LL,
                 rs_dtype_name(t.dtype), (long long)d0, (long long)d1,
                 rs_dtype_name(dtype));
    return i;
}

static void expect_absent(rs_model_h m, const char *name)
{
    if (rs_model_find(m, name) >= 0)
        fail_msg("tensor %s should not be in the manifest", name);
}

static void expect_near(uint64_t got, double published)
{
    double rel = ((double)got - published) / published;
    if (rel > 0.01 || rel < -0.01)
        fail_msg("%llu parameters, published %.4g (off by %.2f%%)",
                 (unsigned long long)got, published, rel * 100);
}

/* Closed-form counts, independent of the manifest builder. */
static uint64_t gqa_params(uint64_t v, uint64_t h, uint64_t l, uint64_t heads,
                           uint64_t kv, uint64_t hd, uint64_t inter, int tied,
                           int bias, int qk_norm, uint64_t experts,
                           uint64_t moe_inter)
{
    uint64_t attn = 2 * heads * hd * h + 2 * kv * hd * h +
                    (bias ? heads * hd + 2 * kv * hd : 0) +
                    (qk_norm ? 2 * hd : 0);
    uint64_t mlp = experts ? experts * h + experts * 3 * moe_inter * h
                           : 3 * inter * h;
    return v * h * (tied ? 1 : 2) + l * (attn + mlp + 2 * h) + h;
}

static uint64_t mla_params(uint64_t v, uint64_t h, uint64_t l, uint64_t heads,
                           uint64_t ql, uint64_t kl, uint64_t nope,
                           uint64_t rope, uint64_t vd, uint64_t inter,
                           uint64_t moe_inter, uint64_t experts,
                           uint64_t shared, uint64_t first_dense)
{
    uint64_t attn = ql * h + ql + heads * (nope + rope) * ql +
                    (kl + rope) * h + kl + heads * (nope + vd) * kl +
                    h * heads * vd;
    uint64_t dense = attn + 3 * inter * h + 2 * h;
    uint64_t moe = attn + experts * h + experts + experts * 3 * moe_inter * h +
                   3 * moe_inter * shared * h + 2 * h;
    return 2 * v * h + first_dense * dense + (l - first_dense) * moe + h;
}

static void test_llama_3_1(void **state)
{
    (void)state;
    rs_model_h m = load("llama-3.1-8b.json");
    const rs_model_config_t *g = rs_model_config(m);
    assert_string_equal(g->model_type, "llama");
    assert_int_equal(g->arch, RS_ARCH_DENSE);
    assert_int_equal(g->dtype, RS_DTYPE_BF16);
    assert_int_equal(g->head_dim, 128);
    assert_int_equal(g->kv_heads, 8);
    assert_false(g->qkv_bias);
    assert_false(g->tie_embeddings);
    uint64_t want = gqa_params(128256, 4096, 32, 32, 8, 128, 14336, 0, 0, 0, 0, 0);
    assert_int_equal(rs_model_num_params(m), want);
    assert_int_equal(rs_model_num_bytes(m), 2 * want);
    expect_near(rs_model_num_params(m), 8.03e9);
    assert_int_equal(rs_model_num_tensors(m), 3 + 32 * 9);
    assert_int_equal(expect_tensor(m, "model.embed_tokens.weight",
                                   RS_DTYPE_BF16, 128256, 4096), 0);
    expect_tensor(m, "model.layers.0.input_layernorm.weight", RS_DTYPE_BF16,
                  4096, -1);
    expect_tensor(m, "model.layers.31.self_attn.q_proj.weight", RS_DTYPE_BF16,
                  4096, 4096);
    expect_tensor(m, "model.layers.7.self_attn.k_proj.weight", RS_DTYPE_BF16,
                  1024, 4096);
    expect_tensor(m, "model.layers.7.self_attn.o_proj.weight", RS_DTYPE_BF16,
                  4096, 4096);
    expect_tensor(m, "model.layers.3.mlp.down_proj.weight", RS_DTYPE_BF16,
                  4096, 14336);
    expect_tensor(m, "model.layers.3.mlp.up_proj.weight", RS_DTYPE_BF16,
                  14336, 4096);
    assert_int_equal(expect_tensor(m, "lm_head.weight", RS_DTYPE_BF16, 128256,
                                   4096), 3 + 32 * 9 - 1);
    expect_absent(m, "model.layers.0.self_attn.q_proj.bias");
    expect_absent(m, "model.layers.32.input_layernorm.weight");
    rs_model_destroy(m);

    m = load("llama-3.1-70b.json");
    want = gqa_params(128256, 8192, 80, 64, 8, 128, 28672, 0, 0, 0, 0, 0);
    assert_int_equal(rs_model_num_params(m), want);
    expect_near(rs_model_num_params(m), 70.6e9);
    expect_tensor(m, "model.layers.79.self_attn.v_proj.weight", RS_DTYPE_BF16,
                  1024, 8192);
    expect_tensor(m, "model.layers.0.mlp.gate_proj.weight", RS_DTYPE_BF16,
                  28672, 8192);
    expect_tensor(m, "model.norm.weight", RS_DTYPE_BF16, 8192, -1);
    rs_model_destroy(m);
}

static void test_qwen2_tied_bias(void **state)
{
    (void)state;
    rs_model_h m = load("qwen2.5-0.5b.json");
    const rs_model_config_t *g = rs_model_config(m);
    assert_true(g->tie_embeddings);
    assert_true(g->qkv_bias);
    assert_int_equal(g->head_dim, 64);
    uint64_t want = gqa_params(151936, 896, 24, 14, 2, 64, 4864, 1, 1, 0, 0, 0);
    assert_int_equal(rs_model_num_params(m), want);
    expect_near(rs_model_num_params(m), 0.494e9);
    assert_int_equal(rs_model_num_tensors(m), 2 + 24 * 12);
    expect_tensor(m, "model.layers.0.self_attn.q_proj.weight", RS_DTYPE_BF16,
                  896, 896);
    expect_tensor(m, "model.layers.0.self_attn.q_proj.bias", RS_DTYPE_BF16,
                  896, -1);
    expect_tensor(m, "model.layers.23.self_attn.k_proj.bias", RS_DTYPE_BF16,
                  128, -1);
    expect_tensor(m, "model.layers.23.self_attn.v_proj.weight", RS_DTYPE_BF16,
                  128, 896);
    expect_absent(m, "model.layers.0.self_attn.o_proj.bias");
    expect_absent(m, "lm_head.weight");
    /* Tied: the manifest ends with the final norm. */
    assert_int_equal(expect_tensor(m, "model.norm.weight", RS_DTYPE_BF16, 896,
                                   -1), 2 + 24 * 12 - 1);
    rs_model_destroy(m);

    m = load("tiny-llama.json");
    assert_int_equal(rs_model_num_params(m),
                     gqa_params(1000, 64, 4, 4, 2, 16, 128, 1, 1, 0, 0, 0));
    expect_absent(m, "lm_head.weight");
    expect_tensor(m, "model.layers.3.self_attn.v_proj.bias", RS_DTYPE_BF16,
                  32, -1);
    rs_model_destroy(m);
}

static void test_qwen3_moe(void **state)
{
    (void)state;
    rs_model_h m = load("qwen3-30b-a3b.json");
    const rs_model_config_t *g = rs_model_config(m);
    assert_int_equal(g->arch, RS_ARCH_QWEN_MOE);
    assert_true(g->qk_norm);
    assert_int_equal(g->experts, 128);
    assert_int_equal(g->first_dense, 0);
    uint64_t want = gqa_params(151936, 2048, 48, 32, 4, 128, 0, 0, 0, 1, 128, 768);
    assert_int_equal(rs_model_num_params(m), want);
    expect_near(rs_model_num_params(m), 30.5e9);
    assert_int_equal(rs_model_num_tensors(m), 3 + 48 * (8 + 1 + 128 * 3));
    expect_tensor(m, "model.layers.0.self_attn.q_proj.weight", RS_DTYPE_BF16,
                  4096, 2048);
    expect_tensor(m, "model.layers.0.self_attn.o_proj.weight", RS_DTYPE_BF16,
                  2048, 4096);
    expect_tensor(m, "model.layers.0.self_attn.q_norm.weight", RS_DTYPE_BF16,
                  128, -1);
    expect_tensor(m, "model.layers.47.self_attn.k_norm.weight", RS_DTYPE_BF16,
                  128, -1);
    expect_tensor(m, "model.layers.5.mlp.gate.weight", RS_DTYPE_BF16, 128,
                  2048);
    long i = expect_tensor(m, "model.layers.5.mlp.experts.127.down_proj.weight",
                           RS_DTYPE_BF16, 2048, 768);
    rs_tensor_info_t t;
    rs_model_tensor(m, (size_t)i, &t);
    assert_int_equal(t.layer, 5);
    assert_int_equal(t.expert, 127);
    expect_tensor(m, "model.layers.5.mlp.experts.0.gate_proj.weight",
                  RS_DTYPE_BF16, 768, 2048);
    expect_absent(m, "model.layers.5.mlp.gate_proj.weight");
    expect_absent(m, "model.layers.5.mlp.experts.128.up_proj.weight");
    expect_absent(m, "model.layers.0.self_attn.q_proj.bias");
    rs_model_destroy(m);

    m = load("qwen3-235b-a22b.json");
    want = gqa_params(151936, 4096, 94, 64, 4, 128, 0, 0, 0, 1, 128, 1536);
    assert_int_equal(rs_model_num_params(m), want);
    expect_near(rs_model_num_params(m), 235e9);
    expect_tensor(m, "model.layers.93.mlp.experts.64.up_proj.weight",
                  RS_DTYPE_BF16, 1536, 4096);
    expect_tensor(m, "model.layers.93.self_attn.q_proj.weight", RS_DTYPE_BF16,
                  8192, 4096);
    rs_model_destroy(m);

    m = load("tiny-moe.json");
    assert_int_equal(rs_model_num_params(m),
                     gqa_params(1000, 64, 4, 4, 2, 16, 0, 0, 0, 1, 8, 32));
    expect_tensor(m, "model.layers.3.mlp.experts.7.gate_proj.weight",
                  RS_DTYPE_BF16, 32, 64);
    expect_tensor(m, "lm_head.weight", RS_DTYPE_BF16, 1000, 64);
    rs_model_destroy(m);
}

static void test_deepseek(void **state)
{
    (void)state;
    rs_model_h m = load("deepseek-v3.json");
    const rs_model_config_t *g = rs_model_config(m);
    assert_int_equal(g->arch, RS_ARCH_DEEPSEEK);
    assert_int_equal(g->first_dense, 3);
    assert_int_equal(g->shared_experts, 1);
    assert_int_equal(g->q_lora_rank, 1536);
    assert_int_equal(g->head_dim, 192);
    uint64_t want = mla_params(129280, 7168, 61, 128, 1536, 512, 128, 64, 128,
                               18432, 2048, 256, 1, 3);
    assert_int_equal(rs_model_num_params(m), want);
    /* The score-correction biases are f32: two more bytes per element. */
    assert_int_equal(rs_model_num_bytes(m), 2 * want + 2 * 256 * 58);
    expect_near(rs_model_num_params(m), 671e9);
    expect_tensor(m, "model.layers.0.self_attn.q_a_proj.weight", RS_DTYPE_BF16,
                  1536, 7168);
    expect_tensor(m, "model.layers.0.self_attn.q_a_layernorm.weight",
                  RS_DTYPE_BF16, 1536, -1);
    expect_tensor(m, "model.layers.0.self_attn.q_b_proj.weight", RS_DTYPE_BF16,
                  128 * 192, 1536);
    expect_tensor(m, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
                  RS_DTYPE_BF16, 576, 7168);
    expect_tensor(m, "model.layers.0.self_attn.kv_a_layernorm.weight",
                  RS_DTYPE_BF16, 512, -1);
    expect_tensor(m, "model.layers.60.self_attn.kv_b_proj.weight",
                  RS_DTYPE_BF16, 128 * 256, 512);
    expect_tensor(m, "model.layers.60.self_attn.o_proj.weight", RS_DTYPE_BF16,
                  7168, 128 * 128);
    expect_tensor(m, "model.layers.2.mlp.gate_proj.weight", RS_DTYPE_BF16,
                  18432, 7168);
    expect_absent(m, "model.layers.2.mlp.gate.weight");
    expect_absent(m, "model.layers.3.mlp.gate_proj.weight");
    expect_tensor(m, "model.layers.3.mlp.gate.weight", RS_DTYPE_BF16, 256,
                  7168);
    expect_tensor(m, "model.layers.3.mlp.gate.e_score_correction_bias",
                  RS_DTYPE_F32, 256, -1);
    expect_tensor(m, "model.layers.3.mlp.experts.255.down_proj.weight",
                  RS_DTYPE_BF16, 7168, 2048);
    expect_tensor(m, "model.layers.60.mlp.shared_experts.up_proj.weight",
                  RS_DTYPE_BF16, 2048, 7168);
    expect_tensor(m, "model.layers.60.mlp.shared_experts.down_proj.weight",
                  RS_DTYPE_BF16, 7168, 2048);
    expect_absent(m, "model.layers.61.input_layernorm.weight"); /* MTP */
    expect_tensor(m, "lm_head.weight", RS_DTYPE_BF16, 129280, 7168);
    rs_model_destroy(m);
}

static void test_kimi_k2(void **state)
{
    (void)state;
    rs_model_h m = load("kimi-k2.json");
    const rs_model_config_t *g = rs_model_config(m);
    assert_string_equal(g->model_type, "kimi_k2");
    assert_int_equal(g->arch, RS_ARCH_DEEPSEEK);
    assert_int_equal(g->experts, 384);
    uint64_t want = mla_params(163840, 7168, 61, 64, 1536, 512, 128, 64, 128,
                               18432, 2048, 384, 1, 1);
    assert_int_equal(rs_model_num_params(m), want);
    expect_near(rs_model_num_params(m), 1.03e12);
    /* 3 outside the layers; a dense layer has 2 norms, 7 attention and 3 MLP
     * tensors; an MoE layer 9 + router + bias + 384 * 3 + 3 shared. */
    assert_int_equal(rs_model_num_tensors(m), 3 + 12 + 60 * (9 + 2 + 1152 + 3));
    expect_tensor(m, "model.layers.1.mlp.experts.383.gate_proj.weight",
                  RS_DTYPE_BF16, 2048, 7168);
    expect_tensor(m, "model.layers.0.mlp.down_proj.weight", RS_DTYPE_BF16,
                  7168, 18432);
    expect_tensor(m, "model.layers.5.self_attn.q_b_proj.weight", RS_DTYPE_BF16,
                  64 * 192, 1536);
    expect_tensor(m, "model.layers.5.self_attn.o_proj.weight", RS_DTYPE_BF16,
                  7168, 64 * 128);
    expect_tensor(m, "model.embed_tokens.weight", RS_DTYPE_BF16, 163840, 7168);
    rs_model_destroy(m);

    m = load("tiny-deepseek.json");
    assert_int_equal(rs_model_num_params(m),
                     mla_params(1000, 64, 3, 4, 32, 16, 16, 8, 16, 128, 32, 8,
                                1, 1));
    expect_tensor(m, "model.layers.0.mlp.up_proj.weight", RS_DTYPE_BF16, 128,
                  64);
    expect_tensor(m, "model.layers.2.mlp.experts.7.up_proj.weight",
                  RS_DTYPE_BF16, 32, 64);
    expect_tensor(m, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight",
                  RS_DTYPE_BF16, 24, 64);
    rs_model_destroy(m);
}

/* Checkpoint order: embedding first, layers ascending with each layer's
 * tensors together, final norm then head last; every name indexed. */
static void check_order(const char *file)
{
    rs_model_h m = load(file);
    size_t n = rs_model_num_tensors(m);
    rs_tensor_info_t t;
    int64_t prev_layer = -1;
    int past_layers = 0;

    rs_model_tensor(m, 0, &t);
    assert_string_equal(t.name, "model.embed_tokens.weight");
    assert_int_equal(t.layer, -1);
    for (size_t i = 1; i < n; i++) {
        char prefix[64];
        rs_model_tensor(m, i, &t);
        assert_int_equal(rs_model_find(m, t.name), (long)i);
        if (t.layer < 0) {
            past_layers = 1;
            assert_int_equal(t.expert, -1);
            continue;
        }
        assert_false(past_layers);
        assert_true(t.layer == prev_layer || t.layer == prev_layer + 1);
        prev_layer = t.layer;
        snprintf(prefix, sizeof(prefix), "model.layers.%lld.",
                 (long long)t.layer);
        assert_int_equal(strncmp(t.name, prefix, strlen(prefix)), 0);
        if (t.expert >= 0) {
            snprintf(prefix, sizeof(prefix), ".mlp.experts.%lld.",
                     (long long)t.expert);
            assert_non_null(strstr(t.name, prefix));
        } else {
            assert_null(strstr(t.name, ".experts."));
        }
    }
    assert_int_equal(prev_layer, rs_model_config(m)->layers - 1);
    assert_int_equal(rs_model_find(m, "model.layers.0"), -1);
    assert_int_equal(rs_model_find(m, ""), -1);
    rs_model_tensor(m, n, &t); /* out of range: zeroed */
    assert_null(t.name);
    rs_model_destroy(m);
}

static void test_order_and_index(void **state)
{
    (void)state;
    static const char *const files[] = {
        "llama-3.1-8b.json", "qwen2.5-0.5b.json", "qwen3-30b-a3b.json",
        "deepseek-v3.json", "kimi-k2.json", "tiny-llama.json",
        "tiny-moe.json", "tiny-deepseek.json"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        check_order(files[i]);
}

/* A bundled config with edits applied by the caller, as text. */
static json_t *config_json(const char *file)
{
    json_error_t err;
    json_t *root = json_load_file(model_path(file), 0, &err);
    if (root == NULL)
        fail_msg("%s: %s", file, err.text);
    return root;
}

static rs_status_t load_json(json_t *root, rs_diag_t *d, rs_model_h *m_p)
{
    char *text = json_dumps(root, 0);
    rs_diag_clear(d);
    rs_status_t st = rs_model_load_string(text, strlen(text), "cfg.json", d,
                                          m_p);
    free(text);
    json_decref(root);
    return st;
}

static void expect_error(json_t *root, rs_status_t want, const char *part1,
                         const char *part2)
{
    rs_diag_t d;
    rs_model_h m = NULL;
    rs_status_t st = load_json(root, &d, &m);
    if (st != want || strncmp(d.msg, "cfg.json: ", 10) != 0 ||
        strstr(d.msg, part1) == NULL ||
        (part2 != NULL && strstr(d.msg, part2) == NULL))
        fail_msg("status %s, message \"%s\"; wanted %s naming \"%s\" and "
                 "\"%s\"", rs_status_str(st), d.msg, rs_status_str(want),
                 part1, part2 ? part2 : "");
    assert_null(m);
}

static json_t *without(const char *file, const char *key)
{
    json_t *root = config_json(file);
    assert_int_equal(json_object_del(root, key), 0);
    return root;
}

static json_t *with(const char *file, const char *key, json_t *value)
{
    json_t *root = config_json(file);
    json_object_set_new(root, key, value);
    return root;
}

static void test_missing_keys(void **state)
{
    (void)state;
    static const char *const dense[] = {"model_type", "hidden_size",
        "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "vocab_size"};
    for (size_t i = 0; i < sizeof(dense) / sizeof(dense[0]); i++)
        expect_error(without("llama-3.1-8b.json", dense[i]), RS_ERR_INPUT,
                     dense[i], "required key is missing");
    static const char *const ds[] = {"n_routed_experts", "kv_lora_rank",
        "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
        "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace"};
    for (size_t i = 0; i < sizeof(ds) / sizeof(ds[0]); i++)
        expect_error(without("kimi-k2.json", ds[i]), RS_ERR_INPUT, ds[i],
                     "required key is missing");
    expect_error(without("tiny-moe.json", "num_experts"), RS_ERR_INPUT,
                 "num_experts", "missing");
    expect_error(with("tiny-moe.json", "moe_intermediate_size", json_null()),
                 RS_ERR_INPUT, "moe_intermediate_size", "null");

    /* Optional keys take Hugging Face's defaults. */
    rs_diag_t d;
    rs_model_h m = NULL;
    json_t *root = without("llama-3.1-8b.json", "num_key_value_heads");
    json_object_del(root, "tie_word_embeddings");
    json_object_del(root, "torch_dtype");
    assert_int_equal(load_json(root, &d, &m), RS_OK);
    assert_int_equal(rs_model_config(m)->kv_heads, 32);
    assert_int_equal(rs_model_config(m)->dtype, RS_DTYPE_BF16);
    assert_false(rs_model_config(m)->tie_embeddings);
    expect_tensor(m, "model.layers.0.self_attn.k_proj.weight", RS_DTYPE_BF16,
                  4096, 4096);
    rs_model_destroy(m);
}

static void test_model_type(void **state)
{
    (void)state;
    expect_error(with("llama-3.1-8b.json", "model_type", json_string("gpt2")),
                 RS_ERR_UNSUPPORTED, "model_type", "\"gpt2\"");
    expect_error(with("llama-3.1-8b.json", "model_type", json_integer(3)),
                 RS_ERR_INPUT, "model_type", "expected a string");

    /* The same failure through a file names the file. */
    char path[] = "/tmp/rs_model_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"model_type\": \"mamba\", \"hidden_size\": 8}", f);
    fclose(f);
    rs_diag_t d;
    rs_model_h m = NULL;
    assert_int_equal(rs_model_load(path, &d, &m), RS_ERR_UNSUPPORTED);
    assert_ptr_equal(strstr(d.msg, path), d.msg);
    assert_non_null(strstr(d.msg, "mamba"));
    f = fopen(path, "w");
    fputs("{\"model_type\": \"llama\", \"hidden_size\": 8}", f);
    fclose(f);
    assert_int_equal(rs_model_load(path, &d, &m), RS_ERR_INPUT);
    assert_ptr_equal(strstr(d.msg, path), d.msg);
    assert_non_null(strstr(d.msg, "num_hidden_layers"));
    unlink(path);
    assert_int_equal(rs_model_load(path, &d, &m), RS_ERR_IO);
    assert_non_null(strstr(d.msg, path));
    assert_null(m);
}

static void test_bad_values(void **state)
{
    (void)state;
    expect_error(with("llama-3.1-8b.json", "torch_dtype", json_string("int8")),
                 RS_ERR_INPUT, "torch_dtype", "int8");
    expect_error(with("llama-3.1-8b.json", "hidden_size", json_integer(0)),
                 RS_ERR_INPUT, "hidden_size", "at least 1");
    expect_error(with("llama-3.1-8b.json", "hidden_size", json_real(4096.5)),
                 RS_ERR_INPUT, "hidden_size", "integer");
    expect_error(with("llama-3.1-8b.json", "num_key_value_heads",
                      json_integer(5)), RS_ERR_INPUT, "num_key_value_heads",
                 "multiple");
    expect_error(with("llama-3.1-8b.json", "num_attention_heads",
                      json_integer(3)), RS_ERR_INPUT, "head_dim",
                 "num_attention_heads");
    expect_error(with("llama-3.1-8b.json", "tie_word_embeddings",
                      json_string("yes")), RS_ERR_INPUT, "tie_word_embeddings",
                 "boolean");
    expect_error(with("llama-3.1-8b.json", "attention_bias", json_true()),
                 RS_ERR_UNSUPPORTED, "attention_bias", NULL);
    expect_error(with("tiny-moe.json", "mlp_only_layers",
                      json_pack("[ii]", 1, 9)), RS_ERR_INPUT,
                 "mlp_only_layers[1]", "past the last layer");
    expect_error(with("kimi-k2.json", "n_routed_experts",
                      json_integer(1 << 16)), RS_ERR_INPUT, "tensors", NULL);
    expect_error(with("kimi-k2.json", "vocab_size",
                      json_integer((json_int_t)1 << 40)), RS_ERR_INPUT,
                 "vocab_size", "maximum");
    rs_diag_t d;
    rs_model_h m = NULL;
    assert_int_equal(rs_model_load_string("[1]", 3, "cfg.json", &d, &m),
                     RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "expected an object"));
    assert_int_equal(rs_model_load_string("{", 1, "cfg.json", &d, &m),
                     RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "malformed JSON"));
    assert_null(m);
}

static void test_variants(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_model_h m = NULL;

    /* qwen3_moe: mlp_only_layers and decoder_sparse_step pick dense layers. */
    json_t *root = with("tiny-moe.json", "mlp_only_layers",
                        json_pack("[i]", 3));
    json_object_set_new(root, "decoder_sparse_step", json_integer(2));
    assert_int_equal(load_json(root, &d, &m), RS_OK);
    expect_tensor(m, "model.layers.0.mlp.gate_proj.weight", RS_DTYPE_BF16, 128,
                  64);
    expect_tensor(m, "model.layers.1.mlp.gate.weight", RS_DTYPE_BF16, 8, 64);
    expect_tensor(m, "model.layers.1.mlp.experts.7.down_proj.weight",
                  RS_DTYPE_BF16, 64, 32);
    expect_tensor(m, "model.layers.2.mlp.down_proj.weight", RS_DTYPE_BF16, 64,
                  128);
    expect_tensor(m, "model.layers.3.mlp.up_proj.weight", RS_DTYPE_BF16, 128,
                  64);
    expect_absent(m, "model.layers.3.mlp.gate.weight");
    assert_int_equal(rs_model_config(m)->first_dense, 1);
    rs_model_destroy(m);

    /* Without the step, mlp_only_layers alone makes layer 0 dense. */
    assert_int_equal(load_json(with("tiny-moe.json", "mlp_only_layers",
                                    json_pack("[i]", 0)), &d, &m), RS_OK);
    expect_tensor(m, "model.layers.0.mlp.gate_proj.weight", RS_DTYPE_BF16, 128,
                  64);
    expect_tensor(m, "model.layers.1.mlp.experts.0.gate_proj.weight",
                  RS_DTYPE_BF16, 32, 64);
    rs_model_destroy(m);

    /* qwen2_moe: q/k/v biases, no q/k norms, a gated shared expert. */
    root = with("tiny-moe.json", "model_type", json_string("qwen2_moe"));
    json_object_set_new(root, "shared_expert_intermediate_size",
                        json_integer(96));
    assert_int_equal(load_json(root, &d, &m), RS_OK);
    expect_tensor(m, "model.layers.2.self_attn.k_proj.bias", RS_DTYPE_BF16,
                  32, -1);
    expect_absent(m, "model.layers.2.self_attn.q_norm.weight");
    expect_tensor(m, "model.layers.2.mlp.shared_expert.gate_proj.weight",
                  RS_DTYPE_BF16, 96, 64);
    expect_tensor(m, "model.layers.2.mlp.shared_expert.down_proj.weight",
                  RS_DTYPE_BF16, 64, 96);
    expect_tensor(m, "model.layers.2.mlp.shared_expert_gate.weight",
                  RS_DTYPE_BF16, 1, 64);
    assert_int_equal(rs_model_config(m)->shared_expert_intermediate, 96);
    rs_model_destroy(m);
    expect_error(with("tiny-moe.json", "model_type", json_string("qwen2_moe")),
                 RS_ERR_INPUT, "shared_expert_intermediate_size", "missing");

    /* qwen3 dense: q/k norms; float32 weights. */
    root = with("tiny-llama.json", "model_type", json_string("qwen3"));
    json_object_set_new(root, "torch_dtype", json_string("float32"));
    json_object_set_new(root, "head_dim", json_integer(32));
    assert_int_equal(load_json(root, &d, &m), RS_OK);
    expect_tensor(m, "model.layers.0.self_attn.q_norm.weight", RS_DTYPE_F32,
                  32, -1);
    expect_tensor(m, "model.layers.0.self_attn.q_proj.weight", RS_DTYPE_F32,
                  128, 64);
    expect_tensor(m, "model.layers.0.self_attn.o_proj.weight", RS_DTYPE_F32,
                  64, 128);
    expect_absent(m, "model.layers.0.self_attn.q_proj.bias");
    assert_int_equal(rs_model_num_bytes(m), 4 * rs_model_num_params(m));
    rs_model_destroy(m);

    /* DeepSeek without a q LoRA (q_lora_rank null): a plain q_proj. */
    root = with("tiny-deepseek.json", "q_lora_rank", json_null());
    json_object_set_new(root, "torch_dtype", json_string("float16"));
    assert_int_equal(load_json(root, &d, &m), RS_OK);
    expect_tensor(m, "model.layers.1.self_attn.q_proj.weight", RS_DTYPE_F16,
                  4 * 24, 64);
    expect_absent(m, "model.layers.1.self_attn.q_a_proj.weight");
    expect_tensor(m, "model.layers.1.mlp.gate.e_score_correction_bias",
                  RS_DTYPE_F32, 8, -1);
    rs_model_destroy(m);
}

/* tiny-llama with a quantization_config given as JSON text. */
static json_t *with_quant(const char *quant_json)
{
    json_error_t err;
    json_t *q = json_loads(quant_json, 0, &err);
    if (q == NULL)
        fail_msg("bad test JSON %s: %s", quant_json, err.text);
    return with("tiny-llama.json", "quantization_config", q);
}

static void test_quantization(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_model_h m = NULL;

    /* The FP8 block config DeepSeek-V3 and Kimi-K2 ship, as bundled. */
    static const char *const fp8[] = {"deepseek-v3.json", "kimi-k2.json"};
    for (size_t i = 0; i < 2; i++) {
        m = load(fp8[i]);
        const rs_model_quant_t *q = rs_model_quantization(m);
        assert_non_null(q);
        assert_int_equal(q->method, RS_MODEL_QUANT_FP8);
        assert_string_equal(q->method_name, "fp8");
        assert_string_equal(q->fmt, "e4m3");
        assert_int_equal(q->weight_dtype, RS_DTYPE_F8E4M3);
        assert_string_equal(q->activation_scheme, "dynamic");
        assert_int_equal(q->weight_block[0], 128);
        assert_int_equal(q->weight_block[1], 128);
        /* the manifest stays in the config's dtype */
        assert_int_equal(rs_model_config(m)->dtype, RS_DTYPE_BF16);
        rs_model_destroy(m);
    }
    m = load("llama-3.1-8b.json");
    assert_null(rs_model_quantization(m));
    rs_model_destroy(m);
    assert_null(rs_model_quantization(NULL));

    /* Defaults: e4m3, dynamic, one scale per tensor; null is "none". */
    assert_int_equal(load_json(with_quant("{\"quant_method\": \"fp8\", "
                                          "\"fmt\": \"e5m2\", "
                                          "\"modules_to_not_convert\": "
                                          "[\"lm_head\", \"gate\"]}"),
                               &d, &m), RS_OK);
    const rs_model_quant_t *q = rs_model_quantization(m);
    assert_non_null(q);
    assert_int_equal(q->weight_dtype, RS_DTYPE_F8E5M2);
    assert_string_equal(q->activation_scheme, "dynamic");
    assert_int_equal(q->weight_block[0], 0);
    assert_int_equal(q->weight_block[1], 0);
    assert_int_equal(q->modules_not_converted, 2);
    rs_model_destroy(m);
    assert_int_equal(load_json(with("tiny-llama.json", "quantization_config",
                                    json_null()), &d, &m), RS_OK);
    assert_null(rs_model_quantization(m));
    rs_model_destroy(m);
}

static void test_quantization_errors(void **state)
{
    (void)state;
    expect_error(with("tiny-llama.json", "quantization_config",
                      json_string("fp8")), RS_ERR_INPUT,
                 "quantization_config", "expected an object");
    expect_error(with_quant("{\"fmt\": \"e4m3\"}"), RS_ERR_INPUT,
                 "quantization_config.quant_method", "missing");
    expect_error(with_quant("{\"quant_method\": 8}"), RS_ERR_INPUT,
                 "quantization_config.quant_method", "expected a string");
    expect_error(with_quant("{\"quant_method\": \"gptq\", \"bits\": 4}"),
                 RS_ERR_UNSUPPORTED, "quantization_config.quant_method",
                 "\"gptq\"");
    expect_error(with_quant("{\"quant_method\": \"fp8\", \"fmt\": \"e3m4\"}"),
                 RS_ERR_INPUT, "quantization_config.fmt", "\"e3m4\"");
    expect_error(with_quant("{\"quant_method\": \"fp8\", \"fmt\": 1}"),
                 RS_ERR_INPUT, "quantization_config.fmt", "expected a string");
    expect_error(with_quant("{\"quant_method\": \"fp8\", "
                            "\"activation_scheme\": \"lazy\"}"),
                 RS_ERR_INPUT, "quantization_config.activation_scheme",
                 "\"lazy\"");
    expect_error(with_quant("{\"quant_method\": \"fp8\", "
                            "\"weight_block_size\": 128}"),
                 RS_ERR_INPUT, "quantization_config.weight_block_size",
                 "expected an array");
    expect_error(with_quant("{\"quant_method\": \"fp8\", "
                            "\"weight_block_size\": [128]}"),
                 RS_ERR_INPUT, "quantization_config.weight_block_size",
                 "two integers");
    expect_error(with_quant("{\"quant_method\": \"fp8\", "
                            "\"weight_block_size\": [128, 0]}"),
                 RS_ERR_INPUT, "quantization_config.weight_block_size[1]",
                 "at least 1");
    expect_error(with_quant("{\"quant_method\": \"fp8\", "
                            "\"weight_block_size\": [128, \"x\"]}"),
                 RS_ERR_INPUT, "quantization_config.weight_block_size[1]",
                 "integer");
    expect_error(with_quant("{\"quant_method\": \"fp8\", "
                            "\"weight_block_size\": [128, 2097152]}"),
                 RS_ERR_INPUT, "quantization_config.weight_block_size",
                 "maximum");
    expect_error(with_quant("{\"quant_method\": \"fp8\", "
                            "\"modules_to_not_convert\": [\"a\", 3]}"),
                 RS_ERR_INPUT, "quantization_config.modules_to_not_convert[1]",
                 "expected a string");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_3_1),
        cmocka_unit_test(test_qwen2_tied_bias),
        cmocka_unit_test(test_qwen3_moe),
        cmocka_unit_test(test_deepseek),
        cmocka_unit_test(test_kimi_k2),
        cmocka_unit_test(test_order_and_index),
        cmocka_unit_test(test_missing_keys),
        cmocka_unit_test(test_model_type),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_variants),
        cmocka_unit_test(test_quantization),
        cmocka_unit_test(test_quantization_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
