/* The version directory against one test body run on both backends (file:
 * in a temporary directory, redis:// on a private redis-server): idempotent
 * creation, replays and conflicts, forked publishers racing on the same
 * version while a reader checks that READY never shows a missing table,
 * newest-READY discovery, stale publishers, leases and release, malformed
 * URLs; then Redis alone: password auth and a server that dies or hangs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "dir_env.h"
#include "reshard/dir.h"
#include "assert_status.h"

typedef dir_env_t env_t;

static env_t *g;

#define NEED_BACKEND() DIR_ENV_NEED(g)

/* Table bytes of (version, slot, variant): binary, with zero bytes, and
 * computed here alone so every read is checked against them. */
static size_t table_of(int64_t version, int64_t slot, int variant,
                       unsigned char *buf, size_t cap)
{
    size_t len = 200 + (size_t)((version * 37 + slot * 11) % 300);
    uint64_t x = (uint64_t)(version * 1000003 + slot * 7919 + variant * 31);
    if (len > cap)
        len = cap;
    for (size_t i = 0; i < len; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (i % 7 == 0) ? 0 : (unsigned char)(x >> 56);
    }
    return len;
}

static rs_dir_h open_dir(void)
{
    return dir_env_open(g);
}

static void publish_ok(rs_dir_h dir, const char *model, int64_t v,
                       int64_t slot)
{
    unsigned char buf[1024];
    rs_diag_t d;
    size_t len = table_of(v, slot, 0, buf, sizeof(buf));
    ASSERT_ST(rs_dir_publish(dir, model, v, slot, buf, len, &d), RS_OK, d);
}

static void read_exact(rs_dir_h dir, const char *model, int64_t v,
                       int64_t slot)
{
    unsigned char want[1024];
    void *got = NULL;
    size_t len = 0;
    rs_diag_t d;
    size_t wlen = table_of(v, slot, 0, want, sizeof(want));
    ASSERT_ST(rs_dir_read(dir, model, v, slot, &d, &got, &len), RS_OK, d);
    assert_int_equal(len, wlen);
    assert_memory_equal(got, want, wlen);
    free(got);
}

static void expect_info(rs_dir_h dir, const char *model, int64_t v,
                        rs_version_state_t state, int64_t slots,
                        int64_t published)
{
    rs_version_info_t info;
    rs_diag_t d;
    ASSERT_ST(rs_dir_info(dir, model, v, &d, &info), RS_OK, d);
    assert_int_equal(info.version, v);
    assert_int_equal(info.state, state);
    assert_int_equal(info.slots, slots);
    assert_int_equal(info.published, published);
}

