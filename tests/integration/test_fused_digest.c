/* Digests fused into the wire's copies (src/exec/fused.c), on every backend
 * that fuses (local, local-mt, cma): a shard read whole is verified from the
 * digest its copy fed, the run installs the right bytes, and a corrupted
 * byte in such a shard fails the run with RS_ERR_VERIFY naming it, before
 * install, with the live parameter (what install copies the run's buffer
 * into) untouched. Shards of about 300 KiB, so local-mt cuts its tasks
 * inside them. A destination with a row stride brings each shard in pieces:
 * nothing is fused there, and the pass after the wire checks it the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/exec_impl.h"
#include "reshard/digest.h"
#include "transport_fixture.h"
#include "reshard/reshard.h"

#define ROWS 1034 /* two shards of 517 rows */
#define COLS 301  /* odd: bf16 rows of 602 bytes */
#define PAD 5     /* the strided case's extra columns */

static const char *const sessions[2] = {"s0", "s1"};

typedef struct fx {
    unsigned char *data[2]; /* the shards, row-major bf16 */
    size_t nbytes;
    rs_sources_h srcs;
    rs_capture_h cap;
    size_t pbytes;
    int64_t pcols;
    int one_session;
} fx_t;

static void fx_open(fx_t *f, int strided, int corrupt)
{
    const int one_session = strided == 2;
    const int64_t full[2] = {ROWS, COLS}, shape[2] = {ROWS / 2, COLS};
    f->nbytes = (size_t)(ROWS / 2) * COLS * 2;
    assert_int_equal(rs_sources_create(&f->srcs), RS_OK);
    f->one_session = one_session;
    f->data[0] = malloc(2 * f->nbytes);
    assert_non_null(f->data[0]);
    f->data[1] = f->data[0] + f->nbytes; /* back to back */
    for (int h = 0; h < 2; h++) {
        for (size_t i = 0; i < f->nbytes; i++)
            f->data[h][i] = (unsigned char)((i * 131 + (size_t)h * 17) >> 3);
        char dg[RS_DIGEST_STR_LEN + 1];
        rs_digest_format(rs_digest(f->data[h], f->nbytes), dg);
        const int64_t off[2] = {h * (ROWS / 2), 0};
        rs_shard_desc_t d = {"src0", RS_DTYPE_BF16, 2, 2, full,
                             sessions[one_session ? 0 : h], 0,
                             4096 + (one_session ? (uint64_t)h * f->nbytes : 0),
                             off, shape, dg};
        assert_int_equal(rs_sources_add_shard(f->srcs, &d, NULL), RS_OK);
    }
    if (corrupt) /* after the digest: what the publisher serves differs */
        f->data[1][f->nbytes / 2 + 3] ^= 0x10;
    f->pcols = strided == 1 ? COLS + PAD : COLS;
    const int64_t pshape[2] = {ROWS, f->pcols};
    f->pbytes = (size_t)ROWS * (size_t)f->pcols * 2;
    assert_int_equal(rs_capture_create(&f->cap), RS_OK);
    assert_int_equal(rs_capture_add_param(f->cap, "w", 2, pshape,
                                          RS_DTYPE_BF16, NULL), RS_OK);
    const int64_t ds[2] = {ROWS, COLS}, st[2] = {f->pcols, 1};
    rs_copy_desc_t c = {"src0", "w", NULL, 0, 0, 2, ds, st, RS_DTYPE_BF16};
    assert_int_equal(rs_capture_add_copy(f->cap, &c, NULL), RS_OK);

}

static void fx_close(fx_t *f)
{
    rs_capture_destroy(f->cap);
    rs_sources_destroy(f->srcs);
    free(f->data[0]);
}

/* Connects each session to its shard; for cma a child holds them (forked
 * after any corruption) and this process's copies are overwritten. */
static pid_t connect_all(rs_transport_h t, rs_plan_h plan, fx_t *f, int cma)
{
    pid_t child = 0;
    if (cma) {
        child = tfx_paused_child();
        assert_true(child >= 0);
    }
    for (uint32_t s = 0; s < rs_plan_num_sessions(plan); s++) {
        int h = strcmp(rs_plan_session_name(plan, s), "s0") == 0 ? 0 : 1;
        /* one session: one region over both shards */
        rs_region_t reg = {4096, f->one_session ? 2 * f->nbytes : f->nbytes,
                           f->data[h]};
        rs_peer_t peer = {sessions[h], cma ? child : 0, &reg, 1, NULL, 0};
        rs_diag_t diag;
        assert_int_equal(rs_transport_connect(t, s, &peer, &diag), RS_OK);
    }
    return child;
}

typedef struct live {
    unsigned char *shadow, *live;
    size_t n;
    int installs;
} live_t;

static rs_status_t on_install(void *ctx, rs_exec_h exec)
{
    (void)exec;
    live_t *l = ctx;
    memcpy(l->live, l->shadow, l->n);
    l->installs++;
    return RS_OK;
}

typedef struct outcome {
    rs_status_t st;
    char msg[RS_DIAG_MSG_MAX];
    uint64_t fused, verified;
    int installs, live_untouched, live_right;
} outcome_t;

/* strided: 0 a contiguous destination (exact reads of whole shards), 1 a
 * row stride, read as full pulls into staging and replayed after (whole
 * shards into staging), 2 contiguous, both shards published by one session
 * back to back in one region, which the planner reads as one read
 * across both. */
