/* Cut-aligned publishing over cma and ucx (UCX_TLS=sm). One publisher
 * holds tensor "w" [ROWS, COLS] (u8) as two row halves, in arena staging
 * cut at the receivers' announced cuts; receivers of two column-parallel
 * layouts (tp=2: column halves, tp=4: column quarters) announce and pull
 * their columns, and every byte is compared with th_value(), computed here.
 * A version published before a receiver announced is not cut for it; the
 * next version is: the table's entries are exactly the expected sub-boxes
 * and the receiver posts one descriptor per sub-box it reads (two per
 * half). The trainer scribbles over its tensors right after each publish
 * and receivers still get the published version's bytes. Hostile records
 * (unparsable, another shape, another model) are told once through the
 * notice callback, naming their holder, and ignored. Two replicas of the
 * rank that saw different cuts both publish into the slot, and receivers
 * reading either one are exact. Cut-aligned with another staging is
 * refused naming both; a cuts file is read at create and cuts alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dir_env.h"
#include "two_halves.h"
#include "reshard/reshard.h"
#include "assert_status.h"

#define MODEL "cutal"
#define ROWS TH_ROWS
#define HALF TH_HALF
#define COLS TH_COLS /* odd: slots are padded inside the arena */
#define GARBAGE TH_GARBAGE

typedef struct world {
    dir_env_t env;
    const char *backend;
    rs_publisher_h pub;
    uint8_t *half[2];
    int notices;
    char notice[4][RS_DIAG_MSG_MAX + 512];
} world_t;

static void on_notice(void *ctx, const char *msg)
{
    world_t *w = ctx;
    if (strstr(msg, "cuts record") == NULL)
        return; /* outages and the like are not this test's */
    if (w->notices < 4)
        snprintf(w->notice[w->notices], sizeof(w->notice[0]), "%s", msg);
    w->notices++;
}

static world_t *world_open(const char *backend)
{
    world_t *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    assert_int_equal(dir_env_setup(&w->env, "cutal"), 0);
    w->backend = backend;
    if (strcmp(backend, "ucx") == 0)
        setenv("UCX_TLS", "sm", 1);
    for (int h = 0; h < 2; h++) {
        w->half[h] = malloc(HALF * COLS);
        assert_non_null(w->half[h]);
    }
    return w;
}

static void world_close(world_t *w)
{
    rs_publisher_destroy(w->pub);
    free(w->half[0]);
    free(w->half[1]);
    dir_env_teardown(&w->env);
    unsetenv("UCX_TLS");
    free(w);
}

static rs_publisher_h open_publisher(world_t *w, int64_t replica,
                                     const char *cuts_file)
{
    rs_publisher_params_t pp;
    rs_publisher_h pub;
    rs_diag_t d;
    rs_publisher_params_init(&pp);
    pp.directory = w->env.url;
    pp.model = MODEL;
    pp.world = 1;
    pp.replica = replica;
    pp.backend = w->backend;
    pp.heartbeat_s = 0.2;
    pp.staging = RS_STAGING_ARENA;
    pp.cut_aligned = cuts_file == NULL;
    pp.cuts_file = cuts_file;
    pp.notice = on_notice;
    pp.notice_ctx = w;
    ASSERT_ST(rs_publisher_create(&pp, &d, &pub), RS_OK, d);
    for (int h = 0; h < 2; h++)
        ASSERT_ST(th_register(pub, w->half[h], h, &d), RS_OK, d);
    return pub;
}

/* Columns [c0, c0 + width) of "w" into param "w" [ROWS, width]. */
static rs_capture_h open_capture(int c0, int width)
{
    rs_capture_h cap;
    rs_diag_t d;
    const int64_t full[2] = {ROWS, COLS};
    const int64_t shape[2] = {ROWS, width}, stride[2] = {width, 1};
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    ASSERT_ST(rs_capture_declare_source(cap, "w", 2, full, RS_DTYPE_U8, &d),
              RS_OK, d);
    ASSERT_ST(rs_capture_add_param(cap, "w", 2, shape, RS_DTYPE_U8, &d),
              RS_OK, d);
    rs_op_t nar = {.kind = RS_OP_NARROW, .arg = {1, c0, width}};
    rs_copy_desc_t c = {"w", "w", &nar, 1, 0, 2, shape, stride, RS_DTYPE_U8};
    ASSERT_ST(rs_capture_add_copy(cap, &c, &d), RS_OK, d);
    return cap;
}

/* The wire bytes of the last pull_exact. */
static uint64_t last_bytes;

