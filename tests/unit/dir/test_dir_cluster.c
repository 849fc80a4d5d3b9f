/* What a cluster does to the directory, on both backends where it applies:
 * URLs shown redacted; abandon releasing whatever the leases; heartbeats
 * refused for a slot without a table; the newest
 * version wait skipping stale versions; a receiver's file: directory never
 * created; then Redis alone: which failures are transient, a wait riding
 * out a stopped server (resumed from the outage notice itself, so the test
 * does not depend on timing) or timing out naming the outage, connecting
 * later, and the password from RESHARD_REDIS_PASSWORD or a password_file,
 * never in a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "dir_env.h"
#include "reshard/dir.h"
#include "assert_status.h"

typedef dir_env_t env_t;

static env_t *g;

#define NEED_BACKEND() DIR_ENV_NEED(g)

#define ASSERT_HAS(text, needle)                                              \
    do {                                                                      \
        if (strstr((text), (needle)) == NULL)                                 \
            fail_msg("'%s' lacks '%s'", (text), (needle));                    \
    } while (0)

static rs_dir_h open_dir(void)
{
    return dir_env_open(g);
}

static void publish_all(rs_dir_h dir, const char *m, int64_t v, int64_t n)
{
    rs_diag_t d;
    char table[64];
    ASSERT_ST(rs_dir_create_version(dir, m, v, n, &d), RS_OK, d);
    for (int64_t s = 0; s < n; s++) {
        int len = snprintf(table, sizeof(table), "table %lld/%lld",
                           (long long)v, (long long)s);
        ASSERT_ST(rs_dir_publish(dir, m, v, s, table, (size_t)len, &d), RS_OK,
                  d);
    }
}

static void test_redact(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"redis://:pw@host:1", "redis://:***@host:1"},
        {"redis://user:p@ss:w@rd@host:1/?timeout=2",
         "redis://user:***@host:1/?timeout=2"},
        {"redis://pw-without-colon@host", "redis://***@host"},
        {"redis://host:1?password_file=/etc/pw", "redis://host:1?password_file=/etc/pw"},
        {"file:/tmp/dir", "file:/tmp/dir"},
        {"rediss://:pw@host", "rediss://:***@host"},
    };
    char out[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rs_dir_redact_url(cases[i][0], out, sizeof(out));
        assert_string_equal(out, cases[i][1]);
    }
    char tiny[8];
    rs_dir_redact_url("redis://:secret@h", tiny, sizeof(tiny));
    assert_null(strstr(tiny, "secret"));
    assert_int_equal(strlen(tiny), sizeof(tiny) - 1);
}

static void test_abandon(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_version_info_t info;
    size_t dropped = 99;
    const char *m = "abandon";
    publish_all(dir, m, 1, 2);
    ASSERT_ST(rs_dir_lease(dir, m, 1, "dead-0", 600, &d), RS_OK, d);
    ASSERT_ST(rs_dir_lease(dir, m, 1, "dead-1", 600, &d), RS_OK, d);
    ASSERT_ST(rs_dir_release(dir, m, 1, &d), RS_ERR_INCOMPLETE, d);
    ASSERT_HAS(d.msg, "leased by 'dead-");
    ASSERT_ST(rs_dir_abandon(dir, m, 1, &d, &dropped), RS_OK, d);
    assert_int_equal(dropped, 2);
    ASSERT_ST(rs_dir_info(dir, m, 1, &d, &info), RS_OK, d);
    assert_int_equal(info.state, RS_VERSION_RELEASED);
    ASSERT_ST(rs_dir_wait_released(dir, m, 1, 0, &d), RS_OK, d);
    /* abandoning again, or a version without leases: nothing to drop */
    ASSERT_ST(rs_dir_abandon(dir, m, 1, &d, &dropped), RS_OK, d);
    assert_int_equal(dropped, 0);
    publish_all(dir, m, 2, 1);
    ASSERT_ST(rs_dir_abandon(dir, m, 2, &d, NULL), RS_OK, d);
    ASSERT_ST(rs_dir_abandon(dir, m, 3, &d, &dropped), RS_ERR_INPUT, d);
    ASSERT_HAS(d.msg, "never created");
    rs_dir_close(dir);
}

/* A heartbeat keeps a table alive: without one (never published, or lost
 * by the directory) it is refused, so the publisher knows to publish
 * again. */
