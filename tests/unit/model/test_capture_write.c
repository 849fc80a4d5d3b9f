/* Tests of the reshard.capture.v1 writer: random captures holding every op
 * kind, getitem keys, odd names, declared source shapes and dtypes,
 * unsupported sources, quantized copies of every scheme and an
 * unattributed count go through write -> load ->
 * write byte for byte, and the reloaded capture equals the original field by
 * field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/capture_impl.h"
#include "reshard/capture.h"
#include "reshard_layout/layout.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Uniform in [lo, hi]. */
static int64_t rnd_in(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

/* A name with quotes, backslashes, control characters and UTF-8 in it,
 * made unique by its index. */
static void rnd_name(char *buf, size_t len, const char *prefix, size_t index)
{
    static const char *const parts[] = {"model", ".", "layers", "\"", "\\",
                                        "\n", "\x01", "\x1f", "\xc3\xa9", "/",
                                        " ", "q_proj", "\t", "{}", "[,]"};
    size_t n = (size_t)snprintf(buf, len, "%s%zu", prefix, index);
    int count = (int)rnd_in(0, 6);
    for (int i = 0; i < count && n + 8 < len; i++) {
        const char *p = parts[rnd() % (sizeof(parts) / sizeof(parts[0]))];
        n += (size_t)snprintf(buf + n, len - n, "%s", p);
    }
}

static char *write_text(rs_capture_h cap, size_t *len_p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    rs_diag_t d;

    assert_non_null(f);
    rs_diag_clear(&d);
    rs_status_t st = rs_capture_write_json(cap, f, &d);
    if (st != RS_OK)
        fail_msg("write failed %s: %s", rs_status_str(st), d.msg);
    fclose(f);
    *len_p = len;
    return text;
}

static rs_capture_h load_text(const char *text, size_t len)
{
    rs_diag_t d;
    rs_capture_h cap = NULL;
    rs_diag_clear(&d);
    rs_status_t st = rs_capture_load_string(text, len, "written.json", &d, &cap);
    if (st != RS_OK)
        fail_msg("reload failed %s: %s\n%s", rs_status_str(st), d.msg, text);
    return cap;
}

/* A getitem key as the loader would record it (defaults filled in). */
static rs_key_t rnd_key(void)
{
    rs_key_t k;
    memset(&k, 0, sizeof(k));
    k.kind = (rs_key_kind_t)rnd_in(RS_KEY_INDEX, RS_KEY_SLICE);
    if (k.kind == RS_KEY_INDEX)
        k.index = rnd_in(-9, 9);
    if (k.kind == RS_KEY_SLICE) {
        k.has_start = (uint8_t)rnd_in(0, 1);
        k.has_stop = (uint8_t)rnd_in(0, 1);
        k.has_step = (uint8_t)rnd_in(0, 1);
        k.start = k.has_start ? rnd_in(-9, 9) : 0;
        k.stop = k.has_stop ? rnd_in(-9, 9) : 0;
        k.step = k.has_step ? rnd_in(1, 4) : 1;
    }
    return k;
}

/* Storage for the lists and keys of one op. */
typedef struct op_store {
    int64_t list[RS_MAX_DIMS];
    rs_key_t keys[RS_MAX_DIMS];
} op_store_t;

static void rnd_list(rs_op_t *op, op_store_t *s, int64_t lo, size_t min)
{
    op->nlist = (size_t)rnd_in((int64_t)min, 5);
    for (size_t i = 0; i < op->nlist; i++)
        s->list[i] = rnd_in(lo, 12);
    op->list = s->list;
}

/* Fixed-arity ops: n integer arguments, all given. */
static void rnd_ints(rs_op_t *op, int n)
{
    for (int i = 0; i < n; i++) {
        op->arg[i] = rnd_in(-5, 40);
        op->has |= 1u << i;
    }
}

static void rnd_optional(rs_op_t *op)
{
    switch (op->kind) {
    case RS_OP_SLICE:
        op->arg[0] = rnd_in(-3, 3);
        op->has = 1u;
        for (int i = 1; i <= 2; i++) {
            if (rnd_in(0, 1)) {
                op->arg[i] = rnd_in(-9, 9);
                op->has |= 1u << i;
            }
        }
        op->arg[3] = 1;
        if (rnd_in(0, 1)) {
            op->arg[3] = rnd_in(1, 5);
            op->has |= 1u << 3;
        }
        break;
    case RS_OP_FLATTEN: /* no args, start, or start and end */
        rnd_ints(op, (int)rnd_in(0, 2));
        break;
    default: /* squeeze */
        rnd_ints(op, (int)rnd_in(0, 1));
        break;
    }
}

/* A random op of the given kind, in the canonical form the loader builds. */
static rs_op_t rnd_op(rs_op_kind_t kind, op_store_t *s)
{
    rs_op_t op;
    memset(&op, 0, sizeof(op));
    op.kind = kind;
    switch (kind) {
    case RS_OP_NARROW: case RS_OP_CHUNK:
        rnd_ints(&op, 3);
        break;
    case RS_OP_SELECT: case RS_OP_TRANSPOSE: case RS_OP_UNBIND:
        rnd_ints(&op, 2);
        break;
    case RS_OP_UNSQUEEZE:
        rnd_ints(&op, 1);
        break;
    case RS_OP_GETITEM:
        op.nkeys = (size_t)rnd_in(0, 4);
        for (size_t i = 0; i < op.nkeys; i++)
            s->keys[i] = rnd_key();
        op.keys = s->keys;
        break;
    case RS_OP_PERMUTE: case RS_OP_VIEW: case RS_OP_RESHAPE:
        rnd_list(&op, s, -1, 0);
        break;
    case RS_OP_UNFLATTEN:
        rnd_ints(&op, 1);
        rnd_list(&op, s, -1, 0);
        break;
    case RS_OP_SPLIT:
        if (rnd_in(0, 1))
            rnd_list(&op, s, 0, 1);
        else
            rnd_ints(&op, 1);
        op.arg[1] = rnd_in(-2, 3);
        op.arg[2] = rnd_in(0, 4);
        op.has |= 6u;
        break;
    case RS_OP_SLICE: case RS_OP_FLATTEN: case RS_OP_SQUEEZE:
        rnd_optional(&op);
        break;
    default: /* t, contiguous */
        break;
    }
    return op;
}

static const rs_dtype_t dtypes[] = {RS_DTYPE_BF16, RS_DTYPE_F32, RS_DTYPE_F16,
                                    RS_DTYPE_F8E4M3, RS_DTYPE_I64,
                                    RS_DTYPE_BOOL};

static void add_params(rs_capture_h cap, size_t n)
{
    char name[128];
    int64_t shape[RS_MAX_DIMS];
    for (size_t i = 0; i < n; i++) {
        int ndim = (int)rnd_in(0, 4);
        for (int d = 0; d < ndim; d++)
            shape[d] = rnd_in(0, 300);
        rnd_name(name, sizeof(name), "p", i);
        rs_dtype_t dt = dtypes[rnd() % (sizeof(dtypes) / sizeof(dtypes[0]))];
        assert_int_equal(rs_capture_add_param(cap, name, ndim, shape, dt, NULL),
                         RS_OK);
    }
}

/* One copy into a random declared parameter with up to 5 random ops. */
static void add_copy(rs_capture_h cap, size_t index)
{
    op_store_t store[5];
    rs_op_t ops[5];
    int64_t shape[RS_MAX_DIMS], stride[RS_MAX_DIMS];
    char src[128];
    rs_param_info_t p;
    rs_copy_desc_t c;

    rs_capture_param(cap, rnd() % rs_capture_num_params(cap), &p);
    memset(&c, 0, sizeof(c));
    c.nops = (size_t)rnd_in(0, 5);
    for (size_t i = 0; i < c.nops; i++)
        ops[i] = rnd_op((rs_op_kind_t)rnd_in(RS_OP_NARROW, RS_OP_CONTIGUOUS),
                        &store[i]);
    c.ndim = (int)rnd_in(0, 4);
    for (int d = 0; d < c.ndim; d++) {
        shape[d] = rnd_in(0, 64);
        stride[d] = rnd_in(0, 1000);
    }
    rnd_name(src, sizeof(src), "s", index % 7); /* sources repeat */
    c.src = src;
    c.param = p.name;
    c.ops = ops;
    c.dest_offset = rnd_in(0, 1 << 20);
    c.dest_shape = shape;
    c.dest_stride = stride;
    c.dest_dtype = p.dtype;
    assert_int_equal(rs_capture_add_copy(cap, &c, NULL), RS_OK);
}

/* Declares some of the copies' sources (named as add_copy names them) and
 * one no copy reads, each with a random shape (rank 0 to 5) and dtype. */
static void add_sources(rs_capture_h cap)
{
    char name[128];
    int64_t shape[RS_MAX_DIMS];
    size_t n = (size_t)rnd_in(0, 8);
    for (size_t i = 0; i < n; i++) {
        int ndim = (int)rnd_in(0, 5);
        for (int d = 0; d < ndim; d++)
            shape[d] = rnd_in(0, 5000);
        rnd_name(name, sizeof(name), i == 7 ? "unused" : "s", i);
        rs_dtype_t dt = dtypes[rnd() % (sizeof(dtypes) / sizeof(dtypes[0]))];
        assert_int_equal(rs_capture_declare_source(cap, name, ndim, shape, dt,
                                                   NULL), RS_OK);
    }
}

/* A quantized copy of a random scheme into "q8" (f8e4m3) or "q5" (f8e5m2)
 * with a random scale region inside "scales" (f32[256]). */
static void add_quant_copy(rs_capture_h cap, size_t index)
{
    int64_t shape[2] = {4, 4}, stride[2] = {4, 1};
    int64_t block[RS_MAX_DIMS], sshape[3], sstride[3];
    char src[128];
    rs_quant_desc_t q = {0};
    rs_op_t narrow = {.kind = RS_OP_NARROW, .arg = {0, 4, 4}, .has = 7u};

    rs_source_info_t decl = {.ndim = RS_MAX_DIMS};
    rnd_name(src, sizeof(src), "s", index % 7);
    long di = rs_capture_find_source(cap, src);
    if (di >= 0) /* a declared source bounds the block's rank */
        rs_capture_source(cap, (size_t)di, &decl);
    q.scheme = (rs_quant_scheme_t)rnd_in(RS_QUANT_FP8_BLOCK,
                                         RS_QUANT_FP8_TENSOR);
    if (decl.ndim == 0)
        q.scheme = RS_QUANT_FP8_TENSOR;
    q.format = rnd_in(0, 1) ? RS_DTYPE_F8E4M3 : RS_DTYPE_F8E5M2;
    if (q.scheme == RS_QUANT_FP8_BLOCK) {
        q.block_ndim = (int)rnd_in(1, decl.ndim);
        for (int d = 0; d < q.block_ndim; d++)
            block[d] = rnd_in(1, 256);
        q.block = block;
    }
    q.scale_param = "scales";
    q.scale_offset = rnd_in(0, 100);
    q.scale_ndim = (int)rnd_in(0, 3);
    for (int d = 0; d < q.scale_ndim; d++) {
        sshape[d] = q.scheme == RS_QUANT_FP8_TENSOR ? 1 : rnd_in(0, 4);
        sstride[d] = rnd_in(0, 8);
    }
    q.scale_shape = sshape;
    q.scale_stride = sstride;
    rs_copy_desc_t c = {src, q.format == RS_DTYPE_F8E4M3 ? "q8" : "q5",
                        &narrow, (size_t)rnd_in(0, 1), 0, 2, shape, stride,
                        q.format};
    assert_int_equal(rs_capture_add_quant_copy(cap, &c, &q, NULL), RS_OK);
}

static void add_quant_params(rs_capture_h cap)
{
    int64_t shape[2] = {8, 8}, scales = 256;
    assert_int_equal(rs_capture_add_param(cap, "q8", 2, shape,
                                          RS_DTYPE_F8E4M3, NULL), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "q5", 2, shape,
                                          RS_DTYPE_F8E5M2, NULL), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "scales", 1, &scales,
                                          RS_DTYPE_F32, NULL), RS_OK);
}

