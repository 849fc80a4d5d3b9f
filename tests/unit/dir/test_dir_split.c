/* Split entries on both directory backends (file: in a temporary
 * directory, redis:// on a private server; one test body each): a
 * geometry document is written by the first publish of a geometry and by
 * no later one naming the same document (file: its file keeps its inode);
 * rs_dir_read_slot hands out the table byte for byte as the publisher had
 * it (the document with the version's values spliced in), while
 * rs__dir_read_parts hands out only the values and the document's digest;
 * a version published as a whole table (the earlier layout) beside split
 * ones reads as before; insertions out of order, past the document or
 * malformed are refused at publish; a reader whose document was replaced
 * by a later geometry is RS_ERR_INCOMPLETE naming it, one whose document
 * bytes changed behind the API RS_ERR_VERIFY before anything is parsed
 * (until a publish of another geometry replaces it: publishing compares
 * the stored digest only); and an entry of the split layout is refused, not misread, by the
 * decoder of the earlier layout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dir/dir_impl.h"
#include "dir/split.h"
#include "dir_env.h"
#include "reshard/digest.h"
#include "reshard/dir.h"
#include "assert_status.h"

static dir_env_t *g;

/* A document with two places for values, and version v's values. */
#define DOC "{\"step\": , \"d\": [\"\", \"\"]}"
static const char *table_of(int v)
{
    return v == 1 ? "{\"step\": 1, \"d\": [\"rsd64:aa\", \"rsd64:bb\"]}"
                  : "{\"step\": 2, \"d\": [\"rsd64:cc\", \"rsd64:dd\"]}";
}
static const char *inserts_of(int v)
{
    return v == 1 ? "9 1\n18 rsd64:aa\n22 rsd64:bb\n"
                  : "9 2\n18 rsd64:cc\n22 rsd64:dd\n";
}

static void publish(rs_dir_h dir, const char *m, int64_t v, const char *doc,
                    const char *ins, int want_written)
{
    rs_diag_t d;
    int written = -1;
    ASSERT_ST(rs__dir_publish_split(dir, m, v, 0, "p", 7, doc, strlen(doc),
                                    ins, strlen(ins), &d, &written), RS_OK, d);
    assert_int_equal(written, want_written);
}

static void expect_table(rs_dir_h dir, const char *m, int64_t v,
                         const char *want)
{
    rs_diag_t d;
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    ASSERT_ST(rs_dir_read_slot(dir, m, v, 0, &d, &e, &n), RS_OK, d);
    assert_int_equal(n, 1);
    assert_int_equal(e[0].len, strlen(want));
    assert_memory_equal(e[0].table, want, e[0].len);
    assert_int_equal(e[0].geometry, 7);
    rs_dir_entries_free(e, n);
}

static ino_t geometry_inode(const char *m)
{
    char path[PATH_MAX + 256];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/dir/%s/geometry/slot-0@p", g->tmp, m);
    assert_int_equal(stat(path, &sb), 0);
    return sb.st_ino;
}

static void test_publish_and_read(void **state)
{
    (void)state;
    rs_dir_h dir = dir_env_open(g);
    rs_diag_t d;
    const char *m = "split";
    for (int64_t v = 1; v <= 2; v++)
        ASSERT_ST(rs_dir_create_version(dir, m, v, 1, &d), RS_OK, d);
    publish(dir, m, 1, DOC, inserts_of(1), 1);
    ino_t ino = g->redis ? 0 : geometry_inode(m);
    publish(dir, m, 2, DOC, inserts_of(2), 0); /* same document: not written */
    if (!g->redis)
        assert_true(geometry_inode(m) == ino);
    expect_table(dir, m, 1, table_of(1));
    expect_table(dir, m, 2, table_of(2));
    /* the parts: the values and the document's digest only */
    rs_dir_entry_t *e = NULL;
    rs__dir_split_t *sp = NULL;
    size_t n = 0;
    ASSERT_ST(rs__dir_read_parts(dir, m, 2, 0, &d, &e, &sp, &n), RS_OK, d);
    assert_int_equal(n, 1);
    assert_true(sp[0].split);
    assert_true(sp[0].doc == rs_digest(DOC, strlen(DOC)));
    assert_int_equal(sp[0].doc_len, strlen(DOC));
    assert_string_equal(e[0].table, inserts_of(2));
    rs_dir_entries_free(e, n);
    free(sp);
    /* a whole table (the earlier layout) in another slot's place reads as
     * before, and as a whole part */
    ASSERT_ST(rs_dir_create_version(dir, m, 3, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_publish_as(dir, m, 3, 0, "p", 7, table_of(1),
                                strlen(table_of(1)), &d), RS_OK, d);
    expect_table(dir, m, 3, table_of(1));
    ASSERT_ST(rs__dir_read_parts(dir, m, 3, 0, &d, &e, &sp, &n), RS_OK, d);
    assert_false(sp[0].split);
    assert_string_equal(e[0].table, table_of(1));
    rs_dir_entries_free(e, n);
    free(sp);
    rs_dir_close(dir);
}

static void test_bad_insertions_refused(void **state)
{
    (void)state;
    rs_dir_h dir = dir_env_open(g);
    rs_diag_t d;
    const char *m = "bad-inserts";
    static const char *const bad[] = {"17 a\n9 b\n", "99 a\n", "x a\n",
                                      "9 no newline"};
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 1, &d), RS_OK, d);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ASSERT_ST(rs__dir_publish_split(dir, m, 1, 0, "p", 7, DOC,
                                        strlen(DOC), bad[i], strlen(bad[i]),
                                        &d, NULL), RS_ERR_INVALID_ARG, d);
        ASSERT_MSG_HAS(d, "insertion");
    }
    rs_version_info_t info;
    ASSERT_ST(rs_dir_info(dir, m, 1, &d, &info), RS_OK, d);
    assert_int_equal(info.published, 0); /* nothing was published */
    rs_dir_close(dir);
}

