/* How a cut-aligned publisher keeps the directory's cuts records, on both
 * directory backends (file: in a temporary directory, redis:// on a
 * private server; one body each). One publisher holds tensor "w" [64,
 * 1000] (u8) whole and stages version after version; the records are
 * written through the directory API. Asserted, by counting the records
 * the publisher's directory handle returned (rs__dir_cuts_reads) and the
 * records it parsed: N versions with unchanged records read and parse
 * each record once; a receiver writing the same bytes again makes nobody
 * read; a changed record is read (alone) and its cuts used at the next
 * version; a dropped holder's cuts leave the union; hostile records are
 * told once each, in holder order, and neither read nor parsed again
 * until they change (a changed one is told again, once); registering a
 * tensor makes the records be read again for it; a cuts folder that
 * cannot be listed (file:) is told and the version staged with the
 * records read before. Each version's table is checked to be exactly the
 * sub-boxes between the expected cuts, and every served byte against the
 * ground truth value_at() computed here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dir/dir_impl.h"
#include "dir_env.h"
#include "refit/publisher_impl.h"
#include "reshard/reshard.h"
#include "assert_status.h"

#define ROWS 64
#define COLS 1000
#define XROWS 16
#define XCOLS 64

static dir_env_t *g;

typedef struct world {
    rs_publisher_h pub;
    rs_dir_h dir; /* the test's own handle, for writing records */
    const char *model; /* one per test: records and versions are its */
    uint8_t w[ROWS * COLS], x[XROWS * XCOLS];
    int64_t version;
    int notices;
    char notice[8][RS_DIAG_MSG_MAX + 512];
} world_t;

static uint8_t value_at(int64_t v, int t, int r, int c)
{
    return (uint8_t)(v * 37 + t * 101 + r * 11 + c * 5 + 1);
}

static void on_notice(void *ctx, const char *msg)
{
    world_t *w = ctx;
    if (strstr(msg, "cuts record") == NULL)
        return;
    if (w->notices < 8)
        snprintf(w->notice[w->notices], sizeof(w->notice[0]), "%s", msg);
    w->notices++;
}

static void world_open(world_t *w, const char *model)
{
    rs_publisher_params_t pp;
    rs_diag_t d;
    const int64_t full[2] = {ROWS, COLS}, off[2] = {0, 0};
    memset(w, 0, sizeof(*w));
    w->model = model;
    rs_publisher_params_init(&pp);
    pp.directory = g->url;
    pp.model = model;
    pp.world = 1;
    pp.backend = "cma";
    pp.heartbeat_s = 0;
    pp.staging = RS_STAGING_ARENA;
    pp.cut_aligned = 1;
    pp.notice = on_notice;
    pp.notice_ctx = w;
    ASSERT_ST(rs_publisher_create(&pp, &d, &w->pub), RS_OK, d);
    ASSERT_ST(rs_publisher_register(w->pub, "w", RS_DTYPE_U8, 2, full, off,
                                    full, w->w, RS_MEM_HOST, &d), RS_OK, d);
    ASSERT_ST(rs_dir_open(g->url, &d, &w->dir), RS_OK, d);
}

static void world_close(world_t *w)
{
    rs_publisher_destroy(w->pub);
    rs_dir_close(w->dir);
}

/* A record cutting w's columns at wcut and (xcut > 0) x's rows at xcut. */
static void put_record(world_t *w, const char *holder, int wcut, int xcut)
{
    char json[512];
    rs_diag_t d;
    int n = snprintf(json, sizeof(json), "{\"schema\": \"reshard.cuts.v1\", "
                     "\"model\": \"%s\", \"tensors\": [{\"name\": "
                     "\"w\", \"shape\": [%d, %d], \"cuts\": [[], [%d]]}",
                     w->model, ROWS, COLS, wcut);
    if (xcut > 0)
        n += snprintf(json + n, sizeof(json) - (size_t)n, ", {\"name\": "
                      "\"x\", \"shape\": [%d, %d], \"cuts\": [[%d], []]}",
                      XROWS, XCOLS, xcut);
    snprintf(json + n, sizeof(json) - (size_t)n, "]}");
    ASSERT_ST(rs_dir_put_cuts(w->dir, w->model, holder, json, strlen(json), &d),
              RS_OK, d);
}

static void put_text(world_t *w, const char *holder, const char *json)
{
    rs_diag_t d;
    ASSERT_ST(rs_dir_put_cuts(w->dir, w->model, holder, json, strlen(json), &d),
              RS_OK, d);
}

static uint64_t reads(world_t *w)
{
    uint64_t n = 0, bytes = 0;
    rs__dir_cuts_reads(w->pub->dir, &n, &bytes);
    return n;
}

