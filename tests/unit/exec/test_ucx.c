/* The ucx transport and exposers: the shared transport test body
 * (test_transport.c, pattern-filled regions as ground truth) run against a
 * child process serving its regions through ucx exposers over shared memory
 * (UCX_TLS=sm) and tcp on loopback; then reads across back-to-back regions,
 * malformed blobs, reconnects, endpoint reuse, a killed peer, how a post
 * is settled (a failed get, an endpoint failure after every get came back,
 * the same inside a real wait), and the exposer API with the cma blob
 * layout. */

/* The read-correctness body is shared verbatim with the other backends;
 * its cma-only tests go unused here. */
#define main test_transport_main
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "core/clock.h"
#include "test_transport.c"
#pragma GCC diagnostic pop
#undef main

#include <time.h>
#include <unistd.h>

#include "exec/transports/blob.h"
#include "exec/transports/ucx/ucx_impl.h"
#include "reshard/expose.h"

static const tfx_backend_t packed_backends[] = {
    {"ucx", 0, 1, "sm", 1},
    {"ucx", 0, 1, "tcp", 1},
};

/* Reads one range of a session and compares it with the pattern of
 * `region` starting at `off` (the range may run into following regions of
 * the packed world). */
static void read_and_check(fx_t *f, uint32_t s, uint64_t addr, uint64_t n)
{
    uint8_t *got = malloc(n + 2);
    memset(got, FILL, n + 2);
    rs_read_t r = {s, addr, got + 1, n};
    run_ok(f->t, &(batch_t){&r, 1, NULL, NULL, 0, 0, 0});
    assert_int_equal(got[0], FILL);
    assert_int_equal(got[n + 1], FILL);
    for (uint64_t k = 0; k < n; k++) {
        uint64_t a = addr + k;
        size_t reg = 0;
        while (a >= tfx_region(&f->world, s, reg)->addr +
                        tfx_region(&f->world, s, reg)->nbytes)
            reg++;
        uint8_t want =
            tfx_byte(s, reg, a - tfx_region(&f->world, s, reg)->addr);
        if (got[1 + k] != want)
            fail_msg("byte %" PRIu64 " of the read at 0x%" PRIx64
                     ": got 0x%02x, want 0x%02x", k, addr, got[1 + k], want);
    }
    free(got);
}

/* Reads that run across all three back-to-back regions, each piece from
 * its own registration; one byte past the last region is refused. */
static void test_read_across_packed(void **state)
{
    fx_t *f = fx_get(state);
    const rs_region_t *r0 = tfx_region(&f->world, 3, 0);
    const rs_region_t *r1 = tfx_region(&f->world, 3, 1);
    const rs_region_t *r2 = tfx_region(&f->world, 3, 2);
    assert_int_equal(r0->addr + r0->nbytes, r1->addr);
    assert_int_equal(r1->addr + r1->nbytes, r2->addr);
    read_and_check(f, 3, r0->addr + r0->nbytes - 17, 40);
    read_and_check(f, 3, r0->addr + 5, r0->nbytes + r1->nbytes + 1000);
    read_and_check(f, 3, r1->addr + r1->nbytes - 1, 2);
    uint64_t all = r0->nbytes + r1->nbytes + r2->nbytes;
    read_and_check(f, 3, r0->addr, all);
    uint8_t *buf = malloc(all + 1);
    memset(buf, FILL, all + 1);
    rs_read_t past = {3, r0->addr, buf, all + 1};
    rs_diag_t d;
    assert_int_equal(rs_transport_post(f->t, &past, 1, &d), RS_ERR_TRANSPORT);
    assert_non_null(strstr(d.msg, "outside every published region"));
    assert_int_equal(rs_transport_wait(f->t, 0, &d), RS_OK);
    for (uint64_t k = 0; k <= all; k++)
        assert_int_equal(buf[k], FILL);
    free(buf);
}

