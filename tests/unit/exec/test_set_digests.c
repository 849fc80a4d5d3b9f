/* rs_exec_set_digests on a cached plan: each plan shard gets the digest its
 * own (session, address, tensor) publishes, whatever the order of the
 * tables, with many sessions publishing at the same addresses. Checked by
 * running the executor with strict verification over the local transport:
 * the right digests pass with the parameters byte-exact, one wrong digest
 * (tried shard by shard) fails naming that shard, a missing one fails, and
 * of a shard published twice the first table's digest counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard.h"

#define NSESS 16
#define NT 24
#define ROWS 16
#define COLS 8
#define BLOCKS 4
#define BLOCK_ROWS (ROWS / BLOCKS)
#define BLOCK_BYTES ((uint64_t)BLOCK_ROWS * COLS * 4)
#define BASE 4096 /* every session publishes from the same address */
#define SESS_BYTES (NT * BLOCK_BYTES)

typedef struct world {
    unsigned char *buf[NSESS]; /* what each session publishes */
    uint64_t used[NSESS];      /* bytes laid out so far */
    uint64_t addr[NT][BLOCKS]; /* where each block lives */
    rs_capture_h cap;
    unsigned char *param[NT];
} world_t;

static int session_of(int t, int b) { return (t * 3 + b) % NSESS; }

static void session_name(int k, char *out, size_t len)
{
    snprintf(out, len, "trainer-%d", k);
}

/* Lays out every block once, in (tensor, block) order, in its session. */
static void layout(world_t *w)
{
    for (int k = 0; k < NSESS; k++) {
        w->buf[k] = malloc(SESS_BYTES);
        for (uint64_t j = 0; j < SESS_BYTES; j++)
            w->buf[k][j] = (unsigned char)((k * 131 + j * 7 + j / 251) & 0xff);
        w->used[k] = 0;
    }
    for (int t = 0; t < NT; t++) {
        for (int b = 0; b < BLOCKS; b++) {
            int k = session_of(t, b);
            w->addr[t][b] = BASE + w->used[k];
            w->used[k] += BLOCK_BYTES;
        }
    }
}

static const unsigned char *block_bytes(const world_t *w, int t, int b)
{
    return w->buf[session_of(t, b)] + (w->addr[t][b] - BASE);
}

typedef enum { DIGEST_RIGHT, DIGEST_WRONG, DIGEST_NONE } digest_kind_t;

static void add_block(rs_sources_h s, const world_t *w, int t, int b,
                      digest_kind_t kind)
{
    static const int64_t full[2] = {ROWS, COLS};
    int64_t off[2] = {(int64_t)b * BLOCK_ROWS, 0};
    int64_t shape[2] = {BLOCK_ROWS, COLS};
    char name[32], session[32], digest[RS_DIGEST_STR_LEN + 1];
    snprintf(name, sizeof(name), "t.%d", t);
    session_name(session_of(t, b), session, sizeof(session));
    uint64_t d = rs_digest(block_bytes(w, t, b), BLOCK_BYTES);
    rs_digest_format(kind == DIGEST_WRONG ? d ^ 1 : d, digest);
    rs_shard_desc_t sh = {name, RS_DTYPE_F32, 4, 2, full, session, 0,
                          w->addr[t][b], off, shape,
                          kind == DIGEST_NONE ? NULL : digest};
    assert_int_equal(rs_sources_add_shard(s, &sh, NULL), RS_OK);
}

/* Every block, tensors forward or backward; block (bad_t, bad_b) gets
 * `bad` as its digest kind. */
static rs_sources_h make_sources(const world_t *w, int reverse, int bad_t,
                                 int bad_b, digest_kind_t bad)
{
    rs_sources_h s;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    for (int i = 0; i < NT; i++) {
        int t = reverse ? NT - 1 - i : i;
        for (int j = 0; j < BLOCKS; j++) {
            int b = reverse ? BLOCKS - 1 - j : j;
            add_block(s, w, t, b, t == bad_t && b == bad_b ? bad
                                                           : DIGEST_RIGHT);
        }
    }
    return s;
}