/* Whether `at` is one of the n cuts (or a bound of the tensor). */
static int is_cut(const int *cuts, int n, int at, int size)
{
    if (at == 0 || at == size)
        return 1;
    for (int i = 0; i < n; i++)
        if (cuts[i] == at)
            return 1;
    return 0;
}

/* Checks one entry of tensor t (dims rows x cols, cut in dim `dim` at
 * `cuts`): bounded by cuts, nothing cut inside, bytes exact. Returns its
 * element count. */
static int64_t check_entry(int64_t v, int t, const rs_shard_desc_t *sh,
                           int rows, int cols, int dim, const int *cuts,
                           int n)
{
    int size = dim == 0 ? rows : cols;
    int lo = (int)sh->offset[dim], hi = lo + (int)sh->shape[dim];
    if (!is_cut(cuts, n, lo, size) || !is_cut(cuts, n, hi, size))
        fail_msg("version %lld %s entry [%d, %d) is not bounded by cuts",
                 (long long)v, sh->tensor, lo, hi);
    for (int a = lo + 1; a < hi; a++)
        if (is_cut(cuts, n, a, size))
            fail_msg("version %lld %s entry [%d, %d) holds cut %d",
                     (long long)v, sh->tensor, lo, hi, a);
    if (sh->shape[1 - dim] != (dim == 0 ? cols : rows))
        fail_msg("version %lld %s entry not whole in dim %d", (long long)v,
                 sh->tensor, 1 - dim);
    const uint8_t *p = (const uint8_t *)(uintptr_t)sh->addr;
    for (int64_t r = 0; r < sh->shape[0]; r++)
        for (int64_t c = 0; c < sh->shape[1]; c++) {
            int rr = (int)(sh->offset[0] + r), cc = (int)(sh->offset[1] + c);
            if (p[r * sh->shape[1] + c] != value_at(v, t, rr, cc))
                fail_msg("version %lld %s[%d][%d] served wrong", (long long)v,
                         sh->tensor, rr, cc);
        }
    return sh->shape[0] * sh->shape[1];
}

/* Publishes the next version (after releasing the last) and checks its
 * table: w cut at wcuts (columns), x (when registered) at xcuts (rows). */
static void next_version(world_t *w, const int *wcuts, int nw,
                         const int *xcuts, int nx, int with_x)
{
    rs_diag_t d;
    if (w->version > 0) {
        rs_dir_release(w->dir, w->model, w->version, NULL);
        ASSERT_ST(rs_publisher_wait_released(w->pub, w->version, 20, &d),
                  RS_OK, d);
    }
    int64_t v = ++w->version;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++)
            w->w[r * COLS + c] = value_at(v, 0, r, c);
    for (int r = 0; r < XROWS; r++)
        for (int c = 0; c < XCOLS; c++)
            w->x[r * XCOLS + c] = value_at(v, 1, r, c);
    ASSERT_ST(rs_publisher_publish(w->pub, v, &d), RS_OK, d);
    memset(w->w, 0xA5, sizeof(w->w)); /* the arena holds v */
    memset(w->x, 0xA5, sizeof(w->x));
    rs_sources_h src = dir_env_table(g, w->model, v, 0);
    assert_non_null(src);
    size_t n = rs_sources_num_shards(src);
    assert_int_equal(n, (size_t)(nw + 1 + (with_x ? nx + 1 : 0)));
    int64_t wsum = 0, xsum = 0;
    for (size_t i = 0; i < n; i++) {
        rs_shard_desc_t sh;
        rs_sources_shard(src, i, &sh);
        if (strcmp(sh.tensor, "w") == 0)
            wsum += check_entry(v, 0, &sh, ROWS, COLS, 1, wcuts, nw);
        else
            xsum += check_entry(v, 1, &sh, XROWS, XCOLS, 0, xcuts, nx);
    }
    assert_int_equal(wsum, ROWS * COLS); /* tiled exactly */
    assert_int_equal(xsum, with_x ? XROWS * XCOLS : 0);
    rs_sources_destroy(src);
}

static void expect_notice(world_t *w, int i, const char *holder)
{
    char want[96];
    snprintf(want, sizeof(want), "cuts record of holder '%s'", holder);
    if (i >= w->notices || strstr(w->notice[i], want) == NULL)
        fail_msg("notice %d '%s' does not name '%s'", i,
                 i < w->notices ? w->notice[i] : "(none)", holder);
}