/* Many small reads over every session, none mergeable with the next. */
static void test_many_small_all_sessions(void **state)
{
    fx_t *f = fx_get(state);
    const size_t n = 20000;
    batch_t b = {calloc(n, sizeof(rs_read_t)), n, NULL, NULL, 0, 0, 0};
    b.dst_len = n * 72;
    b.dst = malloc(b.dst_len + 1);
    memset(b.dst, FILL, b.dst_len + 1);
    rng_state = 11;
    for (size_t i = 0; i < n; i++) {
        uint32_t s = (uint32_t)(i * NSESSIONS / n);
        const rs_region_t *reg = tfx_region(&f->world, s, rnd(NREGIONS));
        b.reads[i].session = s;
        b.reads[i].nbytes = 1 + rnd(64);
        b.reads[i].src_addr = reg->addr + rnd(reg->nbytes - 64);
        b.reads[i].dst = b.dst + i * 72 + 1;
        b.bytes += b.reads[i].nbytes;
    }
    rs_transport_counters_t c0, c1;
    run_counted(f, &b, &c0, &c1); /* b.n == n */
    free_batch(&b);
}

static ucx_sess_t *sess_of(fx_t *f, uint32_t s)
{
    ucx_state_t *st = f->t->priv;
    assert_true(s < st->nsess);
    assert_non_null(st->sess[s]);
    return st->sess[s];
}

/* Prepared reuse: the endpoint and rkeys made at connect serve every later
 * batch; after a timeout forces them closed they come back by themselves. */
static void test_endpoint_reuse(void **state)
{
    fx_t *f = fx_get(state);
    ucp_ep_h ep = sess_of(f, 1)->ep;
    ucp_rkey_h key = sess_of(f, 1)->regions[2].rkey;
    assert_non_null(ep);
    assert_non_null(key);
    rng_state = 21;
    for (int k = 0; k < 4; k++) {
        batch_t b = make_batch(&f->world, 40);
        expect_batch(&f->world, &b);
        run_ok(f->t, &b);
        assert_bytes_equal(b.dst, b.expect, b.dst_len + 1);
        free_batch(&b);
        assert_ptr_equal(sess_of(f, 1)->ep, ep);
        assert_ptr_equal(sess_of(f, 1)->regions[2].rkey, key);
    }
    /* A forced close (as after a timeout) rebuilds on the next batch. */
    rs__ucx_sess_down(f->t->priv, sess_of(f, 1), 1);
    assert_null(sess_of(f, 1)->ep);
    assert_null(sess_of(f, 1)->regions[2].rkey);
    batch_t b = make_batch(&f->world, 40);
    expect_batch(&f->world, &b);
    run_ok(f->t, &b);
    assert_bytes_equal(b.dst, b.expect, b.dst_len + 1);
    assert_non_null(sess_of(f, 1)->ep);
    free_batch(&b);
}

/* Connecting session 0 again with session 4's blob replaces its peer: its
 * reads now come from session 4's regions, and the old addresses are
 * refused. */
static void test_reconnect_replaces(void **state)
{
    fx_t *f = fx_get(state);
    rs_diag_t d;
    rs_peer_t peer = {"again", 0, NULL, 0, f->world.blobs[4],
                      f->world.blob_lens[4]};
    assert_int_equal(rs_transport_connect(f->t, 0, &peer, &d), RS_OK);
    const rs_region_t *reg = tfx_region(&f->world, 4, 1);
    uint8_t got[300];
    rs_read_t r = {0, reg->addr + 1000, got, sizeof(got)};
    assert_int_equal(rs_transport_post(f->t, &r, 1, &d), RS_OK);
    assert_int_equal(rs_transport_wait(f->t, 5, &d), RS_OK);
    for (size_t k = 0; k < sizeof(got); k++)
        assert_int_equal(got[k], tfx_byte(4, 1, 1000 + k));
    r.src_addr = tfx_region(&f->world, 0, 1)->addr;
    assert_int_equal(rs_transport_post(f->t, &r, 1, &d), RS_ERR_TRANSPORT);
    assert_non_null(strstr(d.msg, "session 0 (again)"));
    rs_transport_cancel(f->t);
}

/* Connects `blob` (copied to an exact-size buffer so a read past its end
 * is caught under ASan) as session 0. */
static rs_status_t connect_blob(fx_t *f, const void *blob, size_t len,
                                rs_diag_t *d)
{
    void *copy = malloc(len > 0 ? len : 1);
    memcpy(copy, blob, len);
    rs_peer_t peer = {"bad", 0, NULL, 0, copy, len};
    rs_status_t st = rs_transport_connect(f->t, 0, &peer, d);
    free(copy);
    return st;
}

