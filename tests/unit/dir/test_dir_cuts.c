/* Cuts records on both directory backends (file: in a temporary directory,
 * redis:// on a private server; one test body each): records are read back
 * byte-exact in holder order, one per holder; a holder writing again
 * replaces its record; records survive creating, publishing and releasing
 * versions and do not show up as versions; a record above the cap is
 * refused naming the holder, and one stored around the API above the cap
 * comes back as its size only; dropping removes one record; holders
 * writing at once from several threads never lose each other's records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dir_env.h"
#include "reshard/dir.h"
#include "assert_status.h"

static dir_env_t *g;

static rs_dir_h open_dir(void)
{
    rs_diag_t d;
    rs_dir_h dir = NULL;
    DIR_ENV_NEED(g);
    if (rs_dir_open(g->url, &d, &dir) != RS_OK)
        fail_msg("open %s: %s", g->backend, d.msg);
    return dir;
}

/* A record of its own for (tag, variant): text with a NUL inside, so the
 * backends are seen to keep bytes, not strings. */
static size_t record_of(int tag, int variant, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "{\"format\":\"reshard.cuts.v1\",\"t\":%d,"
                     "\"v\":%d,\"pad\":\"", tag, variant);
    size_t len = (size_t)n;
    for (int i = 0; i < tag * 37 + variant && len + 3 < cap; i++)
        buf[len++] = (char)('a' + (i + tag) % 26);
    buf[len++] = '\0';
    buf[len++] = '"';
    buf[len++] = '}';
    return len;
}

static void put(rs_dir_h dir, const char *m, const char *holder, int tag,
                int variant)
{
    char buf[1024];
    rs_diag_t d;
    size_t len = record_of(tag, variant, buf, sizeof(buf));
    ASSERT_ST(rs_dir_put_cuts(dir, m, holder, buf, len, &d), RS_OK, d);
}

static void expect_record(const rs_dir_cuts_record_t *r, const char *holder,
                          int tag, int variant)
{
    char want[1024];
    size_t len = record_of(tag, variant, want, sizeof(want));
    assert_string_equal(r->holder, holder);
    assert_non_null(r->json);
    assert_int_equal(r->len, len);
    assert_memory_equal(r->json, want, len);
    assert_int_equal(r->json[len], '\0');
}

static rs_dir_cuts_record_t *read_all(rs_dir_h dir, const char *m,
                                      size_t *n_p)
{
    rs_diag_t d;
    rs_dir_cuts_record_t *r = NULL;
    ASSERT_ST(rs_dir_read_cuts(dir, m, &d, &r, n_p), RS_OK, d);
    return r;
}

static void test_put_read_replace(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    size_t n = 99;
    rs_dir_cuts_record_t *r = read_all(dir, "announce", &n);
    assert_int_equal(n, 0); /* no record yet: not an error */
    rs_dir_cuts_free(r, n);
    put(dir, "announce", "vllm-tp2-rank1", 1, 0);
    put(dir, "announce", "vllm-tp4-rank0", 2, 0);
    put(dir, "announce", "a-first", 3, 0);
    put(dir, "other", "vllm-tp2-rank1", 4, 0); /* another model's */
    r = read_all(dir, "announce", &n);
    assert_int_equal(n, 3);
    expect_record(&r[0], "a-first", 3, 0);
    expect_record(&r[1], "vllm-tp2-rank1", 1, 0);
    expect_record(&r[2], "vllm-tp4-rank0", 2, 0);
    rs_dir_cuts_free(r, n);
    put(dir, "announce", "vllm-tp2-rank1", 1, 5); /* replaced, not added */
    r = read_all(dir, "announce", &n);
    assert_int_equal(n, 3);
    expect_record(&r[1], "vllm-tp2-rank1", 1, 5);
    rs_dir_cuts_free(r, n);
    r = read_all(dir, "other", &n);
    assert_int_equal(n, 1);
    expect_record(&r[0], "vllm-tp2-rank1", 4, 0);
    rs_dir_cuts_free(r, n);
    rs_dir_close(dir);
}

static void test_survive_versions(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_version_info_t *infos = NULL;
    size_t n = 0, nv = 0;
    const char *m = "lasting";
    put(dir, m, "r0", 7, 0);
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_publish(dir, m, 1, 0, "t", 1, &d), RS_OK, d);
    put(dir, m, "r1", 8, 0);
    ASSERT_ST(rs_dir_release(dir, m, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_create_version(dir, m, 2, 1, &d), RS_OK, d);
    rs_dir_cuts_record_t *r = read_all(dir, m, &n);
    assert_int_equal(n, 2);
    expect_record(&r[0], "r0", 7, 0);
    expect_record(&r[1], "r1", 8, 0);
    rs_dir_cuts_free(r, n);
    ASSERT_ST(rs_dir_list(dir, m, &d, &infos, &nv), RS_OK, d);
    assert_int_equal(nv, 2); /* the records are no version */
    assert_int_equal(infos[0].version, 1);
    assert_int_equal(infos[1].version, 2);
    free(infos);
    rs_dir_close(dir);
}

/* A record stored behind the API, bypassing the cap. */
static void stored_put(const char *m, const char *holder, size_t len)
{
    char *data = malloc(len);
    assert_non_null(data);
    memset(data, ' ', len);
    if (!g->redis) {
        char path[PATH_MAX + 256];
        snprintf(path, sizeof(path), "%s/dir/%s/cuts/%s", g->tmp, m, holder);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(data, 1, len, f), len);
        fclose(f);
        free(data);
        return;
    }
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", g->server.port,
                                              tv);
    assert_true(c != NULL && c->err == 0);
    redisReply *r = redisCommand(c, "HSET rs:{%s}:cuts %s %b", m, holder,
                                 data, len);
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(c);
    free(data);
}

