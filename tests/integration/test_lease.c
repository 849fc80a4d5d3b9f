/* A pull that outlives its lease must never install a mix of two versions.
 * Two publishers (in this process, cma) serve version 1 of one tensor; a
 * releaser thread keeps trying to release it and a refiller thread, as soon
 * as it is released, overwrites the publishers' buffers with version 2 and
 * publishes that. The receiver's wire is slowed by its progress callback
 * (which sleeps, or waits for the refill, between chunks) past the lease
 * ttl: 2 s where renewals keep the lease, 0.5 s where it is meant to lapse.
 * With renewal the release is refused for the whole pull and version 1
 * installs byte for byte; with the lease lapsed, taken by another party or
 * released, the pull refuses with the destination untouched and install not
 * called. Also the overall deadline, in the wire and the discover stage.
 * Every case runs on a file: and a redis:// directory; on redis also a
 * directory that goes away mid-pull. `test_lease file` or `test_lease redis`
 * runs one directory's cases (ctest runs them as two tests, side by side). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "dir_env.h"
#include "u8_rows.h"
#include "reshard/reshard.h"
#include "assert_status.h"

#define PUBS 2          /* publishers */
#define ROWS 16         /* rows of the tensor, each a shard of its own */
#define COLS 2048       /* bytes per row */
#define CHUNK 4096      /* bytes per wire chunk: one row of each publisher,
                         * so 8 chunks per pull */
#define NCHUNKS (ROWS * COLS / CHUNK)
#define TTL_S 2.0 /* renewals every ttl/3: a renewal thread stalled for 1.3 s
                     * on a loaded machine still keeps the lease */
#define LAPSE_TTL_S 0.5 /* where no renewal runs, the lease only has to lapse
                         * mid-pull: the sooner, the shorter the wait */
#define HOLDER "recv-0"
#define UNTOUCHED 0xEE

typedef enum slow_mode {
    SLOW_SLEEP = 1, /* sleep a fixed time after every chunk */
    SLOW_REFILL,    /* after the first chunk, wait for the refill */
    SLOW_STEAL,     /* after the first chunk, take the lease's name */
    SLOW_OUTAGE,    /* after the first chunk, stop the redis server */
} slow_mode_t;

typedef dir_env_t env_t;

typedef struct world {
    rs_publisher_h pub[PUBS];
    uint8_t *rows[ROWS];
    rs_capture_h cap;
    uint8_t *dest;
    int installs;
    /* the other parties */
    pthread_t releaser, refiller;
    int have_releaser, have_refiller;
    atomic_int stop;
    /* 1 while rs_receiver_pull runs and has not installed yet: the pull
     * drops its lease after install, so a release from then on is not
     * "mid-pull" even though rs_receiver_pull has not returned */
    atomic_int pulling;
    atomic_int released;         /* version 1 released */
    atomic_int released_mid_pull;
    atomic_int refused;          /* release attempts refused */
    atomic_int refused_mid_pull;
    atomic_int refilled;         /* buffers hold version 2 */
    /* the slowed wire */
    slow_mode_t mode;
    int others;                  /* start releaser and refiller mid-pull */
    double sleep_s;
    int chunks;
    int waited_ok;               /* SLOW_REFILL saw the refill */
    rs_status_t steal_st;
    char steal_msg[RS_DIAG_MSG_MAX];
} world_t;

static env_t *g;
static world_t w;
static char model[32]; /* a fresh model per test: its version 1 is unreleased */
#define MODEL model

/* Byte g of the tensor in version v: every byte differs between 1 and 2. */
static uint8_t expected(uint64_t g_index, int64_t v)
{
    return (uint8_t)(g_index * 31 + (g_index >> 8) + (uint64_t)v * 101);
}

static void fill_row(int r, int64_t v)
{
    for (uint64_t j = 0; j < COLS; j++)
        w.rows[r][j] = expected((uint64_t)r * COLS + j, v);
}

#define NEED_BACKEND() DIR_ENV_NEED(g)

static void publish(int64_t v)
{
    rs_diag_t d;
    for (int r = 0; r < PUBS; r++)
        ASSERT_ST(rs_publisher_publish(w.pub[r], v, &d), RS_OK, d);
}

static void open_publishers(void)
{
    u8_rows_open(w.pub, PUBS, g->url, MODEL, w.rows, ROWS, COLS);
    for (int i = 0; i < ROWS; i++)
        fill_row(i, 1);
    publish(1);
}