static void test_heartbeat_needs_table(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    const char *m = "beat";
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 2, &d), RS_OK, d);
    ASSERT_ST(rs_dir_publish(dir, m, 1, 0, "t0", 2, &d), RS_OK, d);
    ASSERT_ST(rs_dir_heartbeat(dir, m, 1, 0, &d), RS_OK, d);
    ASSERT_ST(rs_dir_heartbeat(dir, m, 1, 1, &d), RS_ERR_INCOMPLETE, d);
    ASSERT_HAS(d.msg, "slot 1 has no table");
    assert_false(rs_dir_transient(dir));
    ASSERT_ST(rs_dir_heartbeat(dir, m, 5, 0, &d), RS_ERR_INPUT, d);
    ASSERT_HAS(d.msg, "never created");
    ASSERT_ST(rs_dir_release(dir, m, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_heartbeat(dir, m, 1, 1, &d), RS_OK, d); /* writes nothing */
    rs_dir_close(dir);
}

static void test_stale_skipped(void **state)
{
    (void)state;
    NEED_BACKEND();
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_version_info_t info;
    const char *m = "skip";
    publish_all(dir, m, 1, 2);
    publish_all(dir, m, 2, 2);
    publish_all(dir, m, 3, 1);
    rs__sleep_s(1.5);
    /* 1 alive; 2 half alive; 3 silent: the newest live is 1 */
    ASSERT_ST(rs_dir_heartbeat(dir, m, 1, 0, &d), RS_OK, d);
    ASSERT_ST(rs_dir_heartbeat(dir, m, 1, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_heartbeat(dir, m, 2, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_wait_ready(dir, m, -1, 5.0, 1.0, &d, &info), RS_OK, d);
    assert_int_equal(info.version, 1);
    ASSERT_ST(rs_dir_wait_ready(dir, m, -1, 0, 0, &d, &info), RS_OK, d);
    assert_int_equal(info.version, 3); /* no staleness check: the newest */
    /* an explicit stale version waits, then names its stale slot */
    ASSERT_ST(rs_dir_wait_ready(dir, m, 2, 0.1, 1.0, &d, &info),
              RS_ERR_TIMEOUT, d);
    ASSERT_HAS(d.msg, "version 2 of 'skip' is READY but not every publisher");
    ASSERT_HAS(d.msg, "stale slot: 0 (last heartbeat");
    /* when every READY version is stale, the newest is explained */
    rs__sleep_s(1.1);
    ASSERT_ST(rs_dir_wait_ready(dir, m, -1, 0.1, 1.0, &d, &info),
              RS_ERR_TIMEOUT, d);
    ASSERT_HAS(d.msg, "newest READY version 3 of 'skip'");
    rs_dir_close(dir);
}

static void test_file_not_created(void **state)
{
    (void)state;
    char url[PATH_MAX + 96], path[PATH_MAX + 32];
    rs_dir_params_t dp;
    rs_diag_t d;
    rs_dir_h dir = NULL;
    struct stat st;
    snprintf(path, sizeof(path), "%s/typo/dir", g->tmp);
    snprintf(url, sizeof(url), "file:%s", path);
    rs_dir_params_init(&dp);
    assert_int_equal(dp.create, 1);
    dp.create = 0;
    ASSERT_ST(rs_dir_open_params(url, &dp, &d, &dir), RS_ERR_INPUT, d);
    ASSERT_HAS(d.msg, "no such directory");
    ASSERT_HAS(d.msg, path);
    assert_int_not_equal(stat(path, &st), 0);
    snprintf(path, sizeof(path), "%s/typo", g->tmp);
    assert_int_not_equal(stat(path, &st), 0);
    /* a publisher (create = 1, the default) may create it */
    ASSERT_ST(rs_dir_open(url, &d, &dir), RS_OK, d);
    rs_dir_close(dir);
    dir = NULL;
    ASSERT_ST(rs_dir_open_params(url, &dp, &d, &dir), RS_OK, d);
    assert_false(rs_dir_transient(dir));
    rs_dir_close(dir);
}

/* ---- Redis alone ---------------------------------------------------------- */

typedef struct notices {
    int unreachable, reachable;
    pid_t resume;  /* SIGCONT this pid at the first outage notice */
    char last[2048];
} notices_t;

static void on_notice(void *ctx, const char *msg)
{
    notices_t *n = ctx;
    snprintf(n->last, sizeof(n->last), "%s", msg);
    if (strstr(msg, "unreachable") != NULL) {
        n->unreachable++;
        if (n->resume > 0)
            kill(n->resume, SIGCONT);
    }
    if (strstr(msg, "reachable again") != NULL)
        n->reachable++;
}

static void start_private(rfx_server_t *s, const char *password)
{
    char why[512];
    if (rfx_start(s, password, why, sizeof(why)) != 0)
        fail_msg("%s", why);
}

static void test_transient(void **state)
{
    (void)state;
    NEED_BACKEND();
    rfx_server_t s;
    char url[PATH_MAX + 128];
    rs_diag_t d;
    rs_dir_h dir = NULL, bad = NULL;
    start_private(&s, "right-pw");
    snprintf(url, sizeof(url), "%s?timeout=0.5", s.url);
    rs_status_t st_open = rs_dir_open(url, &d, &dir);
    rs_status_t st_input = st_open == RS_OK
        ? rs_dir_create_version(dir, "bad name", 1, 1, &d) : st_open;
    int t_input = rs_dir_transient(dir);
    rs_status_t st_ok = rs_dir_create_version(dir, "t", 1, 1, &d);
    if (st_ok == RS_OK)
        st_ok = rs_dir_publish(dir, "t", 1, 0, "x", 1, &d);
    int t_ok = rs_dir_transient(dir);
    snprintf(url, sizeof(url), "redis://:wrong-pw@127.0.0.1:%d", s.port);
    rs_status_t st_auth = rs_dir_open(url, &d, &bad);
    rs_diag_t d_auth = d;
    kill(s.pid, SIGSTOP);
    rs_status_t st_hung = rs_dir_heartbeat(dir, "t", 1, 0, &d);
    int t_hung = rs_dir_transient(dir);
    kill(s.pid, SIGCONT);
    rs_status_t st_back = rs_dir_heartbeat(dir, "t", 1, 0, &d);
    int t_back = rs_dir_transient(dir);
    rs_dir_close(dir);
    rfx_stop(&s);
    ASSERT_ST(st_open, RS_OK, d);
    ASSERT_ST(st_input, RS_ERR_INPUT, d);
    assert_false(t_input);
    ASSERT_ST(st_ok, RS_OK, d);
    assert_false(t_ok);
    ASSERT_ST(st_auth, RS_ERR_TRANSPORT, d_auth);
    assert_null(strstr(d_auth.msg, "wrong-pw"));
    ASSERT_ST(st_hung, RS_ERR_TRANSPORT, d);
    assert_true(t_hung);
    ASSERT_ST(st_back, RS_OK, d);
    assert_false(t_back);
}

static void test_wait_rides_outage(void **state)
{
    (void)state;
    NEED_BACKEND();
    rfx_server_t s;
    char url[PATH_MAX + 128], where[64];
    rs_dir_params_t dp;
    rs_diag_t d;
    rs_version_info_t info;
    rs_dir_h dir = NULL;
    notices_t n;
    memset(&n, 0, sizeof(n));
    start_private(&s, NULL);
    snprintf(url, sizeof(url), "%s/?timeout=0.3", s.url);
    snprintf(where, sizeof(where), "127.0.0.1:%d", s.port);
    rs_dir_params_init(&dp);
    dp.notice = on_notice;
    dp.notice_ctx = &n;
    rs_status_t st = rs_dir_open_params(url, &dp, &d, &dir);
    if (st == RS_OK) {
        publish_all(dir, "o", 4, 1);
        n.resume = s.pid;        /* the outage notice resumes the server */
        kill(s.pid, SIGSTOP);
        st = rs_dir_wait_ready(dir, "o", 4, 60, 0, &d, &info);
    }
    notices_t ridden = n;
    /* not resumed: the deadline ends it, naming the outage */
    n.resume = 0;
    kill(s.pid, SIGSTOP);
    rs_diag_t d2;
    rs_status_t st2 = rs_dir_wait_released(dir, "o", 4, 1.0, &d2);
    kill(s.pid, SIGCONT);
    rs_dir_close(dir);
    rfx_stop(&s);
    ASSERT_ST(st, RS_OK, d);
    assert_int_equal(info.version, 4);
    assert_int_equal(ridden.unreachable, 1);
    assert_int_equal(ridden.reachable, 1);
    ASSERT_HAS(ridden.last, "reachable again after");
    /* the outage counts from the start of the look that hung: that look
     * alone held the client's whole 0.3 s timeout */
    const char *after = strstr(ridden.last, "reachable again after ");
    double down = strtod(after + strlen("reachable again after "), NULL);
    if (down < 0.25)
        fail_msg("outage reported shorter than the look that hung: %s",
                 ridden.last);
    ASSERT_ST(st2, RS_ERR_TIMEOUT, d2);
    ASSERT_HAS(d2.msg, "waiting for the release of version 4 of 'o'");
    ASSERT_HAS(d2.msg, "unreachable for the last");
    ASSERT_HAS(d2.msg, where);
    assert_int_equal(n.unreachable, 2);
}

static void test_connect_later(void **state)
{
    (void)state;
    NEED_BACKEND();
    char url[128];
    rs_dir_params_t dp;
    rs_diag_t d;
    rs_version_info_t info;
    rs_dir_h dir = NULL;
    notices_t n;
    memset(&n, 0, sizeof(n));
    snprintf(url, sizeof(url), "redis://:pw@127.0.0.1:%d", rfx_free_port());
    rs_dir_params_init(&dp);
    dp.notice = on_notice;
    dp.notice_ctx = &n;
    ASSERT_ST(rs_dir_open_params(url, &dp, &d, &dir), RS_ERR_TRANSPORT, d);
    dp.connect_later = 1;
    ASSERT_ST(rs_dir_open_params(url, &dp, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_wait_ready(dir, "m", 1, 0.3, 0, &d, &info),
              RS_ERR_TIMEOUT, d);
    ASSERT_HAS(d.msg, "unreachable for the last");
    ASSERT_HAS(d.msg, "cannot connect");
    ASSERT_HAS(d.msg, "redis://:***@127.0.0.1:");
    assert_null(strstr(d.msg, ":pw@"));
    assert_int_equal(n.unreachable, 1);
    assert_null(strstr(n.last, ":pw@"));
    /* a malformed URL still fails at once */
    ASSERT_ST(rs_dir_open_params("redis://:pw@127.0.0.1:x", &dp, &d, &dir),
              RS_ERR_INPUT, d);
    rs_dir_close(dir);
}

static void test_password_sources(void **state)
{
    (void)state;
    NEED_BACKEND();
    rfx_server_t s;
    char url[2 * PATH_MAX + 128], file[PATH_MAX + 16];
    rs_diag_t d, d_env_bad, d_file, d_both;
    rs_dir_h dir = NULL;
    start_private(&s, "pw-from-elsewhere");
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", s.port);
    setenv("RESHARD_REDIS_PASSWORD", "pw-from-elsewhere", 1);
    rs_status_t st_env = rs_dir_open(url, &d, &dir);
    rs_dir_close(dir);
    dir = NULL;
    setenv("RESHARD_REDIS_PASSWORD", "wrong-env-pw", 1);
    rs_status_t st_env_bad = rs_dir_open(url, &d_env_bad, &dir);
    unsetenv("RESHARD_REDIS_PASSWORD");
    snprintf(file, sizeof(file), "%s/pw", g->tmp);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("pw-from-elsewhere\n", f);
    fclose(f);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d?timeout=2&"
             "password_file=%s", s.port, file);
    rs_status_t st_file = rs_dir_open(url, &d_file, &dir);
    if (st_file == RS_OK)
        st_file = rs_dir_create_version(dir, "pw", 1, 1, &d_file);
    rs_dir_close(dir);
    dir = NULL;
    snprintf(url, sizeof(url), "redis://:x@127.0.0.1:%d?password_file=%s",
             s.port, file);
    rs_status_t st_both = rs_dir_open(url, &d_both, &dir);
    rfx_stop(&s);
    ASSERT_ST(st_env, RS_OK, d);
    ASSERT_ST(st_env_bad, RS_ERR_TRANSPORT, d_env_bad);
    assert_null(strstr(d_env_bad.msg, "wrong-env-pw"));
    ASSERT_ST(st_file, RS_OK, d_file);
    ASSERT_ST(st_both, RS_ERR_INPUT, d_both);
    ASSERT_HAS(d_both.msg, "give one");
}

int main(void)
{
    static env_t file_env = {.backend = "file"};
    static env_t redis_env = {.backend = "redis", .redis = 1};
    const struct CMUnitTest file_tests[] = {
        cmocka_unit_test(test_redact),
        cmocka_unit_test(test_abandon),
        cmocka_unit_test(test_heartbeat_needs_table),
        cmocka_unit_test(test_stale_skipped),
        cmocka_unit_test(test_file_not_created),
    };
    const struct CMUnitTest redis_tests[] = {
        cmocka_unit_test(test_abandon),
        cmocka_unit_test(test_heartbeat_needs_table),
        cmocka_unit_test(test_stale_skipped),
        cmocka_unit_test(test_transient),
        cmocka_unit_test(test_wait_rides_outage),
        cmocka_unit_test(test_connect_later),
        cmocka_unit_test(test_password_sources),
    };
    return dir_env_run(&file_env, "dir-cluster", file_tests,
                       sizeof(file_tests) / sizeof(file_tests[0]), &g) +
           dir_env_run(&redis_env, "dir-cluster", redis_tests,
                       sizeof(redis_tests) / sizeof(redis_tests[0]), &g);
}
