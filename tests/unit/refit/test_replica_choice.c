/* The receiver's choice among the publishers of a slot (replicas.c),
 * against a file: directory and a redis one (dir_env.h): the salt rotates the choice, live
 * publishers come before stale ones, a failure naming the chosen publisher
 * ("<agent>, slot <S>", as a whole name) moves its slot to the next one
 * and records it, a message naming no chosen publisher changes nothing,
 * a slot whose every publisher failed ends with a message naming each and
 * its cause, and a publisher that failed is chosen last by later pulls
 * until it publishes another table (restarted); the choice follows the
 * publishers' names, not the order they joined in; a slot is read again
 * before it is declared exhausted (a replica that joined mid-pull); a
 * stall fails a publisher over only where another can serve; a chosen
 * publisher whose geometry document was replaced is read again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dir/split.h"
#include "dir_env.h"
#include "refit/replicas.h"

static dir_env_t *g;

/* Version 1 of model m: slot 0 served by p0, p1, p2 (joining in that
 * order), slot 1 by q0 alone. */
static rs_dir_h make_dir(const char *m, rs_version_info_t *v)
{
    rs_dir_h dir = dir_env_open(g);
    rs_diag_t d;
    const char *pubs[] = {"p0", "p1", "p2"};
    assert_int_equal(rs_dir_create_version(dir, m, 1, 2, &d), RS_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(rs_dir_publish_as(dir, m, 1, 0, pubs[i], 7, pubs[i],
                                           2, &d), RS_OK);
    assert_int_equal(rs_dir_publish_as(dir, m, 1, 1, "q0", 8, "q0", 2, &d),
                     RS_OK);
    assert_int_equal(rs_dir_info(dir, m, 1, &d, v), RS_OK);
    assert_int_equal(v->state, RS_VERSION_READY);
    return dir;
}

/* One case: model m's directory (make_dir) and the receiver's set. */
typedef struct choice {
    const char *m;
    rs_version_info_t v;
    rs_diag_t d;
    rs__replicas_t set;
    rs_dir_h dir;
} choice_t;

static void choice_open(choice_t *c, const char *m)
{
    memset(c, 0, sizeof(*c));
    c->m = m;
    c->dir = make_dir(m, &c->v);
}

/* The set read afresh, with `salt` and publishers older than max_age_s
 * (0: any age) chosen last. */
static void choice_load(choice_t *c, uint64_t salt, double max_age_s)
{
    rs__replicas_reset(&c->set);
    assert_int_equal(rs__replicas_load(&c->set, c->dir, c->m, &c->v, salt,
                                       max_age_s, &c->d), RS_OK);
}

static const char *chosen(const choice_t *c, int64_t slot)
{
    return rs__replicas_chosen(&c->set, slot)->publisher;
}

static void choice_close(choice_t *c)
{
    rs__replicas_reset(&c->set);
    rs_dir_close(c->dir);
}

static void test_salt_rotates(void **state)
{
    (void)state;
    choice_t c;
    choice_open(&c, "salt");
    /* slot s starts at entry (salt + s) mod count */
    const char *want0[] = {"p0", "p1", "p2", "p0"};
    for (uint64_t salt = 0; salt < 4; salt++) {
        choice_load(&c, salt, 0);
        assert_string_equal(chosen(&c, 0), want0[salt]);
        assert_string_equal(chosen(&c, 1), "q0");
        assert_memory_equal(rs__replicas_chosen(&c.set, 0)->table,
                            want0[salt], 2);
    }
    choice_close(&c);
}

static void test_live_first(void **state)
{
    (void)state;
    choice_t c;
    choice_open(&c, "live");
    struct timespec nap = {0, 400000000};
    nanosleep(&nap, NULL);
    assert_int_equal(rs_dir_heartbeat_as(c.dir, "live", 1, 0, "p2", &c.d),
                     RS_OK);
    assert_int_equal(rs_dir_heartbeat_as(c.dir, "live", 1, 1, "q0", &c.d),
                     RS_OK);
    /* salt 0 starts at p0, but only p2 beat within 0.3 s */
    choice_load(&c, 0, 0.3);
    assert_string_equal(chosen(&c, 0), "p2");
    /* every publisher stale: the rotation's first (p2's beat is made
     * older than the 1 ms bound first: the loads above may take less) */
    struct timespec older = {0, 5000000};
    nanosleep(&older, NULL);
    choice_load(&c, 1, 0.001);
    assert_string_equal(chosen(&c, 0), "p1");
    choice_close(&c);
}

static void fail_with(rs_diag_t *d, const char *msg)
{
    rs_diag_clear(d);
    d->status = RS_ERR_TRANSPORT;
    snprintf(d->msg, sizeof(d->msg), "%s", msg);
}

static void test_failover(void **state)
{
    (void)state;
    choice_t c;
    rs_diag_t *d = &c.d;
    choice_open(&c, "fail");
    choice_load(&c, 0, 0);
    /* names that only contain the chosen one's are not it */
    const char *others[] = {"session 0 (xp0, slot 0): reset",
                            "session 0 (p0, slot 01): reset",
                            "session 0 (p1, slot 0): reset",
                            "the run's deadline passed"};
    for (size_t i = 0; i < 4; i++) {
        fail_with(d, others[i]);
        assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_TRANSPORT, 0, d, NULL),
                         0);
        assert_string_equal(d->msg, others[i]);
        assert_string_equal(chosen(&c, 0), "p0");
    }
    fail_with(d, "session 0 (p0, slot 0): reset");
    assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_VERIFY, 0, d, NULL), 0);
    assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_TRANSPORT, 0, d, NULL), 1);
    assert_string_equal(chosen(&c, 0), "p1");
    fail_with(d, "session 0 (p1, slot 0): timed out");
    assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_TIMEOUT, 0, d, NULL), 1);
    assert_string_equal(chosen(&c, 0), "p2");
    assert_int_equal(c.set.failovers, 2);
    assert_string_equal(c.set.record, "p0, slot 0 -> p1; p1, slot 0 -> p2");
    fail_with(d, "session 0 (p2, slot 0): gone; session 1 (q0, slot 1): gone");
    assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_TRANSPORT, 0, d, NULL), 0);
    assert_int_equal(d->status, RS_ERR_TRANSPORT);
    assert_non_null(strstr(d->msg, "slot 0 of version 1: reading from each "
                           "of its 3 publishers failed: p0, slot 0: session "
                           "0 (p0, slot 0): reset; p1, slot 0: session 0 (p1, "
                           "slot 0): timed out; p2, slot 0: session 0 (p2, "
                           "slot 0): gone"));
    choice_close(&c);
}