static void test_create_and_validate(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_version_info_t info;
    const char *m = "create.model-1";
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 3, &d), RS_OK, d);
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 3, &d), RS_OK, d);
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 4, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "exists with 3 slots, not 4");
    expect_info(dir, m, 1, RS_VERSION_PENDING, 3, 0);
    ASSERT_ST(rs_dir_info(dir, m, 2, &d, &info), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "has no version 2");

    ASSERT_ST(rs_dir_create_version(dir, "a/b", 1, 1, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "a/b");
    ASSERT_ST(rs_dir_create_version(dir, "", 1, 1, &d), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_create_version(dir, "..", 1, 1, &d), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_create_version(dir, "x{y}", 1, 1, &d), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_create_version(dir, m, -1, 1, &d), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_create_version(dir, m, 2, 0, &d), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_publish(dir, m, 1, 3, "x", 1, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "slot 3 is out of range");
    ASSERT_ST(rs_dir_publish(dir, m, 1, -1, "x", 1, &d), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_publish(dir, m, 9, 0, "x", 1, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "never created");
    ASSERT_ST(rs_dir_heartbeat(dir, m, 1, 3, &d), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_heartbeat(dir, m, 9, 0, &d), RS_ERR_INPUT, d);
    rs_dir_close(dir);
}

static void test_replay_conflict_pending(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    unsigned char a[1024], b[1024];
    void *got = NULL;
    size_t len = 0;
    const char *m = "replay";
    size_t alen = table_of(4, 0, 0, a, sizeof(a));
    size_t blen = table_of(4, 0, 1, b, sizeof(b));
    ASSERT_ST(rs_dir_create_version(dir, m, 4, 3, &d), RS_OK, d);
    ASSERT_ST(rs_dir_publish(dir, m, 4, 0, a, alen, &d), RS_OK, d);
    ASSERT_ST(rs_dir_read(dir, m, 4, 0, &d, &got, &len), RS_ERR_INCOMPLETE,
              d);
    ASSERT_MSG_HAS(d, "PENDING");
    expect_info(dir, m, 4, RS_VERSION_PENDING, 3, 1);
    ASSERT_ST(rs_dir_publish(dir, m, 4, 0, a, alen, &d), RS_OK, d);
    ASSERT_ST(rs_dir_publish(dir, m, 4, 0, b, blen, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "slot 0: conflicting geometry");
    ASSERT_ST(rs_dir_publish(dir, m, 4, 0, a, alen - 1, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "slot 0: conflicting geometry");
    publish_ok(dir, m, 4, 2);
    expect_info(dir, m, 4, RS_VERSION_PENDING, 3, 2);
    ASSERT_ST(rs_dir_publish(dir, m, 4, 1, "", 0, &d), RS_OK, d);
    expect_info(dir, m, 4, RS_VERSION_READY, 3, 3);
    read_exact(dir, m, 4, 0);
    read_exact(dir, m, 4, 2);
    ASSERT_ST(rs_dir_read(dir, m, 4, 1, &d, &got, &len), RS_OK, d);
    assert_int_equal(len, 0);
    free(got);
    /* after READY: replays still fine, conflicts still refused */
    ASSERT_ST(rs_dir_publish(dir, m, 4, 0, a, alen, &d), RS_OK, d);
    ASSERT_ST(rs_dir_publish(dir, m, 4, 1, "z", 1, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "slot 1: conflicting geometry");
    ASSERT_ST(rs_dir_read(dir, m, 4, 3, &d, &got, &len), RS_ERR_INPUT, d);
    read_exact(dir, m, 4, 0);
    rs_dir_close(dir);
}

#define RACE_PROCS 6
#define RACE_VERSIONS 3
#define RACE_SLOTS 4
#define RACE_DEADLINE_S 15.0

/* A racing publisher: creates every version and publishes every slot in
 * its own order, so each slot is won by one process and replayed by the
 * others. Exit status 0 when every call succeeded. */
static void race_child(int id, int gate)
{
    char c;
    rs_diag_t d;
    rs_dir_h dir = NULL;
    if (read(gate, &c, 1) < 0 || rs_dir_open(g->url, &d, &dir) != RS_OK)
        _exit(2);
    for (int v = 0; v < RACE_VERSIONS; v++) {
        if (rs_dir_create_version(dir, "race", v, RACE_SLOTS, &d) != RS_OK)
            goto fail;
        for (int k = 0; k < RACE_SLOTS; k++) {
            unsigned char buf[1024];
            int slot = (k + id) % RACE_SLOTS;
            size_t len = table_of(v, slot, 0, buf, sizeof(buf));
            if (rs_dir_publish(dir, "race", v, slot, buf, len, &d) != RS_OK)
                goto fail;
        }
    }
    rs_dir_close(dir);
    _exit(0);
fail:
    fprintf(stderr, "racing publisher %d: %s\n", id, d.msg);
    _exit(1);
}

/* The reader's check: a READY version shows every table, byte-exact. */
static int observe(rs_dir_h dir)
{
    int ready = 0;
    for (int v = 0; v < RACE_VERSIONS; v++) {
        rs_version_info_t info;
        rs_diag_t d;
        if (rs_dir_info(dir, "race", v, &d, &info) != RS_OK ||
            info.state != RS_VERSION_READY)
            continue;
        assert_int_equal(info.published, RACE_SLOTS);
        for (int s = 0; s < RACE_SLOTS; s++)
            read_exact(dir, "race", v, s);
        ready++;
    }
    return ready;
}

static void reap_all(pid_t *pids, int n, int *failed)
{
    double deadline = rs__now_s() + RACE_DEADLINE_S;
    for (int i = 0; i < n; i++) {
        int status = 0;
        while (waitpid(pids[i], &status, WNOHANG) == 0) {
            if (rs__now_s() > deadline)
                kill(pids[i], SIGKILL);
            rs__sleep_s(0.005);
        }
        *failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
}

static void test_racing_publishers(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    int gate[2];
    pid_t pids[RACE_PROCS];
    assert_int_equal(pipe(gate), 0);
    for (int i = 0; i < RACE_PROCS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(gate[1]);
            race_child(i, gate[0]);
        }
    }
    close(gate[0]);
    close(gate[1]); /* every child starts at once */
    int seen_ready = 0, failed = 0;
    double deadline = rs__now_s() + RACE_DEADLINE_S;
    while (seen_ready < RACE_VERSIONS && rs__now_s() < deadline)
        seen_ready = observe(dir);
    reap_all(pids, RACE_PROCS, &failed);
    assert_int_equal(failed, 0);
    assert_int_equal(observe(dir), RACE_VERSIONS);

    rs_version_info_t *infos = NULL;
    size_t n = 0;
    rs_diag_t d;
    ASSERT_ST(rs_dir_list(dir, "race", &d, &infos, &n), RS_OK, d);
    assert_int_equal(n, RACE_VERSIONS);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(infos[i].version, (int64_t)i);
        assert_int_equal(infos[i].state, RS_VERSION_READY);
        assert_int_equal(infos[i].published, RACE_SLOTS);
    }
    free(infos);
    ASSERT_ST(rs_dir_publish(dir, "race", 1, 2, "other", 5, &d), RS_ERR_INPUT,
              d);
    ASSERT_MSG_HAS(d, "slot 2: conflicting geometry");
    read_exact(dir, "race", 1, 2);
    rs_dir_close(dir);
}

/* A child that creates and completes a version after a short delay: the
 * parent's wait must see a version another process made. */
static pid_t publish_later(const char *model, int64_t v, double delay)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    rs__sleep_s(delay);
    rs_diag_t d;
    rs_dir_h dir = NULL;
    unsigned char buf[1024];
    size_t len = table_of(v, 0, 0, buf, sizeof(buf));
    int ok = rs_dir_open(g->url, &d, &dir) == RS_OK &&
             rs_dir_create_version(dir, model, v, 1, &d) == RS_OK &&
             rs_dir_publish(dir, model, v, 0, buf, len, &d) == RS_OK;
    rs_dir_close(dir);
    _exit(ok ? 0 : 1);
}

static void test_newest_ready(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_version_info_t info;
    const char *m = "newest";
    ASSERT_ST(rs_dir_wait_ready(dir, m, -1, 0.1, 0, &d, &info),
              RS_ERR_TIMEOUT, d);
    ASSERT_MSG_HAS(d, "no READY version");
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 1, &d), RS_OK, d);
    publish_ok(dir, m, 1, 0);
    ASSERT_ST(rs_dir_create_version(dir, m, 5, 3, &d), RS_OK, d);
    publish_ok(dir, m, 5, 1);
    ASSERT_ST(rs_dir_create_version(dir, m, 3, 1, &d), RS_OK, d);
    publish_ok(dir, m, 3, 0);
    ASSERT_ST(rs_dir_wait_ready(dir, m, -1, 1.0, 0, &d, &info), RS_OK, d);
    assert_int_equal(info.version, 3);
    assert_int_equal(info.state, RS_VERSION_READY);
    ASSERT_ST(rs_dir_wait_ready(dir, m, 5, 0.1, 0, &d, &info),
              RS_ERR_TIMEOUT, d);
    ASSERT_MSG_HAS(d, "1 of 3 slots published; missing slots: 0, 2");
    ASSERT_ST(rs_dir_wait_ready(dir, m, 6, 0.05, 0, &d, &info),
              RS_ERR_TIMEOUT, d);
    ASSERT_MSG_HAS(d, "has no version 6");
    publish_ok(dir, m, 5, 0);
    publish_ok(dir, m, 5, 2);
    ASSERT_ST(rs_dir_wait_ready(dir, m, -1, 1.0, 0, &d, &info), RS_OK, d);
    assert_int_equal(info.version, 5);
    assert_int_equal(info.slots, 3);

    pid_t child = publish_later(m, 12, 0.2);
    ASSERT_ST(rs_dir_wait_ready(dir, m, 12, 10.0, 0, &d, &info), RS_OK, d);
    read_exact(dir, m, 12, 0);
    int status = 0;
    waitpid(child, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    rs_version_info_t *infos = NULL;
    size_t n = 0;
    ASSERT_ST(rs_dir_list(dir, m, &d, &infos, &n), RS_OK, d);
    assert_int_equal(n, 4);
    int64_t want[] = {1, 3, 5, 12};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(infos[i].version, want[i]);
        assert_int_equal(infos[i].state, RS_VERSION_READY);
    }
    free(infos);
    ASSERT_ST(rs_dir_list(dir, "no-such-model", &d, &infos, &n), RS_OK, d);
    assert_int_equal(n, 0);
    free(infos);
    rs_dir_close(dir);
}

static void test_stale_publisher(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_version_info_t info;
    const char *m = "stale";
    ASSERT_ST(rs_dir_create_version(dir, m, 2, 2, &d), RS_OK, d);
    publish_ok(dir, m, 2, 0);
    publish_ok(dir, m, 2, 1);
    ASSERT_ST(rs_dir_wait_ready(dir, m, 2, 1.0, 60, &d, &info), RS_OK, d);
    rs__sleep_s(1.2);
    ASSERT_ST(rs_dir_heartbeat(dir, m, 2, 0, &d), RS_OK, d);
    /* slot 1 said nothing for 1.2 s: never counted as a live publisher */
    ASSERT_ST(rs_dir_wait_ready(dir, m, 2, 0.2, 1.0, &d, &info),
              RS_ERR_TIMEOUT, d);
    ASSERT_MSG_HAS(d, "stale slot");
    ASSERT_MSG_HAS(d, "1 (last heartbeat");
    ASSERT_ST(rs_dir_wait_ready(dir, m, -1, 0.1, 1.0, &d, &info),
              RS_ERR_TIMEOUT, d);
    ASSERT_MSG_HAS(d, "newest READY version 2");
    ASSERT_ST(rs_dir_heartbeat(dir, m, 2, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_wait_ready(dir, m, 2, 2.0, 1.0, &d, &info), RS_OK, d);
    assert_int_equal(info.version, 2);
    rs_dir_close(dir);
}

static void test_lease_release(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_version_info_t info;
    void *got = NULL;
    size_t len = 0;
    const char *m = "lease";
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 1, &d), RS_OK, d);
    publish_ok(dir, m, 1, 0);
    ASSERT_ST(rs_dir_lease(dir, m, 1, "recv-0", 30, &d), RS_OK, d);
    ASSERT_ST(rs_dir_release(dir, m, 1, &d), RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "leased by 'recv-0'");
    ASSERT_ST(rs_dir_lease(dir, m, 1, "recv-1", 30, &d), RS_OK, d);
    ASSERT_ST(rs_dir_release(dir, m, 1, &d), RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "2 live leases");
    rs_dir_lease_info_t *leases = NULL;
    size_t nleases = 0;
    ASSERT_ST(rs_dir_leases(dir, m, 1, &d, &leases, &nleases), RS_OK, d);
    assert_int_equal(nleases, 2);
    assert_string_equal(leases[0].holder, "recv-0");
    assert_string_equal(leases[1].holder, "recv-1");
    assert_true(leases[0].left_s > 0 && leases[0].left_s <= 30);
    assert_true(leases[0].epoch != leases[1].epoch);
    free(leases);
    ASSERT_ST(rs_dir_unlease(dir, m, 1, "recv-0", &d), RS_OK, d);
    ASSERT_ST(rs_dir_unlease(dir, m, 1, "recv-0", &d), RS_OK, d);
    ASSERT_ST(rs_dir_release(dir, m, 1, &d), RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "leased by 'recv-1'");
    expect_info(dir, m, 1, RS_VERSION_READY, 1, 1);
    ASSERT_ST(rs_dir_unlease(dir, m, 1, "recv-1", &d), RS_OK, d);
    ASSERT_ST(rs_dir_release_as(dir, m, 1, "coord-1", &d), RS_OK, d);
    expect_info(dir, m, 1, RS_VERSION_RELEASED, 1, 0);
    ASSERT_ST(rs_dir_leases(dir, m, 1, &d, &leases, &nleases), RS_OK, d);
    assert_int_equal(nleases, 0);
    free(leases);
    ASSERT_ST(rs_dir_release(dir, m, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_read(dir, m, 1, 0, &d, &got, &len), RS_ERR_INCOMPLETE,
              d);
    ASSERT_ST(rs_dir_publish(dir, m, 1, 0, "x", 1, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "released");
    ASSERT_ST(rs_dir_lease(dir, m, 1, "late", 30, &d), RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "was released by 'coord-1'");
    ASSERT_ST(rs_dir_heartbeat(dir, m, 1, 0, &d), RS_OK, d);
    ASSERT_ST(rs_dir_wait_released(dir, m, 1, 0, &d), RS_OK, d);
    ASSERT_ST(rs_dir_wait_ready(dir, m, 1, 1.0, 0, &d, &info),
              RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "was released by 'coord-1'");

    ASSERT_ST(rs_dir_lease(dir, m, 1, "bad holder", 1, &d), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_lease(dir, m, 7, "r", 1, &d), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_create_version(dir, m, 2, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_lease(dir, m, 2, "r", 0, &d), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_lease(dir, m, 2, "r", NAN, &d), RS_ERR_INPUT, d);
    rs_dir_close(dir);
}

static void test_lease_expiry(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    const char *m = "expiry";
    ASSERT_ST(rs_dir_create_version(dir, m, 3, 1, &d), RS_OK, d);
    publish_ok(dir, m, 3, 0);
    /* renewed: the second ttl counts, not the first */
    uint64_t epoch = 0;
    ASSERT_ST(rs_dir_lease_take(dir, m, 3, "renewed", 0.2, &d, &epoch), RS_OK,
              d);
    ASSERT_ST(rs_dir_lease_renew(dir, m, 3, "renewed", epoch, 30, &d), RS_OK,
              d);
    rs__sleep_s(0.4);
    ASSERT_ST(rs_dir_release(dir, m, 3, &d), RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "leased by 'renewed'");
    ASSERT_ST(rs_dir_unlease(dir, m, 3, "renewed", &d), RS_OK, d);
    ASSERT_ST(rs_dir_lease(dir, m, 3, "short", 0.3, &d), RS_OK, d);
    ASSERT_ST(rs_dir_release(dir, m, 3, &d), RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "leased by 'short'");
    rs_status_t st = RS_ERR_INCOMPLETE;
    double deadline = rs__now_s() + 5.0;
    while (st == RS_ERR_INCOMPLETE && rs__now_s() < deadline) {
        rs__sleep_s(0.05);
        st = rs_dir_release(dir, m, 3, &d);
    }
    ASSERT_ST(st, RS_OK, d);
    expect_info(dir, m, 3, RS_VERSION_RELEASED, 1, 0);
    rs_dir_close(dir);
}

/* Lease epochs: every take starts a new one, and a renewal succeeds only
 * for the live lease of its epoch, so a lapse, a re-take, a dropped lease
 * and a release each end the proof of continuity; a refused renewal
 * changes nothing. */
static void test_lease_epochs(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    uint64_t e1 = 0, e2 = 0, e3 = 0, other = 0;
    const char *m = "epochs";
    ASSERT_ST(rs_dir_create_version(dir, m, 4, 1, &d), RS_OK, d);
    publish_ok(dir, m, 4, 0);
    ASSERT_ST(rs_dir_lease_take(dir, m, 4, "h", 30, &d, &e1), RS_OK, d);
    assert_true(e1 >= 1);
    ASSERT_ST(rs_dir_lease_renew(dir, m, 4, "h", e1, 30, &d), RS_OK, d);
    ASSERT_ST(rs_dir_lease_take(dir, m, 4, "other", 30, &d, &other), RS_OK, d);
    assert_true(other != e1);
    /* a live lease's name is its holder's: a second take is refused */
    ASSERT_ST(rs_dir_lease_take(dir, m, 4, "h", 30, &d, &e2), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "lease holder name 'h' is taken");
    /* dropped, then taken again under the same name: the old epoch is over */
    ASSERT_ST(rs_dir_unlease(dir, m, 4, "h", &d), RS_OK, d);
    ASSERT_ST(rs_dir_lease_take(dir, m, 4, "h", 30, &d, &e2), RS_OK, d);
    assert_true(e2 != e1 && e2 != other);
    ASSERT_ST(rs_dir_lease_renew(dir, m, 4, "h", e1, 30, &d),
              RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "was taken again (now epoch");
    ASSERT_ST(rs_dir_lease_renew(dir, m, 4, "h", e2, 30, &d), RS_OK, d);
    ASSERT_ST(rs_dir_unlease(dir, m, 4, "other", &d), RS_OK, d);
    ASSERT_ST(rs_dir_lease_renew(dir, m, 4, "other", other, 30, &d),
              RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "is not held");
    /* a renewal extends: the short first ttl no longer counts */
    ASSERT_ST(rs_dir_unlease(dir, m, 4, "h", &d), RS_OK, d);
    ASSERT_ST(rs_dir_lease_take(dir, m, 4, "h", 0.2, &d, &e3), RS_OK, d);
    ASSERT_ST(rs_dir_lease_renew(dir, m, 4, "h", e3, 30, &d), RS_OK, d);
    rs__sleep_s(0.4);
    ASSERT_ST(rs_dir_release(dir, m, 4, &d), RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "leased by 'h'");
    /* a lapse ends the epoch even though nobody took the name since */
    ASSERT_ST(rs_dir_lease_renew(dir, m, 4, "h", e3, 0.2, &d), RS_OK, d);
    rs__sleep_s(0.4);
    ASSERT_ST(rs_dir_lease_renew(dir, m, 4, "h", e3, 30, &d),
              RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "lapsed");
    ASSERT_MSG_HAS(d, "'h'");
    /* the refused renewal did not revive it: release goes ahead */
    ASSERT_ST(rs_dir_release(dir, m, 4, &d), RS_OK, d);
    ASSERT_ST(rs_dir_lease_renew(dir, m, 4, "h", e3, 30, &d),
              RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "was released by '");
    ASSERT_ST(rs_dir_lease_take(dir, m, 4, "h", 30, &d, &e1),
              RS_ERR_INCOMPLETE, d);
    ASSERT_ST(rs_dir_lease_renew(dir, m, 4, "h", 0, 30, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "epoch 0");
    ASSERT_ST(rs_dir_lease_renew(dir, m, 99, "h", 1, 30, &d), RS_ERR_INPUT,
              d);
    /* epochs are per version and never repeat within one */
    ASSERT_ST(rs_dir_create_version(dir, m, 5, 1, &d), RS_OK, d);
    uint64_t prev = 0;
    for (int i = 0; i < 5; i++) {
        uint64_t e = 0;
        ASSERT_ST(rs_dir_lease_take(dir, m, 5, "h", 30, &d, &e), RS_OK, d);
        assert_true(e > prev);
        prev = e;
        ASSERT_ST(rs_dir_unlease(dir, m, 5, "h", &d), RS_OK, d);
    }
    rs_dir_close(dir);
}

/* Group records: states only go up, the last APPLIED commits, a FAILED
 * or an abort of the open attempt aborts, a decision is final, and the
 * next STAGED opens a new attempt. */
static void test_group_record(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_dir_group_info_t gi;
    const char *m = "group";
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_group_info(dir, m, 1, "e", 0, &d, &gi), RS_OK, d);
    assert_int_equal(gi.size, 0);
    ASSERT_ST(rs_dir_group_mark(dir, m, 1, "e", 3, 2, 0, RS_GROUP_STAGED,
                                NULL, &d, &gi), RS_OK, d);
    assert_int_equal(gi.attempt, 1);
    assert_string_equal(gi.ranks, "--S");
    ASSERT_ST(rs_dir_group_mark(dir, m, 1, "e", 2, 0, 0, RS_GROUP_STAGED,
                                NULL, &d, &gi), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "has 3 ranks, not 2");
    ASSERT_ST(rs_dir_group_mark(dir, m, 1, "e", 3, 3, 0, RS_GROUP_STAGED,
                                NULL, &d, &gi), RS_ERR_INPUT, d);
    for (int64_t r = 0; r < 3; r++)
        ASSERT_ST(rs_dir_group_mark(dir, m, 1, "e", 3, r, 1,
                                    RS_GROUP_APPLIED, NULL, &d, &gi), RS_OK, d);
    assert_int_equal(gi.decision, RS_GROUP_COMMITTED);
    assert_string_equal(gi.ranks, "PPP");
    ASSERT_ST(rs_dir_group_abort(dir, m, 1, "e", 1, "late", &d, &gi), RS_OK, d);
    assert_int_equal(gi.decision, RS_GROUP_COMMITTED);
    ASSERT_ST(rs_dir_group_mark(dir, m, 1, "e", 3, 1, 0, RS_GROUP_STAGED,
                                NULL, &d, &gi), RS_OK, d);
    assert_int_equal(gi.attempt, 2);
    ASSERT_ST(rs_dir_group_mark(dir, m, 1, "e", 3, 1, 2, RS_GROUP_FAILED,
                                "rank 1\nbroke", &d, &gi), RS_OK, d);
    assert_int_equal(gi.decision, RS_GROUP_ABORTED);
    assert_string_equal(gi.note, "rank 1 broke");
    ASSERT_ST(rs_dir_group_mark(dir, m, 1, "e", 3, 0, 2, RS_GROUP_APPLIED,
                                NULL, &d, &gi), RS_OK, d);
    assert_int_equal(gi.decision, RS_GROUP_ABORTED);
    ASSERT_ST(rs_dir_group_mark(dir, m, 1, "e", 3, 0, 0, RS_GROUP_STAGED,
                                NULL, &d, &gi), RS_OK, d);
    ASSERT_ST(rs_dir_group_abort(dir, m, 1, "e", 3, "timed out", &d, &gi),
              RS_OK, d);
    assert_int_equal(gi.decision, RS_GROUP_ABORTED);
    assert_int_equal(gi.attempts, 3);
    ASSERT_ST(rs_dir_group_info(dir, m, 1, "e", 1, &d, &gi), RS_OK, d);
    assert_int_equal(gi.decision, RS_GROUP_COMMITTED);
    ASSERT_ST(rs_dir_group_mark(dir, m, 1, "e", 3, 0, 9, RS_GROUP_APPLIED,
                                NULL, &d, &gi), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "not started");
    ASSERT_ST(rs_dir_group_mark(dir, m, 2, "e", 3, 0, 0, RS_GROUP_STAGED,
                                NULL, &d, &gi), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_group_mark(dir, m, 1, "bad name", 3, 0, 0,
                                RS_GROUP_STAGED, NULL, &d, &gi), RS_ERR_INPUT,
              d);
    /* kept after release: ranks may still read their decision */
    ASSERT_ST(rs_dir_release(dir, m, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_group_info(dir, m, 1, "e", 1, &d, &gi), RS_OK, d);
    assert_int_equal(gi.decision, RS_GROUP_COMMITTED);
    rs_dir_close(dir);
}

static void test_wait_released(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    const char *m = "released";
    ASSERT_ST(rs_dir_create_version(dir, m, 8, 2, &d), RS_OK, d);
    ASSERT_ST(rs_dir_wait_released(dir, m, 8, 0.1, &d), RS_ERR_TIMEOUT, d);
    ASSERT_MSG_HAS(d, "still PENDING");
    ASSERT_ST(rs_dir_wait_released(dir, m, 9, 0.1, &d), RS_ERR_INPUT, d);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        rs_dir_h other = NULL;
        rs__sleep_s(0.2);
        int ok = rs_dir_open(g->url, &d, &other) == RS_OK &&
                 rs_dir_release(other, m, 8, &d) == RS_OK;
        rs_dir_close(other);
        _exit(ok ? 0 : 1);
    }
    ASSERT_ST(rs_dir_wait_released(dir, m, 8, 10.0, &d), RS_OK, d);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    expect_info(dir, m, 8, RS_VERSION_RELEASED, 2, 0);
    rs_dir_close(dir);
}

/* A handle whose cancel flag is raised ends each wait after its first
 * look with RS_ERR_CANCELLED naming what it waited for (a 60 s wait:
 * without the flag this test would fail by timing out); a version READY
 * at the first look is still answered; cleared, the waits time out as
 * before. */
static void test_cancelled_waits(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_cancel_t cancel = {0};
    rs_dir_params_t dp;
    rs_dir_h dir = NULL;
    rs_diag_t d;
    rs_version_info_t info;
    const char *m = "cancelled";
    rs_dir_params_init(&dp);
    dp.cancel = &cancel;
    ASSERT_ST(rs_dir_open_params(g->url, &dp, &d, &dir), RS_OK, d);
    rs_cancel_raise(&cancel);
    assert_true(rs_cancel_raised(&cancel));
    ASSERT_ST(rs_dir_wait_ready(dir, m, 4, 60, 0, &d, &info),
              RS_ERR_CANCELLED, d);
    ASSERT_MSG_HAS(d, "cancelled while waiting for version 4 of 'cancelled'");
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 1, &d), RS_OK, d);
    publish_ok(dir, m, 1, 0);
    ASSERT_ST(rs_dir_wait_ready(dir, m, 1, 60, 0, &d, &info), RS_OK, d);
    ASSERT_ST(rs_dir_wait_released(dir, m, 1, 60, &d), RS_ERR_CANCELLED, d);
    ASSERT_MSG_HAS(d, "the release of version 1 of 'cancelled'");
    rs_cancel_clear(&cancel);
    assert_false(rs_cancel_raised(&cancel));
    assert_false(rs_cancel_raised(NULL));
    ASSERT_ST(rs_dir_wait_ready(dir, m, 4, 0.05, 0, &d, &info),
              RS_ERR_TIMEOUT, d);
    ASSERT_ST(rs_dir_wait_released(dir, m, 1, 0.05, &d), RS_ERR_TIMEOUT, d);
    rs_dir_close(dir);
}

static void test_malformed_urls(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "ftp://host", "file:", "redis://", "redis://host:",
        "redis://host:abc", "redis://host:0", "redis://host:70000",
        "redis://user@host:1", "redis://:@host:1", "redis://host:1/db",
        "redis://host:1?x=1", "redis://host:1?timeout=-1", "redis://[::1",
        "redis://:s3cret@host:x1", "redis://:s3cret@/",
    };
    rs_diag_t d;
    rs_dir_h dir = NULL;
    ASSERT_ST(rs_dir_open(NULL, &d, &dir), RS_ERR_INVALID_ARG, d);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rs_status_t st = rs_dir_open(bad[i], &d, &dir);
        if (st != RS_ERR_INPUT)
            fail_msg("'%s': got %s (%s)", bad[i], rs_status_str(st), d.msg);
        assert_null(strstr(d.msg, "s3cret")); /* never echo a password */
    }
    char url[128];
    int port = rfx_free_port();
    snprintf(url, sizeof(url), "redis://:pw@127.0.0.1:%d?timeout=2", port);
    double t0 = rs__now_s();
    ASSERT_ST(rs_dir_open(url, &d, &dir), RS_ERR_TRANSPORT, d);
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%d", port);
    ASSERT_MSG_HAS(d, where);
    assert_true(rs__now_s() - t0 < 10.0);
}