static outcome_t run(const char *backend, int strided, int corrupt)
{
    fx_t f;
    fx_open(&f, strided, corrupt);
    /* what the live parameter must hold after a good run, from the shards
     * as published (the corrupted byte restored) */
    unsigned char *want = malloc(f.pbytes);
    assert_non_null(want);
    memset(want, 0xEE, f.pbytes);
    if (corrupt)
        f.data[1][f.nbytes / 2 + 3] ^= 0x10;
    for (int64_t r = 0; r < ROWS; r++) {
        const unsigned char *row = f.data[r >= ROWS / 2] +
                                   (size_t)(r % (ROWS / 2)) * COLS * 2;
        memcpy(want + (size_t)r * (size_t)f.pcols * 2, row, COLS * 2);
    }
    if (corrupt)
        f.data[1][f.nbytes / 2 + 3] ^= 0x10;
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h x;
    rs_diag_t diag;
    rs_plan_params_t pp;
    rs_plan_params_init(&pp);
    if (strided == 1)
        pp.max_segments_per_copy = 1;
    assert_int_equal(rs_plan_build(f.cap, f.srcs, &pp, &diag, &plan), RS_OK);
    rs_transport_params_t tp;
    rs_transport_params_init(&tp);
    tp.backend = backend;
    tp.threads = 2;
    assert_int_equal(rs_transport_create(&tp, &diag, &t), RS_OK);
    pid_t child = connect_all(t, plan, &f, strcmp(backend, "cma") == 0);
    if (child > 0) /* only the child's copy is right */
        for (int h = 0; h < 2; h++)
            memset(f.data[h], 0x5A, f.nbytes);
    live_t l = {malloc(f.pbytes), malloc(f.pbytes), f.pbytes, 0};
    assert_non_null(l.shadow);
    assert_non_null(l.live);
    memset(l.shadow, 0xEE, f.pbytes);
    memset(l.live, 0x77, f.pbytes);
    rs_exec_params_t ep;
    rs_exec_params_init(&ep);
    ep.verify_digests = 1;
    ep.install = on_install;
    ep.install_ctx = &l;
    assert_int_equal(rs_exec_create(plan, t, &ep, &diag, &x), RS_OK);
    assert_int_equal(rs_exec_bind(x, 0, l.shadow, f.pbytes, RS_MEM_HOST,
                                  &diag), RS_OK);

    outcome_t o = {0};
    rs_diag_clear(&diag);
    o.st = rs_exec_run(x, &diag);
    memcpy(o.msg, diag.msg, sizeof(o.msg));
    rs_exec_stats_t es;
    rs_exec_stats(x, &es);
    o.fused = atomic_load(&x->shards_fused);
    o.verified = es.shards_verified;
    o.installs = l.installs;
    o.live_untouched = 1;
    for (size_t i = 0; i < f.pbytes; i++)
        o.live_untouched &= l.live[i] == 0x77;
    o.live_right = memcmp(l.live, want, f.pbytes) == 0;
    rs_exec_destroy(x);
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    free(l.shadow);
    free(l.live);
    free(want);
    fx_close(&f);
    return o;
}

static const char *const backends[] = {"local", "local-mt", "cma"};

static void test_fused_verifies(void **state)
{
    (void)state;
    for (int b = 0; b < 3; b++) {
        outcome_t o = run(backends[b], 0, 0);
        if (o.st != RS_OK)
            fail_msg("%s: %s", backends[b], o.msg);
        assert_int_equal(o.verified, 2);
        assert_int_equal(o.fused, 2); /* both from the copies' digests */
        assert_int_equal(o.installs, 1);
        assert_true(o.live_right);
    }
}

static void test_fused_refuses_corruption(void **state)
{
    (void)state;
    for (int b = 0; b < 3; b++) {
        outcome_t o = run(backends[b], 0, 1);
        assert_int_equal(o.st, RS_ERR_VERIFY);
        assert_non_null(strstr(o.msg, "digest mismatch"));
        assert_non_null(strstr(o.msg, "src0"));
        assert_non_null(strstr(o.msg, "s1"));
        assert_true(o.fused >= 1); /* refused by a fused digest */
        assert_int_equal(o.installs, 0);
        assert_true(o.live_untouched);
    }
}

/* Rows land strided, read as full pulls: each shard comes whole into
 * staging and is fused there, before the replay. One read across two
 * shards feeds no tap (a tap is one shard's): nothing is fused, the pass
 * verifies, and refuses a corrupted byte the same way. */
static void test_staging_and_pieces(void **state)
{
    (void)state;
    for (int b = 0; b < 3; b++) {
        outcome_t o = run(backends[b], 1, 0);
        if (o.st != RS_OK)
            fail_msg("%s: %s", backends[b], o.msg);
        assert_int_equal(o.fused, 2);
        assert_true(o.live_right);
        o = run(backends[b], 1, 1);
        assert_int_equal(o.st, RS_ERR_VERIFY);
        assert_true(o.fused >= 1);
        assert_true(o.live_untouched);
        o = run(backends[b], 2, 0);
        if (o.st != RS_OK)
            fail_msg("%s: %s", backends[b], o.msg);
        assert_int_equal(o.verified, 2);
        assert_int_equal(o.fused, 0);
        assert_true(o.live_right);
        o = run(backends[b], 2, 1);
        assert_int_equal(o.st, RS_ERR_VERIFY);
        assert_int_equal(o.fused, 0);
        assert_int_equal(o.installs, 0);
        assert_true(o.live_untouched);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_verifies),
        cmocka_unit_test(test_fused_refuses_corruption),
        cmocka_unit_test(test_staging_and_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
