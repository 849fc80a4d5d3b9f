/* rs_receiver_dry_run against a file: directory: its figures equal a plan
 * built independently from the same tables, it takes no lease, writes no
 * parameter byte and connects nothing (publishers that do not exist are
 * fine); a second version with only new digests reuses the plan, a moved
 * shard replans; an unbound parameter is an error; the result's size
 * travels with the call (older, smaller structs get their bytes only).
 * With publishers in this
 * process (cma), a pull after a dry run reuses its plan, connects and
 * installs byte-exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reshard/reshard.h"
#include "result_guard.h"
#include "tmp_path.h"

#define ROWS 8
#define COLS 4
#define NPUB 2
#define PBYTES ((uint64_t)ROWS * COLS * 4)

typedef struct fixture {
    char dir[64], url[80];
    rs_capture_h cap;
    float param[ROWS * COLS];
} fixture_t;

static void make_capture(fixture_t *f)
{
    static const int64_t shape[2] = {ROWS, COLS}, stride[2] = {COLS, 1};
    assert_int_equal(rs_capture_create(&f->cap), RS_OK);
    assert_int_equal(rs_capture_add_param(f->cap, "p", 2, shape, RS_DTYPE_F32,
                                          NULL), RS_OK);
    rs_copy_desc_t c = {"w", "p", NULL, 0, 0, 2, shape, stride, RS_DTYPE_F32};
    assert_int_equal(rs_capture_add_copy(f->cap, &c, NULL), RS_OK);
}

static void fixture_open(fixture_t *f)
{
    memset(f, 0, sizeof(*f));
    tmp_dir(f->dir, sizeof(f->dir), "dry-run");
    snprintf(f->url, sizeof(f->url), "file:%s", f->dir);
    make_capture(f);
    memset(f->param, 0xEE, sizeof(f->param));
}

static void fixture_close(fixture_t *f)
{
    assert_int_equal(tmp_remove(f->dir), 0);
    rs_capture_destroy(f->cap);
}

/* Slot r's table: rows [r*4, r*4+4) of "w" at addr, digest from seed. */
static void table_text(int r, uint64_t addr, uint64_t seed, char *buf,
                       size_t len)
{
    char digest[RS_DIGEST_STR_LEN + 1];
    rs_digest_format(seed * 31 + (uint64_t)r, digest);
    snprintf(buf, len,
             "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": "
             "\"trainer-%d\", \"agent_meta_b64\": \"AAAA\", \"tensors\": "
             "[{\"name\": \"w\", \"dtype\": \"torch.float32\", \"elsize\": 4, "
             "\"full_shape\": [%d, %d], \"shards\": [{\"addr\": %llu, "
             "\"shard_offset\": [%d, 0], \"shape\": [%d, %d], \"digest\": "
             "\"%s\"}]}]}", r, ROWS, COLS, (unsigned long long)addr,
             r * ROWS / NPUB, ROWS / NPUB, COLS, digest);
}

static void publish_tables(const fixture_t *f, int64_t version,
                           uint64_t addr1, char texts[NPUB][1024])
{
    rs_dir_h dir;
    assert_int_equal(rs_dir_open(f->url, NULL, &dir), RS_OK);
    assert_int_equal(rs_dir_create_version(dir, "m", version, NPUB, NULL),
                     RS_OK);
    for (int r = 0; r < NPUB; r++) {
        table_text(r, r == 1 ? addr1 : 4096, (uint64_t)version, texts[r],
                   1024);
        assert_int_equal(rs_dir_publish(dir, "m", version, r, texts[r],
                                        strlen(texts[r]), NULL), RS_OK);
    }
    rs_dir_close(dir);
}

static rs_receiver_h receiver(const fixture_t *f, const char *backend)
{
    rs_receiver_params_t rp;
    rs_receiver_h r;
    rs_receiver_params_init(&rp);
    rp.directory = f->url;
    rp.model = "m";
    rp.backend = backend;
    rp.discover_timeout_s = 5;
    assert_int_equal(rs_receiver_create(&rp, f->cap, NULL, &r), RS_OK);
    return r;
}

static int exists(const fixture_t *f, int64_t version, const char *name)
{
    char path[160];
    struct stat st;
    snprintf(path, sizeof(path), "%s/m/%lld/%s", f->dir, (long long)version,
             name);
    return stat(path, &st) == 0;
}

