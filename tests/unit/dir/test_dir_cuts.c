/* Cuts records on both directory backends (file: in a temporary directory,
 * redis:// on a private server; one test body each): records are read back
 * byte-exact in holder order, one per holder; a holder writing again
 * replaces its record; records survive creating, publishing and releasing
 * versions and do not show up as versions; a record above the cap is
 * refused naming the holder, and one stored around the API above the cap
 * comes back as its size only; dropping removes one record; holders
 * writing at once from several threads never lose each other's records.
 * Generations: a listing names every holder with its record's generation
 * (the rsd64 digest of its bytes) and size, reading no record (the
 * handle's read counter stays); generations change exactly when a
 * record's bytes change, and writing the same bytes again writes nothing
 * (file: the record file keeps its inode); reading chosen holders returns
 * only theirs, with the generation of the bytes returned; a record
 * written around the API gets a generation that changes when it is
 * rewritten; one whose bytes no longer match its stored generation is
 * RS_ERR_VERIFY naming its holder. */
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

#include <sys/stat.h>

#include "dir/dir_impl.h"
#include "dir_env.h"
#include "reshard/digest.h"
#include "reshard/dir.h"
#include "assert_status.h"

static dir_env_t *g;

static rs_dir_h open_dir(void)
{
    return dir_env_open(g);
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

static uint64_t listed_gen(rs_dir_h dir, const char *m, const char *holder,
                           size_t *len_p);

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
    size_t len = 0;
    listed_gen(dir, m, "stored-big", &len);
    assert_int_equal(len, RS_DIR_CUTS_MAX + 10); /* listed with its size */
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

static rs_dir_cuts_stamp_t *list_all(rs_dir_h dir, const char *m,
                                     size_t *n_p)
{
    rs_diag_t d;
    rs_dir_cuts_stamp_t *s = NULL;
    ASSERT_ST(rs_dir_list_cuts(dir, m, &d, &s, n_p), RS_OK, d);
    return s;
}

/* The generation listed for `holder` (which must be listed). */
static uint64_t listed_gen(rs_dir_h dir, const char *m, const char *holder,
                           size_t *len_p)
{
    size_t n = 0;
    rs_dir_cuts_stamp_t *s = list_all(dir, m, &n);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s[i].holder, holder) != 0)
            continue;
        uint64_t gen = s[i].generation;
        if (len_p != NULL)
            *len_p = s[i].len;
        free(s);
        return gen;
    }
    free(s);
    fail_msg("holder '%s' is not listed", holder);
    return 0;
}

static uint64_t gen_of(int tag, int variant)
{
    char buf[1024];
    size_t len = record_of(tag, variant, buf, sizeof(buf));
    return rs_digest(buf, len);
}

/* The record file's inode (file: only). */
static ino_t record_inode(const char *m, const char *holder)
{
    char path[PATH_MAX + 256];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/dir/%s/cuts/%s", g->tmp, m, holder);
    assert_int_equal(stat(path, &sb), 0);
    return sb.st_ino;
}

static void test_generations(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    uint64_t reads0, bytes0, reads, bytes;
    size_t n = 99, len = 0;
    const char *m = "generations";
    rs_dir_cuts_stamp_t *s = list_all(dir, m, &n);
    assert_int_equal(n, 0); /* none: not an error */
    free(s);
    put(dir, m, "r1", 1, 0);
    put(dir, m, "r0", 2, 0);
    rs__dir_cuts_reads(dir, &reads0, &bytes0);
    s = list_all(dir, m, &n);
    assert_int_equal(n, 2);
    assert_string_equal(s[0].holder, "r0");
    assert_string_equal(s[1].holder, "r1");
    char buf[1024];
    assert_int_equal(s[0].len, record_of(2, 0, buf, sizeof(buf)));
    assert_int_equal(s[0].generation, gen_of(2, 0));
    assert_int_equal(s[1].generation, gen_of(1, 0));
    free(s);
    rs__dir_cuts_reads(dir, &reads, &bytes);
    assert_int_equal(reads, reads0); /* a listing reads no record */
    ino_t ino = g->redis ? 0 : record_inode(m, "r1");
    put(dir, m, "r1", 1, 0); /* the same bytes: nothing changes */
    assert_int_equal(listed_gen(dir, m, "r1", NULL), gen_of(1, 0));
    if (!g->redis)
        assert_int_equal(record_inode(m, "r1"), ino); /* not rewritten */
    put(dir, m, "r1", 1, 3); /* changed: a new generation, r0's stays */
    assert_int_equal(listed_gen(dir, m, "r1", &len), gen_of(1, 3));
    assert_int_equal(len, record_of(1, 3, buf, sizeof(buf)));
    assert_true(gen_of(1, 3) != gen_of(1, 0));
    assert_int_equal(listed_gen(dir, m, "r0", NULL), gen_of(2, 0));
    put(dir, m, "r1", 1, 0); /* back to the first bytes, the first gen */
    assert_int_equal(listed_gen(dir, m, "r1", NULL), gen_of(1, 0));
    rs_diag_t d;
    ASSERT_ST(rs_dir_drop_cuts(dir, m, "r0", &d), RS_OK, d);
    s = list_all(dir, m, &n);
    assert_int_equal(n, 1);
    assert_string_equal(s[0].holder, "r1");
    free(s);
    rs_dir_close(dir);
}

