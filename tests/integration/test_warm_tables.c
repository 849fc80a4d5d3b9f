/* A warm pull reads what changed: publishers (in this process, cma) store
 * their tables as split entries, and a receiver that parsed a version's
 * tables takes a later version's digests into them instead of reading and
 * parsing the tables again. On both directory backends: the second and
 * third pulls reuse every table (the pull result counts them) and install
 * the new bytes exactly (ground truth: the formula the publishers fill
 * from; digests verified, so a pull checking the old digests would fail);
 * an unchanged geometry's document is written once (file: its file keeps
 * its inode); a publisher that moved a shard (new address, new table) is
 * read and parsed again and planned again; tables stored whole (the
 * earlier layout) are still read, and parsed every pull. On file: a
 * version entry changed behind the API is refused (its digest line no
 * longer matches) and one changed consistently (another digest, its
 * digest line redone) fails verification, both with the bound bytes
 * untouched; the entry restored, the next pull reuses the tables again
 * and installs exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dir_env.h"
#include "reshard/reshard.h"
#include "assert_status.h"
#include "u8_rows.h"

#define PUBS 2
#define ROWS 8
#define COLS 4096
#define NBYTES (ROWS * COLS)
#define UNTOUCHED 0xEE

static dir_env_t *g;

typedef struct world {
    char model[32];
    rs_publisher_h pub[PUBS];
    uint8_t *rows[ROWS];
    rs_capture_h cap;
    uint8_t *dest;
    rs_receiver_h recv;
} world_t;

static world_t w;
static int serial;

static uint8_t expected(uint64_t i, int64_t v)
{
    return u8_rows_byte(i, v);
}

static void expect_dest(int64_t v)
{
    for (uint64_t i = 0; i < NBYTES; i++)
        if (w.dest[i] != (v == 0 ? UNTOUCHED : expected(i, v)))
            fail_msg("byte %llu is not version %lld's",
                     (unsigned long long)i, (long long)v);
}

static void publish(int64_t v)
{
    u8_rows_publish(w.pub, PUBS, w.rows, ROWS, COLS, v);
}

static rs_receiver_h open_receiver(const char *model)
{
    rs_receiver_params_t rp;
    rs_receiver_h recv = NULL;
    rs_diag_t d;
    rs_receiver_params_init(&rp);
    rp.directory = g->url;
    rp.model = model;
    rp.backend = "cma";
    rp.discover_timeout_s = 10;
    rp.timeout_s = 10;
    rp.verify_digests = 1;
    ASSERT_ST(rs_receiver_create(&rp, w.cap, &d, &recv), RS_OK, d);
    ASSERT_ST(rs_receiver_bind(recv, 0, w.dest, NBYTES, RS_MEM_HOST, &d),
              RS_OK, d);
    return recv;
}

static void world_open(void)
{
    memset(&w, 0, sizeof(w));
    snprintf(w.model, sizeof(w.model), "warm%d", ++serial);
    u8_rows_open(w.pub, PUBS, g->url, w.model, w.rows, ROWS, COLS);
    w.cap = u8_whole_capture("w", ROWS, COLS);
    w.dest = u8_filled(NBYTES, UNTOUCHED);
}

static int world_teardown(void **state)
{
    (void)state;
    rs_receiver_destroy(w.recv);
    u8_rows_close(w.pub, PUBS, w.rows, ROWS);
    rs_capture_destroy(w.cap);
    free(w.dest);
    memset(&w, 0, sizeof(w));
    return 0;
}

/* Pulls v; checks what the tables step did and the bytes installed. */
static rs_pull_result_t pull_ok(rs_receiver_h recv, int64_t v, int parsed,
                                int reused, int replanned)
{
    rs_diag_t d;
    rs_pull_result_t res;
    rs_diag_clear(&d);
    if (rs_receiver_pull(recv, v, &d, &res) != RS_OK)
        fail_msg("pull of version %lld: %s", (long long)v, d.msg);
    assert_int_equal(res.tables_parsed, parsed);
    assert_int_equal(res.tables_reused, reused);
    assert_int_equal(res.replanned, replanned);
    assert_true(res.exec.shards_verified > 0);
    assert_true(res.table_bytes_read > 0);
    expect_dest(v);
    return res;
}