static void test_suspect_until_restarted(void **state)
{
    (void)state;
    choice_t c;
    choice_open(&c, "suspect");
    choice_load(&c, 0, 0);
    fail_with(&c.d, "session 0 (p0, slot 0): reset");
    assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_TRANSPORT, 0, &c.d, NULL), 1);
    rs__replicas_reset(&c.set); /* the next pull */
    assert_int_equal(c.set.failovers, 0);
    choice_load(&c, 0, 0);
    assert_string_equal(chosen(&c, 0), "p1");
    /* p0 restarted: a new table under the same name */
    assert_int_equal(rs_dir_publish_as(c.dir, "suspect", 1, 0, "p0", 7, "P0",
                                       2, &c.d), RS_OK);
    choice_load(&c, 0, 0);
    assert_string_equal(chosen(&c, 0), "p0");
    choice_close(&c);
}

/* A slot's only publisher keeps the message it failed with. */
static void test_single_publisher(void **state)
{
    (void)state;
    choice_t c;
    choice_open(&c, "single");
    choice_load(&c, 0, 0);
    fail_with(&c.d, "reading from the publishers: session 1 (q0, slot 1): "
                    "eof");
    assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_TRANSPORT, 0, &c.d, NULL), 0);
    assert_string_equal(c.d.msg, "reading from the publishers: session 1 "
                        "(q0, slot 1): eof");
    assert_int_equal(c.set.failovers, 0);
    choice_close(&c);
}

/* Version v of model m: slot 0 served by `pubs` joining in that order,
 * slot 1 by q0. */
static void publish_order(rs_dir_h dir, const char *m, int64_t v,
                          const char *const *pubs, int n)
{
    rs_diag_t d;
    assert_int_equal(rs_dir_create_version(dir, m, v, 2, &d), RS_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(rs_dir_publish_as(dir, m, v, 0, pubs[i], 7, pubs[i],
                                           2, &d), RS_OK);
    assert_int_equal(rs_dir_publish_as(dir, m, v, 1, "q0", 8, "q0", 2, &d),
                     RS_OK);
}

/* The same salt chooses the same publisher whichever joined first. */
static void test_order_of_joining_ignored(void **state)
{
    (void)state;
    choice_t c;
    const char *first[] = {"p2", "p0", "p1"}, *second[] = {"p1", "p2", "p0"};
    const char *want[] = {"p0", "p1", "p2"}; /* by name, from (salt + 0) */
    memset(&c, 0, sizeof(c));
    c.m = "order";
    c.dir = dir_env_open(g);
    publish_order(c.dir, "order", 1, first, 3);
    publish_order(c.dir, "order", 2, second, 3);
    for (int64_t v = 1; v <= 2; v++) {
        assert_int_equal(rs_dir_info(c.dir, "order", v, &c.d, &c.v), RS_OK);
        for (uint64_t salt = 0; salt < 3; salt++) {
            choice_load(&c, salt, 0);
            assert_string_equal(chosen(&c, 0), want[salt]);
        }
    }
    choice_close(&c);
}

/* Collects rs__replicas_failures into one line. */
static void on_failure(void *ctx, const char *publisher, int64_t slot,
                       const char *why)
{
    char *line = ctx;
    size_t n = strlen(line);
    snprintf(line + n, 512 - n, "[%s %lld %s]", publisher, (long long)slot,
             why);
}

/* q1 publishes slot 1 after the set was read: q0's failure moves the
 * slot to it instead of ending the pull. */
static void test_joined_mid_pull(void **state)
{
    (void)state;
    choice_t c;
    char failed[512] = "";
    choice_open(&c, "late");
    choice_load(&c, 0, 0);
    assert_string_equal(chosen(&c, 1), "q0");
    assert_int_equal(rs_dir_publish_as(c.dir, "late", 1, 1, "q1", 8, "q1", 2,
                                       &c.d), RS_OK);
    fail_with(&c.d, "session 1 (q0, slot 1): reset");
    assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_TRANSPORT, 0, &c.d,
                                           NULL), 1);
    assert_string_equal(chosen(&c, 1), "q1");
    assert_memory_equal(rs__replicas_chosen(&c.set, 1)->table, "q1", 2);
    assert_int_equal(c.set.failovers, 1);
    assert_int_equal(c.set.rereads, 1);
    assert_string_equal(c.set.record, "q0, slot 1 -> q1");
    /* both fail: the message names each, the late one included */
    fail_with(&c.d, "session 1 (q1, slot 1): eof");
    assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_TRANSPORT, 0, &c.d,
                                           NULL), 0);
    assert_non_null(strstr(c.d.msg, "reading from each of its 2 publishers "
                           "failed: q0, slot 1: session 1 (q0, slot 1): "
                           "reset; q1, slot 1: session 1 (q1, slot 1): eof"));
    rs__replicas_failures(&c.set, on_failure, failed);
    assert_string_equal(failed, "[q0 1 session 1 (q0, slot 1): reset]"
                                "[q1 1 session 1 (q1, slot 1): eof]");
    choice_close(&c);
}

