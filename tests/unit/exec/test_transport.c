/* Transport backends against one test body: random batches of reads from
 * pattern-filled regions (in this process or in a child for cma) compared
 * byte for byte with the pattern, refusals that leave the destination
 * untouched, cancel, timeouts, counters, and the cma error paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/transport_impl.h"
#include "transport_fixture.h"

#define NSESSIONS 5
#define NREGIONS 3
#define FILL 0xEE

static const uint64_t region_sizes[NREGIONS] = {4099, 300001,
                                                (6u << 20) + 5};

static uint64_t rng_state;

static uint64_t rnd(uint64_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (rng_state >> 33) % n;
}

typedef struct fx {
    const tfx_backend_t *backend;
    tfx_world_t world;
    int skip;
    char why[RS_DIAG_MSG_MAX + 64];
    rs_transport_h t;
} fx_t;

static int fx_setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    f->backend = *state;
    int rc = tfx_world_open(&f->world, f->backend, NSESSIONS, region_sizes,
                            NREGIONS, f->why, sizeof(f->why));
    f->skip = rc == 1;
    if (rc == 0) {
        rs_diag_t d;
        if (tfx_transport(&f->world, &d, &f->t) != RS_OK) {
            snprintf(f->why, sizeof(f->why), "transport: %s", d.msg);
            rc = -1;
        }
    }
    *state = f;
    if (rc < 0)
        fprintf(stderr, "world setup failed: %s\n", f->why);
    return rc < 0 ? -1 : 0;
}

static int fx_teardown(void **state)
{
    fx_t *f = *state;
    rs_transport_destroy(f->t);
    tfx_world_close(&f->world);
    free(f);
    return 0;
}

static fx_t *fx_get(void **state)
{
    fx_t *f = *state;
    if (f->skip) {
        fprintf(stderr, "skipping %s: %s\n", f->backend->name, f->why);
        skip();
    }
    return f;
}

/* A batch with its destination and the expected destination image. */
typedef struct batch {
    rs_read_t *reads;
    size_t n;
    uint8_t *dst;
    uint8_t *expect;
    uint64_t dst_len;
    uint64_t bytes;
    uint64_t sessions; /* distinct sessions in the batch */
} batch_t;

static uint64_t pick_size(uint64_t region)
{
    uint64_t k = rnd(100), n;
    if (k < 50)
        n = 1 + rnd(64);
    else if (k < 80)
        n = 65 + rnd(64 << 10);
    else if (k < 95)
        n = (64 << 10) + rnd(1 << 20);
    else
        n = (1 << 20) + rnd(5 << 20);
    return n < region ? n : region;
}

/* Random reads over every session, placed at shuffled destination offsets
 * with gaps; the reads array itself is shuffled so sessions interleave. */
static batch_t make_batch(const tfx_world_t *w, size_t n)
{
    batch_t b = {calloc(n, sizeof(rs_read_t)), n, NULL, NULL, 0, 0, 0};
    uint64_t *pos = calloc(n, sizeof(uint64_t));
    int seen[NSESSIONS] = {0};
    for (size_t i = 0; i < n; i++) {
        uint32_t s = (uint32_t)rnd(NSESSIONS);
        size_t r = rnd(NREGIONS);
        const rs_region_t *reg = tfx_region(w, s, r);
        uint64_t len = pick_size(reg->nbytes);
        b.reads[i].session = s;
        b.reads[i].src_addr = reg->addr + rnd(reg->nbytes - len + 1);
        b.reads[i].nbytes = len;
        pos[i] = b.dst_len + rnd(64);
        b.dst_len = pos[i] + len;
        b.bytes += len;
        b.sessions += !seen[s];
        seen[s] = 1;
    }
    b.dst = malloc(b.dst_len + 1);
    memset(b.dst, FILL, b.dst_len + 1);
    for (size_t i = n; i > 1; i--) { /* shuffle, keeping each read's slot */
        size_t j = rnd(i);
        rs_read_t tr = b.reads[i - 1];
        uint64_t tp = pos[i - 1];
        b.reads[i - 1] = b.reads[j], pos[i - 1] = pos[j];
        b.reads[j] = tr, pos[j] = tp;
    }
    for (size_t i = 0; i < n; i++)
        b.reads[i].dst = b.dst + pos[i];
    free(pos);
    return b;
}