/* The figures an independent plan of the same tables gives. */
static void assert_figures(const fixture_t *f, char texts[NPUB][1024],
                           const rs_dry_run_t *d)
{
    rs_sources_h s;
    rs_plan_h plan;
    rs_plan_params_t pp;
    rs_plan_stats_t st;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    for (int r = 0; r < NPUB; r++)
        assert_int_equal(rs_sources_load_string(s, texts[r], strlen(texts[r]),
                                                "t", NULL), RS_OK);
    rs_plan_params_init(&pp);
    assert_int_equal(rs_plan_build(f->cap, s, &pp, NULL, &plan), RS_OK);
    rs_plan_stats(plan, &st);
    assert_int_equal(d->bytes, st.bytes_planned);
    assert_int_equal(d->bytes, PBYTES);
    assert_int_equal(d->descriptors, st.descriptor_count);
    assert_int_equal(d->sessions, st.nsessions_used);
    assert_int_equal(d->sessions, NPUB);
    assert_int_equal(d->tables, NPUB);
    assert_int_equal(d->shards, NPUB);
    assert_true(d->complete);
    rs_plan_destroy(plan);
    rs_sources_destroy(s);
}

static void test_dry_run_figures_no_lease(void **state)
{
    (void)state;
    fixture_t f;
    char texts[NPUB][1024];
    rs_dry_run_t d;
    rs_diag_t diag;
    fixture_open(&f);
    publish_tables(&f, 1, 8192, texts);
    rs_receiver_h r = receiver(&f, "cma");
    assert_null(rs_receiver_plan(r));
    assert_int_equal(rs_receiver_bind(r, 0, f.param, PBYTES, RS_MEM_HOST, NULL), RS_OK);
    rs_diag_clear(&diag);
    assert_int_equal(rs_receiver_dry_run(r, 1, &diag, &d), RS_OK);
    assert_int_equal(d.version, 1);
    assert_true(d.replanned);
    assert_figures(&f, texts, &d);
    rs_plan_h plan = rs_receiver_plan(r);
    assert_non_null(plan);
    for (uint32_t k = 0; k < rs_plan_num_sessions(plan); k++)
        assert_int_equal(rs_plan_session_bytes(plan, k), PBYTES / NPUB);
    assert_false(exists(&f, 1, "epoch")); /* no lease was ever taken */
    unsigned char ee[sizeof(f.param)];
    memset(ee, 0xEE, sizeof(ee));
    assert_memory_equal(f.param, ee, sizeof(ee)); /* no byte moved */

    /* version 2: same topology, new digests: the plan is reused */
    publish_tables(&f, 2, 8192, texts);
    assert_int_equal(rs_receiver_dry_run(r, -1, &diag, &d), RS_OK);
    assert_int_equal(d.version, 2);
    assert_false(d.replanned);
    assert_figures(&f, texts, &d);
    assert_ptr_equal(rs_receiver_plan(r), plan);
    /* version 3: trainer-1's shard moved: a new plan */
    publish_tables(&f, 3, 16384, texts);
    assert_int_equal(rs_receiver_dry_run(r, 3, &diag, &d), RS_OK);
    assert_true(d.replanned);
    assert_figures(&f, texts, &d);
    assert_false(exists(&f, 2, "epoch"));
    assert_false(exists(&f, 3, "epoch"));
    assert_memory_equal(f.param, ee, sizeof(ee));
    rs_receiver_destroy(r);
    fixture_close(&f);
}

/* A caller's struct with guard bytes after it. */
typedef union guarded {
    rs_dry_run_t d;
    unsigned char b[sizeof(rs_dry_run_t) + RESULT_GUARD_SLACK];
} guarded_t;

static void assert_guard(const guarded_t *g, size_t from)
{
    assert_result_guard(g->b, sizeof(g->b), from);
}

/* The result's size travels with the call: sizes this library does not
 * know are refused before anything (no plan built), a caller's struct
 * gets its own bytes only, and the unsized function writes the first
 * layout. */