/* One parameter "w" [ROWS, COLS] u8, read whole from tensor "w". */
static void open_capture(void)
{
    w.cap = u8_whole_capture("w", ROWS, COLS);
    w.dest = malloc(ROWS * COLS);
    assert_non_null(w.dest);
    memset(w.dest, UNTOUCHED, ROWS * COLS);
}

/* Tries to release version 1 every 20 ms until it succeeds. */
static void *releaser_main(void *arg)
{
    (void)arg;
    rs_dir_h dir = NULL;
    rs_diag_t d;
    if (rs_dir_open(g->url, &d, &dir) != RS_OK)
        return NULL;
    while (!atomic_load(&w.stop)) {
        int mid = atomic_load(&w.pulling);
        if (rs_dir_release(dir, MODEL, 1, &d) == RS_OK) {
            atomic_store(&w.released_mid_pull, mid && atomic_load(&w.pulling));
            atomic_store(&w.released, 1);
            break;
        }
        atomic_fetch_add(&w.refused, 1);
        if (mid && atomic_load(&w.pulling))
            atomic_fetch_add(&w.refused_mid_pull, 1);
        rs__sleep_s(0.02);
    }
    rs_dir_close(dir);
    return NULL;
}

/* Once version 1 is released, the publishers' buffers get version 2. */
static void *refiller_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&w.stop) && !atomic_load(&w.released))
        rs__sleep_s(0.005);
    if (atomic_load(&w.stop))
        return NULL;
    for (int i = 0; i < ROWS; i++)
        fill_row(i, 2);
    atomic_store(&w.refilled, 1);
    rs_diag_t d;
    for (int r = 0; r < PUBS; r++)
        if (rs_publisher_publish(w.pub[r], 2, &d) != RS_OK)
            fprintf(stderr, "refiller: publish 2: %s\n", d.msg);
    return NULL;
}

static void start_others(void)
{
    w.have_releaser =
        pthread_create(&w.releaser, NULL, releaser_main, NULL) == 0;
    w.have_refiller =
        pthread_create(&w.refiller, NULL, refiller_main, NULL) == 0;
}

/* Between wire chunks. The other parties start at the first chunk: the
 * pull holds its lease by then. */
static void on_progress(void *ctx, const rs_progress_t *p)
{
    (void)ctx;
    (void)p;
    if (w.chunks == 0 && w.others && !w.have_releaser)
        start_others();
    if (w.mode == SLOW_SLEEP) {
        rs__sleep_s(w.sleep_s);
    } else if (w.chunks == 0 && w.mode == SLOW_REFILL) {
        double until = rs__now_s() + 20.0; /* a bound: the lapse takes TTL_S */
        while (!atomic_load(&w.refilled) && rs__now_s() < until)
            rs__sleep_s(0.01);
        w.waited_ok = atomic_load(&w.refilled);
    } else if (w.chunks == 0 && w.mode == SLOW_STEAL) {
        rs_dir_h dir = NULL;
        rs_diag_t d;
        w.steal_st = rs_dir_open(g->url, &d, &dir);
        if (w.steal_st == RS_OK)
            w.steal_st = rs_dir_lease(dir, MODEL, 1, HOLDER, 30, &d);
        snprintf(w.steal_msg, sizeof(w.steal_msg), "%s", d.msg);
        rs_dir_close(dir);
        rs__sleep_s(TTL_S / 2); /* a renewal comes and fails (every ttl/3) */
    } else if (w.chunks == 0 && w.mode == SLOW_OUTAGE) {
        rfx_stop(&g->server);
        rs__sleep_s(TTL_S); /* renewals cannot reach the directory */
    }
    w.chunks++;
}

static rs_status_t on_install(void *ctx, rs_exec_h exec)
{
    (void)ctx;
    (void)exec;
    w.installs++;
    atomic_store(&w.pulling, 0);
    return RS_OK;
}

typedef struct opts {
    double renew_s;    /* 0: default */
    double timeout_s;  /* pull_timeout_s */
    int verify;
    double ttl_s;      /* 0: TTL_S */
} opts_t;

