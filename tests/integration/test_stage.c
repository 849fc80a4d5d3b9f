/* Stage, then apply, then discard. Two publishers (in this process, cma,
 * a file: directory) serve one tensor, a row per shard; a receiver holds
 * its one parameter bound. Staging the next version leaves the bound bytes
 * as they were (a reader thread checks them while the stage runs), keeps
 * the lease live until apply or discard, and apply then installs the new
 * version byte for byte (ground truth: the formula the publishers fill
 * from). Also: discard drops the lease; a failed stage (no such version,
 * a digest mismatch after the wire, a malformed table) leaves nothing
 * staged and no lease; a second stage is refused; apply after the lease
 * was lost refuses with the bound bytes untouched and install not called;
 * stage and apply on different threads; shadow = 0; the figures of the
 * result struct against the plan's bytes; a stage and a release wait
 * cancelled from another thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "exec/exec_impl.h" /* the executor's bindings: the shadows */
#include "reshard/reshard.h"
#include "assert_status.h"
#include "u8_rows.h"
#include "tmp_path.h"

#define PUBS 2
#define ROWS 16
#define COLS 2048
#define NBYTES (ROWS * COLS) /* the plan reads the whole tensor, once */
#define TTL_S 2.0 /* renewals every ttl/3: see test_lease.c */
#define HOLDER "stage-0"
#define UNTOUCHED 0xEE
#define MAX_VERSION 8

typedef struct world {
    char tmp[PATH_MAX];
    char url[PATH_MAX + 16];
    char model[32];
    rs_publisher_h pub[PUBS];
    uint8_t *rows[ROWS];
    rs_capture_h cap;
    uint8_t *dest;
    rs_dir_h dir;
    int installs;
    int64_t seen_at_install; /* the version dest held inside install */
} world_t;

static world_t w;

/* Byte g of the tensor in version v: every byte differs between versions
 * 1..MAX_VERSION (v * 101 mod 256 differs for each). */
static uint8_t expected(uint64_t g, int64_t v)
{
    return u8_rows_byte(g, v);
}

/* The version `buf` holds entirely, 0 when untouched, -1 for anything
 * else (a mix, or a byte of no version). */
static int64_t version_of(const uint8_t *buf)
{
    for (int64_t v = 0; v <= MAX_VERSION; v++) {
        uint64_t i = 0;
        while (i < NBYTES &&
               buf[i] == (v == 0 ? UNTOUCHED : expected(i, v)))
            i++;
        if (i == NBYTES)
            return v;
    }
    return -1;
}

/* Refills the publishers' buffers with version v and publishes it. */
static void publish(int64_t v)
{
    u8_rows_publish(w.pub, PUBS, w.rows, ROWS, COLS, v);
}

static rs_status_t on_install(void *ctx, rs_exec_h exec)
{
    (void)ctx;
    (void)exec;
    w.installs++;
    w.seen_at_install = version_of(w.dest);
    return RS_OK;
}

static rs_receiver_h open_receiver(int shadow, double discover_s)
{
    rs_receiver_params_t rp;
    rs_receiver_h recv = NULL;
    rs_diag_t d;
    rs_receiver_params_init(&rp);
    rp.directory = w.url;
    rp.model = w.model;
    rp.backend = "cma";
    rp.holder = HOLDER;
    rp.discover_timeout_s = discover_s;
    rp.lease_ttl_s = TTL_S;
    rp.shadow = shadow;
    rp.timeout_s = 10;
    rp.install = on_install;
    ASSERT_ST(rs_receiver_create(&rp, w.cap, &d, &recv), RS_OK, d);
    ASSERT_ST(rs_receiver_bind(recv, 0, w.dest, NBYTES, RS_MEM_HOST, &d), RS_OK, d);
    return recv;
}

static void pull_ok(rs_receiver_h recv, int64_t v)
{
    rs_diag_t d;
    rs_pull_result_t res;
    rs_diag_clear(&d);
    if (rs_receiver_pull(recv, v, &d, &res) != RS_OK)
        fail_msg("pull of version %lld: %s", (long long)v, d.msg);
    assert_int_equal(version_of(w.dest), v);
}

