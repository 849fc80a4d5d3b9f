/* Several publishers per slot, on both directory backends (file: in a
 * temporary directory, redis:// on a private server; one test body each):
 * publishers join a slot with the same geometry key and are read back in
 * joining order, byte-exact; another key is refused as a conflict naming
 * slot, publisher and keys; a publisher publishing again (a restarted
 * rank) replaces its own entry; heartbeats and ages are per publisher; a
 * slot takes at most RS_DIR_PUBLISHERS_MAX publishers; and a table changed
 * in the directory behind its digest (a byte of the file, or of the Redis
 * value) is refused on read, naming model, version, slot and publisher. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "dir_env.h"
#include "reshard/dir.h"
#include "assert_status.h"

static dir_env_t *g;

#define GEO_A 0x1234abcd5678ef00ull
#define GEO_B 0x00000000000000ffull

static rs_dir_h open_dir(void)
{
    return dir_env_open(g);
}

/* A binary table of its own for (publisher tag, variant), zero bytes
 * included. */
static size_t table_of(int tag, int variant, unsigned char *buf, size_t cap)
{
    size_t len = 100 + (size_t)(tag * 13 + variant * 7) % 200;
    uint64_t x = (uint64_t)(tag * 7919 + variant * 104729 + 1);
    len = len < cap ? len : cap;
    for (size_t i = 0; i < len; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (i % 5 == 0) ? 0 : (unsigned char)(x >> 56);
    }
    return len;
}

static void publish(rs_dir_h dir, const char *m, int64_t slot,
                    const char *pub, uint64_t geo, int tag, int variant)
{
    unsigned char buf[512];
    rs_diag_t d;
    size_t len = table_of(tag, variant, buf, sizeof(buf));
    ASSERT_ST(rs_dir_publish_as(dir, m, 1, slot, pub, geo, buf, len, &d),
              RS_OK, d);
}

static void expect_entry(const rs_dir_entry_t *e, const char *pub,
                         uint64_t geo, int tag, int variant)
{
    unsigned char want[512];
    size_t len = table_of(tag, variant, want, sizeof(want));
    assert_string_equal(e->publisher, pub);
    assert_int_equal(e->geometry, geo);
    assert_int_equal(e->len, len);
    assert_memory_equal(e->table, want, len);
    assert_int_equal(e->table[len], '\0');
    assert_true(e->age_s >= 0);
}

static void expect_state(rs_dir_h dir, const char *m,
                         rs_version_state_t state, int64_t published)
{
    rs_version_info_t info;
    rs_diag_t d;
    ASSERT_ST(rs_dir_info(dir, m, 1, &d, &info), RS_OK, d);
    assert_int_equal(info.state, state);
    assert_int_equal(info.published, published);
}

static void test_publishers_join(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    void *table = NULL;
    size_t len = 0;
    const char *m = "join";
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 2, &d), RS_OK, d);
    publish(dir, m, 0, "trainer-0", GEO_A, 1, 0);
    expect_state(dir, m, RS_VERSION_PENDING, 1);
    publish(dir, m, 0, "trainer-0-r1", GEO_A, 2, 0);
    expect_state(dir, m, RS_VERSION_PENDING, 1); /* still one slot of two */
    ASSERT_ST(rs_dir_read_slot(dir, m, 1, 0, &d, &e, &n), RS_ERR_INCOMPLETE,
              d);
    publish(dir, m, 1, "trainer-1-r1", GEO_B, 3, 0);
    expect_state(dir, m, RS_VERSION_READY, 2);
    ASSERT_ST(rs_dir_read_slot(dir, m, 1, 0, &d, &e, &n), RS_OK, d);
    assert_int_equal(n, 2);
    expect_entry(&e[0], "trainer-0", GEO_A, 1, 0);
    expect_entry(&e[1], "trainer-0-r1", GEO_A, 2, 0);
    rs_dir_entries_free(e, n);
    /* joining after READY: served from then on */
    publish(dir, m, 1, "trainer-1", GEO_B, 4, 0);
    ASSERT_ST(rs_dir_read_slot(dir, m, 1, 1, &d, &e, &n), RS_OK, d);
    assert_int_equal(n, 2);
    expect_entry(&e[0], "trainer-1-r1", GEO_B, 3, 0);
    expect_entry(&e[1], "trainer-1", GEO_B, 4, 0);
    rs_dir_entries_free(e, n);
    /* rs_dir_read: the first publisher's table */
    unsigned char want[512];
    size_t wlen = table_of(1, 0, want, sizeof(want));
    ASSERT_ST(rs_dir_read(dir, m, 1, 0, &d, &table, &len), RS_OK, d);
    assert_int_equal(len, wlen);
    assert_memory_equal(table, want, wlen);
    free(table);
    ASSERT_ST(rs_dir_publish_as(dir, m, 1, 0, "a/b", GEO_A, "x", 1, &d),
              RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "publisher name 'a/b'");
    rs_dir_close(dir);
}