/* The expected destination by a plain loop over the pattern. */
static void expect_batch(const tfx_world_t *w, batch_t *b)
{
    b->expect = malloc(b->dst_len + 1);
    memset(b->expect, FILL, b->dst_len + 1);
    for (size_t i = 0; i < b->n; i++) {
        const rs_read_t *rd = &b->reads[i];
        size_t r = 0;
        while (r + 1 < NREGIONS &&
               !(rd->src_addr >= tfx_region(w, rd->session, r)->addr &&
                 rd->src_addr < tfx_region(w, rd->session, r)->addr +
                                    tfx_region(w, rd->session, r)->nbytes))
            r++;
        uint64_t off = rd->src_addr - tfx_region(w, rd->session, r)->addr;
        uint8_t *out = b->expect + ((uint8_t *)rd->dst - b->dst);
        for (uint64_t k = 0; k < rd->nbytes; k++)
            out[k] = tfx_byte(rd->session, r, off + k);
    }
}

static void free_batch(batch_t *b)
{
    free(b->reads);
    free(b->dst);
    free(b->expect);
}

static void assert_bytes_equal(const uint8_t *got, const uint8_t *want,
                               uint64_t n)
{
    if (memcmp(got, want, n) == 0)
        return;
    uint64_t k = 0;
    while (got[k] == want[k])
        k++;
    fail_msg("byte %" PRIu64 " of %" PRIu64 ": got 0x%02x, want 0x%02x", k, n,
             got[k], want[k]);
}

static void run_ok(rs_transport_h t, const batch_t *b)
{
    rs_diag_t d;
    rs_status_t st = rs_transport_post(t, b->reads, b->n, &d);
    if (st != RS_OK)
        fail_msg("post: %s", d.msg);
    st = rs_transport_wait(t, 0, &d);
    if (st != RS_OK)
        fail_msg("wait: %s", d.msg);
}

/* Runs b (its expected bytes computed first) and checks every byte and
 * that the counters gained its reads and bytes; the counters before and
 * after in c0, c1. */
static void run_counted(fx_t *f, batch_t *b, rs_transport_counters_t *c0,
                        rs_transport_counters_t *c1)
{
    expect_batch(&f->world, b);
    rs_transport_counters(f->t, c0);
    run_ok(f->t, b);
    rs_transport_counters(f->t, c1);
    assert_bytes_equal(b->dst, b->expect, b->dst_len + 1);
    assert_int_equal(c1->reads - c0->reads, b->n);
    assert_int_equal(c1->bytes - c0->bytes, b->bytes);
}

static void test_random_batches(void **state)
{
    fx_t *f = fx_get(state);
    rng_state = 42;
    static const size_t sizes[] = {1, 7, 60, 150, 150, 300};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        batch_t b = make_batch(&f->world, sizes[k]);
        rs_transport_counters_t c0, c1;
        run_counted(f, &b, &c0, &c1);
        assert_int_equal(c1.posts - c0.posts, b.sessions);
        assert_int_equal(c1.errors, c0.errors);
        free_batch(&b);
    }
}

/* More reads of one session than IOV_MAX, none contiguous with the next,
 * in both source and destination. */
static void test_many_small_reads(void **state)
{
    fx_t *f = fx_get(state);
    const size_t n = 3000;
    const rs_region_t *reg = tfx_region(&f->world, 2, 1);
    batch_t b = {calloc(n, sizeof(rs_read_t)), n, NULL, NULL, 0, 0, 1};
    b.dst_len = n * 16;
    b.dst = malloc(b.dst_len + 1);
    memset(b.dst, FILL, b.dst_len + 1);
    for (size_t i = 0; i < n; i++) {
        b.reads[i].session = 2;
        b.reads[i].src_addr = reg->addr + i * 97 % (reg->nbytes - 16);
        b.reads[i].nbytes = 1 + i % 15;
        b.reads[i].dst = b.dst + i * 16;
        b.bytes += b.reads[i].nbytes;
    }
    expect_batch(&f->world, &b);
    run_ok(f->t, &b);
    assert_bytes_equal(b.dst, b.expect, b.dst_len + 1);
    free_batch(&b);
}