static rs_capture_h random_capture(void)
{
    rs_capture_h cap = NULL;
    char src[128];

    assert_int_equal(rs_capture_create(&cap), RS_OK);
    add_params(cap, (size_t)rnd_in(1, 12));
    add_quant_params(cap);
    add_sources(cap);
    size_t ncopies = (size_t)rnd_in(0, 40);
    for (size_t i = 0; i < ncopies; i++) {
        if (rnd_in(0, 3) == 0)
            add_quant_copy(cap, i);
        else
            add_copy(cap, i);
    }
    size_t nunsup = (size_t)rnd_in(0, 3);
    for (size_t i = 0; i < nunsup; i++) {
        rnd_name(src, sizeof(src), "u", i);
        assert_int_equal(rs_capture_add_unsupported(
                             cap, src, i == 1 ? "reason \"quoted\"\n" : "why",
                             NULL),
                         RS_OK);
    }
    rs__capture_set_unattributed(cap, rnd_in(0, 1) ? rnd_in(0, 1000000) : 0);
    return cap;
}

static void assert_key_equal(const rs_key_t *a, const rs_key_t *b)
{
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->index, b->index);
    assert_int_equal(a->start, b->start);
    assert_int_equal(a->stop, b->stop);
    assert_int_equal(a->step, b->step);
    assert_int_equal(a->has_start, b->has_start);
    assert_int_equal(a->has_stop, b->has_stop);
    assert_int_equal(a->has_step, b->has_step);
}

