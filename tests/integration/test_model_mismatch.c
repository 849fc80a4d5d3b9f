/* A mismatched model never installs: a capture declares the full shape and
 * dtype its loader assumed for each source, and the planner refuses a source
 * published with another shape, rank or dtype (fallback, reason naming the
 * tensor and both shapes), so the executor refuses the plan before any byte
 * moves. Hand-built captures pin the planner's rules (undeclared and unused
 * sources, --only, ordering); the vllm capture producer is shown to declare
 * every source it reads, and a config with intermediate_size doubled, which
 * without declarations plans "complete" over wrong bytes, is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout_env.h"
#include "mini_exec.h"
#include "reshard_layout/layout.h"
#include "reshard/reshard.h"
#include "reshard_layout/layout.h"

/* ---- hand-built captures ------------------------------------------------ */

static uint8_t shard_w[8 * 8 * 4]; /* "w": [8, 8] of up to 4-byte elements */
static uint8_t shard_v[4];         /* "v": [4] u8 */

/* "w" [8, 8] in `dtype` and "v" [4] u8, each published whole by "r0". */
static rs_sources_h sources(rs_dtype_t dtype)
{
    int64_t full[2] = {8, 8}, off[2] = {0, 0}, vfull[1] = {4};
    rs_shard_desc_t w = {"w", dtype, rs_dtype_size(dtype), 2, full, "r0", 0,
                         0x1000, off, full, NULL};
    rs_shard_desc_t v = {"v", RS_DTYPE_U8, 1, 1, vfull, "r0", 0, 0x8000, off,
                         vfull, NULL};
    rs_sources_h s = NULL;
    rs_diag_t d;
    for (size_t i = 0; i < sizeof(shard_w); i++)
        shard_w[i] = (uint8_t)(i * 7 + 3);
    for (size_t i = 0; i < sizeof(shard_v); i++)
        shard_v[i] = (uint8_t)(200 + i);
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_add_shard(s, &w, &d), RS_OK);
    assert_int_equal(rs_sources_add_shard(s, &v, &d), RS_OK);
    return s;
}

/* Param "p" [8, 8] in `pdtype` reading the whole of "w", declared with
 * (ndim, shape, ddtype) unless ndim < 0; param "q" [4] u8 reading "v",
 * never declared. */
static rs_capture_h capture(rs_dtype_t pdtype, int ndim, const int64_t *shape,
                            rs_dtype_t ddtype)
{
    int64_t ps[2] = {8, 8}, pst[2] = {8, 1}, qs[1] = {4}, qst[1] = {1};
    rs_copy_desc_t cw = {"w", "p", NULL, 0, 0, 2, ps, pst, pdtype};
    rs_copy_desc_t cv = {"v", "q", NULL, 0, 0, 1, qs, qst, RS_DTYPE_U8};
    rs_capture_h cap = NULL;
    rs_diag_t d;
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "p", 2, ps, pdtype, &d), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "q", 1, qs, RS_DTYPE_U8, &d),
                     RS_OK);
    if (ndim >= 0)
        assert_int_equal(rs_capture_declare_source(cap, "w", ndim, shape,
                                                   ddtype, &d), RS_OK);
    assert_int_equal(rs_capture_add_copy(cap, &cw, &d), RS_OK);
    assert_int_equal(rs_capture_add_copy(cap, &cv, &d), RS_OK);
    return cap;
}

static rs_plan_h plan_only(rs_capture_h cap, rs_sources_h s,
                           const char *const *only, size_t nonly)
{
    rs_plan_params_t pp;
    rs_plan_h plan = NULL;
    rs_diag_t d;
    rs_plan_params_init(&pp);
    pp.only = only;
    pp.nonly = nonly;
    rs_diag_clear(&d);
    if (rs_plan_build(cap, s, &pp, &d, &plan) != RS_OK)
        fail_msg("plan: %s", d.msg);
    return plan;
}

static rs_plan_h plan(rs_capture_h cap, rs_sources_h s)
{
    return plan_only(cap, s, NULL, 0);
}