/* Posts a good batch plus one bad read; the post must fail naming
 * `needle`, nothing may be written, and the transport stays usable. */
static void expect_refused(fx_t *f, rs_read_t bad, const char *needle)
{
    rng_state = 7 + bad.session;
    batch_t b = make_batch(&f->world, 40);
    uint8_t spare[64];
    bad.dst = spare;
    rs_read_t *all = calloc(b.n + 1, sizeof(rs_read_t));
    memcpy(all, b.reads, b.n * sizeof(rs_read_t));
    all[b.n] = bad;
    rs_transport_counters_t c0, c1;
    rs_transport_counters(f->t, &c0);
    rs_diag_t d;
    assert_int_equal(rs_transport_post(f->t, all, b.n + 1, &d),
                     RS_ERR_TRANSPORT);
    if (strstr(d.msg, needle) == NULL)
        fail_msg("message '%s' lacks '%s'", d.msg, needle);
    assert_int_equal(rs_transport_wait(f->t, 0, &d), RS_OK);
    rs_transport_counters(f->t, &c1);
    uint8_t *fill = malloc(b.dst_len + 1);
    memset(fill, FILL, b.dst_len + 1);
    assert_bytes_equal(b.dst, fill, b.dst_len + 1);
    assert_int_equal(c1.reads, c0.reads);
    assert_int_equal(c1.bytes, c0.bytes);
    assert_int_equal(c1.errors, c0.errors + 1);
    assert_true(c1.posts - c0.posts <= b.sessions);
    free(fill);
    free(all);
    free_batch(&b);
    /* Still usable afterwards. */
    batch_t ok = make_batch(&f->world, 20);
    expect_batch(&f->world, &ok);
    run_ok(f->t, &ok);
    assert_bytes_equal(ok.dst, ok.expect, ok.dst_len + 1);
    free_batch(&ok);
}

static void test_refuse_outside(void **state)
{
    fx_t *f = fx_get(state);
    char needle[96];
    for (uint32_t s = 0; s < NSESSIONS; s += NSESSIONS - 1) {
        const rs_region_t *r0 = tfx_region(&f->world, s, 0);
        const rs_region_t *r1 = tfx_region(&f->world, s, 1);
        rs_read_t past_end = {s, r1->addr + r1->nbytes - 10, NULL, 11};
        rs_read_t before = {s, r0->addr - 1, NULL, 1};
        rs_read_t wraps = {s, UINT64_MAX - 15, NULL, 64};
        rs_read_t cases[] = {past_end, before, wraps};
        for (size_t k = 0; k < 3; k++) {
            snprintf(needle, sizeof(needle), "session %u", s);
            expect_refused(f, cases[k], needle);
            snprintf(needle, sizeof(needle), "%" PRIu64 " bytes at 0x%" PRIx64,
                     cases[k].nbytes, cases[k].src_addr);
            expect_refused(f, cases[k], needle);
        }
    }
}

static void test_refuse_unconnected(void **state)
{
    fx_t *f = fx_get(state);
    rs_read_t bad = {NSESSIONS + 3, tfx_region(&f->world, 0, 0)->addr, NULL,
                     8};
    expect_refused(f, bad, "session 8 is not connected");
    bad.session = 1000000;
    expect_refused(f, bad, "session 1000000 is not connected");
}