static void assert_op_equal(const rs_op_t *a, const rs_op_t *b)
{
    assert_int_equal(a->kind, b->kind);
    for (int i = 0; i < 4; i++)
        assert_int_equal(a->arg[i], b->arg[i]);
    assert_int_equal(a->has, b->has);
    assert_int_equal(a->nlist, b->nlist);
    for (size_t i = 0; i < a->nlist; i++)
        assert_int_equal(a->list[i], b->list[i]);
    assert_int_equal(a->nkeys, b->nkeys);
    for (size_t i = 0; i < a->nkeys; i++)
        assert_key_equal(&a->keys[i], &b->keys[i]);
}

static void assert_copy_equal(const rs_copy_desc_t *a, const rs_copy_desc_t *b)
{
    assert_string_equal(a->src, b->src);
    assert_string_equal(a->param, b->param);
    assert_int_equal(a->nops, b->nops);
    for (size_t i = 0; i < a->nops; i++)
        assert_op_equal(&a->ops[i], &b->ops[i]);
    assert_int_equal(a->dest_offset, b->dest_offset);
    assert_int_equal(a->ndim, b->ndim);
    for (int d = 0; d < a->ndim; d++) {
        assert_int_equal(a->dest_shape[d], b->dest_shape[d]);
        assert_int_equal(a->dest_stride[d], b->dest_stride[d]);
    }
    assert_int_equal(a->dest_dtype, b->dest_dtype);
}

