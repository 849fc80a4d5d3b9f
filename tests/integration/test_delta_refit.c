/* Delta refit end to end (docs/delta.md): an arena publisher (cma) serves
 * tensor "w" [ROWS, COLS] (bf16, 16-bit patterns) as two row halves, version v changing about
 * 1 element in 50 of each (the contents' own generator below, independent
 * of the library); a receiver with deltas pulls it whole. Asserted, every
 * install byte for byte against the generator:
 * - the first version is read whole; the next from its deltas, for a few
 *   percent of the bytes; a receiver two versions behind applies the two
 *   kept deltas in turn; one further behind than the publisher keeps reads
 *   whole; a publisher with delta_keep 0 lists no deltas at all;
 * - a delta damaged in the publisher's memory (payload or header) is
 *   refused and the read taken whole; a delta re-signed over wrong values
 *   patches, fails verification, and the version is read again whole; a
 *   delta whose header names another base is refused;
 * - a publisher killed while the receiver reads its deltas (forked, cma)
 *   fails the pull with a transport error in bounded time, the bound
 *   parameter keeping its bytes;
 * - deltas are on by default, patched in place in the receiver's shadows
 *   with no copy held; a run that fails after patching part of them
 *   (cancelled mid-delta, or failing verification) leaves them holding no
 *   version: the next pull reads them whole, byte-exact; so does a
 *   rebind (a new shadow, holding the bound bytes), and a group commit
 *   that rolls back (the shadow holds the older bytes again);
 * - with shadow = 0 the bound parameters are never patched: only copies
 *   within the budget take deltas (0, the default: none, every read
 *   whole; unbounded: both; one shard's bytes: one, the same one every
 *   version); reads that cast from the executor's staging (one round)
 *   are patched in place there, also with no budget; a rebind, which
 *   prepares a new staging, reads them whole once; the stage record's
 *   `delta` object says what the pull read;
 * - a copy that does not fit the memory available is not made (a notice,
 *   the pull byte-exact, that shard read whole);
 * - a result of an older, smaller rs_pull_result_t gets only its bytes
 *   written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "assert_status.h"
#include "core/delta.h"
#include "delta_contents.h"
#include "dir_env.h"
#include "reshard/reshard.h"
#include "result_guard.h"

#define ROWS 66 /* odd halves of odd rows: padded slots, two reads */
#define HALF (ROWS / 2)
#define COLS 1001
#define N ((size_t)ROWS * COLS)
#define HALF_N ((size_t)HALF * COLS)

static dir_env_t *env;
static const char *MODEL = "delta"; /* each test its own model */
static uint64_t rx_budget = RS_RECEIVER_DEFAULT_DELTA_BUDGET;
static int rx_shadow = 1; /* receivers' shadow setting */
static int rx_cast = 0;   /* 1: the param is f32, cast from staging */
static const char *rx_group; /* a group commit of one rank, when set */
static rs_install_cb rx_install; /* receivers' install callback */
static void *rx_install_ctx;
static int notices; /* receivers' notices, the last one's text: */
static char notice_text[512];