static rs_staged_h stage_ok(rs_receiver_h recv, int64_t v)
{
    rs_diag_t d;
    rs_staged_h h = NULL;
    rs_diag_clear(&d);
    if (rs_receiver_stage(recv, v, &d, &h) != RS_OK)
        fail_msg("stage of version %lld: %s", (long long)v, d.msg);
    assert_non_null(h);
    assert_int_equal(rs_staged_version(h), v);
    /* the receiver's shadows, where the pull landed, are whole pages */
    rs_exec_h x = rs_receiver_exec(recv);
    for (size_t p = 0; p < x->nparams; p++)
        assert_true((uintptr_t)x->binds[p].base % 4096 == 0);
    return h;
}

/* A live lease makes release refuse (naming the holder); none lets it
 * succeed. */
static void expect_leased(int64_t v, int leased)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_status_t st = rs_dir_release(w.dir, w.model, v, &d);
    if (leased) {
        ASSERT_ST(st, RS_ERR_INCOMPLETE, d);
        ASSERT_MSG_HAS(d, HOLDER);
    } else {
        ASSERT_ST(st, RS_OK, d);
    }
}

/* Pulls version 1 into dest, releases it and publishes version 2 over the
 * same buffers: v1 is what the receiver runs on, v2 what it stages. */
static rs_receiver_h running_on_v1(void)
{
    rs_receiver_h recv = open_receiver(1, 10);
    pull_ok(recv, 1);
    assert_int_equal(w.installs, 1);
    expect_leased(1, 0);
    publish(2);
    return recv;
}

/* ---- a reader of the bound parameter, while a stage runs ------------- */

typedef struct reader {
    pthread_t thread;
    atomic_int stop, passes, wrong;
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    while (!atomic_load(&r->stop)) {
        if (version_of(w.dest) != 1)
            atomic_fetch_add(&r->wrong, 1);
        atomic_fetch_add(&r->passes, 1);
    }
    return NULL;
}

static void test_stage_while_bound_then_apply(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_pull_result_t res;
    rs_receiver_h recv = running_on_v1();
    reader_t rd;
    memset(&rd, 0, sizeof(rd));
    assert_int_equal(pthread_create(&rd.thread, NULL, reader_main, &rd), 0);
    while (atomic_load(&rd.passes) == 0)
        rs__sleep_s(0.001);
    rs_staged_h h = stage_ok(recv, 2);
    atomic_store(&rd.stop, 1);
    pthread_join(rd.thread, NULL);
    assert_int_equal(atomic_load(&rd.wrong), 0);
    assert_int_equal(version_of(w.dest), 1); /* v1 still bound, in use */
    assert_int_equal(w.installs, 1);
    expect_leased(2, 1);
    rs_diag_clear(&d);
    ASSERT_ST(rs_receiver_apply(recv, h, &d, &res), RS_OK, d);
    assert_int_equal(version_of(w.dest), 2);
    assert_int_equal(w.installs, 2);
    assert_int_equal(w.seen_at_install, 2); /* copied before install ran */
    assert_int_equal(res.version, 2);
    assert_int_equal(res.replanned, 0); /* same topology: the cached plan */
    /* the figures, without JSON, against the plan's bytes */
    assert_int_equal(res.stages.bytes, NBYTES);
    assert_int_equal(res.exec.bytes, NBYTES);
    assert_int_equal(res.bytes_installed, NBYTES);
    assert_int_equal(res.sessions, PUBS);
    assert_int_equal(res.stages.descriptors, res.exec.descriptors);
    assert_true(res.stages.descriptors >= 1);
    assert_true(res.stages.ok);
    assert_null(res.stages.failure);
    assert_true(res.stages.wire_s >= 0);
    assert_true(res.stages.verify_s >= 0); /* verification is on */
    assert_true(res.stages.install_s >= 0);
    assert_true(res.stages.replay_s < 0); /* no full pulls: absent */
    assert_true(res.stages.shards_verified == ROWS);
    rs_exec_stages_t x;
    rs_exec_stages(rs_receiver_exec(recv), &x);
    assert_int_equal(x.bytes, res.stages.bytes);
    assert_true(x.install_s == res.stages.install_s);
    /* the stage record is written from the same struct */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    ASSERT_ST(rs_exec_write_stages(&res.stages, RS_RECORD_COMPACT, f, &d),
              RS_OK, d);
    fclose(f);
    char want[64];
    snprintf(want, sizeof(want), "\"bytes\":%d,", NBYTES);
    if (strstr(text, want) == NULL || strstr(text, "\"install\":") == NULL ||
        strstr(text, "\"ok\":true") == NULL || strstr(text, "\"replay\"") ||
        strchr(text, '\n') != NULL)
        fail_msg("stage record: %s", text);
    free(text);
    expect_leased(2, 0); /* apply dropped the lease */
    rs_receiver_destroy(recv);
}