static void expect_malformed(fx_t *f, const void *blob, size_t len,
                             const char *needle)
{
    rs_diag_t d;
    assert_int_equal(connect_blob(f, blob, len, &d), RS_ERR_INPUT);
    if (strstr(d.msg, "session 0 (bad)") == NULL ||
        (needle != NULL && strstr(d.msg, needle) == NULL))
        fail_msg("message '%s' lacks the session or '%s'", d.msg,
                 needle != NULL ? needle : "");
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_malformed_blob(void **state)
{
    fx_t *f = fx_get(state);
    const uint8_t *good = f->world.blobs[1];
    size_t len = f->world.blob_lens[1];
    uint8_t *b = malloc(len + 1);
    for (size_t cut = 0; cut < len; cut++) /* every truncation */
        expect_malformed(f, good, cut, NULL);
    memcpy(b, good, len);
    b[len] = 0;
    expect_malformed(f, b, len + 1, "1 trailing bytes");
    b[0] = 'X';
    expect_malformed(f, b, len, "magic");
    memcpy(b, good, len);
    b[4] = RS_BLOB_CMA;
    expect_malformed(f, b, len, "backend byte 1 (cma)");
    memcpy(b, good, len);
    put_u32(b + 5, 0);
    expect_malformed(f, b, len, "empty worker address");
    memcpy(b, good, len);
    put_u32(b + 5, UINT32_MAX);
    expect_malformed(f, b, len, "worker address of 4294967295 bytes");
    memcpy(b, good, len);
    uint32_t alen_ok = (uint32_t)good[5] | (uint32_t)good[6] << 8 |
                       (uint32_t)good[7] << 16 | (uint32_t)good[8] << 24;
    put_u32(b + 9 + alen_ok, 1000000);
    expect_malformed(f, b, len, "1000000 regions cannot fit");
    /* Region 1 moved onto region 0: overlapping published ranges. */
    memcpy(b, good, len);
    size_t r0 = 13 + alen_ok;
    uint32_t k0 = (uint32_t)b[r0 + 24] | (uint32_t)b[r0 + 25] << 8 |
                  (uint32_t)b[r0 + 26] << 16 | (uint32_t)b[r0 + 27] << 24;
    memcpy(b + r0 + 28 + k0, b + r0, 8);
    expect_malformed(f, b, len, "overlap");
    rs_diag_t d;
    rs_peer_t none = {"bad", 0, NULL, 0, NULL, 0};
    assert_int_equal(rs_transport_connect(f->t, 0, &none, &d), RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "no ucx blob"));
    free(b);
    /* The session's previous peer is still in place and readable. */
    read_and_check(f, 0, tfx_region(&f->world, 0, 2)->addr + 77, 5000);
}

/* Fails unless `needle` occurs in `msg` exactly once. */
static void expect_once(const char *msg, const char *needle)
{
    const char *at = strstr(msg, needle);
    if (at == NULL || strstr(at + 1, needle) != NULL)
        fail_msg("'%s' not exactly once in: %s", needle, msg);
}

/* A killed exposer: the wait fails (the endpoint reports the peer gone, or
 * the timeout expires) naming the session, and returns. The next read
 * reconnects and is told the publisher is gone, once, with UCX's own line
 * (a gone shared-memory segment, a refused connection) at most once. */