static void make_capture(world_t *w)
{
    static const int64_t shape[2] = {ROWS, COLS}, stride[2] = {COLS, 1};
    assert_int_equal(rs_capture_create(&w->cap), RS_OK);
    for (int t = 0; t < NT; t++) {
        char src[32], param[32];
        snprintf(src, sizeof(src), "t.%d", t);
        snprintf(param, sizeof(param), "p.%d", t);
        assert_int_equal(rs_capture_add_param(w->cap, param, 2, shape,
                                              RS_DTYPE_F32, NULL), RS_OK);
        rs_copy_desc_t c = {src, param, NULL, 0, 0, 2, shape, stride,
                            RS_DTYPE_F32};
        assert_int_equal(rs_capture_add_copy(w->cap, &c, NULL), RS_OK);
        w->param[t] = malloc((size_t)ROWS * COLS * 4);
    }
}

typedef struct run {
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h x;
    rs_region_t regions[NSESS];
} run_t;

static void start(world_t *w, rs_sources_h s, run_t *r)
{
    rs_plan_params_t pp;
    rs_exec_params_t xp;
    rs_plan_params_init(&pp);
    assert_int_equal(rs_plan_build(w->cap, s, &pp, NULL, &r->plan), RS_OK);
    assert_true(rs_plan_is_complete(r->plan));
    assert_int_equal(rs_transport_create(NULL, NULL, &r->t), RS_OK);
    for (uint32_t k = 0; k < rs_plan_num_sessions(r->plan); k++) {
        int sess = atoi(rs_plan_session_name(r->plan, k) + strlen("trainer-"));
        r->regions[k] = (rs_region_t){BASE, SESS_BYTES, w->buf[sess]};
        rs_peer_t peer = {rs_plan_session_name(r->plan, k), 0, &r->regions[k],
                          1, NULL, 0};
        assert_int_equal(rs_transport_connect(r->t, k, &peer, NULL), RS_OK);
    }
    rs_exec_params_init(&xp);
    xp.verify_digests = 1;
    xp.verify_partial = 1; /* every shard the plan reads is checked */
    assert_int_equal(rs_exec_create(r->plan, r->t, &xp, NULL, &r->x), RS_OK);
    for (int t = 0; t < NT; t++)
        assert_int_equal(rs_exec_bind(r->x, (size_t)t, w->param[t],
                                      (uint64_t)ROWS * COLS * 4, RS_MEM_HOST, NULL), RS_OK);
}

static void stop(run_t *r)
{
    rs_exec_destroy(r->x);
    rs_transport_destroy(r->t);
    rs_plan_destroy(r->plan);
}

/* The parameters hold exactly the published blocks. */
static void assert_params_exact(const world_t *w)
{
    for (int t = 0; t < NT; t++)
        for (int b = 0; b < BLOCKS; b++)
            assert_memory_equal(w->param[t] + b * BLOCK_BYTES,
                                block_bytes(w, t, b), BLOCK_BYTES);
}

static void clear_params(world_t *w)
{
    for (int t = 0; t < NT; t++)
        memset(w->param[t], 0xEE, (size_t)ROWS * COLS * 4);
}

static void setup_world(world_t *w)
{
    memset(w, 0, sizeof(*w));
    layout(w);
    make_capture(w);
}

static void free_world(world_t *w)
{
    for (int k = 0; k < NSESS; k++)
        free(w->buf[k]);
    for (int t = 0; t < NT; t++)
        free(w->param[t]);
    rs_capture_destroy(w->cap);
}

static void test_right_digests_any_order(void **state)
{
    (void)state;
    world_t w;
    run_t r;
    rs_exec_stats_t st;
    setup_world(&w);
    rs_sources_h a = make_sources(&w, 0, -1, -1, DIGEST_RIGHT);
    start(&w, a, &r);
    clear_params(&w);
    assert_int_equal(rs_exec_run(r.x, NULL), RS_OK);
    assert_params_exact(&w);
    rs_exec_stats(r.x, &st);
    assert_int_equal(st.shards_verified, NT * BLOCKS);
    rs_sources_h b = make_sources(&w, 1, -1, -1, DIGEST_RIGHT);
    assert_int_equal(rs_exec_set_digests(r.x, b, NULL), RS_OK);
    clear_params(&w);
    assert_int_equal(rs_exec_run(r.x, NULL), RS_OK);
    assert_params_exact(&w);
    rs_exec_stats(r.x, &st);
    assert_int_equal(st.shards_verified, NT * BLOCKS);
    assert_int_equal(st.prepares, 1); /* the prepared state was kept */
    stop(&r);
    rs_sources_destroy(a);
    rs_sources_destroy(b);
    free_world(&w);
}

/* One wrong digest, for each of many blocks in turn: the run fails naming
 * that block's tensor, session and address. */