/* ---- stage on one thread, apply on another --------------------------- */

typedef struct stager {
    rs_receiver_h recv;
    rs_status_t st;
    rs_staged_h h;
    rs_diag_t d;
} stager_t;

static void *stager_main(void *arg)
{
    stager_t *s = arg;
    rs_diag_clear(&s->d);
    s->st = rs_receiver_stage(s->recv, 2, &s->d, &s->h);
    return NULL;
}

/* The lease outlives the stage call: after two ttls of waiting it is
 * still live (release refused), and the apply on the main thread proves
 * it unbroken. */
static void test_stage_and_apply_on_two_threads(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_pull_result_t res;
    pthread_t t;
    stager_t s = {running_on_v1(), RS_OK, NULL, {0}};
    assert_int_equal(pthread_create(&t, NULL, stager_main, &s), 0);
    pthread_join(t, NULL);
    ASSERT_ST(s.st, RS_OK, s.d);
    rs__sleep_s(2 * TTL_S);
    expect_leased(2, 1);
    assert_int_equal(version_of(w.dest), 1);
    rs_diag_clear(&d);
    ASSERT_ST(rs_receiver_apply(s.recv, s.h, &d, &res), RS_OK, d);
    assert_int_equal(version_of(w.dest), 2);
    assert_true(res.lease_renewals >= 1);
    /* the handle is consumed */
    ASSERT_ST(rs_receiver_apply(s.recv, s.h, &d, &res), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "nothing to apply");
    assert_int_equal(w.installs, 2);
    rs_receiver_destroy(s.recv);
}

/* ---- discard ----------------------------------------------------------- */

static void test_discard_drops_lease(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_pull_result_t res;
    rs_receiver_h recv = running_on_v1();
    rs_staged_h h = stage_ok(recv, 2);
    expect_leased(2, 1);
    rs_receiver_discard(recv, h);
    assert_int_equal(rs_staged_version(h), -1);
    rs_receiver_discard(recv, h); /* a consumed handle: no-op */
    expect_leased(2, 0);
    assert_int_equal(version_of(w.dest), 1);
    rs_diag_clear(&d);
    ASSERT_ST(rs_receiver_apply(recv, h, &d, &res), RS_ERR_INVALID_ARG, d);
    assert_int_equal(version_of(w.dest), 1);
    assert_int_equal(w.installs, 1);
    /* the receiver goes on: the next version stages and applies */
    publish(3);
    h = stage_ok(recv, 3);
    ASSERT_ST(rs_receiver_apply(recv, h, &d, &res), RS_OK, d);
    assert_int_equal(version_of(w.dest), 3);
    /* destroying a receiver with a staged version drops its lease */
    expect_leased(3, 0);
    publish(4);
    stage_ok(recv, 4);
    expect_leased(4, 1);
    rs_receiver_destroy(recv);
    expect_leased(4, 0);
    assert_int_equal(version_of(w.dest), 3);
}

/* ---- failed stages ----------------------------------------------------- */

/* After a failed stage: nothing to apply, the bound bytes and install as
 * they were, no lease on `v` (when it exists). */
static void expect_nothing_staged(rs_receiver_h recv, rs_staged_h h,
                                  int64_t v, int64_t bound, int installs)
{
    rs_diag_t d;
    rs_pull_result_t res;
    assert_null(h); /* outputs are set only on success */
    rs_diag_clear(&d);
    ASSERT_ST(rs_receiver_apply(recv, h, &d, &res), RS_ERR_INVALID_ARG, d);
    assert_int_equal(version_of(w.dest), bound);
    assert_int_equal(w.installs, installs);
    if (v >= 0)
        expect_leased(v, 0);
}

