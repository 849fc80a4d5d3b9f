/* The receiver's choice among the publishers of a slot (replicas.c),
 * against a file: directory made here: the salt rotates the choice, live
 * publishers come before stale ones, a failure naming the chosen publisher
 * ("<agent>, slot <S>", as a whole name) moves its slot to the next one
 * and records it, a message naming no chosen publisher changes nothing,
 * a slot whose every publisher failed ends with a message naming each and
 * its cause, and a publisher that failed is chosen last by later pulls
 * until it publishes another table (restarted). */
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

#include "refit/replicas.h"
#include "tmp_path.h"

static char tmp[64], url[96];

static int setup(void **state)
{
    (void)state;
    snprintf(tmp, sizeof(tmp), "/tmp/rs-choice-XXXXXX");
    if (mkdtemp(tmp) == NULL)
        return -1;
    snprintf(url, sizeof(url), "file:%s", tmp);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return tmp_remove(tmp);
}

/* Version 1 of model m: slot 0 served by p0, p1, p2 (joining in that
 * order), slot 1 by q0 alone. */
static rs_dir_h make_dir(const char *m, rs_version_info_t *v)
{
    rs_dir_h dir = NULL;
    rs_diag_t d;
    const char *pubs[] = {"p0", "p1", "p2"};
    assert_int_equal(rs_dir_open(url, &d, &dir), RS_OK);
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
    /* every publisher stale: the rotation's first */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_salt_rotates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_live_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_suspect_until_restarted, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_single_publisher, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
