/* The cut set: cuts stay sorted, unique and strictly inside their dim;
 * names come back in name order; merges are unions that leave the target
 * alone on a disagreement; rs_cuts_split tiles a box exactly, in row-major
 * order, with no cut inside any sub-box (a seeded property test against a
 * naive per-element check); captures add the bounds of every box they read;
 * the JSON form reads back to the same set and the same text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "assert_status.h"
#include "reshard/capture.h"
#include "reshard/cuts.h"

static rs_cuts_h new_set(void)
{
    rs_cuts_h c = NULL;
    assert_int_equal(rs_cuts_create(NULL, &c), RS_OK);
    assert_non_null(c);
    return c;
}

static void expect_cuts(rs_cuts_h c, const char *t, int dim,
                        const int64_t *want, size_t n)
{
    size_t got_n = 99;
    const int64_t *got = rs_cuts_get(c, t, dim, &got_n);
    if (got_n != n)
        fail_msg("tensor '%s' dim %d: %zu cuts (first %lld), want %zu", t, dim,
                 got_n, got_n ? (long long)got[0] : -1LL, n);
    if (n == 0) {
        assert_null(got);
        return;
    }
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i], want[i]);
}

static void test_add_sorted_unique(void **state)
{
    (void)state;
    rs_cuts_h c = new_set();
    const int64_t shape[2] = {10, 20}, other[2] = {10, 21};
    const int64_t ins[] = {7, 3, 0, 10, 3, 5, 9, 1};
    const int64_t want[] = {1, 3, 5, 7, 9};
    rs_diag_t d;
    for (size_t i = 0; i < sizeof(ins) / sizeof(ins[0]); i++)
        ASSERT_ST(rs_cuts_add(c, "w", 2, shape, 0, ins[i], &d), RS_OK, d);
    expect_cuts(c, "w", 0, want, 5);
    expect_cuts(c, "w", 1, NULL, 0);
    expect_cuts(c, "w", 2, NULL, 0);
    expect_cuts(c, "absent", 0, NULL, 0);
    int nd = 0;
    const int64_t *held = rs_cuts_shape(c, "w", &nd);
    assert_int_equal(nd, 2);
    assert_int_equal(held[1], 20);
    assert_null(rs_cuts_shape(c, "absent", &nd));
    assert_int_equal(nd, -1);
    ASSERT_ST(rs_cuts_add(c, "w", 2, shape, 0, 11, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_cuts_add(c, "w", 2, shape, 0, -1, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_cuts_add(c, "w", 2, shape, 2, 1, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_cuts_add(c, "w", 2, other, 1, 4, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "'w'");
    ASSERT_MSG_HAS(d, "[10, 21]");
    ASSERT_MSG_HAS(d, "[10, 20]");
    expect_cuts(c, "w", 1, NULL, 0);
    /* a cut at 0 or at the size holds the tensor's shape, cutting nothing */
    ASSERT_ST(rs_cuts_add(c, "z", 1, shape, 0, 10, &d), RS_OK, d);
    assert_int_equal(rs_cuts_num_tensors(c), 2);
    expect_cuts(c, "z", 0, NULL, 0);
    rs_cuts_destroy(c);
}

/* Names added in a seeded random order come back sorted by strcmp, both
 * when added one by one and when a merge brings many at once. */
static void test_name_order(void **state)
{
    (void)state;
    rs_cuts_h a = new_set(), b = new_set();
    const int64_t shape[1] = {100};
    char name[32];
    srand(13);
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof(name), "layers.%d.w", rand() % 1000);
        assert_int_equal(rs_cuts_add(i % 2 ? a : b, name, 1, shape, 0,
                                     1 + rand() % 98, NULL), RS_OK);
    }
    assert_int_equal(rs_cuts_merge(a, b, NULL), RS_OK);
    size_t n = rs_cuts_num_tensors(a);
    assert_true(n > 100);
    for (size_t i = 1; i < n; i++)
        assert_true(strcmp(rs_cuts_tensor(a, i - 1), rs_cuts_tensor(a, i)) < 0);
    assert_null(rs_cuts_tensor(a, n));
    /* every name of b is in a with at least b's cuts */
    for (size_t i = 0; i < rs_cuts_num_tensors(b); i++) {
        size_t nb, na;
        const char *t = rs_cuts_tensor(b, i);
        const int64_t *cb = rs_cuts_get(b, t, 0, &nb);
        const int64_t *ca = rs_cuts_get(a, t, 0, &na);
        for (size_t k = 0; k < nb; k++) {
            size_t j = 0;
            while (j < na && ca[j] != cb[k])
                j++;
            assert_true(j < na);
        }
    }
    rs_cuts_destroy(a);
    rs_cuts_destroy(b);
}