static void test_geometry_conflict(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    unsigned char buf[512];
    size_t len = table_of(9, 0, buf, sizeof(buf));
    const char *m = "conflict";
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 1, &d), RS_OK, d);
    publish(dir, m, 0, "trainer-0", GEO_A, 1, 0);
    ASSERT_ST(rs_dir_publish_as(dir, m, 1, 0, "trainer-0-r1", GEO_B, buf, len,
                                &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "version 1 of 'conflict': slot 0: conflicting "
                   "geometry from publisher 'trainer-0-r1'");
    ASSERT_MSG_HAS(d, "00000000000000ff");
    ASSERT_MSG_HAS(d, "1234abcd5678ef00, published by 'trainer-0'");
    /* the slot's own publisher cannot change its geometry either */
    ASSERT_ST(rs_dir_publish_as(dir, m, 1, 0, "trainer-0", GEO_B, buf, len,
                                &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "conflicting geometry from publisher 'trainer-0'");
    /* nothing of the refused publishes is in the slot */
    ASSERT_ST(rs_dir_read_slot(dir, m, 1, 0, &d, &e, &n), RS_OK, d);
    assert_int_equal(n, 1);
    expect_entry(&e[0], "trainer-0", GEO_A, 1, 0);
    rs_dir_entries_free(e, n);
    ASSERT_ST(rs_dir_heartbeat_as(dir, m, 1, 0, "trainer-0-r1", &d),
              RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "slot 0 has no table of publisher 'trainer-0-r1'");
    rs_dir_close(dir);
}

/* A rank restarted with the same geometry at new addresses. */
static void test_restart_replaces(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    const char *m = "restart";
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 2, &d), RS_OK, d);
    publish(dir, m, 0, "trainer-0", GEO_A, 1, 0);
    publish(dir, m, 1, "trainer-1", GEO_B, 2, 0);
    publish(dir, m, 1, "trainer-1-r1", GEO_B, 3, 0);
    expect_state(dir, m, RS_VERSION_READY, 2);
    publish(dir, m, 1, "trainer-1", GEO_B, 2, 1);    /* new addresses */
    publish(dir, m, 1, "trainer-1", GEO_B, 2, 1);    /* a replay of it */
    expect_state(dir, m, RS_VERSION_READY, 2);
    ASSERT_ST(rs_dir_read_slot(dir, m, 1, 1, &d, &e, &n), RS_OK, d);
    assert_int_equal(n, 2);                           /* replaced, not added */
    expect_entry(&e[0], "trainer-1", GEO_B, 2, 1);
    expect_entry(&e[1], "trainer-1-r1", GEO_B, 3, 0);
    rs_dir_entries_free(e, n);
    ASSERT_ST(rs_dir_heartbeat_as(dir, m, 1, 1, "trainer-1", &d), RS_OK, d);
    /* the single-publisher calls: one publisher, "default" */
    ASSERT_ST(rs_dir_heartbeat(dir, m, 1, 0, &d), RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "publisher 'default'");
    rs_dir_close(dir);
}

/* A slot lives while any of its publishers does. */
static void test_heartbeats_per_publisher(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_version_info_t info;
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    const char *m = "beats";
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 1, &d), RS_OK, d);
    publish(dir, m, 0, "a", GEO_A, 1, 0);
    publish(dir, m, 0, "b", GEO_A, 2, 0);
    rs__sleep_s(1.0);
    ASSERT_ST(rs_dir_wait_ready(dir, m, 1, 0.1, 0.9, &d, &info),
              RS_ERR_TIMEOUT, d);
    ASSERT_MSG_HAS(d, "stale");
    ASSERT_ST(rs_dir_heartbeat_as(dir, m, 1, 0, "b", &d), RS_OK, d);
    ASSERT_ST(rs_dir_wait_ready(dir, m, 1, 5, 0.9, &d, &info), RS_OK, d);
    ASSERT_ST(rs_dir_read_slot(dir, m, 1, 0, &d, &e, &n), RS_OK, d);
    assert_int_equal(n, 2);
    assert_true(e[0].age_s >= 1.0);          /* a: since its publish */
    assert_true(e[1].age_s < e[0].age_s);    /* b: since its heartbeat */
    rs_dir_entries_free(e, n);
    rs_dir_close(dir);
}

static void test_publisher_limit(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    char name[32];
    const char *m = "limit";
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 1, &d), RS_OK, d);
    for (int i = 0; i < RS_DIR_PUBLISHERS_MAX; i++) {
        snprintf(name, sizeof(name), "p%d", i);
        publish(dir, m, 0, name, GEO_A, i, 0);
    }
    publish(dir, m, 0, "p7", GEO_A, 7, 1); /* a member may still replace */
    ASSERT_ST(rs_dir_publish_as(dir, m, 1, 0, "one-more", GEO_A, "x", 1, &d),
              RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "already has 64 publishers: 'one-more'");
    ASSERT_ST(rs_dir_read_slot(dir, m, 1, 0, &d, &e, &n), RS_OK, d);
    assert_int_equal(n, RS_DIR_PUBLISHERS_MAX);
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "p%zu", i);
        expect_entry(&e[i], name, GEO_A, (int)i, i == 7);
    }
    rs_dir_entries_free(e, n);
    rs_dir_close(dir);
}