static void assert_dims_equal(const int64_t *a, const int64_t *b, int n)
{
    for (int d = 0; d < n; d++)
        assert_int_equal(a[d], b[d]);
}

/* Copy `i` is quantized in both or neither, with the same spec. */
static void assert_quant_equal(rs_capture_h a, rs_capture_h b, size_t i)
{
    rs_quant_desc_t qa, qb;
    int has = rs_capture_copy_quant(a, i, &qa);
    assert_int_equal(has, rs_capture_copy_quant(b, i, &qb));
    if (!has)
        return;
    assert_int_equal(qa.scheme, qb.scheme);
    assert_int_equal(qa.format, qb.format);
    assert_int_equal(qa.block_ndim, qb.block_ndim);
    assert_dims_equal(qa.block, qb.block, qa.block_ndim);
    assert_string_equal(qa.scale_param, qb.scale_param);
    assert_int_equal(qa.scale_offset, qb.scale_offset);
    assert_int_equal(qa.scale_ndim, qb.scale_ndim);
    assert_dims_equal(qa.scale_shape, qb.scale_shape, qa.scale_ndim);
    assert_dims_equal(qa.scale_stride, qb.scale_stride, qa.scale_ndim);
}

static void assert_capture_equal(rs_capture_h a, rs_capture_h b)
{
    assert_int_equal(rs_capture_num_params(a), rs_capture_num_params(b));
    for (size_t i = 0; i < rs_capture_num_params(a); i++) {
        rs_param_info_t pa, pb;
        rs_capture_param(a, i, &pa);
        rs_capture_param(b, i, &pb);
        assert_string_equal(pa.name, pb.name);
        assert_int_equal(pa.ndim, pb.ndim);
        for (int d = 0; d < pa.ndim; d++)
            assert_int_equal(pa.shape[d], pb.shape[d]);
        assert_int_equal(pa.dtype, pb.dtype);
    }
    assert_int_equal(rs_capture_num_sources(a), rs_capture_num_sources(b));
    for (size_t i = 0; i < rs_capture_num_sources(a); i++) {
        rs_source_info_t sa, sb;
        rs_capture_source(a, i, &sa);
        rs_capture_source(b, i, &sb);
        assert_string_equal(sa.name, sb.name);
        assert_int_equal(sa.ndim, sb.ndim);
        for (int d = 0; d < sa.ndim; d++)
            assert_int_equal(sa.shape[d], sb.shape[d]);
        assert_int_equal(sa.dtype, sb.dtype);
        assert_int_equal(rs_capture_find_source(b, sa.name), (long)i);
    }
    assert_int_equal(rs_capture_num_copies(a), rs_capture_num_copies(b));
    for (size_t i = 0; i < rs_capture_num_copies(a); i++) {
        rs_copy_desc_t ca, cb;
        rs_capture_copy(a, i, &ca);
        rs_capture_copy(b, i, &cb);
        assert_copy_equal(&ca, &cb);
        assert_quant_equal(a, b, i);
    }
    assert_int_equal(rs_capture_num_unsupported(a),
                     rs_capture_num_unsupported(b));
    for (size_t i = 0; i < rs_capture_num_unsupported(a); i++) {
        const char *sa, *ra, *sb, *rb;
        rs_capture_unsupported(a, i, &sa, &ra);
        rs_capture_unsupported(b, i, &sb, &rb);
        assert_string_equal(sa, sb);
        assert_string_equal(ra, rb);
    }
    assert_int_equal(rs_capture_unattributed(a), rs_capture_unattributed(b));
}