static void test_unchanged_records_read_once(void **state)
{
    (void)state;
    DIR_ENV_NEED(g);
    world_t *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    world_open(w, "once");
    const int c1[2] = {100, 500};
    put_record(w, "r1", 100, 8);
    put_record(w, "r2", 500, 0);
    put_text(w, "bad", "{\"schema\": \"reshard.cuts.v1\", \"tens");
    put_text(w, "elsewhere", "{\"schema\": \"reshard.cuts.v1\", \"model\": "
             "\"another\", \"tensors\": []}");
    next_version(w, c1, 2, NULL, 0, 0);
    assert_int_equal(reads(w), 4);
    assert_int_equal(w->pub->records_parsed, 4);
    assert_int_equal(w->notices, 2); /* in holder order */
    expect_notice(w, 0, "bad");
    expect_notice(w, 1, "elsewhere");
    for (int k = 0; k < 4; k++) /* unchanged: nothing read or parsed */
        next_version(w, c1, 2, NULL, 0, 0);
    put_record(w, "r1", 100, 8); /* the same bytes announced again */
    next_version(w, c1, 2, NULL, 0, 0);
    assert_int_equal(reads(w), 4);
    assert_int_equal(w->pub->records_parsed, 4);
    assert_int_equal(w->notices, 2);
    world_close(w);
    free(w);
}

static void test_changes_drops_and_registrations(void **state)
{
    (void)state;
    DIR_ENV_NEED(g);
    world_t *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    world_open(w, "changing");
    rs_diag_t d;
    const int c1[2] = {100, 500}, c2[2] = {250, 500}, c3[1] = {250};
    const int x1[1] = {8};
    put_record(w, "r1", 100, 8);
    put_record(w, "r2", 500, 0);
    put_text(w, "bad", "not json");
    next_version(w, c1, 2, NULL, 0, 0);
    assert_int_equal(reads(w), 3);
    put_record(w, "r1", 250, 8); /* changed: read alone, used next */
    next_version(w, c2, 2, NULL, 0, 0);
    assert_int_equal(reads(w), 4);
    assert_int_equal(w->pub->records_parsed, 4);
    ASSERT_ST(rs_dir_drop_cuts(w->dir, w->model, "r2", &d), RS_OK, d);
    next_version(w, c3, 1, NULL, 0, 0); /* its cut at 500 left */
    assert_int_equal(reads(w), 4);
    assert_int_equal(w->notices, 1);
    put_text(w, "bad", "still not json"); /* changed: told again, once */
    next_version(w, c3, 1, NULL, 0, 0);
    next_version(w, c3, 1, NULL, 0, 0);
    assert_int_equal(w->notices, 2);
    expect_notice(w, 1, "bad");
    assert_int_equal(reads(w), 5);
    assert_int_equal(w->pub->records_parsed, 5);
    /* a new tensor: the kept records hold the registered tensors' cuts
     * only, so every record is read again, and x is cut at 8 */
    const int64_t xfull[2] = {XROWS, XCOLS}, off[2] = {0, 0};
    ASSERT_ST(rs_publisher_register(w->pub, "x", RS_DTYPE_U8, 2, xfull, off,
                                    xfull, w->x, RS_MEM_HOST, &d), RS_OK, d);
    next_version(w, c3, 1, x1, 1, 1);
    assert_int_equal(reads(w), 7);
    assert_int_equal(w->notices, 2); /* the same bad record: not again */
    next_version(w, c3, 1, x1, 1, 1);
    assert_int_equal(reads(w), 7);
    world_close(w);
    free(w);
}

/* file: a cuts folder that cannot be listed (a plain file in its place)
 * is told; the version is staged with the records read before. */
static void test_unlistable_keeps_records(void **state)
{
    (void)state;
    DIR_ENV_NEED(g);
    if (g->redis)
        skip(); /* the fault is made on the filesystem */
    world_t *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    world_open(w, "unlistable");
    const int c1[1] = {300};
    char folder[PATH_MAX + 64], away[PATH_MAX + 80];
    put_record(w, "only", 300, 0);
    next_version(w, c1, 1, NULL, 0, 0);
    snprintf(folder, sizeof(folder), "%s/dir/%s/cuts", g->tmp, w->model);
    snprintf(away, sizeof(away), "%s.away", folder);
    assert_int_equal(rename(folder, away), 0);
    FILE *f = fopen(folder, "w");
    assert_non_null(f);
    fclose(f);
    w->notices = 0;
    next_version(w, c1, 1, NULL, 0, 0); /* still cut at 300 */
    assert_int_equal(w->notices, 1);
    assert_non_null(strstr(w->notice[0], "cannot read the cuts records"));
    assert_non_null(strstr(w->notice[0], "staging with the records read "
                                         "before"));
    assert_int_equal(remove(folder), 0);
    assert_int_equal(rename(away, folder), 0);
    next_version(w, c1, 1, NULL, 0, 0);
    assert_int_equal(reads(w), 1);
    world_close(w);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unchanged_records_read_once),
        cmocka_unit_test(test_changes_drops_and_registrations),
        cmocka_unit_test(test_unlistable_keeps_records),
    };
    return dir_env_run_both("cut-records", tests,
                            sizeof(tests) / sizeof(tests[0]), &g);
}