static void test_merge_disagreement(void **state)
{
    (void)state;
    rs_cuts_h a = new_set(), b = new_set();
    const int64_t s1[1] = {8}, s2[1] = {9};
    const int64_t want[] = {2};
    rs_diag_t d;
    assert_int_equal(rs_cuts_add(a, "x", 1, s1, 0, 2, NULL), RS_OK);
    assert_int_equal(rs_cuts_add(b, "a", 1, s1, 0, 3, NULL), RS_OK);
    assert_int_equal(rs_cuts_add(b, "x", 1, s2, 0, 4, NULL), RS_OK);
    ASSERT_ST(rs_cuts_merge(a, b, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "'x'");
    assert_int_equal(rs_cuts_num_tensors(a), 1); /* "a" did not land */
    expect_cuts(a, "x", 0, want, 1);
    rs_cuts_destroy(b);
    b = new_set();
    assert_int_equal(rs_cuts_set_model(a, "m1", NULL), RS_OK);
    assert_int_equal(rs_cuts_set_model(b, "m2", NULL), RS_OK);
    ASSERT_ST(rs_cuts_merge(a, b, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "'m2'");
    assert_int_equal(rs_cuts_set_model(a, NULL, NULL), RS_OK);
    assert_int_equal(rs_cuts_merge(a, b, NULL), RS_OK);
    assert_string_equal(rs_cuts_model(a), "m2");
    assert_int_equal(rs_cuts_merge(a, a, NULL), RS_OK);
    rs_cuts_destroy(a);
    rs_cuts_destroy(b);
}

/* What a split hands its callback, for checking afterwards. */
typedef struct boxes {
    int ndim;
    int n, stop_at;
    int64_t off[4096][3], len[4096][3];
} boxes_t;

static rs_status_t collect(void *ctx, const int64_t *off, const int64_t *len)
{
    boxes_t *b = ctx;
    if (b->n == b->stop_at)
        return RS_ERR_INCOMPLETE;
    assert_true(b->n < 4096);
    memcpy(b->off[b->n], off, (size_t)b->ndim * sizeof(int64_t));
    memcpy(b->len[b->n], len, (size_t)b->ndim * sizeof(int64_t));
    b->n++;
    return RS_OK;
}

/* Lexicographic order of offsets: the row-major order of the grid. */
static int before(const int64_t *a, const int64_t *b, int n)
{
    for (int d = 0; d < n; d++)
        if (a[d] != b[d])
            return a[d] < b[d];
    return 0;
}

/* The naive check: every element of the box lies in exactly one sub-box,
 * no element outside it in any, and no cut lies strictly inside a sub-box
 * (nor does a sub-box edge lie where there is no cut or box edge). */
static void check_split(rs_cuts_h c, const boxes_t *b, const int64_t *off,
                        const int64_t *len, int64_t want_boxes)
{
    static uint8_t hit[16][16][16];
    memset(hit, 0, sizeof(hit));
    assert_int_equal(b->n, want_boxes);
    for (int i = 0; i < b->n; i++) {
        if (i > 0)
            assert_true(before(b->off[i - 1], b->off[i], b->ndim));
        for (int d = 0; d < b->ndim; d++) {
            size_t n;
            const int64_t *cut = rs_cuts_get(c, "t", d, &n);
            int64_t lo = b->off[i][d], hi = lo + b->len[i][d];
            assert_true(lo >= off[d] && hi <= off[d] + len[d] && hi > lo);
            for (size_t k = 0; k < n; k++)
                assert_false(cut[k] > lo && cut[k] < hi);
        }
        for (int64_t x = 0; x < b->len[i][0]; x++)
            for (int64_t y = 0; y < b->len[i][1]; y++)
                for (int64_t z = 0; z < b->len[i][2]; z++)
                    hit[b->off[i][0] + x][b->off[i][1] + y][b->off[i][2] + z]++;
    }
    for (int x = 0; x < 16; x++)
        for (int y = 0; y < 16; y++)
            for (int z = 0; z < 16; z++) {
                int in = x >= off[0] && x < off[0] + len[0] && y >= off[1] &&
                         y < off[1] + len[1] && z >= off[2] &&
                         z < off[2] + len[2];
                assert_int_equal(hit[x][y][z], in);
            }
}

/* Sub-boxes along one dim: 1 plus the cuts strictly inside (lo, hi). */
static int64_t pieces(rs_cuts_h c, int d, int64_t lo, int64_t hi)
{
    size_t n;
    const int64_t *cut = rs_cuts_get(c, "t", d, &n);
    int64_t p = 1;
    for (size_t k = 0; k < n; k++)
        p += cut[k] > lo && cut[k] < hi;
    return p;
}

static void test_split_property(void **state)
{
    (void)state;
    static boxes_t b;
    const int64_t shape[3] = {16, 16, 16};
    srand(1313);
    for (int round = 0; round < 200; round++) {
        rs_cuts_h c = new_set();
        int64_t off[3], len[3], want = 1;
        for (int k = rand() % 12; k > 0; k--)
            assert_int_equal(rs_cuts_add(c, "t", 3, shape, rand() % 3,
                                         rand() % 17, NULL), RS_OK);
        for (int d = 0; d < 3; d++) {
            off[d] = rand() % 16;
            len[d] = 1 + rand() % (16 - off[d]);
            want *= pieces(c, d, off[d], off[d] + len[d]);
        }
        b.ndim = 3;
        b.n = 0;
        b.stop_at = -1;
        assert_int_equal(rs_cuts_split(c, "t", 3, off, len, collect, &b, NULL),
                         RS_OK);
        check_split(c, &b, off, len, want);
        rs_cuts_destroy(c);
    }
}

static void test_split_edges(void **state)
{
    (void)state;
    static boxes_t b;
    rs_cuts_h c = new_set();
    const int64_t shape[2] = {8, 8}, off[2] = {0, 0}, full[2] = {8, 8};
    const int64_t empty[2] = {8, 0}, neg[2] = {-1, 8};
    rs_diag_t d;
    assert_int_equal(rs_cuts_add(c, "t", 2, shape, 1, 4, NULL), RS_OK);
    assert_int_equal(rs_cuts_add(c, "t", 2, shape, 0, 2, NULL), RS_OK);
    b.ndim = 2;
    b.n = 0;
    b.stop_at = -1;
    /* an empty box is one sub-box, itself */
    assert_int_equal(rs_cuts_split(c, "t", 2, off, empty, collect, &b, NULL),
                     RS_OK);
    assert_int_equal(b.n, 1);
    assert_int_equal(b.len[0][0], 8);
    assert_int_equal(b.len[0][1], 0);
    /* a tensor the set does not hold is one sub-box */
    b.n = 0;
    assert_int_equal(rs_cuts_split(c, "u", 2, off, full, collect, &b, NULL),
                     RS_OK);
    assert_int_equal(b.n, 1);
    /* the callback's status stops the split */
    b.n = 0;
    b.stop_at = 2;
    assert_int_equal(rs_cuts_split(c, "t", 2, off, full, collect, &b, NULL),
                     RS_ERR_INCOMPLETE);
    assert_int_equal(b.n, 2);
    ASSERT_ST(rs_cuts_split(c, "t", 1, off, full, collect, &b, &d),
              RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "'t'");
    ASSERT_ST(rs_cuts_split(c, "t", 2, off, neg, collect, &b, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_cuts_split(c, "t", 2, neg, full, collect, &b, &d),
              RS_ERR_INVALID_ARG, d);
    rs_cuts_destroy(c);
}


/* A split at block boundaries keeps the cuts on multiples of each dim's
 * block only: w [300, 260] cut in dim 1 at 100, 128 and 256 and in dim 0
 * at 64 and 150; its box of whole 128 x 128 blocks [0, 128) x [0, 260)
 * splits at column 128 and 256 (not 100, inside a block; rows: 64 and 150
 * are no multiple of 128), each piece whole blocks. */
static void test_split_blocks(void **state)
{
    (void)state;
    static boxes_t b;
    rs_cuts_h c = new_set();
    const int64_t shape[2] = {300, 260}, blk[2] = {128, 128}, off[2] = {0, 0},
                  len[2] = {128, 260}, bad[2] = {128, 0};
    rs_diag_t d;
    const int64_t at1[3] = {100, 128, 256}, at0[2] = {64, 150};
    for (int i = 0; i < 3; i++)
        assert_int_equal(rs_cuts_add(c, "w", 2, shape, 1, at1[i], NULL), RS_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(rs_cuts_add(c, "w", 2, shape, 0, at0[i], NULL), RS_OK);
    b.ndim = 2;
    b.n = 0;
    b.stop_at = -1;
    ASSERT_ST(rs_cuts_split_blocks(c, "w", 2, blk, off, len, collect, &b, &d),
              RS_OK, d);
    assert_int_equal(b.n, 3);
    const int64_t want_off[3] = {0, 128, 256}, want_len[3] = {128, 128, 4};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(b.off[i][0], 0);
        assert_int_equal(b.len[i][0], 128);
        assert_int_equal(b.off[i][1], want_off[i]);
        assert_int_equal(b.len[i][1], want_len[i]);
    }
    /* 64 x 128 blocks: row 64 is a boundary too */
    const int64_t blk64[2] = {64, 128};
    b.n = 0;
    ASSERT_ST(rs_cuts_split_blocks(c, "w", 2, blk64, off, len, collect, &b,
                                   &d), RS_OK, d);
    assert_int_equal(b.n, 6);
    assert_int_equal(b.off[3][0], 64);
    /* a block extent below 1, a rank the set does not hold */
    ASSERT_ST(rs_cuts_split_blocks(c, "w", 2, bad, off, len, collect, &b, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "block extent 0");
    ASSERT_ST(rs_cuts_split_blocks(c, "w", 1, blk, off, len, collect, &b, &d),
              RS_ERR_INPUT, d);
    rs_cuts_destroy(c);
}

/* Copies over declared sources add the bounds of the box they read, in
 * source coordinates (through a transpose, a strided slice and a select);
 * undeclared and unsupported sources add nothing. */
static const char capture_json[] =
    "{\"schema\": \"reshard.capture.v1\","
    " \"params\": {\"p\": {\"shape\": [64], \"dtype\": \"bf16\"}},"
    " \"sources\": {\"w\": {\"shape\": [8, 12], \"dtype\": \"bf16\"},"
    "  \"v\": {\"shape\": [6, 10], \"dtype\": \"bf16\"},"
    "  \"bad\": {\"shape\": [4], \"dtype\": \"bf16\"}},"
    " \"copies\": ["
    "  {\"src\": \"w\", \"ops\": [[\"narrow\", 1, 3, 4], [\"narrow\", 0, 2, 4]],"
    "   \"param\": \"p\", \"dest_offset\": 0, \"dest_shape\": [4, 4],"
    "   \"dest_stride\": [4, 1], \"dest_dtype\": \"bf16\"},"
    "  {\"src\": \"v\", \"ops\": [[\"t\"], [\"slice\", 1, 1, 5, 2],"
    "   [\"select\", 0, 7]], \"param\": \"p\", \"dest_offset\": 16,"
    "   \"dest_shape\": [2], \"dest_stride\": [1], \"dest_dtype\": \"bf16\"},"
    "  {\"src\": \"u\", \"ops\": [[\"narrow\", 0, 1, 2]], \"param\": \"p\","
    "   \"dest_offset\": 20, \"dest_shape\": [2], \"dest_stride\": [1],"
    "   \"dest_dtype\": \"bf16\"},"
    "  {\"src\": \"bad\", \"ops\": [[\"narrow\", 0, 1, 2]], \"param\": \"p\","
    "   \"dest_offset\": 24, \"dest_shape\": [2], \"dest_stride\": [1],"
    "   \"dest_dtype\": \"bf16\"}],"
    " \"unsupported\": {\"bad\": \"test\"}, \"unattributed\": 0}";

static rs_capture_h load_capture(const char *text)
{
    rs_capture_h cap = NULL;
    rs_diag_t d;
    ASSERT_ST(rs_capture_load_string(text, strlen(text), "cap.json", &d, &cap),
              RS_OK, d);
    return cap;
}

static void test_add_capture(void **state)
{
    (void)state;
    rs_capture_h cap = load_capture(capture_json);
    rs_cuts_h c = new_set();
    const int64_t w0[] = {2, 6}, w1[] = {3, 7};
    const int64_t v0[] = {1, 4}, v1[] = {7, 8};
    const int64_t other[1] = {5};
    rs_diag_t d;
    ASSERT_ST(rs_cuts_add_capture(c, cap, &d), RS_OK, d);
    assert_int_equal(rs_cuts_num_tensors(c), 2);
    assert_string_equal(rs_cuts_tensor(c, 0), "v");
    assert_string_equal(rs_cuts_tensor(c, 1), "w");
    expect_cuts(c, "w", 0, w0, 2);
    expect_cuts(c, "w", 1, w1, 2);
    expect_cuts(c, "v", 0, v0, 2); /* rows 1 and 3 of v: [1, 4) */
    expect_cuts(c, "v", 1, v1, 2); /* column 7 */
    /* a set holding another shape for a declared source refuses the whole
     * capture and stays as it was */
    rs_cuts_h c2 = new_set();
    assert_int_equal(rs_cuts_add(c2, "bad", 1, other, 0, 1, NULL), RS_OK);
    ASSERT_ST(rs_cuts_add_capture(c2, cap, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "'bad'");
    assert_int_equal(rs_cuts_num_tensors(c2), 1);
    rs_cuts_destroy(c2);
    rs_cuts_destroy(c);
    rs_capture_destroy(cap);
}

static char *write_text(rs_cuts_h c, size_t *len_p)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len_p);
    assert_non_null(f);
    assert_int_equal(rs_cuts_write_json(c, f, NULL), RS_OK);
    fclose(f);
    return buf;
}

static void test_json_round_trip(void **state)
{
    (void)state;
    rs_cuts_h c = new_set(), back = NULL;
    const int64_t s3[3] = {4, 5, 6}, s0[1] = {0};
    const int64_t want[] = {1, 3};
    size_t n1, n2;
    rs_diag_t d;
    assert_int_equal(rs_cuts_add(c, "b\"q", 3, s3, 2, 3, NULL), RS_OK);
    assert_int_equal(rs_cuts_add(c, "b\"q", 3, s3, 2, 1, NULL), RS_OK);
    assert_int_equal(rs_cuts_add(c, "a", 3, s3, 0, 2, NULL), RS_OK);
    assert_int_equal(rs_cuts_add(c, "empty", 1, s0, 0, 0, NULL), RS_OK);
    assert_int_equal(rs_cuts_set_model(c, "m", NULL), RS_OK);
    char *t1 = write_text(c, &n1);
    ASSERT_ST(rs_cuts_read_json(t1, n1, "t1", &d, &back), RS_OK, d);
    char *t2 = write_text(back, &n2);
    assert_string_equal(t1, t2);
    assert_string_equal(rs_cuts_model(back), "m");
    assert_int_equal(rs_cuts_num_tensors(back), 3);
    expect_cuts(back, "b\"q", 2, want, 2);
    expect_cuts(back, "b\"q", 0, NULL, 0);
    assert_non_null(strstr(t1, "\"schema\": \"reshard.cuts.v1\""));
    free(t1);
    free(t2);
    rs_cuts_destroy(back);
    rs_cuts_destroy(c);
    /* an empty set writes and reads back */
    c = new_set();
    t1 = write_text(c, &n1);
    ASSERT_ST(rs_cuts_read_json(t1, n1, "t1", &d, &back), RS_OK, d);
    assert_int_equal(rs_cuts_num_tensors(back), 0);
    assert_null(rs_cuts_model(back));
    free(t1);
    rs_cuts_destroy(back);
    rs_cuts_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_sorted_unique),
        cmocka_unit_test(test_name_order),
        cmocka_unit_test(test_merge_disagreement),
        cmocka_unit_test(test_split_property),
        cmocka_unit_test(test_split_edges),
        cmocka_unit_test(test_split_blocks),
        cmocka_unit_test(test_add_capture),
        cmocka_unit_test(test_json_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