static void test_cancel_and_two_posts(void **state)
{
    fx_t *f = fx_get(state);
    rng_state = 99;
    batch_t a = make_batch(&f->world, 30);
    rs_diag_t d;
    assert_int_equal(rs_transport_post(f->t, a.reads, a.n, &d), RS_OK);
    rs_transport_cancel(f->t);
    assert_int_equal(rs_transport_wait(f->t, 0, &d), RS_OK);
    uint8_t *fill = malloc(a.dst_len + 1);
    memset(fill, FILL, a.dst_len + 1);
    assert_bytes_equal(a.dst, fill, a.dst_len + 1);
    free(fill);
    /* Two posts, one wait: both batches land. */
    batch_t b = make_batch(&f->world, 30);
    expect_batch(&f->world, &a);
    expect_batch(&f->world, &b);
    assert_int_equal(rs_transport_post(f->t, a.reads, a.n, &d), RS_OK);
    assert_int_equal(rs_transport_post(f->t, b.reads, b.n, &d), RS_OK);
    assert_int_equal(rs_transport_wait(f->t, 0, &d), RS_OK);
    assert_bytes_equal(a.dst, a.expect, a.dst_len + 1);
    assert_bytes_equal(b.dst, b.expect, b.dst_len + 1);
    free_batch(&a);
    free_batch(&b);
}

/* A tiny timeout either still completes or names outstanding sessions;
 * either way the transport is clean for the next batch. */
static void test_timeout_is_clean(void **state)
{
    fx_t *f = fx_get(state);
    rng_state = 5;
    batch_t b = make_batch(&f->world, 300);
    rs_diag_t d;
    assert_int_equal(rs_transport_post(f->t, b.reads, b.n, &d), RS_OK);
    rs_status_t st = rs_transport_wait(f->t, 1e-7, &d);
    assert_true(st == RS_OK || st == RS_ERR_TIMEOUT);
    if (st == RS_ERR_TIMEOUT) {
        assert_non_null(strstr(d.msg, "outstanding: "));
        assert_non_null(strstr(d.msg, "(s"));
    }
    assert_int_equal(rs_transport_wait(f->t, 0, &d), RS_OK);
    batch_t ok = make_batch(&f->world, 50);
    expect_batch(&f->world, &ok);
    run_ok(f->t, &ok);
    assert_bytes_equal(ok.dst, ok.expect, ok.dst_len + 1);
    free_batch(&ok);
    free_batch(&b);
}

static void test_zero_length_and_empty(void **state)
{
    fx_t *f = fx_get(state);
    rs_diag_t d;
    rs_read_t z = {1, tfx_region(&f->world, 1, 2)->addr, NULL, 0};
    rs_transport_counters_t c0, c1;
    rs_transport_counters(f->t, &c0);
    assert_int_equal(rs_transport_post(f->t, NULL, 0, &d), RS_OK);
    assert_int_equal(rs_transport_post(f->t, &z, 1, &d), RS_OK);
    assert_int_equal(rs_transport_wait(f->t, 0, &d), RS_OK);
    rs_transport_counters(f->t, &c1);
    assert_int_equal(c1.reads - c0.reads, 1);
    assert_int_equal(c1.bytes, c0.bytes);
}

static void test_unknown_backend(void **state)
{
    (void)state;
    rs_transport_params_t p;
    rs_transport_params_init(&p);
    assert_string_equal(p.backend, "local");
    p.backend = "carrier-pigeon";
    rs_diag_t d;
    rs_transport_h t = (rs_transport_h)0x1;
    assert_int_equal(rs_transport_create(&p, &d, &t), RS_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.msg, "carrier-pigeon"));
    assert_ptr_equal(t, (rs_transport_h)0x1);
    assert_int_equal(rs_transport_create(&p, &d, NULL), RS_ERR_INVALID_ARG);
    p.backend = NULL;
    assert_int_equal(rs_transport_create(&p, &d, &t), RS_ERR_INVALID_ARG);
    /* NULL params mean the defaults. */
    assert_int_equal(rs_transport_create(NULL, &d, &t), RS_OK);
    assert_string_equal(rs_transport_backend(t), "local");
    rs_transport_destroy(t);
    rs_transport_destroy(NULL);
}

/* Regions back to back in published addresses may be read across, each
 * piece from its own local buffer; a gap after them is still refused. */