/* Stores `bytes` as (slot 0, publisher p)'s document of model m, behind
 * the API, keeping the stored digest. */
static void tamper_document(const char *m, const char *bytes)
{
    if (g->redis) {
        char key[256];
        snprintf(key, sizeof(key), "rs:{%s}:geometry", m);
        dir_env_hset(g, key, "0@p", bytes);
        return;
    }
    char path[PATH_MAX + 256];
    snprintf(path, sizeof(path), "%s/dir/%s/geometry/slot-0@p", g->tmp, m);
    dir_env_rewrite(path, 1, bytes);
}

static void test_replaced_and_corrupted(void **state)
{
    (void)state;
    rs_dir_h dir = dir_env_open(g);
    rs_diag_t d;
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    char *doc = NULL;
    size_t len = 0;
    const char *m = "replaced";
    for (int64_t v = 1; v <= 2; v++)
        ASSERT_ST(rs_dir_create_version(dir, m, v, 1, &d), RS_OK, d);
    publish(dir, m, 1, DOC, inserts_of(1), 1);
    /* a new geometry for version 2 replaces the document version 1 names */
    const char *doc2 = "{\"step\": , \"d\": [\"\", \"\"], \"more\": 1}";
    publish(dir, m, 2, doc2, inserts_of(2), 1);
    ASSERT_ST(rs_dir_read_slot(dir, m, 1, 0, &d, &e, &n), RS_ERR_INCOMPLETE,
              d);
    ASSERT_MSG_HAS(d, "published another geometry since");
    expect_table(dir, m, 2, "{\"step\": 2, \"d\": [\"rsd64:cc\", "
                 "\"rsd64:dd\"], \"more\": 1}");
    /* its bytes changed behind the API: refused before parsing */
    tamper_document(m, "{\"step\": , \"d\": [\"\", \"\"], \"more\": 2}");
    ASSERT_ST(rs_dir_read_slot(dir, m, 2, 0, &d, &e, &n), RS_ERR_VERIFY, d);
    ASSERT_MSG_HAS(d, "geometry document of publisher 'p' is corrupted");
    ASSERT_ST(rs__dir_read_geometry(dir, m, 2, 0, "p",
                                    rs_digest(doc2, strlen(doc2)), &d, &doc,
                                    &len), RS_ERR_VERIFY, d);
    /* a publish compares the stored digest only: it does not see the
     * change, and readers keep refusing the document */
    publish(dir, m, 2, doc2, inserts_of(2), 0);
    ASSERT_ST(rs_dir_read_slot(dir, m, 2, 0, &d, &e, &n), RS_ERR_VERIFY, d);
    /* a publish of another geometry replaces it */
    publish(dir, m, 2, DOC, inserts_of(2), 1);
    ASSERT_ST(rs__dir_read_geometry(dir, m, 2, 0, "p",
                                    rs_digest(DOC, strlen(DOC)), &d, &doc,
                                    &len), RS_OK, d);
    assert_string_equal(doc, DOC);
    free(doc);
    expect_table(dir, m, 2, table_of(2));
    rs_dir_close(dir);
}

/* The decoder of whole entries (what an earlier reader runs) refuses a
 * split entry: no newline where its digest line ends. */
static void test_earlier_reader_refuses(void **state)
{
    (void)state;
    if (g->redis)
        skip(); /* the bytes are the same on both backends */
    rs_dir_h dir = dir_env_open(g);
    rs_diag_t d;
    const char *m = "earlier";
    ASSERT_ST(rs_dir_create_version(dir, m, 1, 1, &d), RS_OK, d);
    publish(dir, m, 1, DOC, inserts_of(1), 1);
    char path[PATH_MAX + 256], *bytes = NULL;
    snprintf(path, sizeof(path), "%s/dir/%s/1/slot-0@p", g->tmp, m);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    bytes = calloc(1, 4096);
    size_t len = fread(bytes, 1, 4095, f);
    fclose(f);
    rs_dir_entry_t e = {"p", 0, bytes, len, -1};
    rs__dir_request_t req;
    memset(&req, 0, sizeof(req));
    req.model = m;
    req.version = 1;
    ASSERT_ST(rs__dir_entry_decode(&req, &e, &d), RS_ERR_VERIFY, d);
    ASSERT_MSG_HAS(d, "is corrupted");
    free(bytes);
    rs_dir_close(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_publish_and_read),
        cmocka_unit_test(test_bad_insertions_refused),
        cmocka_unit_test(test_replaced_and_corrupted),
        cmocka_unit_test(test_earlier_reader_refuses),
    };
    return dir_env_run_both("dir-split", tests,
                            sizeof(tests) / sizeof(tests[0]), &g);
}