static void test_read_chosen(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_dir_cuts_record_t *r = NULL;
    uint64_t reads0, bytes0, reads, bytes;
    size_t n = 0;
    char buf[1024];
    const char *m = "chosen";
    put(dir, m, "a", 1, 0);
    put(dir, m, "b", 2, 0);
    put(dir, m, "c", 3, 0);
    rs__dir_cuts_reads(dir, &reads0, &bytes0);
    const char *want[] = {"c", "gone", "a"}; /* any order; gone: none */
    ASSERT_ST(rs_dir_read_cuts_of(dir, m, want, 3, &d, &r, &n), RS_OK, d);
    assert_int_equal(n, 2);
    expect_record(&r[0], "a", 1, 0); /* holder order */
    expect_record(&r[1], "c", 3, 0);
    assert_int_equal(r[0].generation, gen_of(1, 0));
    assert_int_equal(r[1].generation, gen_of(3, 0));
    rs_dir_cuts_free(r, n);
    rs__dir_cuts_reads(dir, &reads, &bytes);
    assert_int_equal(reads - reads0, 2);
    assert_int_equal(bytes - bytes0, record_of(1, 0, buf, sizeof(buf)) +
                                         record_of(3, 0, buf, sizeof(buf)));
    ASSERT_ST(rs_dir_read_cuts_of(dir, m, NULL, 0, &d, &r, &n), RS_OK, d);
    assert_int_equal(n, 0);
    rs_dir_cuts_free(r, n);
    const char *bad[] = {"a", "x/y"};
    ASSERT_ST(rs_dir_read_cuts_of(dir, m, bad, 2, &d, &r, &n), RS_ERR_INPUT,
              d);
    ASSERT_MSG_HAS(d, "cuts holder name 'x/y'");
    ASSERT_ST(rs_dir_read_cuts_of(dir, m, NULL, 1, &d, &r, &n),
              RS_ERR_INVALID_ARG, d);
    /* the whole read returns generations too */
    r = read_all(dir, m, &n);
    assert_int_equal(n, 3);
    assert_int_equal(r[1].generation, gen_of(2, 0));
    rs_dir_cuts_free(r, n);
    rs_dir_close(dir);
}

/* Overwrites holder's record behind the API with `text`: file: the whole
 * file (keep_stamp 0) or the bytes after its stamp line (keep_stamp 1);
 * redis: the record's field only, its generation left as it was. */
static void stored_text(const char *m, const char *holder, const char *text,
                        int keep_stamp)
{
    if (g->redis) {
        char key[256];
        snprintf(key, sizeof(key), "rs:{%s}:cuts", m);
        dir_env_hset(g, key, holder, text);
        return;
    }
    char path[PATH_MAX + 256];
    snprintf(path, sizeof(path), "%s/dir/%s", g->tmp, m);
    mkdir(path, 0755); /* a model no call wrote yet */
    snprintf(path, sizeof(path), "%s/dir/%s/cuts", g->tmp, m);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/dir/%s/cuts/%s", g->tmp, m, holder);
    dir_env_rewrite(path, keep_stamp, text);
}

static void test_around_the_api(void **state)
{
    (void)state;
    rs_dir_h dir = open_dir();
    rs_diag_t d;
    rs_dir_cuts_record_t *r = NULL;
    size_t n = 0, len = 0;
    const char *m = "by-hand";
    const char *one[] = {"hand"};
    stored_text(m, "hand", "{\"first\": 1}", 0);
    uint64_t g1 = listed_gen(dir, m, "hand", &len);
    assert_int_equal(len, 12);
    ASSERT_ST(rs_dir_read_cuts_of(dir, m, one, 1, &d, &r, &n), RS_OK, d);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].json, "{\"first\": 1}");
    assert_int_equal(r[0].generation, g1); /* as listed */
    rs_dir_cuts_free(r, n);
    stored_text(m, "hand", "{\"second\": 22}", 0);
    uint64_t g2 = listed_gen(dir, m, "hand", &len);
    assert_true(g2 != g1); /* rewritten: seen */
    assert_int_equal(len, 14);
    /* written through the API: its digest, then changed behind its back */
    put(dir, m, "stamped", 4, 0);
    stored_text(m, "stamped", "{\"tampered\": true}", 1);
    const char *two[] = {"stamped"};
    ASSERT_ST(rs_dir_read_cuts_of(dir, m, two, 1, &d, &r, &n), RS_ERR_VERIFY,
              d);
    ASSERT_MSG_HAS(d, "cuts record of holder 'stamped' for 'by-hand' is "
                   "corrupted");
    ASSERT_ST(rs_dir_read_cuts(dir, m, &d, &r, &n), RS_ERR_VERIFY, d);
    /* listing still works; writing through the API repairs it */
    assert_int_equal(listed_gen(dir, m, "hand", NULL), g2);
    put(dir, m, "stamped", 4, 0);
    ASSERT_ST(rs_dir_read_cuts_of(dir, m, two, 1, &d, &r, &n), RS_OK, d);
    expect_record(&r[0], "stamped", 4, 0);
    assert_int_equal(r[0].generation, gen_of(4, 0));
    rs_dir_cuts_free(r, n);
    rs_dir_close(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_read_replace),
        cmocka_unit_test(test_survive_versions),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_drop),
        cmocka_unit_test(test_concurrent_holders),
        cmocka_unit_test(test_generations),
        cmocka_unit_test(test_read_chosen),
        cmocka_unit_test(test_around_the_api),
    };
    return dir_env_run_both("dir-cuts", tests,
                            sizeof(tests) / sizeof(tests[0]), &g);
}