/* Receiver `tp` rank `rank` (columns COLS / tp each) pulls version v,
 * announcing first; every byte checked. Returns the descriptors posted
 * (last_bytes: the bytes read, at least the needed ones). */
static uint64_t pull_exact(world_t *w, int tp, int rank, int64_t v,
                           uint64_t salt, int release)
{
    rs_receiver_params_t rp;
    rs_receiver_h r;
    rs_pull_result_t res;
    rs_diag_t d;
    char name[64];
    int width = COLS / tp, c0 = rank * width;
    uint8_t *dest = calloc(ROWS, (size_t)width);
    rs_capture_h cap = open_capture(c0, width);
    snprintf(name, sizeof(name), "tp%d-rank%d", tp, rank);
    rs_receiver_params_init(&rp);
    rp.directory = w->env.url;
    rp.model = MODEL;
    rp.backend = w->backend;
    rp.salt = salt;
    rp.discover_timeout_s = 10;
    rp.timeout_s = 20;
    rp.release_after = release;
    rp.announce_as = name;
    assert_int_equal(rp.announce_cuts, 1); /* the default */
    ASSERT_ST(rs_receiver_create(&rp, cap, &d, &r), RS_OK, d);
    ASSERT_ST(rs_receiver_bind(r, 0, dest, (uint64_t)ROWS * (uint64_t)width,
                               RS_MEM_HOST, &d), RS_OK, d);
    ASSERT_ST(rs_receiver_pull(r, v, &d, &res), RS_OK, d);
    assert_int_equal(res.version, v);
    last_bytes = res.stages.bytes;
    assert_true(last_bytes >= (uint64_t)ROWS * (uint64_t)width);
    rs_receiver_destroy(r);
    rs_capture_destroy(cap);
    snprintf(name, sizeof(name), "tp %d rank %d ", tp, rank);
    th_expect(dest, c0, width, v, name);
    free(dest);
    return res.stages.descriptors;
}

/* The table of version v (the slot's first publisher, or `publisher`)
 * holds exactly the sub-boxes of the two halves cut at the column cuts
 * `cuts` (ncuts of them, ascending), each at a 64-byte-aligned address
 * outside the caller's buffers. */