static void test_size_cap(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    size_t n = 0;
    const char *m = "capped";
    char *big = calloc(1, RS_DIR_CUTS_MAX + 1);
    assert_non_null(big);
    ASSERT_ST(rs_dir_put_cuts(dir, m, "huge-one", big, RS_DIR_CUTS_MAX + 1,
                              &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "cuts record of holder 'huge-one' for 'capped' is "
                   "16777217 bytes, more than the 16777216-byte limit");
    free(big);
    put(dir, m, "fine", 1, 1);
    stored_put(m, "stored-big", RS_DIR_CUTS_MAX + 10);
    rs_dir_cuts_record_t *r = read_all(dir, m, &n);
    assert_int_equal(n, 2);
    expect_record(&r[0], "fine", 1, 1);
    assert_string_equal(r[1].holder, "stored-big");
    assert_null(r[1].json); /* too big: its size only */
    assert_int_equal(r[1].len, RS_DIR_CUTS_MAX + 10);
    rs_dir_cuts_free(r, n);
    /* bad names */
    ASSERT_ST(rs_dir_put_cuts(dir, m, "a/b", "{}", 2, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "cuts holder name 'a/b'");
    ASSERT_ST(rs_dir_put_cuts(dir, m, NULL, "{}", 2, &d), RS_ERR_INPUT, d);
    ASSERT_ST(rs_dir_put_cuts(dir, "x y", "h", "{}", 2, &d), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "model name 'x y'");
    ASSERT_ST(rs_dir_put_cuts(dir, m, "h", NULL, 2, &d), RS_ERR_INVALID_ARG,
              d);
    rs_dir_close(dir);
}

static void test_drop(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    size_t n = 0;
    const char *m = "dropping";
    put(dir, m, "gone", 1, 0);
    put(dir, m, "stays", 2, 0);
    ASSERT_ST(rs_dir_drop_cuts(dir, m, "gone", &d), RS_OK, d);
    ASSERT_ST(rs_dir_drop_cuts(dir, m, "gone", &d), RS_OK, d); /* again */
    ASSERT_ST(rs_dir_drop_cuts(dir, "never-written", "x", &d), RS_OK, d);
    rs_dir_cuts_record_t *r = read_all(dir, m, &n);
    assert_int_equal(n, 1);
    expect_record(&r[0], "stays", 2, 0);
    rs_dir_cuts_free(r, n);
    rs_dir_close(dir);
}

#define WRITERS 4
#define ROUNDS 25

typedef struct writer {
    int index;
    int failed;
    char msg[RS_DIAG_MSG_MAX];
} writer_t;

/* Each writer replaces its own record ROUNDS times on its own handle. */
static void *writer_main(void *arg)
{
    writer_t *w = arg;
    rs_dir_h dir = NULL;
    rs_diag_t d;
    char holder[32], buf[1024];
    snprintf(holder, sizeof(holder), "writer-%d", w->index);
    if (rs_dir_open(g->url, &d, &dir) != RS_OK) {
        w->failed = 1;
        snprintf(w->msg, sizeof(w->msg), "%s", d.msg);
        return NULL;
    }
    for (int k = 0; k < ROUNDS && !w->failed; k++) {
        size_t len = record_of(10 + w->index, k, buf, sizeof(buf));
        if (rs_dir_put_cuts(dir, "racing", holder, buf, len, &d) != RS_OK) {
            w->failed = 1;
            snprintf(w->msg, sizeof(w->msg), "%s", d.msg);
        }
    }
    rs_dir_close(dir);
    return NULL;
}

static void test_concurrent_holders(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    pthread_t t[WRITERS];
    writer_t w[WRITERS];
    size_t n = 0;
    for (int i = 0; i < WRITERS; i++) {
        w[i] = (writer_t){.index = i};
        assert_int_equal(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
    }
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(t[i], NULL);
        if (w[i].failed)
            fail_msg("writer %d: %s", i, w[i].msg);
    }
    rs_dir_cuts_record_t *r = read_all(dir, "racing", &n);
    assert_int_equal(n, WRITERS);
    for (int i = 0; i < WRITERS; i++) {
        char holder[32];
        snprintf(holder, sizeof(holder), "writer-%d", i);
        expect_record(&r[i], holder, 10 + i, ROUNDS - 1);
    }
    rs_dir_cuts_free(r, n);
    rs_dir_close(dir);
}

static int group_setup(void **state)
{
    (void)state;
    return dir_env_setup(g, "dir-cuts");
}

static int group_teardown(void **state)
{
    (void)state;
    dir_env_teardown(g);
    return 0;
}

static int run_group(const char *name)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_read_replace),
        cmocka_unit_test(test_survive_versions),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_drop),
        cmocka_unit_test(test_concurrent_holders),
    };
    fprintf(stderr, "== directory backend: %s\n", name);
    return _cmocka_run_group_tests(name, tests,
                                   sizeof(tests) / sizeof(tests[0]),
                                   group_setup, group_teardown);
}

int main(void)
{
    static dir_env_t file_env = {.backend = "file"};
    static dir_env_t redis_env = {.backend = "redis", .redis = 1};
    int failed = 0;
    g = &file_env;
    failed += run_group("file");
    g = &redis_env;
    failed += run_group("redis");
    return failed;
}