static void test_killed_peer(void **state)
{
    fx_t *f = fx_get(state);
    read_and_check(f, 2, tfx_region(&f->world, 2, 0)->addr, 100);
    tfx_world_kill(&f->world);
    rng_state = 31;
    batch_t b = make_batch(&f->world, 60);
    rs_diag_t d;
    double t0 = rs__now_s();
    rs_status_t st = rs_transport_post(f->t, b.reads, b.n, &d);
    if (st == RS_OK)
        st = rs_transport_wait(f->t, 2.0, &d);
    fprintf(stderr, "killed peer (%s): %s after %.2f s: %s\n",
            f->backend->tls, rs_status_str(st), rs__now_s() - t0, d.msg);
    assert_true(st == RS_ERR_TRANSPORT || st == RS_ERR_TIMEOUT);
    assert_true(strstr(d.msg, "(s") != NULL);
    /* Still answers (with an error) rather than hanging. */
    rs_read_t one = {2, tfx_region(&f->world, 2, 0)->addr, b.dst, 8};
    assert_int_equal(rs_transport_post(f->t, &one, 1, &d), RS_OK);
    st = rs_transport_wait(f->t, 1.0, &d);
    fprintf(stderr, "killed peer (%s), next read: %s: %s\n",
            f->backend->tls, rs_status_str(st), d.msg);
    assert_int_equal(st, RS_ERR_TRANSPORT);
    expect_once(d.msg, "session 2 (s2): the publisher is gone or unreachable");
    const char *ucx = strstr(d.msg, "UCX: ");
    if (ucx != NULL)
        expect_once(d.msg, "UCX: ");
    free_batch(&b);
}

/* After a wait times out, nothing more lands in that batch's destination,
 * however long the worker keeps progressing for later batches. */
static void test_no_write_after_timeout(void **state)
{
    fx_t *f = fx_get(state);
    rng_state = 41;
    int timeouts = 0;
    for (int round = 0; round < 3; round++) {
        batch_t b = make_batch(&f->world, 300);
        rs_diag_t d;
        assert_int_equal(rs_transport_post(f->t, b.reads, b.n, &d), RS_OK);
        rs_status_t st = rs_transport_wait(f->t, 1e-4, &d);
        assert_true(st == RS_OK || st == RS_ERR_TIMEOUT);
        timeouts += st == RS_ERR_TIMEOUT;
        uint8_t *snap = malloc(b.dst_len + 1);
        memcpy(snap, b.dst, b.dst_len + 1);
        for (int k = 0; k < 3; k++) {
            batch_t ok = make_batch(&f->world, 30);
            expect_batch(&f->world, &ok);
            run_ok(f->t, &ok);
            assert_bytes_equal(ok.dst, ok.expect, ok.dst_len + 1);
            free_batch(&ok);
            usleep(20000);
        }
        assert_bytes_equal(b.dst, snap, b.dst_len + 1);
        free(snap);
        free_batch(&b);
    }
    fprintf(stderr, "no write after timeout (%s): %d of 3 waits timed out\n",
            f->backend->tls, timeouts);
}

/* ---- how a post is settled ------------------------------------------------ */

/* A get completing with an error fails its post, even when every other
 * get of the post succeeded and the endpoint never reported anything. */
static void test_get_error_fails_post(void **state)
{
    (void)state;
    ucx_group_t g = {0, 3, 300, 0, 3, 0, UCS_OK, UCS_INPROGRESS};
    const char *what = NULL;
    g.outstanding = 3;
    assert_int_equal(rs__ucx_group_verdict(&g, UCS_OK, &what),
                     UCS_INPROGRESS);
    rs__ucx_get_done(NULL, UCS_OK, &g);
    rs__ucx_get_done(NULL, UCS_ERR_CONNECTION_RESET, &g);
    assert_int_equal(g.outstanding, 1);
    assert_int_equal(rs__ucx_group_verdict(&g, UCS_OK, &what),
                     UCS_ERR_CONNECTION_RESET);
    assert_string_equal(what, "read failed");
    /* The first failure is the one kept; the last get's success changes
     * nothing. */
    rs__ucx_get_done(NULL, UCS_ERR_CANCELED, &g);
    assert_int_equal(g.outstanding, 0);
    assert_int_equal(rs__ucx_group_verdict(&g, UCS_OK, &what),
                     UCS_ERR_CONNECTION_RESET);
}

/* An endpoint whose error handler has run fails the post, even after
 * every get has come back UCS_OK (a peer that failed during the post). */