/* The file backend's layout is what docs/formats.md says. */
static void test_file_layout(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    const char *m = "layout";
    ASSERT_ST(rs_dir_create_version(dir, m, 7, 2, &d), RS_OK, d);
    publish_ok(dir, m, 7, 1);
    char p[PATH_MAX + 64];
    struct stat st;
    const char *present[] = {"meta", "slot-1", "slot-1@default",
                             "hb-1@default", "lock"};
    for (size_t i = 0; i < 5; i++) {
        snprintf(p, sizeof(p), "%s/dir/%s/7/%s", g->tmp, m, present[i]);
        assert_int_equal(stat(p, &st), 0);
    }
    snprintf(p, sizeof(p), "%s/dir/%s/7/READY", g->tmp, m);
    assert_int_not_equal(stat(p, &st), 0);
    publish_ok(dir, m, 7, 0);
    assert_int_equal(stat(p, &st), 0);
    uint64_t epoch = 0;
    ASSERT_ST(rs_dir_lease_take(dir, m, 7, "h", 30, &d, &epoch), RS_OK, d);
    snprintf(p, sizeof(p), "%s/dir/%s/7/lease-h", g->tmp, m);
    assert_int_equal(stat(p, &st), 0);
    /* "<expiry> <epoch>\n", and `epoch` holds the last one handed out */
    char text[128] = "", want[32];
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(text, sizeof(text), f));
    fclose(f);
    snprintf(want, sizeof(want), " %llu\n", (unsigned long long)epoch);
    assert_non_null(strstr(text, want));
    assert_true(strtod(text, NULL) > (double)time(NULL));
    snprintf(p, sizeof(p), "%s/dir/%s/7/epoch", g->tmp, m);
    f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(text, sizeof(text), f));
    fclose(f);
    assert_int_equal(strtoull(text, NULL, 10), epoch);
    rs_dir_close(dir);
}