static void test_failed_stage_leaves_nothing(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_pull_result_t res;
    rs_staged_h h = NULL;
    rs_receiver_h recv = open_receiver(1, 0.3);
    pull_ok(recv, 1);
    /* no such version: discovery times out, before any lease */
    ASSERT_ST(rs_receiver_stage(recv, 7, &d, &h), RS_ERR_TIMEOUT, d);
    ASSERT_MSG_HAS(d, "version 7");
    expect_nothing_staged(recv, h, -1, 1, 1);
    /* a digest mismatch, found after every byte reached the staging: a
     * publisher's buffer changed after its table was published */
    expect_leased(1, 0);
    publish(2);
    w.rows[5][7] ^= 0xFF;
    rs_diag_clear(&d);
    ASSERT_ST(rs_receiver_stage(recv, 2, &d, &h), RS_ERR_VERIFY, d);
    fprintf(stderr, "refused as expected: %s\n", d.msg);
    expect_nothing_staged(recv, h, 2, 1, 1);
    /* a malformed table for a slot */
    const char bad[] = "{\"schema\": \"mx.reshard.shard_table.v1\", ";
    ASSERT_ST(rs_dir_create_version(w.dir, w.model, 5, PUBS, &d), RS_OK, d);
    for (int64_t slot = 0; slot < PUBS; slot++)
        ASSERT_ST(rs_dir_publish(w.dir, w.model, 5, slot, bad,
                                 sizeof(bad) - 1, &d), RS_OK, d);
    rs_diag_clear(&d);
    rs_status_t st = rs_receiver_stage(recv, 5, &d, &h);
    if (st == RS_OK)
        fail_msg("a malformed table staged");
    fprintf(stderr, "refused as expected: %s\n", d.msg);
    ASSERT_MSG_HAS(d, "slot 0");
    expect_nothing_staged(recv, h, 5, 1, 1);
    /* and the receiver stages fine afterwards */
    publish(3);
    h = stage_ok(recv, 3);
    assert_int_equal(version_of(w.dest), 1);
    ASSERT_ST(rs_receiver_apply(recv, h, &d, &res), RS_OK, d);
    assert_int_equal(version_of(w.dest), 3);
    rs_receiver_destroy(recv);
}

/* ---- cancel ------------------------------------------------------------ */

/* A call on its own thread, and whether it returned. */
typedef struct canceled_call {
    rs_receiver_h recv;
    rs_publisher_h pub;
    int64_t version;
    rs_status_t st;
    rs_staged_h h;
    rs_diag_t d;
    atomic_int done;
} canceled_call_t;

static void *stage_main(void *arg)
{
    canceled_call_t *c = arg;
    rs_diag_clear(&c->d);
    c->st = rs_receiver_stage(c->recv, c->version, &c->d, &c->h);
    atomic_store(&c->done, 1);
    return NULL;
}

static void *wait_released_main(void *arg)
{
    canceled_call_t *c = arg;
    rs_diag_clear(&c->d);
    c->st = rs_publisher_wait_released(c->pub, c->version, 60, &c->d);
    atomic_store(&c->done, 1);
    return NULL;
}

/* Starts fn on a thread, raises the cancel flag once it is (most likely)
 * waiting, and joins it; a hang guard of 20 s, far above the 60 s waits'
 * cancelled end, fails the test instead of hanging. */
static void cancel_call(canceled_call_t *c, void *(*fn)(void *))
{
    pthread_t t;
    atomic_init(&c->done, 0);
    assert_int_equal(pthread_create(&t, NULL, fn, c), 0);
    rs__sleep_s(0.3);
    if (c->recv != NULL)
        rs_receiver_cancel(c->recv);
    else
        rs_publisher_cancel(c->pub);
    for (int i = 0; i < 2000 && !atomic_load(&c->done); i++)
        rs__sleep_s(0.01);
    if (!atomic_load(&c->done))
        fail_msg("a cancelled wait did not return within 20 s");
    pthread_join(t, NULL);
}