/* "w" refused with exactly `reason`; "v" still planned (its 4 bytes). */
static void expect_refused(rs_plan_h p, const char *reason)
{
    const char *src, *why;
    size_t n;
    rs_plan_stats_t st;
    assert_false(rs_plan_is_complete(p));
    assert_int_equal(rs_plan_num_fallback(p), 1);
    assert_int_equal(rs_plan_num_mismatched(p), 1);
    rs_plan_fallback(p, 0, &src, &why);
    assert_string_equal(src, "w");
    assert_string_equal(why, reason);
    rs_plan_converts(p, &n);
    assert_int_equal(n, 0);
    rs_plan_staged_reads(p, &n);
    assert_int_equal(n, 0);
    const rs_segment_t *seg = rs_plan_segments(p, &n);
    assert_int_equal(n, 1);
    assert_int_equal(seg[0].src_addr, 0x8000);
    rs_plan_stats(p, &st);
    assert_int_equal(st.bytes_planned, 4);
    assert_int_equal(st.copies_planned, 1);
}

/* A capture declaring "w" as ndim/shape in `declared` planned against s:
 * refused with exactly `reason` (expect_refused). */
static void expect_capture_refused(rs_sources_h s, rs_dtype_t pdtype,
                                   int ndim, const int64_t *shape,
                                   rs_dtype_t declared, const char *reason)
{
    rs_capture_h cap = capture(pdtype, ndim, shape, declared);
    rs_plan_h p = plan(cap, s);
    expect_refused(p, reason);
    rs_plan_destroy(p);
    rs_capture_destroy(cap);
}