static void test_redis_auth(void **state)
{
    (void)state;
    NEED_BACKEND();
    rfx_server_t s;
    char why[512], url[256];
    rs_diag_t d;
    rs_dir_h dir = NULL;
    if (rfx_start(&s, "right-pw", why, sizeof(why)) != 0)
        fail_msg("%s", why);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", s.port);
    rs_status_t st1 = rs_dir_open(url, &d, &dir);
    rs_diag_t d1 = d;
    snprintf(url, sizeof(url), "redis://:wrong-pw@127.0.0.1:%d", s.port);
    rs_status_t st2 = rs_dir_open(url, &d, &dir);
    rs_diag_t d2 = d;
    rs_status_t st3 = rs_dir_open(s.url, &d, &dir);
    rs_status_t st4 = st3 == RS_OK
                          ? rs_dir_create_version(dir, "auth", 1, 1, &d)
                          : st3;
    rs_dir_close(dir);
    rfx_stop(&s);
    ASSERT_ST(st1, RS_ERR_TRANSPORT, d1);
    ASSERT_MSG_HAS(d1, "NOAUTH");
    ASSERT_ST(st2, RS_ERR_TRANSPORT, d2);
    ASSERT_MSG_HAS(d2, "authentication refused");
    assert_null(strstr(d2.msg, "wrong-pw"));
    ASSERT_ST(st4, RS_OK, d);
}