/* A stage waiting 60 s for a version that never comes, cancelled from
 * another thread: RS_ERR_CANCELLED, nothing staged, the bound bytes as
 * they were; the flag stops every stage and pull until cleared; then the
 * receiver stages and applies as before. A publisher's release wait is
 * cancelled the same way. */
static void test_cancel(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_pull_result_t res;
    rs_staged_h h = NULL;
    rs_receiver_h recv = open_receiver(1, 60);
    pull_ok(recv, 1);
    publish(2);
    canceled_call_t c = {.recv = recv, .version = 7};
    cancel_call(&c, stage_main);
    ASSERT_ST(c.st, RS_ERR_CANCELLED, c.d);
    ASSERT_MSG_HAS(c.d, "version 7");
    expect_nothing_staged(recv, c.h, -1, 1, 1);
    /* still raised: a stage or pull of a READY version is cancelled too */
    rs_diag_clear(&d);
    ASSERT_ST(rs_receiver_stage(recv, 2, &d, &h), RS_ERR_CANCELLED, d);
    expect_nothing_staged(recv, h, -1, 1, 1);
    ASSERT_ST(rs_receiver_pull(recv, 2, &d, &res), RS_ERR_CANCELLED, d);
    assert_int_equal(version_of(w.dest), 1);
    rs_receiver_cancel_clear(recv);
    h = stage_ok(recv, 2);
    ASSERT_ST(rs_receiver_apply(recv, h, &d, &res), RS_OK, d);
    assert_int_equal(version_of(w.dest), 2);
    /* the publisher's wait for a release nobody makes */
    canceled_call_t pc = {.pub = w.pub[0], .version = 2};
    cancel_call(&pc, wait_released_main);
    ASSERT_ST(pc.st, RS_ERR_CANCELLED, pc.d);
    ASSERT_MSG_HAS(pc.d, "release of version 2");
    rs_publisher_cancel_clear(w.pub[0]);
    expect_leased(2, 0); /* releases it */
    rs_diag_clear(&d);
    ASSERT_ST(rs_publisher_wait_released(w.pub[0], 2, 10, &d), RS_OK, d);
    rs_receiver_destroy(recv);
}

/* ---- one staged version at a time -------------------------------------- */