static void test_endpoint_error_fails_post(void **state)
{
    (void)state;
    ucx_group_t g = {0, 2, 200, 0, 2, 2, UCS_OK, UCS_INPROGRESS};
    const char *what = NULL;
    assert_int_equal(rs__ucx_group_verdict(&g, UCS_ERR_ENDPOINT_TIMEOUT,
                                           &what), UCS_ERR_ENDPOINT_TIMEOUT);
    assert_string_equal(what, "endpoint failed");
    rs__ucx_get_done(NULL, UCS_OK, &g);
    rs__ucx_get_done(NULL, UCS_OK, &g);
    assert_int_equal(g.outstanding, 0);
    assert_int_equal(rs__ucx_group_verdict(&g, UCS_ERR_ENDPOINT_TIMEOUT,
                                           &what), UCS_ERR_ENDPOINT_TIMEOUT);
    assert_string_equal(what, "endpoint failed");
    /* Healthy endpoint, every get back: done. */
    assert_int_equal(rs__ucx_group_verdict(&g, UCS_OK, &what), UCS_OK);
}

/* The same through the wait: an endpoint failure recorded after the
 * batch's gets succeeded fails the batch, naming the session, and credits
 * none of its bytes; the next batch reconnects and reads correctly. */
static void test_endpoint_error_during_wait(void **state)
{
    fx_t *f = fx_get(state);
    ucx_state_t *st = f->t->priv;
    uint8_t got[4096];
    rs_diag_t d;
    const rs_region_t *reg = tfx_region(&f->world, 2, 1);
    rs_read_t r = {2, reg->addr + 10, got, sizeof(got)};
    rs_transport_counters_t c0, c1;
    rs_transport_counters(f->t, &c0);
    assert_int_equal(rs_transport_post(f->t, &r, 1, &d), RS_OK);
    /* What the endpoint's error handler records when the peer fails
     * before the post is settled: the wait lets every get come back (with
     * UCS_OK: the peer is alive), then the endpoint is marked failed before
     * the post is looked at. A wait that settled posts by their flush (or
     * their gets) alone returned RS_OK here. */
    ucx_sess_t *x = sess_of(f, 2);
    assert_non_null(x->ep);
    assert_int_equal(st->groups_len, 1);
    st->fail_after_issue = UCS_ERR_CONNECTION_RESET;
    rs_status_t rc = rs_transport_wait(f->t, 5, &d);
    st->fail_after_issue = UCS_OK;
    assert_int_equal(rc, RS_ERR_TRANSPORT);
    /* A reset peer is reported as gone, UCX's words once in parentheses. */
    if (strstr(d.msg, "session 2 (s2): the publisher is gone or "
                      "unreachable (endpoint failed: ") == NULL)
        fail_msg("message: %s", d.msg);
    rs_transport_counters(f->t, &c1);
    assert_int_equal(c1.bytes - c0.bytes, 0);
    read_and_check(f, 2, reg->addr + 10, sizeof(got));
}

/* ---- the exposer API ---------------------------------------------------- */

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void test_exposer_api(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_exposer_h x = (rs_exposer_h)0x1;
    assert_int_equal(rs_exposer_create("pigeon", &d, &x), RS_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.msg, "pigeon"));
    assert_ptr_equal(x, (rs_exposer_h)0x1);
    rs_exposer_destroy(NULL);
    static uint8_t mem[4096];
    assert_int_equal(rs_exposer_create("cma", &d, &x), RS_OK);
    const void *blob;
    size_t len;
    assert_int_equal(rs_exposer_blob(x, &blob, &len), RS_ERR_INVALID_ARG);
    assert_int_equal(rs_exposer_add_region(x, 0x5000, mem + 100, 900, RS_MEM_HOST, &d),
                     RS_OK);
    assert_int_equal(rs_exposer_add_region(x, 0x1000, mem, 100, RS_MEM_HOST, &d), RS_OK);
    assert_int_equal(rs_exposer_add_region(x, 0x5000 + 899, mem, 2, RS_MEM_HOST, &d),
                     RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "overlaps"));
    assert_int_equal(rs_exposer_add_region(x, 0x9000, mem, 0, RS_MEM_HOST, &d),
                     RS_ERR_INVALID_ARG);
    assert_int_equal(rs_exposer_add_region(x, UINT64_MAX - 3, mem, 8, RS_MEM_HOST, &d),
                     RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "wraps"));
    assert_int_equal(rs_exposer_start(x, &d), RS_OK);
    assert_int_equal(rs_exposer_add_region(x, 0x9000, mem, 8, RS_MEM_HOST, &d),
                     RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "after start"));
    assert_int_equal(rs_exposer_start(x, &d), RS_ERR_INVALID_ARG);
    /* The cma blob, field by field (docs/formats.md). */
    assert_int_equal(rs_exposer_blob(x, &blob, &len), RS_OK);
    const uint8_t *p = blob;
    assert_int_equal(len, 4 + 1 + 8 + 4 + 2 * 24);
    assert_memory_equal(p, "RSB1", 4);
    assert_int_equal(p[4], 1);
    assert_int_equal(get_le(p + 5, 8), (uint64_t)getpid());
    assert_int_equal(get_le(p + 13, 4), 2);
    assert_int_equal(get_le(p + 17, 8), 0x5000);
    assert_int_equal(get_le(p + 25, 8), 900);
    assert_int_equal(get_le(p + 33, 8), (uint64_t)(uintptr_t)(mem + 100));
    assert_int_equal(get_le(p + 41, 8), 0x1000);
    assert_int_equal(get_le(p + 49, 8), 100);
    assert_int_equal(get_le(p + 57, 8), (uint64_t)(uintptr_t)mem);
    rs_exposer_destroy(x);
}