static void on_notice(void *ctx, const char *msg)
{
    (void)ctx;
    notices++;
    snprintf(notice_text, sizeof(notice_text), "%s", msg);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the contents: element i of version v (delta_contents.h) ---------- */

static uint16_t elem(size_t i, int64_t v) { return delta_elem(i, v); }

static void fill(uint16_t *w, int64_t v) { delta_fill(w, N, v); }

static void assert_version(const uint16_t *got, int64_t v)
{
    delta_assert_version(got, N, v);
}

/* bf16 bits widened to f32 as IEEE conversion does: a signaling NaN
 * comes out quiet. */
static uint32_t widen(uint16_t h)
{
    uint32_t f = (uint32_t)h << 16;
    if ((f & 0x7F800000u) == 0x7F800000u && (f & 0x007FFFFFu) != 0)
        f |= 0x00400000u;
    return f;
}

/* The f32 param of a casting receiver: each bf16 pattern widened. */
static void assert_version_f32(const uint32_t *got, int64_t v)
{
    for (size_t i = 0; i < N; i++)
        if (got[i] != widen(elem(i, v)))
            fail_msg("element %zu: %08x, version %lld has bf16 %04x", i,
                     got[i], (long long)v, elem(i, v));
}

/* ---- publisher and receiver ------------------------------------------- */

static rs_publisher_h open_publisher(int64_t keep, uint16_t *w)
{
    rs_publisher_params_t pp;
    rs_publisher_h p;
    rs_diag_t d;
    rs_publisher_params_init(&pp);
    pp.directory = env->url;
    pp.model = MODEL;
    pp.world = 1;
    pp.backend = "cma";
    pp.heartbeat_s = 0;
    pp.staging = RS_STAGING_ARENA;
    pp.delta_keep = keep;
    ASSERT_ST(rs_publisher_create(&pp, &d, &p), RS_OK, d);
    const int64_t full[2] = {ROWS, COLS}, shape[2] = {HALF, COLS};
    for (int h = 0; h < 2; h++) {
        const int64_t off[2] = {h * HALF, 0};
        ASSERT_ST(rs_publisher_register(p, "w", RS_DTYPE_BF16, 2, full, off,
                                        shape, w + h * HALF_N, RS_MEM_HOST, &d),
                  RS_OK, d);
    }
    return p;
}

/* Releases the previous version (if any), fills and publishes v. */
static void publish(rs_publisher_h p, uint16_t *w, int64_t v)
{
    rs_diag_t d;
    if (v > 1)
        dir_env_release(env, MODEL, v - 1, p);
    fill(w, v);
    ASSERT_ST(rs_publisher_publish(p, v, &d), RS_OK, d);
}

typedef struct rx {
    rs_capture_h cap;
    rs_receiver_h r;
    uint16_t *dest;
    int cast; /* dest holds f32 */
} rx_t;

static void rx_open(rx_t *x, rs_progress_cb progress, void *ctx)
{
    rs_receiver_params_t rp;
    rs_diag_t d;
    const int64_t shape[2] = {ROWS, COLS}, stride[2] = {COLS, 1};
    const rs_dtype_t dt = rx_cast ? RS_DTYPE_F32 : RS_DTYPE_BF16;
    const size_t es = rx_cast ? 4 : 2;
    x->cast = rx_cast;
    assert_int_equal(rs_capture_create(&x->cap), RS_OK);
    ASSERT_ST(rs_capture_add_param(x->cap, "w", 2, shape, dt, &d), RS_OK, d);
    rs_copy_desc_t c = {"w", "w", NULL, 0, 0, 2, shape, stride, dt};
    ASSERT_ST(rs_capture_add_copy(x->cap, &c, &d), RS_OK, d);
    rs_receiver_params_init(&rp);
    rp.directory = env->url;
    rp.model = MODEL;
    rp.backend = "cma";
    rp.discover_timeout_s = 10;
    rp.timeout_s = 10;
    rp.pull_timeout_s = 20;
    rp.announce_cuts = 0;
    assert_int_equal(rp.delta, 1); /* deltas are on by default */
    assert_int_equal(rp.delta_budget, RS_RECEIVER_DEFAULT_DELTA_BUDGET);
    rp.delta_budget = rx_budget;
    rp.shadow = rx_shadow;
    rp.notice = on_notice;
    rp.descriptor_ns = 1; /* these reads are small: let deltas pay */
    rp.progress = progress;
    rp.progress_ctx = ctx;
    rp.progress_chunk_bytes = progress != NULL ? 1 : 0; /* a read a chunk */
    rp.install = rx_install;
    rp.install_ctx = rx_install_ctx;
    if (rx_group != NULL) {
        rp.group = rx_group;
        rp.group_size = 1;
        rp.group_rank = 0;
        rp.group_timeout_s = 10;
    }
    ASSERT_ST(rs_receiver_create(&rp, x->cap, &d, &x->r), RS_OK, d);
    x->dest = calloc(N, es);
    assert_non_null(x->dest);
    ASSERT_ST(rs_receiver_bind(x->r, 0, x->dest, N * es, RS_MEM_HOST, &d),
              RS_OK, d);
}

static void rx_close(rx_t *x)
{
    rs_receiver_destroy(x->r);
    rs_capture_destroy(x->cap);
    free(x->dest);
}

/* Pulls v, checks every byte; the result in *res. */
static void pull_exact(rx_t *x, int64_t v, rs_pull_result_t *res)
{
    rs_diag_t d;
    ASSERT_ST(rs_receiver_pull(x->r, v, &d, res), RS_OK, d);
    assert_int_equal(res->version, v);
    if (x->cast)
        assert_version_f32((const uint32_t *)(void *)x->dest, v);
    else
        assert_version(x->dest, v);
}

/* ---- the publisher's deltas, from its table --------------------------- */

/* The table of version v (malloc'd). */
static char *table_of(int64_t v)
{
    rs_dir_h dir;
    rs_diag_t d;
    rs_dir_entry_t *e;
    size_t n;
    ASSERT_ST(rs_dir_open(env->url, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_read_slot(dir, MODEL, v, 0, &d, &e, &n), RS_OK, d);
    assert_int_equal(n, 1);
    char *t = strdup(e[0].table);
    rs_dir_entries_free(e, n);
    rs_dir_close(dir);
    return t;
}

/* Shard h's delta producing version `made` in version v's table: its
 * address (this process's memory: the publisher is in it) and length. */
static unsigned char *delta_of(int64_t v, int h, int64_t made, size_t *len_p)
{
    char *t = table_of(v);
    json_error_t err;
    json_t *root = json_loads(t, 0, &err);
    free(t);
    assert_non_null(root);
    json_t *shards = json_object_get(
        json_array_get(json_object_get(root, "tensors"), 0), "shards");
    json_t *deltas = json_object_get(json_array_get(shards, (size_t)h),
                                     "deltas");
    unsigned char *at = NULL;
    for (size_t k = 0; k < json_array_size(deltas); k++) {
        json_t *o = json_array_get(deltas, k);
        if (json_integer_value(json_object_get(o, "version")) != made)
            continue;
        at = (unsigned char *)(uintptr_t)json_integer_value(
            json_object_get(o, "addr"));
        *len_p = (size_t)json_integer_value(json_object_get(o, "bytes"));
    }
    json_decref(root);
    assert_non_null(at);
    return at;
}

/* A publisher of model `model` keeping `keep` versions of deltas, its
 * shards' memory, and a delta receiver. */
typedef struct world {
    uint16_t *w;
    rs_publisher_h p;
    rx_t x;
} world_t;

static void world_open(world_t *o, const char *model, int64_t keep)
{
    MODEL = model;
    o->w = malloc(N * 2);
    assert_non_null(o->w);
    o->p = open_publisher(keep, o->w);
    rx_open(&o->x, NULL, NULL);
}

static void world_close(world_t *o)
{
    rx_close(&o->x);
    rs_publisher_destroy(o->p);
    free(o->w);
}

/* world_open, then version 1 published and pulled. */
static void world_at_1(world_t *o, const char *model)
{
    rs_pull_result_t res;
    world_open(o, model, 2);
    publish(o->p, o->w, 1);
    pull_exact(&o->x, 1, &res);
}

/* ---- tests ------------------------------------------------------------ */

static void test_versions(void **state)
{
    (void)state;
    world_t o;
    rs_pull_result_t res;
    world_open(&o, "versions", 2);

    publish(o.p, o.w, 1);
    pull_exact(&o.x, 1, &res);
    assert_int_equal(res.delta_runs, 0); /* nothing held yet */
    assert_int_equal(res.whole_bytes, N * 2);

    publish(o.p, o.w, 2);
    pull_exact(&o.x, 2, &res);
    assert_int_equal(res.delta_runs, 2); /* one per shard */
    assert_int_equal(res.delta_refused, 0);
    assert_int_equal(res.delta_full_bytes, N * 2);
    /* patched in place in the shadows: no copy, no budget */
    assert_int_equal(res.delta_in_place_runs, 2);
    assert_int_equal(res.delta_in_place_bytes, N * 2);
    assert_int_equal(res.delta_held_bytes, 0);
    assert_int_equal(res.delta_held_runs, 0);
    assert_int_equal(res.delta_over_budget_runs, 0);
    assert_true(res.delta_bytes > 0 && res.delta_bytes < N * 2 / 10);
    assert_int_equal(res.replanned, 0);

    publish(o.p, o.w, 3); /* not pulled: the receiver falls two behind */
    publish(o.p, o.w, 4);
    pull_exact(&o.x, 4, &res);
    assert_int_equal(res.delta_runs, 2); /* 2 -> 3 -> 4, the kept deltas */
    assert_int_equal(res.delta_refused, 0);

    for (int64_t v = 5; v <= 7; v++)
        publish(o.p, o.w, v);
    pull_exact(&o.x, 7, &res); /* holds 4; the publisher keeps 6 and 7 */
    assert_int_equal(res.delta_runs, 0);
    assert_int_equal(res.whole_bytes, N * 2);
    publish(o.p, o.w, 8);
    pull_exact(&o.x, 8, &res);
    assert_int_equal(res.delta_runs, 2);
    world_close(&o);
}

/* delta_keep 0: the table is the one publishers wrote before deltas. */
static void test_keep_zero(void **state)
{
    (void)state;
    world_t o;
    rs_pull_result_t res;
    world_open(&o, "keep0", 0);
    publish(o.p, o.w, 1);
    publish(o.p, o.w, 2);
    char *t = table_of(2);
    assert_null(strstr(t, "deltas"));
    free(t);
    pull_exact(&o.x, 2, &res);
    pull_exact(&o.x, 2, &res);
    assert_int_equal(res.delta_runs, 0);
    world_close(&o);
}

/* A byte of a served delta flipped: refused, read whole. */
static void test_damaged(void **state)
{
    (void)state;
    world_t o;
    rs_pull_result_t res;
    size_t len;
    world_at_1(&o, "damaged");

    publish(o.p, o.w, 2);
    unsigned char *dl = delta_of(2, 1, 2, &len);
    dl[len - 1] ^= 0x40; /* the last payload byte */
    pull_exact(&o.x, 2, &res);
    assert_int_equal(res.delta_refused, 1);
    assert_int_equal(res.delta_runs, 1); /* the other shard's delta */
    assert_int_equal(res.delta_retried, 0);

    publish(o.p, o.w, 3);
    dl = delta_of(3, 0, 3, &len);
    dl[40] ^= 1; /* the header's new version: its check fails */
    pull_exact(&o.x, 3, &res);
    assert_int_equal(res.delta_refused, 1);
    assert_int_equal(res.delta_runs, 1);
    world_close(&o);
}

/* Replaces shard h's delta (base -> 2) in version 2's table by one encoded
 * from version `base`'s bytes to `to` (every check valid); returns 0 when
 * it does not fit where the listed one was. */
static int plant(int h, int64_t base, const uint16_t *to)
{
    size_t len, got;
    rs_diag_t d;
    unsigned char *dl = delta_of(2, h, 2, &len);
    uint16_t *old = malloc(HALF_N * 2);
    unsigned char *out = malloc(rs__delta_bound(HALF_N, 2, RS__DELTA_CHUNK));
    for (size_t i = 0; i < HALF_N; i++)
        old[i] = elem((size_t)h * HALF_N + i, 1);
    ASSERT_ST(rs__delta_encode(old, to + (size_t)h * HALF_N, HALF_N, 2,
                               RS__DELTA_CHUNK, base, 2, out, &d, &got),
              RS_OK, d);
    int fits = got == len;
    if (fits)
        memcpy(dl, out, len);
    free(out);
    free(old);
    return fits;
}

/* Nothing holds a version: v is read whole; then v + 1 by deltas again,
 * patched in place. */
static void whole_then_deltas(world_t *o, int64_t v)
{
    rs_pull_result_t res;
    publish(o->p, o->w, v);
    pull_exact(&o->x, v, &res);
    assert_int_equal(res.delta_runs, 0);
    assert_int_equal(res.delta_retried, 0);
    assert_int_equal(res.whole_bytes, N * 2);
    publish(o->p, o->w, v + 1);
    pull_exact(&o->x, v + 1, &res);
    assert_int_equal(res.delta_runs, 2);
    assert_int_equal(res.delta_in_place_bytes, N * 2);
}

/* Publishes version 2 with shard 0's delta re-signed over a wrong value
 * (the same places, every check valid). */
static void publish_wrong(world_t *o)
{
    uint16_t *wrong = malloc(N * 2);
    assert_non_null(wrong);
    publish(o->p, o->w, 2);
    memcpy(wrong, o->w, N * 2);
    size_t at = 0; /* an element of shard 0 that changes at 2 */
    while (!delta_changes(at, 2))
        at++;
    wrong[at] = (uint16_t)(wrong[at] + 1); /* same places, another value */
    assert_true(plant(0, 1, wrong));
    free(wrong);
}

/* A delta with valid checks over wrong values patches, fails the digest,
 * and the version is read again whole; one naming another base is
 * refused. */
static void test_wrong_and_stale(void **state)
{
    (void)state;
    world_t o;
    rs_pull_result_t res;
    world_at_1(&o, "wrong");
    publish_wrong(&o);
    pull_exact(&o.x, 2, &res);
    assert_int_equal(res.delta_retried, 1);
    assert_int_equal(res.delta_refused, 0);
    /* the shadows were patched wrong, then read whole by the second run:
     * they hold no version, so the next pull reads them whole */
    whole_then_deltas(&o, 3);
    world_close(&o);

    /* stale: version 2's delta of shard 0 says it patches version 0 */
    world_at_1(&o, "stale");
    publish(o.p, o.w, 2);
    assert_true(plant(0, 0, o.w));
    pull_exact(&o.x, 2, &res);
    assert_int_equal(res.delta_refused, 1);
    assert_int_equal(res.delta_runs, 1);
    assert_int_equal(res.delta_retried, 0);
    world_close(&o);
}

/* ---- a publisher killed while its deltas are read ---------------------- */

static pid_t victim;

static void strike(void *ctx, const rs_progress_t *pr)
{
    (void)pr;
    int *struck = ctx;
    if (*struck || victim <= 0)
        return;
    *struck = 1;
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    victim = 0;
}

/* The child: publishes 1, waits for its release, publishes 2, waits to
 * be killed. Tells each publish on `fd`. */
static void child(int fd)
{
    uint16_t *w = malloc(N * 2);
    rs_publisher_h p = open_publisher(2, w);
    rs_diag_t d;
    for (int64_t v = 1; v <= 2; v++) {
        if (v > 1 && rs_publisher_wait_released(p, v - 1, 20, &d) != RS_OK)
            _exit(3);
        fill(w, v);
        if (rs_publisher_publish(p, v, &d) != RS_OK)
            _exit(4);
        char c = (char)v;
        if (write(fd, &c, 1) != 1)
            _exit(5);
    }
    pause();
    _exit(0);
}

static void test_killed(void **state)
{
    (void)state;
    MODEL = "killed";
    int fds[2];
    char c;
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    victim = fork();
    assert_true(victim >= 0);
    if (victim == 0) {
        close(fds[0]);
        child(fds[1]);
    }
    close(fds[1]);
    int struck = 0;
    rx_t x;
    rs_pull_result_t res;
    rs_diag_t d;
    rx_open(&x, strike, &struck);
    assert_int_equal(read(fds[0], &c, 1), 1);
    struck = 1; /* no strike during the first pull */
    ASSERT_ST(rs_receiver_pull(x.r, 1, &d, &res), RS_OK, d);
    assert_version(x.dest, 1);
    rs_dir_h dir;
    ASSERT_ST(rs_dir_open(env->url, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_release(dir, MODEL, 1, &d), RS_OK, d);
    rs_dir_close(dir);
    assert_int_equal(read(fds[0], &c, 1), 1);
    struck = 0;
    double t0 = now_s();
    rs_status_t st = rs_receiver_pull(x.r, 2, &d, &res);
    if (st != RS_ERR_TRANSPORT && st != RS_ERR_TIMEOUT)
        fail_msg("pull of version 2: %s (%s), struck %d", rs_status_str(st),
                 d.msg, struck);
    assert_true(struck);
    assert_true(now_s() - t0 < 20);
    assert_version(x.dest, 1); /* the bound parameter kept its bytes */
    rx_close(&x);
    close(fds[0]);
    if (victim > 0) {
        kill(victim, SIGKILL);
        waitpid(victim, NULL, 0);
    }
}

/* ---- a run cancelled after patching part of the shadows --------------- */

typedef struct halt {
    rs_receiver_h r;
    int armed, fired;
} halt_t;

/* Cancels the pull after its first chunk (one read: shard 0's, patched in
 * place), before shard 1's is read. */
static void halt_after_first(void *ctx, const rs_progress_t *pr)
{
    halt_t *h = ctx;
    (void)pr;
    if (h->armed && !h->fired) {
        h->fired = 1;
        rs_receiver_cancel(h->r);
    }
}

/* cast: the param is f32, its reads patched in place in the executor's
 * staging rather than in the shadow. */
static void cancelled_case(const char *model, int cast)
{
    world_t o;
    halt_t h = {NULL, 0, 0};
    rs_pull_result_t res;
    rs_diag_t d;
    MODEL = model;
    o.w = malloc(N * 2);
    assert_non_null(o.w);
    o.p = open_publisher(2, o.w);
    rx_cast = cast;
    rx_open(&o.x, halt_after_first, &h);
    rx_cast = 0;
    h.r = o.x.r;
    publish(o.p, o.w, 1);
    pull_exact(&o.x, 1, &res);
    publish(o.p, o.w, 2);
    h.armed = 1;
    rs_status_t st = rs_receiver_pull(o.x.r, 2, &d, &res);
    if (st == RS_OK)
        fail_msg("pull of version 2 was not cancelled");
    assert_true(h.fired);
    /* the bound parameter kept its bytes */
    if (cast)
        assert_version_f32((const uint32_t *)(void *)o.x.dest, 1);
    else
        assert_version(o.x.dest, 1);
    rs_receiver_cancel_clear(o.x.r);
    h.armed = 0;
    /* a shadow or staging patched halfway holds no version: read whole */
    whole_then_deltas(&o, 3);
    world_close(&o);
}

static void test_cancelled(void **state)
{
    (void)state;
    cancelled_case("cancelled", 0);
    cancelled_case("cancelled-cast", 1);
}

/* A rebind gives the parameter a new shadow holding the bound bytes (here
 * zeros, not version 1): nothing patched in place holds a version after
 * it, so the next pull reads whole instead of patching zeros (which would
 * fail verification and be read again, delta_retried). */
static void test_rebind(void **state)
{
    (void)state;
    world_t o;
    rs_diag_t d;
    world_at_1(&o, "rebind");
    memset(o.x.dest, 0, N * 2);
    ASSERT_ST(rs_receiver_bind(o.x.r, 0, o.x.dest, N * 2, RS_MEM_HOST, &d),
              RS_OK, d);
    whole_then_deltas(&o, 2);
    world_close(&o);
}

/* An install callback that fails while armed. */
static rs_status_t failing_install(void *ctx, rs_exec_h exec)
{
    (void)exec;
    return *(int *)ctx ? RS_ERR_IO : RS_OK;
}

/* A group commit that aborts puts the replaced bytes back into the bound
 * parameter from the shadow, which then holds the version before the one
 * its patched reads held: nothing patched in place holds a version after
 * it, so the next pull reads whole (not a patch of the older bytes, which
 * would fail verification and be read again, delta_retried). */
static void test_rollback(void **state)
{
    (void)state;
    world_t o;
    rs_diag_t d;
    rs_pull_result_t res;
    int armed = 0;
    rx_group = "rollback";
    rx_install = failing_install;
    rx_install_ctx = &armed;
    world_at_1(&o, "rollback");
    rx_group = NULL;
    rx_install = NULL;
    rx_install_ctx = NULL;
    publish(o.p, o.w, 2);
    armed = 1; /* version 2 is patched in place, installed, then undone */
    rs_diag_clear(&d);
    const rs_status_t st = rs_receiver_pull(o.x.r, 2, &d, &res);
    if (st == RS_OK)
        fail_msg("the apply of version 2 did not fail");
    /* the callback's own status, though it left diag untouched */
    assert_int_equal(st, RS_ERR_IO);
    assert_int_equal(d.status, RS_ERR_IO);
    if (strstr(d.msg, "rolls back") == NULL ||
        strstr(d.msg, "install callback failed") == NULL)
        fail_msg("message: %s", d.msg);
    assert_version(o.x.dest, 1); /* rolled back */
    armed = 0;
    whole_then_deltas(&o, 3);
    world_close(&o);
}

/* ---- the delta budget ------------------------------------------------- */

/* The stage record of the receiver's last run, parsed. */
static json_t *stage_record(rx_t *x)
{
    char *text = NULL;
    size_t len = 0;
    rs_diag_t d;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    ASSERT_ST(rs_exec_write_stage_record(rs_receiver_exec(x->r), -1,
                                         RS_RECORD_COMPACT, f, &d),
              RS_OK, d);
    fclose(f);
    json_error_t err;
    json_t *rec = json_loads(text, 0, &err);
    free(text);
    assert_non_null(rec);
    return rec;
}

static uint64_t key_u64(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        fail_msg("stage record: no integer '%s'", key);
    return (uint64_t)json_integer_value(v);
}

/* The record's `delta` object says what the pull read (none without
 * delta reads); its `bytes` stay the plan's full bytes. */
static void assert_record(rx_t *x, const rs_pull_result_t *res, int deltas)
{
    json_t *rec = stage_record(x);
    const json_t *dl = json_object_get(rec, "delta");
    assert_int_equal(key_u64(rec, "bytes"), N * 2);
    if (!deltas) {
        assert_null(dl);
        json_decref(rec);
        return;
    }
    assert_non_null(dl);
    assert_int_equal(key_u64(dl, "runs"), res->delta_runs);
    assert_int_equal(key_u64(dl, "bytes"), res->delta_bytes);
    assert_int_equal(key_u64(dl, "full_bytes"), res->delta_full_bytes);
    assert_int_equal(key_u64(dl, "whole_runs"), res->whole_runs);
    assert_int_equal(key_u64(dl, "whole_bytes"), res->whole_bytes);
    assert_int_equal(key_u64(dl, "held_bytes"), res->delta_held_bytes);
    assert_int_equal(key_u64(dl, "in_place_bytes"),
                     res->delta_in_place_bytes);
    assert_int_equal(key_u64(dl, "wire_bytes"),
                     res->delta_bytes + res->whole_bytes);
    /* every byte of the plan came whole or through a delta */
    assert_int_equal(res->delta_full_bytes + res->whole_bytes, N * 2);
    json_decref(rec);
}

/* Versions 1 to 3 under one budget, with shadow = 0 (reads land in the
 * bound parameters, never patched): `kept` shards (0, 1 or 2) keep copies
 * and take deltas from version 2 on, the others are read whole. */
static void budget_case(const char *model, uint64_t budget, uint64_t kept)
{
    world_t o;
    rs_pull_result_t res;
    rx_budget = budget;
    rx_shadow = 0;
    world_open(&o, model, 2);
    rx_budget = RS_RECEIVER_DEFAULT_DELTA_BUDGET;
    rx_shadow = 1;
    publish(o.p, o.w, 1);
    pull_exact(&o.x, 1, &res);
    assert_int_equal(res.delta_runs, 0);
    assert_int_equal(res.delta_held_bytes, kept * HALF_N * 2);
    assert_int_equal(res.delta_held_runs, kept);
    assert_int_equal(res.delta_over_budget_runs, budget > 0 ? 2 - kept : 0);
    assert_record(&o.x, &res, budget > 0);
    for (int64_t v = 2; v <= 3; v++) {
        publish(o.p, o.w, v);
        pull_exact(&o.x, v, &res);
        assert_int_equal(res.delta_runs, kept);
        assert_int_equal(res.delta_full_bytes, kept * HALF_N * 2);
        assert_true(res.delta_bytes <= kept * HALF_N * 2 / 10);
        assert_true((res.delta_bytes > 0) == (kept > 0));
        assert_int_equal(res.whole_bytes, budget > 0 ? (2 - kept) * HALF_N * 2
                                                     : 0);
        assert_int_equal(res.delta_over_budget_bytes,
                         budget > 0 ? (2 - kept) * HALF_N * 2 : 0);
        assert_int_equal(res.delta_held_bytes, kept * HALF_N * 2);
        assert_int_equal(res.delta_refused, 0);
        assert_int_equal(res.delta_in_place_bytes, 0); /* never live */
        assert_record(&o.x, &res, budget > 0);
    }
    world_close(&o);
}

static void test_budget(void **state)
{
    (void)state;
    assert_int_equal(RS_RECEIVER_DEFAULT_DELTA_BUDGET, 0); /* opt-in */
    budget_case("budget0", 0, 0); /* no copies: every read whole */
    budget_case("budget-unbounded", RS_DELTA_UNBOUNDED, 2);
    /* one shard's bytes, a little more: the first shard by rank (both
     * equal: by address), kept every version */
    budget_case("budget-half", HALF_N * 2 + 100, 1);
}

/* shadow = 0: a version whose delta patches wrong values is read again
 * whole; the bound parameter, never patched in place, ends byte-exact,
 * also when the patch was of cast reads in the staging. */
static void test_live_refused(void **state)
{
    (void)state;
    world_t o;
    rs_pull_result_t res;
    rx_shadow = 0;
    rx_budget = RS_DELTA_UNBOUNDED;
    world_at_1(&o, "live-wrong");
    rx_shadow = 1;
    rx_budget = RS_RECEIVER_DEFAULT_DELTA_BUDGET;
    publish_wrong(&o);
    pull_exact(&o.x, 2, &res);
    assert_int_equal(res.delta_retried, 1);
    assert_int_equal(res.delta_in_place_bytes, 0);
    world_close(&o);

    /* cast reads patched in the staging with no budget: the wrong patch
     * fails verification and the version is read again whole */
    rx_shadow = 0;
    rx_budget = 0;
    rx_cast = 1;
    world_at_1(&o, "live-wrong-cast");
    rx_shadow = 1;
    rx_budget = RS_RECEIVER_DEFAULT_DELTA_BUDGET;
    rx_cast = 0;
    publish_wrong(&o);
    pull_exact(&o.x, 2, &res);
    assert_int_equal(res.delta_retried, 1);
    assert_int_equal(res.delta_held_bytes, 0);
    world_close(&o);
}

/* Reads cast from staging (an f32 param) land in the executor's staging,
 * not in the shadows. Staging in one round (the default budget here: the
 * param's one box) keeps each read in its place from one pull to the
 * next, so they are patched in place there, without a copy, whatever the
 * delta budget, which counts none of them. (Staging in rounds, boxes
 * sharing the buffer, takes deltas only through copies within the
 * budget: cli_test_delta_cli.) */
static void cast_case(const char *model, uint64_t budget, int shadow)
{
    world_t o;
    rs_pull_result_t res;
    rx_cast = 1;
    rx_budget = budget;
    rx_shadow = shadow;
    world_open(&o, model, 2);
    rx_cast = 0;
    rx_budget = RS_RECEIVER_DEFAULT_DELTA_BUDGET;
    rx_shadow = 1;
    for (int64_t v = 1; v <= 3; v++) {
        publish(o.p, o.w, v);
        pull_exact(&o.x, v, &res);
        assert_int_equal(res.delta_runs, v > 1 ? 2 : 0);
        assert_int_equal(res.delta_held_bytes, 0);
        assert_int_equal(res.delta_in_place_bytes, v > 1 ? N * 2 : 0);
        /* the budget counts no piece that lands in place */
        assert_int_equal(res.delta_over_budget_bytes, 0);
        assert_int_equal(res.delta_full_bytes + res.whole_bytes, N * 2);
    }
    world_close(&o);
}

static void test_staged_budget(void **state)
{
    (void)state;
    cast_case("cast-default", RS_RECEIVER_DEFAULT_DELTA_BUDGET, 1);
    cast_case("cast-half", HALF_N * 2 + 100, 1);
    /* no shadows and no budget: the staging is still patched in place */
    cast_case("cast-live", 0, 0);
}

/* A rebind with shadow = 0: it prepares the executor again, whose new
 * staging holds no version (its generation; the receiver's epoch rises
 * too), so the next pull reads the staged reads whole instead of
 * patching whatever the new buffer holds (which would fail verification
 * and be read again, delta_retried); the one after patches in place.
 * The generation alone: tests/unit/exec/test_delta_reads.c. */
static void test_rebind_live(void **state)
{
    (void)state;
    world_t o;
    rs_pull_result_t res;
    rs_diag_t d;
    rx_cast = 1;
    rx_shadow = 0;
    rx_budget = 0;
    world_open(&o, "rebind-live", 2);
    rx_cast = 0;
    rx_shadow = 1;
    rx_budget = RS_RECEIVER_DEFAULT_DELTA_BUDGET;
    for (int64_t v = 1; v <= 2; v++) {
        publish(o.p, o.w, v);
        pull_exact(&o.x, v, &res);
    }
    assert_int_equal(res.delta_in_place_bytes, N * 2);
    memset(o.x.dest, 0, N * 4);
    ASSERT_ST(rs_receiver_bind(o.x.r, 0, o.x.dest, N * 4, RS_MEM_HOST, &d),
              RS_OK, d);
    publish(o.p, o.w, 3);
    pull_exact(&o.x, 3, &res);
    assert_int_equal(res.delta_runs, 0);
    assert_int_equal(res.delta_retried, 0);
    assert_int_equal(res.delta_in_place_bytes, 0);
    assert_int_equal(res.whole_bytes, N * 2);
    publish(o.p, o.w, 4);
    pull_exact(&o.x, 4, &res);
    assert_int_equal(res.delta_runs, 2);
    assert_int_equal(res.delta_retried, 0);
    assert_int_equal(res.delta_in_place_bytes, N * 2);
    world_close(&o);
}

/* Memory for one copy only (half the figure): the other is not made, the
 * pull goes on. */
static void test_no_memory(void **state)
{
    (void)state;
    world_t o;
    rs_pull_result_t res;
    char avail[32];
    rx_shadow = 0;
    rx_budget = RS_DELTA_UNBOUNDED;
    world_open(&o, "nomem", 2);
    rx_shadow = 1;
    rx_budget = RS_RECEIVER_DEFAULT_DELTA_BUDGET;
    /* copies take at most half of what is available */
    snprintf(avail, sizeof(avail), "%zu", 2 * (HALF_N * 2 + 1000));
    setenv("RESHARD_MEMORY_AVAILABLE", avail, 1); /* after bind's shadow */
    notices = 0;
    publish(o.p, o.w, 1);
    pull_exact(&o.x, 1, &res);
    assert_int_equal(res.delta_no_memory_runs, 1);
    assert_int_equal(res.delta_no_memory_bytes, HALF_N * 2);
    assert_int_equal(res.delta_held_bytes, HALF_N * 2);
    assert_int_equal(notices, 1);
    assert_non_null(strstr(notice_text, "do not fit the memory available"));
    /* the figure is what is free now (the copy made counts in it) */
    setenv("RESHARD_MEMORY_AVAILABLE", "1000", 1);
    publish(o.p, o.w, 2);
    pull_exact(&o.x, 2, &res);
    assert_int_equal(res.delta_runs, 1);
    assert_int_equal(res.whole_runs, 1);
    assert_int_equal(res.whole_bytes, HALF_N * 2);
    assert_int_equal(res.delta_no_memory_runs, 1); /* tried again */
    assert_int_equal(notices, 2);
    unsetenv("RESHARD_MEMORY_AVAILABLE"); /* room again: the copy is made */
    publish(o.p, o.w, 3);
    pull_exact(&o.x, 3, &res);
    assert_int_equal(res.delta_runs, 1);
    assert_int_equal(res.delta_no_memory_runs, 0);
    assert_int_equal(res.delta_held_bytes, N * 2);
    publish(o.p, o.w, 4);
    pull_exact(&o.x, 4, &res);
    assert_int_equal(res.delta_runs, 2);
    assert_int_equal(notices, 2);
    world_close(&o);
}

/* ---- results sized by the caller -------------------------------------- */

typedef union guarded {
    rs_pull_result_t r;
    unsigned char b[sizeof(rs_pull_result_t) + RESULT_GUARD_SLACK];
} guarded_t;

static void assert_guard(const guarded_t *g, size_t from)
{
    assert_result_guard(g->b, sizeof(g->b), from);
}

static void test_result_sized(void **state)
{
    (void)state;
    world_t o;
    guarded_t g;
    rs_diag_t d;
    const size_t v1 = RS_PULL_RESULT_V1_SIZE;
    world_open(&o, "sized", 2);
    publish(o.p, o.w, 1);

    /* sizes this library does not know: refused before anything */
    memset(&g, RESULT_GUARD_BYTE, sizeof(g));
    ASSERT_ST(rs_receiver_pull_sized(o.x.r, 1, &d, &g.r, v1 - 1),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "rs_pull_result_t: size");
    ASSERT_ST(rs_receiver_pull_sized(o.x.r, 1, &d, &g.r,
                                     sizeof(rs_pull_result_t) + 8),
              RS_ERR_INVALID_ARG, d);
    assert_guard(&g, 0);

    /* a caller built with the first sized layout: its bytes only */
    ASSERT_ST(rs_receiver_pull_sized(o.x.r, 1, &d, &g.r, v1), RS_OK, d);
    assert_version(o.x.dest, 1);
    assert_int_equal(g.r.version, 1);
    assert_int_equal(g.r.whole_bytes, N * 2);
    assert_guard(&g, v1);

    /* the unsized entry point of programs built before: the same */
    publish(o.p, o.w, 2);
    memset(&g, RESULT_GUARD_BYTE, sizeof(g));
    ASSERT_ST((rs_receiver_pull)(o.x.r, 2, &d, &g.r), RS_OK, d);
    assert_version(o.x.dest, 2);
    assert_int_equal(g.r.version, 2);
    assert_int_equal(g.r.delta_runs, 2);
    assert_guard(&g, v1);

    /* this header's size: every field, nothing past it */
    publish(o.p, o.w, 3);
    memset(&g, RESULT_GUARD_BYTE, sizeof(g));
    ASSERT_ST(rs_receiver_pull(o.x.r, 3, &d, &g.r), RS_OK, d);
    assert_int_equal(g.r.delta_in_place_bytes, N * 2);
    assert_int_equal(g.r.delta_held_bytes, 0);
    assert_guard(&g, sizeof(rs_pull_result_t));
    world_close(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_keep_zero),
        cmocka_unit_test(test_damaged),
        cmocka_unit_test(test_wrong_and_stale),
        cmocka_unit_test(test_killed),
        cmocka_unit_test(test_cancelled),
        cmocka_unit_test(test_rebind),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_live_refused),
        cmocka_unit_test(test_staged_budget),
        cmocka_unit_test(test_rebind_live),
        cmocka_unit_test(test_no_memory),
        cmocka_unit_test(test_result_sized),
    };
    dir_env_t e = {0};
    return dir_env_run(&e, "delta", tests, sizeof(tests) / sizeof(tests[0]),
                       &env);
}