/* write -> load -> write gives the same bytes and the same capture. */
static void round_trip(rs_capture_h cap)
{
    size_t len1, len2;
    char *text1 = write_text(cap, &len1);
    rs_capture_h back = load_text(text1, len1);
    char *text2 = write_text(back, &len2);

    assert_capture_equal(cap, back);
    if (len1 != len2 || memcmp(text1, text2, len1) != 0)
        fail_msg("round trip differs:\n%s\n---\n%s", text1, text2);
    rs_capture_destroy(back);
    free(text1);
    free(text2);
}

static void test_random_round_trip(void **state)
{
    (void)state;
    size_t declared = 0, quantized[RS_QUANT_FP8_TENSOR + 1] = {0};
    rs_quant_desc_t q;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        rng_state = seed * 0x9e3779b97f4a7c15ull;
        rs_capture_h cap = random_capture();
        declared += rs_capture_num_sources(cap);
        for (size_t i = 0; i < rs_capture_num_copies(cap); i++)
            if (rs_capture_copy_quant(cap, i, &q))
                quantized[q.scheme]++;
        round_trip(cap);
        rs_capture_destroy(cap);
    }
    assert_true(declared > 300); /* the key was exercised, not left empty */
    for (int k = RS_QUANT_FP8_BLOCK; k <= RS_QUANT_FP8_TENSOR; k++)
        assert_true(quantized[k] > 100); /* every scheme went through */
}

/* Every op kind at least once, plus every getitem key kind. */
static void test_every_op_kind(void **state)
{
    (void)state;
    rs_capture_h cap = NULL;
    int64_t shape[2] = {4, 4}, stride[2] = {4, 1};
    op_store_t store[RS_OP_CONTIGUOUS + 1];
    rs_op_t ops[RS_OP_CONTIGUOUS + 1];

    rng_state = 77;
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "w", 2, shape, RS_DTYPE_BF16,
                                          NULL), RS_OK);
    for (int k = RS_OP_NARROW; k <= RS_OP_CONTIGUOUS; k++) {
        for (int rep = 0; rep < 8; rep++) {
            ops[0] = rnd_op((rs_op_kind_t)k, &store[0]);
            rs_copy_desc_t c = {"src", "w", ops, 1, 0, 2, shape, stride,
                                RS_DTYPE_BF16};
            assert_int_equal(rs_capture_add_copy(cap, &c, NULL), RS_OK);
        }
    }
    round_trip(cap);
    rs_capture_destroy(cap);
}