static void expect_boxes(world_t *w, int64_t v, const char *publisher,
                         const int64_t *cuts, int ncuts)
{
    rs_dir_h dir;
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    rs_diag_t d;
    rs_sources_h src;
    ASSERT_ST(rs_dir_open(w->env.url, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_read_slot(dir, MODEL, v, 0, &d, &e, &n), RS_OK, d);
    size_t k = 0;
    while (publisher != NULL && k < n && strcmp(e[k].publisher, publisher))
        k++;
    assert_true(k < n);
    assert_int_equal(rs_sources_create(&src), RS_OK);
    ASSERT_ST(rs_sources_load_string(src, e[k].table, e[k].len, "t", &d),
              RS_OK, d);
    rs_dir_entries_free(e, n);
    rs_dir_close(dir);
    assert_int_equal(rs_sources_num_shards(src), 2 * (size_t)(ncuts + 1));
    size_t i = 0;
    for (int h = 0; h < 2; h++) {
        for (int b = 0; b <= ncuts; b++, i++) {
            rs_shard_desc_t sh;
            int64_t lo = b == 0 ? 0 : cuts[b - 1];
            int64_t hi = b == ncuts ? COLS : cuts[b];
            rs_sources_shard(src, i, &sh);
            if (sh.offset[0] != h * HALF || sh.shape[0] != HALF ||
                sh.offset[1] != lo || sh.shape[1] != hi - lo)
                fail_msg("version %lld entry %zu: box [%lld, %lld] + [%lld, "
                         "%lld], want [%d, %lld] + [%d, %lld]", (long long)v,
                         i, (long long)sh.offset[0], (long long)sh.offset[1],
                         (long long)sh.shape[0], (long long)sh.shape[1],
                         h * HALF, (long long)lo, HALF, (long long)(hi - lo));
            assert_int_equal(sh.addr % 64, 0);
            assert_true(sh.addr < (uint64_t)(uintptr_t)w->half[h] ||
                        sh.addr >= (uint64_t)(uintptr_t)w->half[h] +
                                       HALF * COLS);
        }
    }
    rs_sources_destroy(src);
}

static void publish(world_t *w, rs_publisher_h pub, int64_t v)
{
    rs_diag_t d;
    th_fill(w->half, v);
    ASSERT_ST(rs_publisher_publish(pub, v, &d), RS_OK, d);
    th_scribble(w->half); /* the trainer goes on: the arena holds v */
}

static void release(world_t *w, rs_publisher_h pub, int64_t v)
{
    dir_env_release(&w->env, MODEL, v, pub);
}

static void put_record(world_t *w, const char *holder, const char *json)
{
    dir_env_put_cuts(&w->env, MODEL, holder, json, strlen(json));
}

/* Receivers announce; the versions after each announcement are cut for
 * them. */
static void announce_and_cut(world_t *w)
{
    const int64_t half_cut[1] = {500}, quarter[3] = {250, 500, 750};
    w->pub = open_publisher(w, 0, NULL);
    publish(w, w->pub, 1);
    expect_boxes(w, 1, NULL, NULL, 0); /* nobody announced yet: whole */
    assert_int_equal(rs_publisher_num_served(w->pub), 2);
    /* uncut: a column half is a run per row, or more bytes than needed
     * (a full pull, or reads through the gaps) */
    uint64_t uncut = pull_exact(w, 2, 0, 1, 0, 1);
    assert_true(uncut > 2 || last_bytes > (uint64_t)ROWS * 500);
    release(w, w->pub, 1);
    publish(w, w->pub, 2);
    expect_boxes(w, 2, NULL, half_cut, 1);
    assert_int_equal(rs_publisher_num_served(w->pub), 4);
    /* one descriptor per sub-box read (one in each half), exact bytes */
    assert_int_equal(pull_exact(w, 2, 0, 2, 0, 0), 2);
    assert_int_equal(last_bytes, ROWS * 500);
    assert_int_equal(pull_exact(w, 2, 1, 2, 0, 0), 2);
    assert_int_equal(last_bytes, ROWS * 500);
    pull_exact(w, 4, 1, 2, 0, 0); /* announce; v2 is not cut for them */
    pull_exact(w, 4, 3, 2, 0, 1);
    release(w, w->pub, 2);
    publish(w, w->pub, 3);
    expect_boxes(w, 3, NULL, quarter, 3);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(pull_exact(w, 4, k, 3, 0, 0), 2);
        assert_int_equal(last_bytes, ROWS * 250);
    }
    /* tp=2 rank 1 reads two sub-boxes of each half, [500, 750) and
     * [750, 1000): each contiguous in the arena but strided in its
     * destination (rows of 500), so the planner reads them row by row
     * (the cost model may instead stage whole sub-boxes) */
    uint64_t strided = pull_exact(w, 2, 1, 3, 0, 1);
    assert_true(strided >= 4 && strided <= 2 * ROWS);
    assert_int_equal(last_bytes, ROWS * 500);
    release(w, w->pub, 3);
}