/* A command on a connection of its own, around the directory. */
static redisReply *raw(int port, const char *cmd)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = c != NULL && c->err == 0 ? redisCommand(c, cmd) : NULL;
    if (c != NULL)
        redisFree(c);
    return r;
}

/* A private server with a short timeout, and a directory on it. */
typedef struct private {
    rfx_server_t s;
    char url[PATH_MAX + 128];
    char where[64]; /* how messages name the server */
    rs_diag_t d;
    rs_dir_h dir;
} private_t;

/* Starts p with version 1 (two slots) of model m: the status of opening
 * and creating, checked later. */
static rs_status_t start_private(private_t *p, const char *m)
{
    char why[512];
    p->dir = NULL;
    if (rfx_start(&p->s, NULL, why, sizeof(why)) != 0)
        fail_msg("%s", why);
    snprintf(p->url, sizeof(p->url), "%s?timeout=0.5", p->s.url);
    snprintf(p->where, sizeof(p->where), "127.0.0.1:%d", p->s.port);
    rs_status_t st = rs_dir_open(p->url, &p->d, &p->dir);
    return st == RS_OK ? rs_dir_create_version(p->dir, m, 1, 2, &p->d) : st;
}

static void test_redis_killed_server(void **state)
{
    (void)state;
    NEED_BACKEND();
    private_t p;
    rs_status_t st = start_private(&p, "dead");
    /* scripts flushed behind our back are loaded again */
    redisReply *r = raw(p.s.port, "SCRIPT FLUSH");
    if (r != NULL)
        freeReplyObject(r);
    rs_status_t st_flushed =
        st == RS_OK ? rs_dir_create_version(p.dir, "dead", 1, 2, &p.d) : st;
    kill(p.s.pid, SIGKILL); /* with our connection open */
    waitpid(p.s.pid, NULL, 0);
    rs_status_t st_lost = rs_dir_publish(p.dir, "dead", 1, 0, "t", 1, &p.d);
    rs_diag_t d_lost = p.d;
    rs_status_t st_gone = rs_dir_heartbeat(p.dir, "dead", 1, 0, &p.d);
    rs_diag_t d_gone = p.d;
    rs_dir_close(p.dir);
    rfx_stop(&p.s);
    ASSERT_ST(st, RS_OK, p.d);
    ASSERT_ST(st_flushed, RS_OK, p.d);
    ASSERT_ST(st_lost, RS_ERR_TRANSPORT, d_lost);
    ASSERT_MSG_HAS(d_lost, p.where);
    ASSERT_ST(st_gone, RS_ERR_TRANSPORT, d_gone);
    ASSERT_MSG_HAS(d_gone, p.where);
    ASSERT_MSG_HAS(d_gone, "cannot connect");
}