/* A capture read from text with an unknown op, unsupported sources and an
 * unattributed count writes out what loads back to the same thing. */
static void test_loaded_unknown_op(void **state)
{
    (void)state;
    const char *text =
        "{\"schema\": \"reshard.capture.v1\","
        " \"params\": {\"w\": {\"shape\": [8, 4], \"dtype\": \"bf16\"}},"
        " \"copies\": ["
        "  {\"src\": \"a\", \"ops\": [[\"narrow\", 0, 0, 4], [\"expand\", 2]],"
        "   \"param\": \"w\", \"dest_offset\": 0, \"dest_shape\": [4, 4],"
        "   \"dest_stride\": [4, 1], \"dest_dtype\": \"bf16\"},"
        "  {\"src\": \"b\", \"ops\": [[\"slice\", 0, null, 4, null],"
        "   [\"getitem\", [null, [1, null, 2], -1]]],"
        "   \"param\": \"w\", \"dest_offset\": 16, \"dest_shape\": [4, 4],"
        "   \"dest_stride\": [4, 1], \"dest_dtype\": \"bf16\"}],"
        " \"unsupported\": {\"c\": \"index_select\"},"
        " \"unattributed\": 3}";
    rs_capture_h cap = load_text(text, strlen(text));
    const char *src, *reason;

    assert_int_equal(rs_capture_num_unsupported(cap), 2);
    rs_capture_unsupported(cap, 1, &src, &reason);
    assert_string_equal(src, "a");
    assert_int_equal(rs_capture_unattributed(cap), 3);
    round_trip(cap);
    rs_capture_destroy(cap);
}

/* `want` loads and is written back to the same text. */
static void expect_written_as_read(const char *want)
{
    rs_capture_h cap = load_text(want, strlen(want));
    size_t len;
    char *got = write_text(cap, &len);
    assert_string_equal(got, want);
    free(got);
    rs_capture_destroy(cap);
}

/* The exact text of a small capture, so the format is pinned down. */
static void test_exact_text(void **state)
{
    (void)state;
    const char *want =
        "{\"schema\": \"reshard.capture.v1\",\n"
        " \"params\": {\n"
        "  \"w\": {\"shape\": [8, 4], \"dtype\": \"bf16\"}},\n"
        " \"sources\": {\n"
        "  \"q\\\"\\u0001\": {\"shape\": [8, 8], \"dtype\": \"bf16\"},\n"
        "  \"scale\": {\"shape\": [], \"dtype\": \"f32\"}},\n"
        " \"copies\": [\n"
        "  {\"src\": \"q\\\"\\u0001\", \"ops\": [[\"narrow\", 0, 4, 4], "
        "[\"t\"]], \"param\": \"w\", \"dest_offset\": 16, \"dest_shape\": "
        "[4, 4], \"dest_stride\": [1, 4], \"dest_dtype\": \"bf16\"}],\n"
        " \"unsupported\": {},\n"
        " \"unattributed\": 0}\n";
    expect_written_as_read(want);
}

/* The exact text of quantized copies: the quant object after the copy's
 * fields, block only on fp8_block. */