static void test_one_wrong_digest_is_found(void **state)
{
    (void)state;
    world_t w;
    run_t r;
    setup_world(&w);
    rs_sources_h a = make_sources(&w, 0, -1, -1, DIGEST_RIGHT);
    start(&w, a, &r);
    for (int t = 0; t < NT; t += 5) {
        for (int b = 0; b < BLOCKS; b++) {
            rs_diag_t diag;
            char want[96];
            rs_diag_clear(&diag);
            rs_sources_h bad = make_sources(&w, t % 2, t, b, DIGEST_WRONG);
            assert_int_equal(rs_exec_set_digests(r.x, bad, NULL), RS_OK);
            assert_int_equal(rs_exec_run(r.x, &diag), RS_ERR_VERIFY);
            snprintf(want, sizeof(want), "tensor 't.%d', shard of session "
                     "'trainer-%d' at addr %llu", t, session_of(t, b),
                     (unsigned long long)w.addr[t][b]);
            if (strstr(diag.msg, want) == NULL)
                fail_msg("want '%s' in '%s'", want, diag.msg);
            rs_sources_destroy(bad);
        }
    }
    stop(&r);
    rs_sources_destroy(a);
    free_world(&w);
}

static void test_missing_digest_fails(void **state)
{
    (void)state;
    world_t w;
    run_t r;
    rs_diag_t diag;
    rs_diag_clear(&diag);
    setup_world(&w);
    rs_sources_h a = make_sources(&w, 0, -1, -1, DIGEST_RIGHT);
    start(&w, a, &r);
    rs_sources_h none = make_sources(&w, 1, 7, 2, DIGEST_NONE);
    assert_int_equal(rs_exec_set_digests(r.x, none, NULL), RS_OK);
    assert_int_equal(rs_exec_run(r.x, &diag), RS_ERR_VERIFY);
    assert_non_null(strstr(diag.msg, "tensor 't.7'"));
    assert_non_null(strstr(diag.msg, "without a digest"));
    /* a table without block (7, 2) at all: no digest either */
    rs_sources_h part;
    assert_int_equal(rs_sources_create(&part), RS_OK);
    for (int t = 0; t < NT; t++)
        for (int b = 0; b < BLOCKS; b++)
            if (t != 7 || b != 2)
                add_block(part, &w, t, b, DIGEST_RIGHT);
    assert_int_equal(rs_exec_set_digests(r.x, part, NULL), RS_OK);
    rs_diag_clear(&diag);
    assert_int_equal(rs_exec_run(r.x, &diag), RS_ERR_VERIFY);
    assert_non_null(strstr(diag.msg, "without a digest"));
    stop(&r);
    rs_sources_destroy(a);
    rs_sources_destroy(none);
    rs_sources_destroy(part);
    free_world(&w);
}

/* A block published twice by its session (a table merged twice): the
 * first one's digest is the one checked. */
static void test_duplicate_first_wins(void **state)
{
    (void)state;
    world_t w;
    run_t r;
    setup_world(&w);
    rs_sources_h a = make_sources(&w, 0, -1, -1, DIGEST_RIGHT);
    start(&w, a, &r);
    rs_sources_h dup = make_sources(&w, 0, -1, -1, DIGEST_RIGHT);
    add_block(dup, &w, 3, 1, DIGEST_WRONG);
    assert_int_equal(rs_exec_set_digests(r.x, dup, NULL), RS_OK);
    clear_params(&w);
    assert_int_equal(rs_exec_run(r.x, NULL), RS_OK);
    assert_params_exact(&w);
    rs_sources_h dup2;
    assert_int_equal(rs_sources_create(&dup2), RS_OK);
    add_block(dup2, &w, 3, 1, DIGEST_WRONG);
    for (int t = 0; t < NT; t++)
        for (int b = 0; b < BLOCKS; b++)
            add_block(dup2, &w, t, b, DIGEST_RIGHT);
    assert_int_equal(rs_exec_set_digests(r.x, dup2, NULL), RS_OK);
    assert_int_equal(rs_exec_run(r.x, NULL), RS_ERR_VERIFY);
    assert_int_equal(rs_exec_set_digests(r.x, NULL, NULL), RS_ERR_INVALID_ARG);
    stop(&r);
    rs_sources_destroy(a);
    rs_sources_destroy(dup);
    rs_sources_destroy(dup2);
    free_world(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_right_digests_any_order),
        cmocka_unit_test(test_one_wrong_digest_is_found),
        cmocka_unit_test(test_missing_digest_fails),
        cmocka_unit_test(test_duplicate_first_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