static rs_receiver_h open_receiver(const opts_t *o)
{
    rs_receiver_params_t rp;
    rs_receiver_h recv = NULL;
    rs_diag_t d;
    rs_receiver_params_init(&rp);
    rp.directory = g->url;
    rp.model = MODEL;
    rp.backend = "cma";
    rp.holder = HOLDER;
    rp.discover_timeout_s = 10;
    rp.lease_ttl_s = o->ttl_s > 0 ? o->ttl_s : TTL_S;
    rp.lease_renew_s = o->renew_s;
    rp.pull_timeout_s = o->timeout_s;
    rp.timeout_s = 10;
    rp.verify_digests = o->verify;
    rp.install = on_install;
    rp.progress = on_progress;
    rp.progress_chunk_bytes = CHUNK;
    ASSERT_ST(rs_receiver_create(&rp, w.cap, &d, &recv), RS_OK, d);
    ASSERT_ST(rs_receiver_bind(recv, 0, w.dest, ROWS * COLS, RS_MEM_HOST, &d), RS_OK, d);
    return recv;
}

static rs_status_t pull(rs_receiver_h recv, int64_t v, rs_diag_t *d,
                        rs_pull_result_t *res)
{
    rs_diag_clear(d);
    w.chunks = 0;
    atomic_store(&w.pulling, 1);
    rs_status_t st = rs_receiver_pull(recv, v, d, res);
    atomic_store(&w.pulling, 0);
    return st;
}

/* The invariant of every case: the destination holds exactly one version
 * (and install ran once), or it is untouched (and install never ran). */
static int64_t one_version_or_untouched(rs_status_t st)
{
    uint64_t n1 = 0, n2 = 0, n0 = 0, n = ROWS * COLS;
    for (uint64_t i = 0; i < n; i++) {
        n1 += w.dest[i] == expected(i, 1);
        n2 += w.dest[i] == expected(i, 2);
        n0 += w.dest[i] == UNTOUCHED;
    }
    int64_t seen = n1 == n ? 1 : n2 == n ? 2 : n0 == n ? 0 : -1;
    if (seen < 0)
        fail_msg("a mix: of %llu bytes, %llu are version 1's, %llu version "
                 "2's and %llu untouched", (unsigned long long)n,
                 (unsigned long long)n1, (unsigned long long)n2,
                 (unsigned long long)n0);
    if (st == RS_OK && (seen == 0 || w.installs != 1))
        fail_msg("pull succeeded, destination version %lld, %d installs",
                 (long long)seen, w.installs);
    if (st != RS_OK && (seen != 0 || w.installs != 0))
        fail_msg("pull failed (%s), destination version %lld, %d installs",
                 rs_status_str(st), (long long)seen, w.installs);
    return seen;
}

/* The lease is renewed for the whole slow pull (1.5 ttls: an unrenewed
 * lease would lapse with a third of the pull still to go): release is refused
 * while it runs, version 1 installs byte for byte, and once the pull has
 * unleased the release goes through and version 2 follows over the same
 * buffers. */
static void test_renewal_keeps_release_off(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_diag_t d;
    rs_pull_result_t res;
    opts_t o = {0, 0, 1, 0};
    w.mode = SLOW_SLEEP;
    w.sleep_s = 1.5 * TTL_S / NCHUNKS; /* 1.5 ttls in all */
    rs_receiver_h recv = open_receiver(&o);
    w.others = 1;
    rs_status_t st = pull(recv, 1, &d, &res);
    if (st != RS_OK)
        fail_msg("pull of version 1: %s", d.msg);
    assert_int_equal(one_version_or_untouched(st), 1);
    assert_int_equal(atomic_load(&w.released_mid_pull), 0);
    assert_true(atomic_load(&w.refused_mid_pull) > 0);
    assert_true(res.lease_renewals >= 1);
    assert_true(res.lease_epoch >= 1);
    double until = rs__now_s() + 20.0;
    while (!atomic_load(&w.refilled) && rs__now_s() < until)
        rs__sleep_s(0.01);
    assert_true(atomic_load(&w.released));
    w.sleep_s = 0;
    w.installs = 0;
    st = pull(recv, 2, &d, &res);
    if (st != RS_OK)
        fail_msg("pull of version 2: %s", d.msg);
    assert_int_equal(one_version_or_untouched(st), 2);
    rs_receiver_destroy(recv);
}

/* Renewal blocked (a period far above the ttl): the lease lapses after the
 * first chunk, the releaser wins, the refiller writes version 2 into the
 * buffers being read. Digests are off, so only the lease proof stands
 * between the mixed bytes and the install. */