static void test_dry_run_sized(void **state)
{
    (void)state;
    fixture_t f;
    char texts[NPUB][1024];
    guarded_t g;
    rs_diag_t diag;
    const size_t v1 = RS_DRY_RUN_V1_SIZE;
    fixture_open(&f);
    publish_tables(&f, 1, 8192, texts);
    rs_receiver_h r = receiver(&f, "cma");
    assert_int_equal(rs_receiver_bind(r, 0, f.param, PBYTES, RS_MEM_HOST, NULL), RS_OK);
    memset(&g, RESULT_GUARD_BYTE, sizeof(g));
    assert_int_equal(rs_receiver_dry_run_sized(r, 1, &diag, &g.d, v1 - 1),
                     RS_ERR_INVALID_ARG);
    assert_non_null(strstr(diag.msg, "rs_dry_run_t: size"));
    assert_int_equal(rs_receiver_dry_run_sized(r, 1, &diag, &g.d,
                                               sizeof(rs_dry_run_t) + 8),
                     RS_ERR_INVALID_ARG);
    assert_guard(&g, 0);
    assert_null(rs_receiver_plan(r)); /* refused before planning */

    assert_int_equal(rs_receiver_dry_run_sized(r, 1, &diag, &g.d, v1), RS_OK);
    assert_int_equal(g.d.version, 1);
    assert_figures(&f, texts, &g.d);
    assert_guard(&g, v1);

    memset(&g, RESULT_GUARD_BYTE, sizeof(g));
    assert_int_equal((rs_receiver_dry_run)(r, 1, &diag, &g.d), RS_OK);
    assert_int_equal(g.d.version, 1);
    assert_false(g.d.replanned);
    assert_guard(&g, v1);

    memset(&g, RESULT_GUARD_BYTE, sizeof(g));
    assert_int_equal(rs_receiver_dry_run(r, 1, &diag, &g.d), RS_OK);
    assert_figures(&f, texts, &g.d);
    assert_guard(&g, sizeof(rs_dry_run_t));
    /* no result at all: the figures are not written anywhere */
    assert_int_equal(rs_receiver_dry_run(r, 1, &diag, (rs_dry_run_t *)NULL),
                     RS_OK);
    rs_receiver_destroy(r);
    fixture_close(&f);
}

static void test_dry_run_unbound_and_missing(void **state)
{
    (void)state;
    fixture_t f;
    char texts[NPUB][1024];
    rs_dry_run_t d;
    rs_diag_t diag;
    fixture_open(&f);
    publish_tables(&f, 1, 8192, texts);
    rs_receiver_h r = receiver(&f, "cma");
    rs_diag_clear(&diag);
    /* nothing bound: a dry run allocates and binds nothing, so it needs
     * no storage, and reports what a pull would hold */
    if (rs_receiver_dry_run(r, 1, &diag, &d) != RS_OK)
        fail_msg("%s", diag.msg);
    assert_int_equal(d.param_bytes, PBYTES);
    assert_int_equal(d.shadow_bytes, PBYTES);
    assert_int_equal(d.bytes, PBYTES);
    /* and prepared nothing: no staging, no descriptors */
    uint64_t pb = 1, pn = 1;
    assert_non_null(rs_receiver_exec(r));
    rs_exec_prepared(rs_receiver_exec(r), &pb, &pn);
    assert_int_equal(pb, 0);
    assert_int_equal(pn, 0);
    rs_receiver_destroy(r);
    /* a version that never comes: discovery's own timeout error */
    rs_receiver_params_t rp;
    rs_receiver_params_init(&rp);
    rp.directory = f.url;
    rp.model = "m";
    rp.discover_timeout_s = 0.2;
    assert_int_equal(rs_receiver_create(&rp, f.cap, NULL, &r), RS_OK);
    assert_int_equal(rs_receiver_bind(r, 0, f.param, PBYTES, RS_MEM_HOST, NULL), RS_OK);
    rs_diag_clear(&diag);
    assert_int_equal(rs_receiver_dry_run(r, 9, &diag, &d), RS_ERR_TIMEOUT);
    assert_null(rs_receiver_plan(r));
    rs_receiver_destroy(r);
    fixture_close(&f);
}

/* Publishers in this process over cma; a dry run, then a pull that reuses
 * its plan: the pull connects and installs the published bytes. */