/* ---- corrupting a stored entry, behind the directory's back ----------- */

/* The stored entry of (model, version 1, slot, publisher), as bytes. */
static char *stored_get(const char *m, int64_t slot, const char *pub,
                        size_t *len_p)
{
    char path[PATH_MAX + 256];
    if (!g->redis) {
        snprintf(path, sizeof(path), "%s/dir/%s/1/slot-%lld@%s", g->tmp, m,
                 (long long)slot, pub);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        char *buf = malloc(4096);
        assert_non_null(buf);
        *len_p = fread(buf, 1, 4096, f);
        fclose(f);
        return buf;
    }
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", g->server.port,
                                              tv);
    assert_true(c != NULL && c->err == 0);
    redisReply *r = redisCommand(c, "HGET rs:{%s}:1:slots %lld@%s", m,
                                 (long long)slot, pub);
    assert_true(r != NULL && r->type == REDIS_REPLY_STRING);
    char *buf = malloc(r->len + 1);
    assert_non_null(buf);
    memcpy(buf, r->str, r->len);
    *len_p = r->len;
    freeReplyObject(r);
    redisFree(c);
    return buf;
}

static void stored_put(const char *m, int64_t slot, const char *pub,
                       const char *data, size_t len)
{
    char path[PATH_MAX + 256];
    if (!g->redis) {
        snprintf(path, sizeof(path), "%s/dir/%s/1/slot-%lld@%s", g->tmp, m,
                 (long long)slot, pub);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(data, 1, len, f), len);
        fclose(f);
        return;
    }
    char field[160];
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", g->server.port,
                                              tv);
    assert_true(c != NULL && c->err == 0);
    snprintf(field, sizeof(field), "%lld@%s", (long long)slot, pub);
    redisReply *r = redisCommand(c, "HSET rs:{%s}:1:slots %s %b", m, field,
                                 data, len);
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(c);
}

static void expect_refused(rs_dir_h dir, const char *m, int64_t slot,
                           const char *why)
{
    rs_diag_t d;
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    void *table = NULL;
    size_t len = 0;
    ASSERT_ST(rs_dir_read_slot(dir, m, 1, slot, &d, &e, &n), RS_ERR_VERIFY,
              d);
    assert_null(e);
    ASSERT_MSG_HAS(d, "table of publisher 'b' of slot 1 of version 1 of "
                   "'corrupt' is corrupted");
    ASSERT_MSG_HAS(d, why);
    ASSERT_ST(rs_dir_read(dir, m, 1, slot, &d, &table, &len), RS_ERR_VERIFY,
              d);
    assert_null(table);
}

static void test_corrupted_table(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    size_t len = 0;
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    const char *m = "corrupt";
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 2, &d), RS_OK, d);
    publish(dir, m, 0, "a", GEO_A, 1, 0);
    publish(dir, m, 1, "a", GEO_B, 2, 0);
    publish(dir, m, 1, "b", GEO_B, 3, 0);
    char *good = stored_get(m, 1, "b", &len);
    char *bad = malloc(len);
    assert_non_null(bad);
    memcpy(bad, good, len);
    bad[len - 3] ^= 0x20; /* one bit of the table, near its end */
    stored_put(m, 1, "b", bad, len);
    expect_refused(dir, m, 1, "the stored digest is rsd64:");
    /* the entry without its digest line */
    stored_put(m, 1, "b", good + 40, len - 40);
    expect_refused(dir, m, 1, "digest record");
    /* the other slot, and the restored entry, read fine */
    ASSERT_ST(rs_dir_read_slot(dir, m, 1, 0, &d, &e, &n), RS_OK, d);
    expect_entry(&e[0], "a", GEO_A, 1, 0);
    rs_dir_entries_free(e, n);
    stored_put(m, 1, "b", good, len);
    ASSERT_ST(rs_dir_read_slot(dir, m, 1, 1, &d, &e, &n), RS_OK, d);
    assert_int_equal(n, 2);
    expect_entry(&e[1], "b", GEO_B, 3, 0);
    rs_dir_entries_free(e, n);
    free(bad);
    free(good);
    rs_dir_close(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_publishers_join),
        cmocka_unit_test(test_geometry_conflict),
        cmocka_unit_test(test_restart_replaces),
        cmocka_unit_test(test_heartbeats_per_publisher),
        cmocka_unit_test(test_publisher_limit),
        cmocka_unit_test(test_corrupted_table),
    };
    return dir_env_run_both("dir-replicas", tests,
                            sizeof(tests) / sizeof(tests[0]), &g);
}