/* The file under DIR/<model>/<folder> whose name starts with `prefix`. */
static void find_file(const char *folder, const char *prefix,
                      char out[PATH_MAX])
{
    char path[PATH_MAX + 128];
    snprintf(path, sizeof(path), "%.3000s/dir/%s/%s", g->tmp, w.model,
             folder);
    DIR *dir = opendir(path);
    assert_non_null(dir);
    struct dirent *e;
    out[0] = '\0';
    while ((e = readdir(dir)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            snprintf(out, PATH_MAX, "%.3000s/%.200s", path, e->d_name);
    closedir(dir);
    assert_true(out[0] != '\0');
}

static ino_t inode_of(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return sb.st_ino;
}

static void test_warm_pull_reuses_tables(void **state)
{
    (void)state;
    DIR_ENV_NEED(g);
    world_open();
    publish(1);
    w.recv = open_receiver(w.model);
    rs_pull_result_t cold = pull_ok(w.recv, 1, PUBS, 0, 1);
    char doc[PATH_MAX] = "";
    ino_t ino = 0;
    if (!g->redis) {
        find_file("geometry", "slot-0@", doc);
        ino = inode_of(doc);
    }
    for (int64_t v = 2; v <= 3; v++) {
        publish(v); /* new bytes, new digests, same geometry */
        rs_pull_result_t warm = pull_ok(w.recv, v, 0, PUBS, 0);
        /* only the digests and the step came from the directory */
        assert_true(warm.table_bytes_read * 4 < cold.table_bytes_read);
    }
    if (!g->redis)
        assert_true(inode_of(doc) == ino); /* written once */
}

static void test_moved_shard_reread(void **state)
{
    (void)state;
    rs_diag_t d;
    DIR_ENV_NEED(g);
    world_open();
    publish(1);
    w.recv = open_receiver(w.model);
    pull_ok(w.recv, 1, PUBS, 0, 1);
    /* row 0 of publisher 0 moves to a new buffer: its table changes */
    const int64_t full[2] = {ROWS, COLS}, shape[2] = {1, COLS};
    const int64_t offset[2] = {0, 0};
    ASSERT_ST(rs_publisher_unregister(w.pub[0], "w", offset, &d), RS_OK, d);
    free(w.rows[0]);
    w.rows[0] = malloc(COLS);
    assert_non_null(w.rows[0]);
    ASSERT_ST(rs_publisher_register(w.pub[0], "w", RS_DTYPE_U8, 2, full,
                                    offset, shape, w.rows[0], RS_MEM_HOST, &d),
              RS_OK, d);
    publish(2);
    pull_ok(w.recv, 2, PUBS, 0, 1); /* read and parsed again, planned */
    publish(3);
    pull_ok(w.recv, 3, 0, PUBS, 0); /* and reused from then on */
}

static void test_whole_tables_still_read(void **state)
{
    (void)state;
    rs_diag_t d;
    DIR_ENV_NEED(g);
    world_open();
    publish(1);
    /* the same tables stored whole, as the earlier layout stores them */
    char whole[48];
    snprintf(whole, sizeof(whole), "%s-whole", w.model);
    rs_dir_h dir = dir_env_open(g);
    ASSERT_ST(rs_dir_create_version(dir, whole, 1, PUBS, &d), RS_OK, d);
    for (int64_t s = 0; s < PUBS; s++) {
        rs_dir_entry_t *e = NULL;
        size_t n = 0;
        ASSERT_ST(rs_dir_read_slot(dir, w.model, 1, s, &d, &e, &n), RS_OK, d);
        ASSERT_ST(rs_dir_publish_as(dir, whole, 1, s, e[0].publisher,
                                    e[0].geometry, e[0].table, e[0].len, &d),
                  RS_OK, d);
        rs_dir_entries_free(e, n);
    }
    rs_dir_close(dir);
    w.recv = open_receiver(whole);
    pull_ok(w.recv, 1, PUBS, 0, 1);
    memset(w.dest, UNTOUCHED, NBYTES);
    pull_ok(w.recv, 1, PUBS, 0, 0); /* parsed again: no reuse */
}

static char *slurp(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    *len_p = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    return buf;
}

static void spill(const char *path, const char *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    fclose(f);
}

/* A pull of v that must fail with `want`, leaving version `kept`. */
static void pull_refused(int64_t v, rs_status_t want, const char *text,
                         int64_t kept)
{
    rs_diag_t d;
    rs_pull_result_t res;
    rs_diag_clear(&d);
    ASSERT_ST(rs_receiver_pull(w.recv, v, &d, &res), want, d);
    ASSERT_MSG_HAS(d, text);
    expect_dest(kept);
}

static void test_tampered_digests_refused(void **state)
{
    (void)state;
    DIR_ENV_NEED(g);
    if (g->redis)
        skip(); /* the entry is edited as a file */
    world_open();
    publish(1);
    w.recv = open_receiver(w.model);
    pull_ok(w.recv, 1, PUBS, 0, 1);
    publish(2);
    char path[PATH_MAX];
    size_t len = 0;
    find_file("2", "slot-0@", path);
    char *good = slurp(path, &len), *bad = malloc(len + 1);
    assert_non_null(bad);
    /* the last digest's last hex digit, changed */
    memcpy(bad, good, len);
    char *last = bad + len - 2;
    *last = *last == '0' ? '1' : '0';
    spill(path, bad, len);
    pull_refused(2, RS_ERR_VERIFY, "is corrupted", 1);
    /* the same change with its digest line redone: a consistent entry
     * whose digest is not the bytes' */
    char digest[RS_DIGEST_STR_LEN + 1];
    rs_digest_format(rs_digest(bad + 46, len - 46), digest);
    memcpy(bad, digest, 22);
    spill(path, bad, len);
    pull_refused(2, RS_ERR_VERIFY, "digest", 1);
    /* restored: every digest is the version's again */
    spill(path, good, len);
    pull_ok(w.recv, 2, 0, PUBS, 0);
    free(good);
    free(bad);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_warm_pull_reuses_tables, world_teardown),
        cmocka_unit_test_teardown(test_moved_shard_reread, world_teardown),
        cmocka_unit_test_teardown(test_whole_tables_still_read,
                                  world_teardown),
        cmocka_unit_test_teardown(test_tampered_digests_refused,
                                  world_teardown),
    };
    return dir_env_run_both("warm-tables", tests,
                            sizeof(tests) / sizeof(tests[0]), &g);
}