/* A stall fails a publisher over where its slot has another one; a slot
 * without keeps its publisher and asks for a wait without the bound. */
static void test_stall(void **state)
{
    (void)state;
    choice_t c;
    int keep = 0;
    choice_open(&c, "stall");
    choice_load(&c, 0, 0);
    assert_true(rs__replicas_backed(&c.set));
    fail_with(&c.d, "no progress for 5 s; sessions stalled: 1 (q0, slot 1)");
    assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_TIMEOUT, 1, &c.d,
                                           &keep), 1);
    assert_int_equal(keep, 1);
    assert_string_equal(chosen(&c, 1), "q0");
    assert_int_equal(c.set.failovers, 0);
    keep = 0;
    fail_with(&c.d, "no progress for 5 s; sessions stalled: 0 (p0, slot 0)");
    assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_TIMEOUT, 1, &c.d,
                                           &keep), 1);
    assert_int_equal(keep, 0);
    assert_string_equal(chosen(&c, 0), "p1");
    /* the same stall without the flag is a timeout like any other: q0 is
     * its slot's only publisher, so the slot is exhausted */
    fail_with(&c.d, "timed out; sessions still outstanding: 1 (q0, slot 1)");
    assert_int_equal(rs__replicas_failover(&c.set, RS_ERR_TIMEOUT, 0, &c.d,
                                           &keep), 0);
    assert_int_equal(keep, 0);
    choice_close(&c);
}

/* A split entry of slot 0 by p0 with geometry document `doc`. */
static void publish_doc(rs_dir_h dir, const char *doc)
{
    rs_diag_t d;
    assert_int_equal(rs__dir_publish_split(dir, "renew", 1, 0, "p0", 7, doc,
                                           strlen(doc), "", 0, &d, NULL),
                     RS_OK);
}

/* p0 restarted at new addresses under its name after the set was read:
 * the chosen entry is replaced by its new one, once. */
static void test_renew_chosen(void **state)
{
    (void)state;
    choice_t c;
    memset(&c, 0, sizeof(c));
    c.m = "renew";
    c.dir = dir_env_open(g);
    assert_int_equal(rs_dir_create_version(c.dir, "renew", 1, 1, &c.d),
                     RS_OK);
    publish_doc(c.dir, "{\"at\": 1}");
    assert_int_equal(rs_dir_info(c.dir, "renew", 1, &c.d, &c.v), RS_OK);
    choice_load(&c, 0, 0);
    uint64_t was = rs__replicas_chosen_split(&c.set, 0)->doc;
    assert_int_equal(rs__replicas_renew_chosen(&c.set, 0), 0); /* same */
    publish_doc(c.dir, "{\"at\": 22}");
    assert_int_equal(rs__replicas_renew_chosen(&c.set, 0), 1);
    assert_true(rs__replicas_chosen_split(&c.set, 0)->doc != was);
    assert_int_equal(rs__replicas_chosen_split(&c.set, 0)->doc_len, 10);
    assert_int_equal(rs__replicas_renew_chosen(&c.set, 0), 0);
    choice_close(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_salt_rotates),
        cmocka_unit_test(test_live_first),
        cmocka_unit_test(test_failover),
        cmocka_unit_test(test_suspect_until_restarted),
        cmocka_unit_test(test_single_publisher),
        cmocka_unit_test(test_order_of_joining_ignored),
        cmocka_unit_test(test_joined_mid_pull),
        cmocka_unit_test(test_stall),
        cmocka_unit_test(test_renew_chosen),
    };
    return dir_env_run_both("replica-choice", tests,
                            sizeof(tests) / sizeof(tests[0]), &g);
}