static void test_exact_quant_text(void **state)
{
    (void)state;
    const char *want =
        "{\"schema\": \"reshard.capture.v1\",\n"
        " \"params\": {\n"
        "  \"w\": {\"shape\": [256, 128], \"dtype\": \"f8e4m3\"},\n"
        "  \"w_s\": {\"shape\": [2, 1], \"dtype\": \"f32\"}},\n"
        " \"sources\": {},\n"
        " \"copies\": [\n"
        "  {\"src\": \"a\", \"ops\": [[\"narrow\", 0, 256, 256]], "
        "\"param\": \"w\", \"dest_offset\": 0, \"dest_shape\": [256, 128], "
        "\"dest_stride\": [128, 1], \"dest_dtype\": \"f8e4m3\", \"quant\": "
        "{\"scheme\": \"fp8_block\", \"format\": \"f8e4m3\", \"block\": "
        "[128, 128], \"scale\": {\"param\": \"w_s\", \"dest_offset\": 0, "
        "\"dest_shape\": [2, 1], \"dest_stride\": [1, 1]}}},\n"
        "  {\"src\": \"b\", \"ops\": [], \"param\": \"w\", "
        "\"dest_offset\": 0, \"dest_shape\": [2, 128], \"dest_stride\": "
        "[128, 1], \"dest_dtype\": \"f8e4m3\", \"quant\": {\"scheme\": "
        "\"fp8_channel\", \"format\": \"f8e4m3\", \"scale\": {\"param\": "
        "\"w_s\", \"dest_offset\": 0, \"dest_shape\": [2], "
        "\"dest_stride\": [1]}}}],\n"
        " \"unsupported\": {},\n"
        " \"unattributed\": 0}\n";
    expect_written_as_read(want);
}

/* A capture written before sources were declared loads with none and is
 * written with an empty "sources" object, which loads back the same. */
static void test_older_capture(void **state)
{
    (void)state;
    const char *old =
        "{\"schema\": \"reshard.capture.v1\",\n"
        " \"params\": {\n"
        "  \"w\": {\"shape\": [4], \"dtype\": \"f32\"}},\n"
        " \"copies\": [\n"
        "  {\"src\": \"a\", \"ops\": [], \"param\": \"w\", \"dest_offset\": 0, "
        "\"dest_shape\": [4], \"dest_stride\": [1], \"dest_dtype\": \"f32\"}],\n"
        " \"unsupported\": {},\n"
        " \"unattributed\": 0}\n";
    rs_capture_h cap = load_text(old, strlen(old));
    size_t len;
    assert_int_equal(rs_capture_num_sources(cap), 0);
    assert_int_equal(rs_capture_find_source(cap, "a"), -1);
    char *got = write_text(cap, &len);
    const char *key = strstr(got, " \"sources\": {},\n \"copies\"");
    if (key == NULL)
        fail_msg("no empty sources object before copies:\n%s", got);
    round_trip(cap);
    free(got);
    rs_capture_destroy(cap);
}

static void test_errors(void **state)
{
    (void)state;
    rs_capture_h cap = NULL;
    int64_t shape[1] = {4}, stride[1] = {1};
    rs_op_t bad;
    rs_diag_t d;

    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "w", 1, shape, RS_DTYPE_F32,
                                          NULL), RS_OK);
    memset(&bad, 0, sizeof(bad));
    bad.kind = (rs_op_kind_t)99;
    rs_copy_desc_t c = {"src", "w", &bad, 1, 0, 1, shape, stride, RS_DTYPE_F32};
    assert_int_equal(rs_capture_add_copy(cap, &c, NULL), RS_OK);
    FILE *f = tmpfile();
    assert_non_null(f);
    rs_diag_clear(&d);
    assert_int_equal(rs_capture_write_json(cap, f, &d), RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "copies[0].ops[0]"));
    assert_non_null(strstr(d.msg, "'src'"));
    fclose(f);
    assert_int_equal(rs_capture_write_json(NULL, stdout, &d),
                     RS_ERR_INVALID_ARG);
    rs_capture_destroy(cap);

    /* A full device: the write is reported, not lost. */
    FILE *full = fopen("/dev/full", "w");
    if (full != NULL) {
        assert_int_equal(rs_capture_create(&cap), RS_OK);
        assert_int_equal(rs_capture_write_json(cap, full, &d), RS_ERR_IO);
        fclose(full);
        rs_capture_destroy(cap);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_round_trip),
        cmocka_unit_test(test_every_op_kind),
        cmocka_unit_test(test_loaded_unknown_op),
        cmocka_unit_test(test_exact_text),
        cmocka_unit_test(test_exact_quant_text),
        cmocka_unit_test(test_older_capture),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