static void test_shape_mismatch(void **state)
{
    (void)state;
    int64_t twice[2] = {16, 8};
    rs_sources_h s = sources(RS_DTYPE_U8);
    expect_capture_refused(s, RS_DTYPE_U8, 2, twice, RS_DTYPE_U8,
                           "tensor 'w': capture assumes shape [16, 8] u8, "
                           "published [8, 8] u8");

    /* the same copies undeclared: planned whole, as captures always were */
    rs_capture_h cap = capture(RS_DTYPE_U8, -1, NULL, RS_DTYPE_U8);
    rs_plan_h p = plan(cap, s);
    rs_plan_stats_t st;
    assert_true(rs_plan_is_complete(p));
    assert_int_equal(rs_plan_num_mismatched(p), 0);
    rs_plan_stats(p, &st);
    assert_int_equal(st.bytes_planned, 64 + 4);
    rs_plan_destroy(p);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

static void test_rank_mismatch(void **state)
{
    (void)state;
    int64_t flat[1] = {64}, deeper[3] = {8, 8, 1};
    rs_sources_h s = sources(RS_DTYPE_U8);
    expect_capture_refused(s, RS_DTYPE_U8, 1, flat, RS_DTYPE_U8,
                           "tensor 'w': capture assumes shape [64] u8, "
                           "published [8, 8] u8");
    expect_capture_refused(s, RS_DTYPE_U8, 3, deeper, RS_DTYPE_U8,
                           "tensor 'w': capture assumes shape [8, 8, 1] u8, "
                           "published [8, 8] u8");
    rs_sources_destroy(s);
}

/* A dtype the planner could cast is still refused when the capture says the
 * loader read another one. */
static void test_dtype_mismatch(void **state)
{
    (void)state;
    int64_t shape[2] = {8, 8};
    rs_sources_h s = sources(RS_DTYPE_F32);
    expect_capture_refused(s, RS_DTYPE_BF16, 2, shape, RS_DTYPE_BF16,
                           "tensor 'w': capture assumes shape [8, 8] bf16, "
                           "published [8, 8] f32");

    /* declared as published: the cast is planned */
    rs_capture_h cap = capture(RS_DTYPE_BF16, 2, shape, RS_DTYPE_F32);
    rs_plan_h p = plan(cap, s);
    size_t n;
    assert_true(rs_plan_is_complete(p));
    rs_plan_converts(p, &n);
    assert_int_equal(n, 1);
    rs_plan_destroy(p);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

/* A declaration that matches changes nothing: the bytes land exactly. */
static void test_declared_match_moves_bytes(void **state)
{
    (void)state;
    int64_t shape[2] = {8, 8};
    uint8_t pbuf[64], qbuf[4];
    char err[256];
    rs_sources_h s = sources(RS_DTYPE_U8);
    rs_capture_h cap = capture(RS_DTYPE_U8, 2, shape, RS_DTYPE_U8);
    rs_plan_h p = plan(cap, s);
    assert_true(rs_plan_is_complete(p));
    assert_int_equal(rs_plan_num_fallback(p), 0);
    assert_int_equal(rs_plan_num_mismatched(p), 0);
    mini_exec_t *mx = mini_exec_create(p);
    mini_exec_add_shard(mx, "r0", 0x1000, shard_w, 64);
    mini_exec_add_shard(mx, "r0", 0x8000, shard_v, 4);
    memset(pbuf, 0xEE, sizeof(pbuf));
    memset(qbuf, 0xEE, sizeof(qbuf));
    mini_exec_set_param(mx, 0, pbuf);
    mini_exec_set_param(mx, 1, qbuf);
    if (mini_exec_run(mx, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_memory_equal(pbuf, shard_w, 64); /* the whole source, row-major */
    assert_memory_equal(qbuf, shard_v, 4);
    mini_exec_destroy(mx);
    rs_plan_destroy(p);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

/* A declared source no copy reads is never checked (nothing is read from
 * it), published or not; an undeclared one is planned against what is
 * published. */
static void test_unused_and_undeclared(void **state)
{
    (void)state;
    int64_t shape[2] = {8, 8}, ghost[1] = {3}, wrong_v[1] = {5};
    rs_sources_h s = sources(RS_DTYPE_U8);
    rs_capture_h cap = capture(RS_DTYPE_U8, 2, shape, RS_DTYPE_U8);
    assert_int_equal(rs_capture_declare_source(cap, "ghost", 1, ghost,
                                               RS_DTYPE_F32, NULL), RS_OK);
    rs_plan_h p = plan(cap, s);
    assert_true(rs_plan_is_complete(p));
    assert_int_equal(rs_capture_num_sources(cap), 2);
    rs_plan_destroy(p);

    /* declaring "v" wrongly after its copy was added still counts */
    assert_int_equal(rs_capture_declare_source(cap, "v", 1, wrong_v,
                                               RS_DTYPE_U8, NULL), RS_OK);
    p = plan(cap, s);
    const char *src, *why;
    assert_int_equal(rs_plan_num_mismatched(p), 1);
    rs_plan_fallback(p, 0, &src, &why);
    assert_string_equal(src, "v");
    assert_string_equal(why, "tensor 'v': capture assumes shape [5] u8, "
                             "published [4] u8");
    rs_plan_destroy(p);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

/* With a parameter selection only sources the selected copies read are
 * checked, as only they are read. */
static void test_selection(void **state)
{
    (void)state;
    int64_t twice[2] = {16, 8};
    const char *only_q[] = {"q"}, *only_p[] = {"p"};
    rs_sources_h s = sources(RS_DTYPE_U8);
    rs_capture_h cap = capture(RS_DTYPE_U8, 2, twice, RS_DTYPE_U8);
    rs_plan_h p = plan_only(cap, s, only_q, 1);
    assert_true(rs_plan_is_complete(p));
    assert_int_equal(rs_plan_num_mismatched(p), 0);
    rs_plan_destroy(p);
    p = plan_only(cap, s, only_p, 1);
    assert_false(rs_plan_is_complete(p));
    assert_int_equal(rs_plan_num_mismatched(p), 1);
    rs_plan_destroy(p);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

/* Mismatches lead the fallback list, ahead of capture-flagged and
 * unpublished sources, whatever the copy order; an unsupported source that
 * is also mismatched is reported as the mismatch. */
static void test_mismatches_lead(void **state)
{
    (void)state;
    int64_t twice[2] = {16, 8}, one[1] = {4}, st1[1] = {1}, vs[1] = {9};
    rs_sources_h s = sources(RS_DTYPE_U8);
    rs_capture_h cap = NULL;
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    const char *names[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(rs_capture_add_param(cap, names[i], 1, one,
                                              RS_DTYPE_U8, NULL), RS_OK);
    int64_t ps[2] = {8, 8}, pst[2] = {8, 1};
    assert_int_equal(rs_capture_add_param(cap, "p", 2, ps, RS_DTYPE_U8, NULL),
                     RS_OK);
    /* copies in order: unsupported "u", unpublished "x", "v" (declared
     * wrong and flagged unsupported), then "w" declared wrong */
    const char *srcs[] = {"u", "x", "v"};
    for (int i = 0; i < 3; i++) {
        rs_copy_desc_t c = {srcs[i], names[i], NULL, 0, 0, 1, one, st1,
                            RS_DTYPE_U8};
        assert_int_equal(rs_capture_add_copy(cap, &c, NULL), RS_OK);
    }
    rs_copy_desc_t cw = {"w", "p", NULL, 0, 0, 2, ps, pst, RS_DTYPE_U8};
    assert_int_equal(rs_capture_add_copy(cap, &cw, NULL), RS_OK);
    assert_int_equal(rs_capture_add_unsupported(cap, "u", "op 'expand' is "
                                                "not supported", NULL), RS_OK);
    assert_int_equal(rs_capture_add_unsupported(cap, "v", "op 'expand' is "
                                                "not supported", NULL), RS_OK);
    assert_int_equal(rs_capture_declare_source(cap, "v", 1, vs, RS_DTYPE_U8,
                                               NULL), RS_OK);
    assert_int_equal(rs_capture_declare_source(cap, "w", 2, twice,
                                               RS_DTYPE_U8, NULL), RS_OK);
    rs_plan_h p = plan(cap, s);
    const char *src, *why;
    assert_int_equal(rs_plan_num_fallback(p), 4);
    assert_int_equal(rs_plan_num_mismatched(p), 2);
    rs_plan_fallback(p, 0, &src, &why);
    assert_string_equal(src, "v");
    assert_non_null(strstr(why, "capture assumes shape [9] u8, published [4]"));
    rs_plan_fallback(p, 1, &src, &why);
    assert_string_equal(src, "w");
    assert_non_null(strstr(why, "[16, 8] u8, published [8, 8] u8"));
    rs_plan_fallback(p, 2, &src, &why);
    assert_string_equal(src, "u");
    rs_plan_fallback(p, 3, &src, &why);
    assert_string_equal(src, "x");
    rs_plan_destroy(p);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

typedef struct installs {
    int calls;
} installs_t;

static rs_status_t on_install(void *ctx, rs_exec_h exec)
{
    (void)exec;
    ((installs_t *)ctx)->calls++;
    return RS_OK;
}

/* The executor refuses the plan: RS_ERR_INCOMPLETE naming the tensor and
 * both shapes, no byte of either parameter written (not even the planned
 * "v"), install never called, the stage record saying "mismatch". */
static void test_exec_refuses(void **state)
{
    (void)state;
    int64_t twice[2] = {16, 8};
    uint8_t pbuf[64], qbuf[4], want[64];
    rs_sources_h s = sources(RS_DTYPE_U8);
    rs_capture_h cap = capture(RS_DTYPE_U8, 2, twice, RS_DTYPE_U8);
    rs_plan_h p = plan(cap, s);
    rs_transport_h t = NULL;
    rs_exec_h x = NULL;
    rs_exec_params_t ep;
    rs_diag_t d;
    installs_t log = {0};
    rs_region_t regions[2] = {{0x1000, 64, shard_w}, {0x8000, 4, shard_v}};
    rs_peer_t peer = {"r0", 0, regions, 2, NULL, 0};

    assert_int_equal(rs_transport_create(NULL, &d, &t), RS_OK);
    assert_int_equal(rs_transport_connect(t, 0, &peer, &d), RS_OK);
    rs_exec_params_init(&ep);
    ep.install = on_install;
    ep.install_ctx = &log;
    assert_int_equal(rs_exec_create(p, t, &ep, &d, &x), RS_OK);
    memset(pbuf, 0xEE, sizeof(pbuf));
    memset(qbuf, 0xEE, sizeof(qbuf));
    memset(want, 0xEE, sizeof(want));
    assert_int_equal(rs_exec_bind(x, 0, pbuf, sizeof(pbuf), RS_MEM_HOST, &d), RS_OK);
    assert_int_equal(rs_exec_bind(x, 1, qbuf, sizeof(qbuf), RS_MEM_HOST, &d), RS_OK);
    rs_diag_clear(&d);
    rs_status_t st = rs_exec_run(x, &d);
    assert_int_equal(st, RS_ERR_INCOMPLETE);
    assert_int_equal(d.status, RS_ERR_INCOMPLETE);
    const char *frags[] = {"model mismatch", "tensor 'w'", "[16, 8] u8",
                           "published [8, 8] u8"};
    for (size_t i = 0; i < 4; i++)
        if (strstr(d.msg, frags[i]) == NULL)
            fail_msg("\"%s\" lacks \"%s\"", d.msg, frags[i]);
    assert_int_equal(log.calls, 0);
    assert_memory_equal(pbuf, want, sizeof(pbuf));
    assert_memory_equal(qbuf, want, sizeof(qbuf));

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(rs_exec_write_stage_json(x, -1, f, &d), RS_OK);
    fclose(f);
    if (strstr(text, "\"failure\": \"mismatch\"") == NULL ||
        strstr(text, "\"install\"") != NULL)
        fail_msg("stage record: %s", text);
    free(text);
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    rs_plan_destroy(p);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

/* ---- the vllm capture producer --------------------------------------- */

/* The example config with `key` set to `value` (an integer, or a string
 * when value_s is given). */
static rs_model_h model_with(const char *file, const char *key,
                             json_int_t value, const char *value_s)
{
    json_error_t jerr;
    char *example = lx_read_model_file(file);
    json_t *root = json_loads(example, 0, &jerr);
    free(example);
    rs_model_h m = NULL;
    rs_diag_t d;
    assert_non_null(root);
    if (key != NULL)
        json_object_set_new(root, key, value_s ? json_string(value_s)
                                               : json_integer(value));
    char *text = json_dumps(root, 0);
    rs_diag_clear(&d);
    if (rs_model_load_string(text, strlen(text), file, &d, &m) != RS_OK)
        fail_msg("%s: %s", file, d.msg);
    free(text);
    json_decref(root);
    return m;
}

static rs_capture_h layout_capture(rs_model_h m, const rs_layout_t *l,
                                   int64_t rank)
{
    rs_capture_h cap = NULL;
    rs_diag_t d;
    rs_diag_clear(&d);
    if (rs_layout_capture(m, l, rank, &d, &cap, NULL) != RS_OK)
        fail_msg("rank %lld: %s", (long long)rank, d.msg);
    return cap;
}

/* Every source a copy reads is declared with the manifest's shape and
 * dtype, and every declared source is read by some copy. */
static void check_declarations(rs_model_h m, rs_capture_h cap)
{
    size_t nsrc = rs_capture_num_sources(cap);
    char *read = calloc(nsrc + 1, 1);
    assert_non_null(read);
    for (size_t i = 0; i < rs_capture_num_copies(cap); i++) {
        rs_copy_desc_t c;
        rs_source_info_t s;
        rs_tensor_info_t t;
        rs_capture_copy(cap, i, &c);
        long k = rs_capture_find_source(cap, c.src);
        if (k < 0)
            fail_msg("copy %zu: source '%s' is not declared", i, c.src);
        read[k] = 1;
        rs_capture_source(cap, (size_t)k, &s);
        long ti = rs_model_find(m, c.src);
        assert_true(ti >= 0);
        rs_model_tensor(m, (size_t)ti, &t);
        assert_string_equal(s.name, c.src);
        assert_int_equal(s.ndim, t.ndim);
        for (int dd = 0; dd < t.ndim; dd++)
            assert_int_equal(s.shape[dd], t.shape[dd]);
        assert_int_equal(s.dtype, t.dtype);
    }
    for (size_t k = 0; k < nsrc; k++)
        assert_true(read[k]);
    free(read);
}

static void test_layout_declares_every_source(void **state)
{
    (void)state;
    static const struct {
        const char *file, *spec;
    } cases[] = {
        {"tiny-llama.json", "vllm:tp=2"},
        {"tiny-llama.json", "vllm:tp=2,pp=2"},
        {"tiny-moe.json", "vllm:tp=2,ep=2"},
        {"tiny-moe.json", "vllm:tp=2"},
        {"tiny-deepseek.json", "vllm:tp=2"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rs_model_h m = model_with(cases[i].file, NULL, 0, NULL);
        rs_layout_t l;
        l = lx_layout(m, cases[i].spec);
        for (int64_t r = 0; r < l.world; r++) {
            rs_capture_h cap = layout_capture(m, &l, r);
            assert_true(rs_capture_num_sources(cap) > 0);
            check_declarations(m, cap);
            rs_capture_destroy(cap);
        }
        rs_model_destroy(m);
    }
}

/* What the trainers of `m` publish under megatron:tp=2. */
static rs_sources_h published(rs_model_h m)
{
    rs_layout_t l;
    rs_sources_h s = NULL;
    rs_diag_t d;
    l = lx_layout(m, "megatron:tp=2");
    assert_int_equal(rs_sources_create(&s), RS_OK);
    rs_diag_clear(&d);
    if (rs_layout_publish_all(m, &l, s, &d) != RS_OK)
        fail_msg("publish: %s", d.msg);
    return s;
}

/* The capture without its declarations, as an older producer wrote it. */
static rs_capture_h undeclared(rs_capture_h cap)
{
    rs_capture_h out = NULL;
    assert_int_equal(rs_capture_create(&out), RS_OK);
    for (size_t i = 0; i < rs_capture_num_params(cap); i++) {
        rs_param_info_t p;
        rs_capture_param(cap, i, &p);
        assert_int_equal(rs_capture_add_param(out, p.name, p.ndim, p.shape,
                                              p.dtype, NULL), RS_OK);
    }
    for (size_t i = 0; i < rs_capture_num_copies(cap); i++) {
        rs_copy_desc_t c;
        rs_capture_copy(cap, i, &c);
        assert_int_equal(rs_capture_add_copy(out, &c, NULL), RS_OK);
    }
    return out;
}

/* Published from tiny-llama, captured from tiny-llama with
 * intermediate_size doubled (vllm:tp=2): rank 0's narrows still fit the
 * published tensors, so without declarations its plan is complete over the
 * wrong elements. With them, every rank's plan refuses the 12 MLP sources
 * (gate, up and down of 4 layers), and nothing else. */
static void test_layout_intermediate_doubled(void **state)
{
    (void)state;
    rs_model_h pub = model_with("tiny-llama.json", NULL, 0, NULL);
    rs_model_h sub = model_with("tiny-llama.json", "intermediate_size", 256,
                                NULL);
    rs_sources_h s = published(pub);
    rs_layout_t l;
    l = lx_layout(sub, "vllm:tp=2");
    for (int64_t r = 0; r < l.world; r++) {
        rs_capture_h cap = layout_capture(sub, &l, r);
        rs_plan_h p = plan(cap, s);
        const char *src, *why;
        assert_false(rs_plan_is_complete(p));
        assert_int_equal(rs_plan_num_mismatched(p), 12);
        assert_int_equal(rs_plan_num_fallback(p), 12);
        rs_plan_fallback(p, 0, &src, &why);
        assert_string_equal(src, "model.layers.0.mlp.gate_proj.weight");
        assert_string_equal(why, "tensor 'model.layers.0.mlp.gate_proj."
                                 "weight': capture assumes shape [256, 64] "
                                 "bf16, published [128, 64] bf16");
        for (size_t i = 0; i < 12; i++) {
            rs_plan_fallback(p, i, &src, &why);
            assert_non_null(strstr(src, ".mlp."));
        }
        rs_plan_destroy(p);
        if (r == 0) {
            rs_capture_h old = undeclared(cap);
            p = plan(old, s);
            assert_true(rs_plan_is_complete(p));
            rs_plan_destroy(p);
            rs_capture_destroy(old);
        }
        rs_capture_destroy(cap);
    }
    rs_sources_destroy(s);
    rs_model_destroy(sub);
    rs_model_destroy(pub);
}

/* The inference side configured for f32 while bf16 is published: every
 * source is refused, naming both dtypes. */
static void test_layout_dtype_changed(void **state)
{
    (void)state;
    rs_model_h pub = model_with("tiny-llama.json", NULL, 0, NULL);
    rs_model_h sub = model_with("tiny-llama.json", "torch_dtype", 0,
                                "float32");
    rs_sources_h s = published(pub);
    rs_layout_t l;
    l = lx_layout(sub, "vllm:tp=2");
    rs_capture_h cap = layout_capture(sub, &l, 1);
    rs_plan_h p = plan(cap, s);
    const char *src, *why;
    assert_int_equal(rs_plan_num_mismatched(p), rs_capture_num_sources(cap));
    assert_int_equal(rs_plan_num_fallback(p), rs_capture_num_sources(cap));
    rs_plan_fallback(p, 0, &src, &why);
    if (strstr(why, "f32, published") == NULL ||
        strstr(why, "bf16") == NULL || strstr(why, src) == NULL)
        fail_msg("reason: %s", why);
    rs_plan_destroy(p);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
    rs_model_destroy(sub);
    rs_model_destroy(pub);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_mismatch),
        cmocka_unit_test(test_rank_mismatch),
        cmocka_unit_test(test_dtype_mismatch),
        cmocka_unit_test(test_declared_match_moves_bytes),
        cmocka_unit_test(test_unused_and_undeclared),
        cmocka_unit_test(test_selection),
        cmocka_unit_test(test_mismatches_lead),
        cmocka_unit_test(test_exec_refuses),
        cmocka_unit_test(test_layout_declares_every_source),
        cmocka_unit_test(test_layout_intermediate_doubled),
        cmocka_unit_test(test_layout_dtype_changed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