static void test_read_across_regions(void **state)
{
    (void)state;
    static const char *names[] = {"local", "local-mt"};
    uint8_t a[100], b[50], out[160];
    for (int i = 0; i < 100; i++)
        a[i] = (uint8_t)i;
    for (int i = 0; i < 50; i++)
        b[i] = (uint8_t)(200 + i);
    rs_region_t regs[] = {{0x1064, 50, b}, {0x1000, 100, a}};
    rs_peer_t peer = {"packed", 0, regs, 2, NULL, 0};
    for (int k = 0; k < 2; k++) {
        rs_transport_params_t p;
        rs_transport_params_init(&p);
        p.backend = names[k];
        rs_transport_h t;
        rs_diag_t d;
        assert_int_equal(rs_transport_create(&p, &d, &t), RS_OK);
        assert_int_equal(rs_transport_connect(t, 0, &peer, &d), RS_OK);
        memset(out, FILL, sizeof(out));
        rs_read_t r = {0, 0x1000 + 90, out + 1, 30};
        assert_int_equal(rs_transport_post(t, &r, 1, &d), RS_OK);
        assert_int_equal(rs_transport_wait(t, 0, &d), RS_OK);
        assert_int_equal(out[0], FILL);
        for (int i = 0; i < 30; i++)
            assert_int_equal(out[1 + i], i < 10 ? 90 + i : 200 + i - 10);
        assert_int_equal(out[31], FILL);
        r.nbytes = 61; /* one byte past the second region */
        assert_int_equal(rs_transport_post(t, &r, 1, &d), RS_ERR_TRANSPORT);
        assert_non_null(strstr(d.msg, "61 bytes at 0x105a"));
        rs_transport_destroy(t);
    }
}

static rs_status_t connect_one(const char *backend, const rs_peer_t *peer,
                               rs_diag_t *d)
{
    rs_transport_params_t p;
    rs_transport_params_init(&p);
    p.backend = backend;
    rs_transport_h t;
    assert_int_equal(rs_transport_create(&p, d, &t), RS_OK);
    assert_string_equal(rs_transport_backend(t), backend);
    rs_status_t st = rs_transport_connect(t, 0, peer, d);
    rs_transport_destroy(t);
    return st;
}

static void test_connect_validation(void **state)
{
    (void)state;
    static uint8_t mem[256];
    rs_diag_t d;
    rs_region_t overlap[] = {{0x2000, 100, mem}, {0x1000, 0x1001, mem}};
    rs_peer_t p = {"p", 1, overlap, 2, NULL, 0};
    assert_int_equal(connect_one("local", &p, &d), RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "overlap"));
    rs_region_t nolocal[] = {{0x1000, 16, NULL}};
    p.regions = nolocal;
    p.nregions = 1;
    assert_int_equal(connect_one("local-mt", &p, &d), RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "local pointer"));
    assert_int_equal(connect_one("cma", &p, &d), RS_OK);
    p.pid = 0;
    assert_int_equal(connect_one("cma", &p, &d), RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "pid 0"));
    rs_region_t empty[] = {{0x1000, 0, mem}};
    p.regions = empty;
    assert_int_equal(connect_one("local", &p, &d), RS_ERR_INVALID_ARG);
}

/* Binary search against a linear scan over random disjoint regions. */
static void test_region_find(void **state)
{
    (void)state;
    rng_state = 3;
    rs_region_t regs[40];
    uint64_t at = 100;
    for (size_t i = 0; i < 40; i++) {
        at += rnd(3) * rnd(50);
        regs[i].addr = at;
        regs[i].nbytes = 1 + rnd(60);
        regs[i].local = NULL;
        at += regs[i].nbytes;
    }
    for (int k = 0; k < 20000; k++) {
        uint64_t addr = rnd(at + 50), n = 1 + rnd(70);
        const rs_region_t *want = NULL;
        for (size_t i = 0; i < 40; i++) {
            if (addr >= regs[i].addr &&
                addr + n <= regs[i].addr + regs[i].nbytes) {
                want = &regs[i];
                break;
            }
        }
        assert_ptr_equal(rs__region_find(regs, 40, addr, n), want);
    }
    assert_null(rs__region_find(regs, 0, 100, 1));
    assert_null(rs__region_find(regs, 40, regs[39].addr, UINT64_MAX));
}