static void test_second_stage_refused(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_pull_result_t res;
    rs_staged_h h2 = NULL;
    rs_receiver_h recv = open_receiver(1, 10);
    rs_staged_h h = stage_ok(recv, 1);
    rs_diag_clear(&d);
    ASSERT_ST(rs_receiver_stage(recv, 1, &d, &h2), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "version 1 of '");
    ASSERT_MSG_HAS(d, "is staged");
    assert_null(h2);
    ASSERT_ST(rs_receiver_pull(recv, 1, &d, &res), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "is staged");
    ASSERT_ST(rs_receiver_bind(recv, 0, w.dest, NBYTES, RS_MEM_HOST, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "staged");
    assert_int_equal(version_of(w.dest), 0);
    assert_int_equal(w.installs, 0);
    /* the first one still applies */
    ASSERT_ST(rs_receiver_apply(recv, h, &d, &res), RS_OK, d);
    assert_int_equal(version_of(w.dest), 1);
    assert_int_equal(w.installs, 1);
    rs_receiver_destroy(recv);
}

/* ---- apply after the lease was lost ------------------------------------ */

static void refused_apply(rs_receiver_h recv, rs_staged_h h, const char *why)
{
    rs_diag_t d;
    rs_pull_result_t res;
    rs_diag_clear(&d);
    ASSERT_ST(rs_receiver_apply(recv, h, &d, &res), RS_ERR_VERIFY, d);
    fprintf(stderr, "refused as expected: %s\n", d.msg);
    ASSERT_MSG_HAS(d, "refusing to install");
    ASSERT_MSG_HAS(d, "'" HOLDER "'");
    ASSERT_MSG_HAS(d, why);
    assert_int_equal(version_of(w.dest), 0);
    assert_int_equal(w.installs, 0);
    assert_int_equal(rs_staged_version(h), -1); /* consumed */
}

static void test_apply_after_lease_lost(void **state)
{
    (void)state;
    rs_diag_t d;
    size_t dropped = 0;
    rs_receiver_h recv = open_receiver(1, 10);
    /* force-released (abandoned) while staged */
    rs_staged_h h = stage_ok(recv, 1);
    ASSERT_ST(rs_dir_abandon(w.dir, w.model, 1, &d, &dropped), RS_OK, d);
    assert_int_equal(dropped, 1);
    refused_apply(recv, h, "released");
    /* the lease taken again under the receiver's name: refused while it
     * is live (naming it); once dropped, the take ends the epoch */
    publish(2);
    h = stage_ok(recv, 2);
    ASSERT_ST(rs_dir_lease(w.dir, w.model, 2, HOLDER, 30, &d), RS_ERR_INPUT,
              d);
    ASSERT_MSG_HAS(d, "lease holder name '" HOLDER "' is taken");
    ASSERT_ST(rs_dir_unlease(w.dir, w.model, 2, HOLDER, &d), RS_OK, d);
    ASSERT_ST(rs_dir_lease(w.dir, w.model, 2, HOLDER, 30, &d), RS_OK, d);
    refused_apply(recv, h, "was taken again");
    ASSERT_ST(rs_dir_unlease(w.dir, w.model, 2, HOLDER, &d), RS_OK, d);
    rs_receiver_destroy(recv);
}

/* ---- shadow = 0 -------------------------------------------------------- */

static void test_shadow_off(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_pull_result_t res;
    rs_staged_h h = NULL;
    rs_receiver_h recv = open_receiver(0, 10);
    rs_diag_clear(&d);
    ASSERT_ST(rs_receiver_stage(recv, 1, &d, &h), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "shadow = 1");
    assert_null(h);
    assert_int_equal(version_of(w.dest), 0);
    /* a pull reads straight into the bound storage: nothing to copy */
    ASSERT_ST(rs_receiver_pull(recv, 1, &d, &res), RS_OK, d);
    assert_int_equal(version_of(w.dest), 1);
    assert_int_equal(w.installs, 1);
    assert_int_equal(res.bytes_installed, 0);
    assert_int_equal(res.stages.bytes, NBYTES);
    expect_leased(1, 0);
    rs_receiver_destroy(recv);
}

/* ---- fixtures ------------------------------------------------------------ */

static void open_publishers(void)
{
    u8_rows_open(w.pub, PUBS, w.url, w.model, w.rows, ROWS, COLS);
    publish(1);
}

/* One parameter "w" [ROWS, COLS] u8, read whole from tensor "w". */
static void open_capture(void)
{
    w.cap = u8_whole_capture("w", ROWS, COLS);
    w.dest = u8_filled(NBYTES, UNTOUCHED);
}

static int world_setup(void **state)
{
    (void)state;
    static int serial;
    rs_diag_t d;
    char tmp[PATH_MAX];
    memcpy(tmp, w.tmp, sizeof(tmp));
    memset(&w, 0, sizeof(w));
    memcpy(w.tmp, tmp, sizeof(tmp));
    snprintf(w.url, sizeof(w.url), "file:%s", w.tmp);
    snprintf(w.model, sizeof(w.model), "m%d", ++serial);
    if (rs_dir_open(w.url, &d, &w.dir) != RS_OK)
        return -1;
    open_publishers();
    open_capture();
    return 0;
}

static int world_teardown(void **state)
{
    (void)state;
    u8_rows_close(w.pub, PUBS, w.rows, ROWS);
    rs_capture_destroy(w.cap);
    rs_dir_close(w.dir);
    free(w.dest);
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(w.tmp, sizeof(w.tmp), "/tmp/rs-stage-test-XXXXXX");
    return mkdtemp(w.tmp) != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    tmp_remove(w.tmp);
    return 0;
}

#define CASE(fn) cmocka_unit_test_setup_teardown(fn, world_setup, world_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE(test_stage_while_bound_then_apply),
        CASE(test_stage_and_apply_on_two_threads),
        CASE(test_discard_drops_lease),
        CASE(test_failed_stage_leaves_nothing),
        CASE(test_second_stage_refused),
        CASE(test_apply_after_lease_lost),
        CASE(test_shadow_off),
        CASE(test_cancel),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