static void test_pull_after_dry_run(void **state)
{
    (void)state;
    fixture_t f;
    rs_publisher_h pubs[NPUB];
    float data[NPUB][ROWS / NPUB * COLS];
    static const int64_t full[2] = {ROWS, COLS};
    fixture_open(&f);
    for (int p = 0; p < NPUB; p++) {
        rs_publisher_params_t pp;
        int64_t off[2] = {p * ROWS / NPUB, 0}, shape[2] = {ROWS / NPUB, COLS};
        for (int i = 0; i < ROWS / NPUB * COLS; i++)
            data[p][i] = (float)(p * 1000 + i) + 0.25f;
        rs_publisher_params_init(&pp);
        pp.directory = f.url;
        pp.model = "m";
        pp.rank = p;
        pp.world = NPUB;
        pp.backend = "cma";
        pp.digests = 1;
        pp.heartbeat_s = 0;
        assert_int_equal(rs_publisher_create(&pp, NULL, &pubs[p]), RS_OK);
        assert_int_equal(rs_publisher_register(pubs[p], "w", RS_DTYPE_F32, 2,
                                               full, off, shape, data[p], RS_MEM_HOST,
                                               NULL), RS_OK);
        assert_int_equal(rs_publisher_publish(pubs[p], 1, NULL), RS_OK);
    }
    rs_receiver_h r = receiver(&f, "cma");
    assert_int_equal(rs_receiver_bind(r, 0, f.param, PBYTES, RS_MEM_HOST, NULL), RS_OK);
    rs_dry_run_t d;
    rs_pull_result_t res;
    rs_diag_t diag;
    rs_diag_clear(&diag);
    assert_int_equal(rs_receiver_dry_run(r, 1, &diag, &d), RS_OK);
    assert_true(d.replanned);
    assert_int_equal(d.bytes, PBYTES);
    assert_int_equal(rs_receiver_pull(r, 1, &diag, &res), RS_OK);
    assert_false(res.replanned); /* the dry run's plan, now connected */
    assert_int_equal(res.exec.bytes, d.bytes);
    assert_int_equal(res.exec.descriptors, d.descriptors);
    assert_int_equal(res.exec.shards_verified, NPUB);
    assert_memory_equal(f.param, data, sizeof(data));
    assert_true(exists(&f, 1, "epoch")); /* the pull did take a lease */
    /* and a dry run after a pull reuses the connected plan */
    assert_int_equal(rs_receiver_dry_run(r, 1, &diag, &d), RS_OK);
    assert_false(d.replanned);
    memset(f.param, 0, sizeof(f.param));
    assert_int_equal(rs_receiver_pull(r, 1, &diag, &res), RS_OK);
    assert_false(res.replanned);
    assert_memory_equal(f.param, data, sizeof(data));
    rs_receiver_destroy(r);
    for (int p = 0; p < NPUB; p++)
        rs_publisher_destroy(pubs[p]);
    fixture_close(&f);
}

/* A capture with writes it could not tie to a source is refused when the
 * receiver is created, naming the count; nothing is created. */
static void test_unattributed_capture_refused(void **state)
{
    (void)state;
    fixture_t f;
    fixture_open(&f);
    static const char json[] =
        "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p\": "
        "{\"shape\": [8, 4], \"dtype\": \"f32\"}}, \"copies\": [], "
        "\"unattributed\": 3}";
    rs_capture_h cap = NULL;
    assert_int_equal(rs_capture_load_string(json, sizeof(json) - 1, "c.json",
                                            NULL, &cap), RS_OK);
    rs_receiver_params_t rp;
    rs_receiver_params_init(&rp);
    rp.directory = f.url;
    rp.model = "m";
    rs_diag_t d;
    rs_receiver_h r = (rs_receiver_h)&f; /* must stay untouched */
    assert_int_equal(rs_receiver_create(&rp, cap, &d, &r), RS_ERR_INPUT);
    assert_ptr_equal(r, (rs_receiver_h)&f);
    assert_non_null(strstr(d.msg, "3 unattributed write(s)"));
    rs_capture_destroy(cap);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dry_run_figures_no_lease),
        cmocka_unit_test(test_dry_run_sized),
        cmocka_unit_test(test_dry_run_unbound_and_missing),
        cmocka_unit_test(test_pull_after_dry_run),
        cmocka_unit_test(test_unattributed_capture_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