static void test_redis_hung_server(void **state)
{
    (void)state;
    NEED_BACKEND();
    private_t p;
    rs_status_t st = start_private(&p, "hung");
    kill(p.s.pid, SIGSTOP); /* every call must still return */
    double t0 = rs__now_s();
    rs_status_t st_hung = rs_dir_heartbeat(p.dir, "hung", 1, 0, &p.d);
    rs_diag_t d_hung = p.d;
    rs_dir_h other = NULL;
    rs_status_t st_open = rs_dir_open(p.url, &p.d, &other);
    rs_diag_t d_open = p.d;
    double hung_s = rs__now_s() - t0;
    rs_dir_close(other);
    rs_dir_close(p.dir);
    rfx_stop(&p.s);
    ASSERT_ST(st, RS_OK, p.d);
    ASSERT_ST(st_hung, RS_ERR_TRANSPORT, d_hung);
    ASSERT_MSG_HAS(d_hung, p.where);
    ASSERT_ST(st_open, RS_ERR_TRANSPORT, d_open);
    ASSERT_MSG_HAS(d_open, p.where);
    assert_true(hung_s < 20.0); /* a bound, not a measurement */
}

static int run_group(env_t *e, const struct CMUnitTest *extra, size_t nextra)
{
    const struct CMUnitTest common[] = {
        cmocka_unit_test(test_create_and_validate),
        cmocka_unit_test(test_replay_conflict_pending),
        cmocka_unit_test(test_racing_publishers),
        cmocka_unit_test(test_newest_ready),
        cmocka_unit_test(test_stale_publisher),
        cmocka_unit_test(test_lease_release),
        cmocka_unit_test(test_lease_expiry),
        cmocka_unit_test(test_lease_epochs),
        cmocka_unit_test(test_group_record),
        cmocka_unit_test(test_wait_released),
        cmocka_unit_test(test_cancelled_waits),
        cmocka_unit_test(test_malformed_urls),
    };
    enum { NCOMMON = sizeof(common) / sizeof(common[0]) };
    struct CMUnitTest all[NCOMMON + 4];
    memcpy(all, common, sizeof(common));
    memcpy(all + NCOMMON, extra, nextra * sizeof(*extra));
    return dir_env_run(e, "dir-test", all, NCOMMON + nextra, &g);
}

int main(void)
{
    static env_t file_env = {.backend = "file"};
    static env_t redis_env = {.backend = "redis", .redis = 1};
    const struct CMUnitTest file_only[] = {
        cmocka_unit_test(test_file_layout),
    };
    const struct CMUnitTest redis_only[] = {
        cmocka_unit_test(test_redis_auth),
        cmocka_unit_test(test_redis_killed_server),
        cmocka_unit_test(test_redis_hung_server),
    };
    return run_group(&file_env, file_only, 1) +
           run_group(&redis_env, redis_only, 3);
}