/* A ucx exposer in this process: the blob's header and regions are laid
 * out as documented, and destroy stops its thread and unmaps. */
static void test_ucx_exposer_blob(void **state)
{
    (void)state;
    setenv("UCX_TLS", "tcp", 1);
    rs_diag_t d;
    rs_exposer_h x;
    static uint8_t mem[3][1000];
    assert_int_equal(rs_exposer_create("ucx", &d, &x), RS_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(rs_exposer_add_region(x, 0x100000 * (uint64_t)(3 - i),
                                               mem[i], 1000, RS_MEM_HOST, &d), RS_OK);
    assert_int_equal(rs_exposer_start(x, &d), RS_OK);
    const void *blob;
    size_t len;
    assert_int_equal(rs_exposer_blob(x, &blob, &len), RS_OK);
    const uint8_t *p = blob;
    assert_memory_equal(p, "RSB1", 4);
    assert_int_equal(p[4], 2);
    size_t at = 9 + get_le(p + 5, 4);
    assert_true(at + 4 <= len);
    assert_int_equal(get_le(p + at, 4), 3);
    at += 4;
    for (int i = 0; i < 3; i++) {
        assert_true(at + 28 <= len);
        assert_int_equal(get_le(p + at, 8), 0x100000 * (uint64_t)(3 - i));
        assert_int_equal(get_le(p + at + 8, 8), 1000);
        assert_int_equal(get_le(p + at + 16, 8), (uint64_t)(uintptr_t)mem[i]);
        uint64_t klen = get_le(p + at + 24, 4);
        assert_true(klen > 0);
        at += 28 + klen;
    }
    assert_int_equal(at, len);
    rs_exposer_destroy(x);
}

#define UCX(test, k)                                                    \
    cmocka_unit_test_prestate_setup_teardown(test, fx_setup, fx_teardown, \
                                             (void *)&tfx_ucx_backends[k])
#define BOTH_TLS(test) UCX(test, 0), UCX(test, 1)
#define PACKED(test, k)                                                 \
    cmocka_unit_test_prestate_setup_teardown(test, fx_setup, fx_teardown, \
                                             (void *)&packed_backends[k])

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exposer_api),
        cmocka_unit_test(test_ucx_exposer_blob),
        BOTH_TLS(test_random_batches),
        BOTH_TLS(test_many_small_reads),
        BOTH_TLS(test_refuse_outside),
        BOTH_TLS(test_refuse_unconnected),
        BOTH_TLS(test_cancel_and_two_posts),
        BOTH_TLS(test_timeout_is_clean),
        BOTH_TLS(test_zero_length_and_empty),
        BOTH_TLS(test_many_small_all_sessions),
        PACKED(test_read_across_packed, 0),
        PACKED(test_read_across_packed, 1),
        BOTH_TLS(test_endpoint_reuse),
        BOTH_TLS(test_reconnect_replaces),
        UCX(test_malformed_blob, 0),
        BOTH_TLS(test_no_write_after_timeout),
        cmocka_unit_test(test_get_error_fails_post),
        cmocka_unit_test(test_endpoint_error_fails_post),
        BOTH_TLS(test_endpoint_error_during_wait),
        BOTH_TLS(test_killed_peer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