static void test_lapsed_lease_refuses(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_diag_t d;
    rs_pull_result_t res;
    opts_t o = {1000, 0, 0, LAPSE_TTL_S};
    w.mode = SLOW_REFILL;
    rs_receiver_h recv = open_receiver(&o);
    w.others = 1;
    rs_status_t st = pull(recv, 1, &d, &res);
    assert_true(w.waited_ok); /* the refill really came mid-pull */
    assert_int_equal(one_version_or_untouched(st), 0);
    ASSERT_ST(st, RS_ERR_VERIFY, d);
    fprintf(stderr, "refused as expected: %s\n", d.msg);
    ASSERT_MSG_HAS(d, "refusing to install");
    ASSERT_MSG_HAS(d, "'" HOLDER "'");
    ASSERT_MSG_HAS(d, "was not held throughout the pull");
    ASSERT_MSG_HAS(d, "released");
    assert_int_equal(one_version_or_untouched(st), 0);
    assert_int_equal(atomic_load(&w.released_mid_pull), 1);
    rs_receiver_destroy(recv);
}

/* The case as it was seen in the field: digests on, a wire slowed by
 * sleeps past the ttl, another party releasing, the publishers refilling.
 * Whatever wins, the destination holds one whole version or nothing. */
static void never_a_mix(double renew_s, double ttl_s, int64_t want)
{
    rs_diag_t d;
    rs_pull_result_t res;
    opts_t o = {renew_s, 0, 1, ttl_s};
    w.mode = SLOW_SLEEP;
    w.sleep_s = 2.0 * ttl_s / NCHUNKS; /* 2 ttls in all */
    rs_receiver_h recv = open_receiver(&o);
    w.others = 1;
    rs_status_t st = pull(recv, 1, &d, &res);
    int64_t v = one_version_or_untouched(st);
    fprintf(stderr, "renewal every %g s: %s, destination version %lld%s%s\n",
            renew_s, rs_status_str(st), (long long)v, st != RS_OK ? ": " : "",
            st != RS_OK ? d.msg : "");
    assert_int_equal(v, want);
    rs_receiver_destroy(recv);
}

static void test_never_a_mix_renewed(void **state)
{
    (void)state;
    NEED_BACKEND();
    never_a_mix(0, TTL_S, 1);
}

static void test_never_a_mix_lapsed(void **state)
{
    (void)state;
    NEED_BACKEND();
    never_a_mix(1000, LAPSE_TTL_S, 0);
}

/* Someone takes a lease under the receiver's name mid-pull: the directory
 * refuses the second holder of a live lease's name, naming it, and the
 * pull, whose epoch never changed, installs. */
static void test_taken_lease_refuses(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_diag_t d;
    rs_pull_result_t res;
    opts_t o = {0, 0, 1, 0};
    w.mode = SLOW_STEAL;
    rs_receiver_h recv = open_receiver(&o);
    rs_status_t st = pull(recv, 1, &d, &res);
    assert_int_equal(w.steal_st, RS_ERR_INPUT);
    fprintf(stderr, "refused as expected: %s\n", w.steal_msg);
    assert_non_null(strstr(w.steal_msg, "lease holder name '" HOLDER
                                        "' is taken"));
    ASSERT_ST(st, RS_OK, d);
    assert_int_equal(one_version_or_untouched(st), 1);
    rs_receiver_destroy(recv);
}

/* The directory goes away mid-pull: renewals fail without saying anything
 * about the lease, and the lease cannot be proven at the end, so the pull
 * refuses (the bytes may be fine, but nothing shows they are one version). */
static void test_directory_outage_refuses(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_diag_t d;
    rs_pull_result_t res;
    opts_t o = {0, 0, 1, 0};
    w.mode = SLOW_OUTAGE;
    rs_receiver_h recv = open_receiver(&o);
    rs_status_t st = pull(recv, 1, &d, &res);
    assert_int_equal(one_version_or_untouched(st), 0);
    ASSERT_ST(st, RS_ERR_VERIFY, d);
    fprintf(stderr, "refused as expected: %s\n", d.msg);
    ASSERT_MSG_HAS(d, "refusing to install");
    ASSERT_MSG_HAS(d, "renewal error");
    if (strstr(d.msg, " 0 renewal errors") != NULL)
        fail_msg("no renewal error was recorded: %s", d.msg);
    rs_receiver_destroy(recv);
    /* the next tests need a server */
    if (rfx_start(&g->server, NULL, g->why, sizeof(g->why)) != 0)
        fail_msg("redis restart: %s", g->why);
    snprintf(g->url, sizeof(g->url), "%s", g->server.url);
}