static void expect_cma_error(pid_t pid, uint64_t addr, const char *needle)
{
    rs_transport_params_t p;
    rs_transport_params_init(&p);
    p.backend = "cma";
    rs_transport_h t;
    rs_diag_t d;
    assert_int_equal(rs_transport_create(&p, &d, &t), RS_OK);
    rs_peer_t peer = {"gone", pid, NULL, 0, NULL, 0};
    assert_int_equal(rs_transport_connect(t, 4, &peer, &d), RS_OK);
    uint8_t buf[32];
    memset(buf, FILL, sizeof(buf));
    rs_read_t r = {4, addr, buf, 32};
    assert_int_equal(rs_transport_post(t, &r, 1, &d), RS_OK);
    rs_status_t st = rs_transport_wait(t, 0, &d);
    rs_transport_counters_t c;
    rs_transport_counters(t, &c);
    rs_transport_destroy(t);
    assert_int_equal(st, RS_ERR_TRANSPORT);
    char pidstr[32];
    snprintf(pidstr, sizeof(pidstr), "pid %d", (int)pid);
    if (strstr(d.msg, pidstr) == NULL || strstr(d.msg, needle) == NULL ||
        strstr(d.msg, "session 4") == NULL)
        fail_msg("message '%s' lacks '%s', '%s' or the session", d.msg,
                 pidstr, needle);
    assert_int_equal(c.errors, 1);
    assert_int_equal(c.reads, 0);
}

static void test_cma_gone(void **state)
{
    fx_t *f = fx_get(state); /* skips where cma is not permitted */
    pid_t dead = tfx_dead_pid();
    assert_true(dead > 0);
    expect_cma_error(dead, tfx_region(&f->world, 0, 0)->addr, "ESRCH");
}

static void test_cma_bad_address(void **state)
{
    fx_t *f = fx_get(state);
    expect_cma_error(f->world.child, 0x10, "EFAULT");
}

#define PER_BACKEND(test, k)                                         \
    cmocka_unit_test_prestate_setup_teardown(test, fx_setup, fx_teardown, \
                                             (void *)&tfx_backends[k])

/* The cases that need no world. */
static int run_api(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_backend),
        cmocka_unit_test(test_connect_validation),
        cmocka_unit_test(test_region_find),
        cmocka_unit_test(test_read_across_regions),
    };
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}

/* Every world case on backend k of tfx_backends (and cma's own). */
static int run_backend(const char *name, size_t k)
{
    const struct CMUnitTest tests[] = {
        PER_BACKEND(test_random_batches, k),
        PER_BACKEND(test_many_small_reads, k),
        PER_BACKEND(test_refuse_outside, k),
        PER_BACKEND(test_refuse_unconnected, k),
        PER_BACKEND(test_cancel_and_two_posts, k),
        PER_BACKEND(test_timeout_is_clean, k),
        PER_BACKEND(test_zero_length_and_empty, k),
        PER_BACKEND(test_cma_gone, k),
        PER_BACKEND(test_cma_bad_address, k),
    };
    const size_t n = sizeof(tests) / sizeof(tests[0]);
    int cma = strcmp(tfx_backends[k].name, "cma") == 0;
    return _cmocka_run_group_tests(name, tests, cma ? n : n - 2, NULL, NULL);
}

/* One part per backend, so ctest runs them side by side; no argument runs
 * every part. */
static const char *const parts[] = {"api", "local", "local-mt-1",
                                    "local-mt-3", "cma"};
#define NPARTS (sizeof(parts) / sizeof(parts[0]))

int main(int argc, char **argv)
{
    size_t first = 0, last = NPARTS;
    if (argc > 1) {
        for (first = 0; first < NPARTS; first++)
            if (strcmp(argv[1], parts[first]) == 0)
                break;
        if (first == NPARTS) {
            fprintf(stderr, "usage: %s [api|local|local-mt-1|local-mt-3|cma]\n",
                    argv[0]);
            return 2;
        }
        last = first + 1;
    }
    int failed = 0;
    for (size_t p = first; p < last; p++)
        failed += p == 0 ? run_api() : run_backend(parts[p], p - 1);
    return failed;
}