/* Hostile records are told once each, naming the holder, and ignored. */
static void hostile_records(world_t *w)
{
    const int64_t quarter[3] = {250, 500, 750};
    put_record(w, "garbled", "{\"schema\": \"reshard.cuts.v1\", \"tens");
    put_record(w, "misshapen", "{\"schema\": \"reshard.cuts.v1\", "
               "\"tensors\": [{\"name\": \"w\", \"shape\": [64, 999], "
               "\"cuts\": [[], [100]]}]}");
    put_record(w, "elsewhere", "{\"schema\": \"reshard.cuts.v1\", "
               "\"model\": \"another\", \"tensors\": [{\"name\": \"w\", "
               "\"shape\": [64, 1000], \"cuts\": [[], [100]]}]}");
    w->notices = 0;
    publish(w, w->pub, 4);
    assert_int_equal(w->notices, 3);
    const char *holders[3] = {"elsewhere", "garbled", "misshapen"};
    for (int i = 0; i < 3; i++) {
        char want[96];
        snprintf(want, sizeof(want), "cuts record of holder '%s'",
                 holders[i]);
        if (strstr(w->notice[i], want) == NULL ||
            strstr(w->notice[i], "ignoring") == NULL)
            fail_msg("notice %d '%s' does not name '%s'", i, w->notice[i],
                     holders[i]);
    }
    expect_boxes(w, 4, NULL, quarter, 3); /* the good records still count */
    assert_int_equal(pull_exact(w, 4, 2, 4, 0, 1), 2);
    assert_int_equal(last_bytes, ROWS * 250);
    release(w, w->pub, 4);
    publish(w, w->pub, 5);
    assert_int_equal(w->notices, 3); /* once, while they stay the same */
    pull_exact(w, 2, 0, 5, 0, 1);
    release(w, w->pub, 5);
    rs_dir_h dir;
    rs_diag_t d;
    ASSERT_ST(rs_dir_open(w->env.url, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_drop_cuts(dir, MODEL, "garbled", &d), RS_OK, d);
    ASSERT_ST(rs_dir_drop_cuts(dir, MODEL, "misshapen", &d), RS_OK, d);
    ASSERT_ST(rs_dir_drop_cuts(dir, MODEL, "elsewhere", &d), RS_OK, d);
    rs_dir_close(dir);
}

/* Replicas that saw different records: replica 0 publishes, a receiver
 * announces new cuts, replica 1 publishes cut at them too. Both share the
 * slot, and receivers reading either (by salt) are exact. */
static void replicas_see_different_cuts(world_t *w)
{
    const int64_t quarter[3] = {250, 500, 750};
    const int64_t more[4] = {100, 250, 500, 750};
    rs_publisher_h r1 = open_publisher(w, 1, NULL);
    th_fill(w->half, 6);
    rs_diag_t d;
    ASSERT_ST(rs_publisher_publish(w->pub, 6, &d), RS_OK, d);
    put_record(w, "late", "{\"schema\": \"reshard.cuts.v1\", \"tensors\": "
               "[{\"name\": \"w\", \"shape\": [64, 1000], \"cuts\": [[], "
               "[100]]}]}");
    ASSERT_ST(rs_publisher_publish(r1, 6, &d), RS_OK, d);
    th_scribble(w->half);
    expect_boxes(w, 6, "trainer-0", quarter, 3);
    expect_boxes(w, 6, "trainer-0-r1", more, 4);
    for (uint64_t salt = 0; salt < 2; salt++) {
        pull_exact(w, 4, 0, 6, salt, 0);
        pull_exact(w, 2, 1, 6, salt, 0);
    }
    release(w, w->pub, 6);
    ASSERT_ST(rs_publisher_wait_released(r1, 6, 20, &d), RS_OK, d);
    rs_publisher_destroy(r1);
}

static void scenario(const char *backend)
{
    world_t *w = world_open(backend);
    DIR_ENV_NEED(&w->env);
    announce_and_cut(w);
    hostile_records(w);
    replicas_see_different_cuts(w);
    world_close(w);
}

static void test_cut_aligned_cma(void **state)
{
    (void)state;
    scenario("cma");
}

static void test_cut_aligned_ucx(void **state)
{
    (void)state;
    scenario("ucx");
}

/* Cuts given as a file, no directory records read; other stagings are
 * refused naming both. */
static void test_cuts_file(void **state)
{
    (void)state;
    rs_publisher_params_t pp;
    rs_publisher_h pub;
    rs_diag_t d;
    const int64_t cuts[2] = {300, 600};
    world_t *w = world_open("cma");
    DIR_ENV_NEED(&w->env);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/w.cuts.json", w->env.tmp);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"schema\": \"reshard.cuts.v1\", \"tensors\": [{\"name\": \"w\", "
          "\"shape\": [64, 1000], \"cuts\": [[], [300, 600]]}]}", f);
    fclose(f);
    put_record(w, "ignored", "{\"schema\": \"reshard.cuts.v1\", \"tensors\": "
               "[{\"name\": \"w\", \"shape\": [64, 1000], \"cuts\": [[], "
               "[10]]}]}");
    w->pub = open_publisher(w, 0, path);
    publish(w, w->pub, 1);
    expect_boxes(w, 1, NULL, cuts, 2); /* cut_aligned 0: no record read */
    pull_exact(w, 4, 3, 1, 0, 1);
    release(w, w->pub, 1);
    rs_publisher_params_init(&pp);
    pp.directory = w->env.url;
    pp.model = MODEL;
    pp.world = 1;
    pp.cut_aligned = 1;
    ASSERT_ST(rs_publisher_create(&pp, &d, &pub), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "cut-aligned publishing (cut_aligned)");
    ASSERT_MSG_HAS(d, "needs staging arena (2), not staging caller (0)");
    pp.cut_aligned = 0;
    pp.staging = RS_STAGING_ARENA;
    pp.cuts_file = "/nonexistent/cuts.json";
    ASSERT_ST(rs_publisher_create(&pp, &d, &pub), RS_ERR_INPUT, d);
    ASSERT_MSG_HAS(d, "/nonexistent/cuts.json");
    world_close(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cut_aligned_cma),
        cmocka_unit_test(test_cut_aligned_ucx),
        cmocka_unit_test(test_cuts_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