/* One deadline for the whole pull: the slow wire runs past it. */
static void test_deadline_in_wire(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_diag_t d;
    rs_pull_result_t res;
    opts_t o = {0, 1.0, 1, 0};
    w.mode = SLOW_SLEEP;
    w.sleep_s = 0.3; /* 8 chunks: 2.4 s */
    rs_receiver_h recv = open_receiver(&o);
    rs_status_t st = pull(recv, 1, &d, &res);
    ASSERT_ST(st, RS_ERR_TIMEOUT, d);
    fprintf(stderr, "refused as expected: %s\n", d.msg);
    char subject[96];
    snprintf(subject, sizeof(subject), "version 1 of '%s' (timeout 1 s)",
             model);
    ASSERT_MSG_HAS(d, subject);
    ASSERT_MSG_HAS(d, "deadline passed in the wire stage");
    ASSERT_MSG_HAS(d, "bytes read");
    assert_true(w.chunks < NCHUNKS);
    assert_int_equal(one_version_or_untouched(st), 0);
    /* the same receiver pulls fine with time to spare */
    w.sleep_s = 0;
    st = pull(recv, 1, &d, &res);
    if (st != RS_OK)
        fail_msg("pull after a timeout: %s", d.msg);
    assert_int_equal(one_version_or_untouched(st), 1);
    rs_receiver_destroy(recv);
}

/* The deadline also bounds discovery, whatever discover_timeout_s says. */
static void test_deadline_in_discover(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_diag_t d;
    rs_pull_result_t res;
    opts_t o = {0, 0.5, 1, 0};
    rs_receiver_h recv = open_receiver(&o); /* discover_timeout_s = 10 */
    rs_status_t st = pull(recv, 7, &d, &res);
    ASSERT_ST(st, RS_ERR_TIMEOUT, d);
    fprintf(stderr, "refused as expected: %s\n", d.msg);
    char subject[96];
    snprintf(subject, sizeof(subject), "version 7 of '%s' (timeout 0.5 s)",
             model);
    ASSERT_MSG_HAS(d, subject);
    ASSERT_MSG_HAS(d, "deadline passed in the discover stage");
    /* the wait got what was left of the deadline, not discover_timeout_s
     * (10 s); how much was left depends on the machine, so only the
     * wrong value is looked for */
    ASSERT_MSG_HAS(d, "after waiting 0.");
    if (strstr(d.msg, "after waiting 10") != NULL)
        fail_msg("discovery waited discover_timeout_s: %s", d.msg);
    assert_int_equal(one_version_or_untouched(st), 0);
    rs_receiver_destroy(recv);
}

static int world_setup(void **state)
{
    (void)state;
    static int serial;
    memset(&w, 0, sizeof(w));
    snprintf(model, sizeof(model), "m%d", ++serial);
    if (g->skip)
        return 0;
    open_publishers();
    open_capture();
    return 0;
}

static int world_teardown(void **state)
{
    (void)state;
    atomic_store(&w.stop, 1);
    if (w.have_releaser)
        pthread_join(w.releaser, NULL);
    if (w.have_refiller)
        pthread_join(w.refiller, NULL);
    u8_rows_close(w.pub, PUBS, w.rows, ROWS);
    rs_capture_destroy(w.cap);
    free(w.dest);
    return 0;
}

#define CASE(fn) cmocka_unit_test_setup_teardown(fn, world_setup, world_teardown)

/* No argument: both directories; "file" or "redis": that one only. */
int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    if (only != NULL && strcmp(only, "file") != 0 &&
        strcmp(only, "redis") != 0) {
        fprintf(stderr, "usage: %s [file|redis]\n", argv[0]);
        return 2;
    }
    static env_t file_env = {.backend = "file"};
    static env_t redis_env = {.backend = "redis", .redis = 1};
    const struct CMUnitTest tests[] = {
        CASE(test_renewal_keeps_release_off),
        CASE(test_lapsed_lease_refuses),
        CASE(test_never_a_mix_renewed),
        CASE(test_never_a_mix_lapsed),
        CASE(test_taken_lease_refuses),
        CASE(test_deadline_in_wire),
        CASE(test_deadline_in_discover),
    };
    const struct CMUnitTest redis_tests[] = {
        CASE(test_directory_outage_refuses), /* a file: one does not go away */
    };
    enum { N = sizeof(tests) / sizeof(tests[0]) };
    struct CMUnitTest all[N + 1];
    memcpy(all, tests, sizeof(tests));
    all[N] = redis_tests[0];
    int failed = 0;
    if (only == NULL || strcmp(only, "file") == 0) {
        failed += dir_env_run(&file_env, "lease-test", tests, N, &g);
    }
    if (only == NULL || strcmp(only, "redis") == 0) {
        failed += dir_env_run(&redis_env, "lease-test", all, N + 1, &g);
    }
    return failed;
}
