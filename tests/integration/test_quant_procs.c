/* Quantized refit between processes over UCX (shared memory, tcp for the
 * faults): trainer
 * processes of tiny-deepseek-fp8 (an FP8 quantization_config of 16x16
 * blocks) publish its bf16 shards, and this process pulls inference rank 0
 * of vllm:tp=2, whose capture loads FP8 weights and weight_scale_inv
 * scales. Publisher-side: the receiver announces its cuts record first
 * (with its quantized copies), then the trainers start with
 * quantize_wanted and serve FP8 copies of what it asks for; receiver-side:
 * plain bf16 tables. From megatron:tp=2 every quantized copy takes the
 * publisher path; from fsdp:2 most do and the copies whose blocks straddle
 * the flat shards take the receiver path. Each pull lands every byte equal
 * to the capture replayed locally over whole bf16 tensors (every block
 * quantized from its full bf16 values, by the receiver path), digests
 * verified. A trainer killed mid-wire on the FP8 path fails the pull
 * naming it, nothing installed, the parameters untouched; with a second
 * replica of that slot the pull fails over and is exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "reshard/reshard.h"
#include "reshard_layout/layout.h"
#include "proc_fixture.h"
#include "rank_fixture.h"
#include "vllm_direct.h"
#include "ref_quant.h"

#define INFER "vllm:tp=2"
#define MODEL "tinyq"
#define CHUNK_BYTES (8u << 10)
#define WAIT_TIMEOUT_S 3.0
#define MAX_PUBS 4

enum { PLAIN = 0, WANTED = 1 };
enum { NO_STRIKE = 0, KILL_SLOT1 = 1 };

typedef struct world {
    pfx_world_t pw; /* a directory and a trainer layout per case */
    pfx_proc_t pubs[MAX_PUBS];
    int slot[MAX_PUBS];
    int npubs;
} world_t;

static world_t world;

/* ---- a trainer (a fresh process: UCX is not fork-safe) ----------------- */

static void start_publisher(world_t *w, int rank, int replica, int mode)
{
    pfx_publish_t s = {.config = w->pw.config, .train = w->pw.train_text,
                       .directory = w->pw.directory, .model = MODEL,
                       .backend = "ucx", .rank = rank, .replica = replica,
                       .first = 1,
                       .flags = PFX_UCX_QUIET |
                                (mode == WANTED ? PFX_QUANTIZE_WANTED : 0)};
    assert_true(w->npubs < MAX_PUBS);
    pfx_start(&w->pubs[w->npubs], &s);
    w->slot[w->npubs] = rank;
    w->npubs++;
}

/* A fresh directory and trainer layout for a case, over UCX's shared
 * memory or tcp on loopback (the arena is shared memory, which a reader
 * on this machine keeps reading after its publisher died: only tcp makes
 * a killed publisher's reads fail). */
static void world_end(world_t *w)
{
    for (int i = 0; i < w->npubs; i++)
        pfx_stop(&w->pubs[i], 1);
    w->npubs = 0;
}

static void world_begin(world_t *w, const char *train, const char *tls)
{
    static int round;
    world_end(w); /* what a failed case left running */
    snprintf(w->pw.directory, sizeof(w->pw.directory), "file:%.60s/d%d",
             w->pw.tmp, round++);
    assert_int_equal(mkdir(w->pw.directory + 5, 0700), 0);
    pfx_world_train(&w->pw, train);
    pfx_use_tls(tls);
}

static int world_setup(void **state)
{
    (void)state;
    world_t *w = &world;
    memset(w, 0, sizeof(*w));
    return pfx_world_open(&w->pw, "tiny-deepseek-fp8.json", NULL, INFER,
                          "qprocs");
}

/* ---- the inference rank ------------------------------------------------ */

typedef struct rank {
    pfx_rank_t r;
    uint8_t **expected; /* [param]: the local replay's bytes */
    int strike, fired;
    world_t *w;
} rank_t;

/* Kills replica 0 of slot 1 (the first publisher started for it) once the
 * wire is under way and both slots still have reads outstanding. */
static void on_progress(void *ctx, const rs_progress_t *p)
{
    rank_t *ir = ctx;
    if (ir->strike == NO_STRIKE || ir->fired ||
        p->bytes_done >= p->bytes_total || p->sessions_outstanding < 2)
        return;
    for (int i = 0; i < ir->w->npubs; i++)
        if (ir->w->slot[i] == 1) {
            pfx_stop(&ir->w->pubs[i], 1);
            ir->fired = 1;
            return;
        }
}

/* Kills the replica of slot 1 that `plan` reads most from: publishers of
 * slot 1 were started replica 0 first, named "trainer-1", then
 * "trainer-1-r1". */
static void kill_read_replica_of_slot1(world_t *w, rs_plan_h plan)
{
    uint64_t bytes[2] = {0, 0};
    assert_non_null(plan);
    for (uint32_t s = 0; s < rs_plan_num_sessions(plan); s++) {
        const char *name = rs_plan_session_name(plan, s);
        if (strcmp(name, "trainer-1") == 0)
            bytes[0] = rs_plan_session_bytes(plan, s);
        else if (strcmp(name, "trainer-1-r1") == 0)
            bytes[1] = rs_plan_session_bytes(plan, s);
    }
    assert_true(bytes[0] + bytes[1] > 0);
    int victim = bytes[1] > bytes[0], seen = 0;
    for (int i = 0; i < w->npubs; i++)
        if (w->slot[i] == 1 && seen++ == victim) {
            pfx_stop(&w->pubs[i], 1);
            return;
        }
    fail_msg("no publisher for replica %d of slot 1", victim);
}

/* What every parameter must hold: the capture replayed with the local
 * transport over whole source tensors filled as the trainers fill their
 * shards (one session holding them all), before any publisher runs. The
 * FP8 values and scales come from the reference quantizer of
 * tests/support/ref_quant.c applied to the whole tensors, published beside
 * them as "<src>#<spec>" and "<src>#<spec>#scale": every quantized copy of
 * the replay takes the publisher path (asserted), so the library's own
 * kernel computes nothing of the expectation. */
#define GT_MAX 1024

typedef struct gt {
    rs_sources_h src;
    uint8_t *buf[GT_MAX];
    rs_region_t regions[GT_MAX];
    char *names[GT_MAX];
    size_t n;
} gt_t;

static void gt_add(gt_t *g, const char *name, rs_dtype_t dt, int ndim,
                   const int64_t *shape, uint8_t *data)
{
    int64_t zero[RS_MAX_DIMS] = {0}, numel = 1;
    rs_diag_t d;
    assert_true(g->n < GT_MAX);
    for (int k = 0; k < ndim; k++)
        numel *= shape[k];
    size_t es = rs_dtype_size(dt);
    rs_shard_desc_t sh = {name, dt, es, ndim, shape, "gt", 0,
                          (uint64_t)(uintptr_t)data, zero, shape, NULL};
    g->buf[g->n] = data;
    g->names[g->n] = strdup(name);
    g->regions[g->n] = (rs_region_t){sh.addr, (uint64_t)numel * es, data};
    g->n++;
    if (rs_sources_add_shard(g->src, &sh, &d) != RS_OK)
        fail_msg("ground truth shard %s: %s", name, d.msg);
}

/* The reference FP8 copy of declared source `s` (filled in `x`) under the
 * spec `q`, unless an earlier copy added it. */
static void gt_add_quant(gt_t *g, const rs_source_info_t *s, const uint8_t *x,
                         const rs_quant_desc_t *q)
{
    char spec[128], name[1024], sname[1100];
    uint8_t *codes;
    float *scales;
    int64_t grid[RS_MAX_DIMS];
    assert_true(rs_quant_spec_format(q, spec, sizeof(spec)) > 0);
    snprintf(name, sizeof(name), "%s#%s", s->name, spec);
    snprintf(sname, sizeof(sname), "%s" RS_QUANT_SCALE_SUFFIX, name);
    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->names[i], name) == 0)
            return;
    if (ref_quant_tensor(q, s->dtype, x, s->ndim, s->shape, &codes, &scales,
                         grid) != 0)
        fail_msg("reference quantizer refused %s", name);
    gt_add(g, name, q->format, s->ndim, s->shape, codes);
    gt_add(g, sname, RS_DTYPE_F32, s->ndim, grid, (uint8_t *)scales);
}

static void expected_params(rank_t *ir)
{
    size_t ns = rs_capture_num_sources(ir->r.cap);
    gt_t *g = calloc(1, sizeof(*g));
    rs_plan_h plan = NULL;
    rs_transport_h t = NULL;
    rs_exec_h x = NULL;
    rs_plan_params_t pp;
    rs_diag_t d;
    assert_int_equal(rs_sources_create(&g->src), RS_OK);
    for (size_t i = 0; i < ns; i++) {
        rs_source_info_t s;
        int64_t zero[RS_MAX_DIMS] = {0}, numel = 1;
        rs_capture_source(ir->r.cap, i, &s);
        for (int k = 0; k < s.ndim; k++)
            numel *= s.shape[k];
        size_t es = rs_dtype_size(s.dtype);
        uint8_t *data = malloc((size_t)(numel ? numel : 1) * es);
        rs_shard_desc_t sh = {s.name, s.dtype, es, s.ndim, s.shape, "gt", 0,
                              (uint64_t)(uintptr_t)data, zero, s.shape, NULL};
        vd_fill_box(data, &sh);
        gt_add(g, s.name, s.dtype, s.ndim, s.shape, data);
    }
    for (size_t c = 0; c < rs_capture_num_copies(ir->r.cap); c++) {
        rs_quant_desc_t q;
        rs_copy_desc_t cp;
        if (!rs_capture_copy_quant(ir->r.cap, c, &q))
            continue;
        rs_capture_copy(ir->r.cap, c, &cp);
        long si = rs_capture_find_source(ir->r.cap, cp.src);
        assert_true(si >= 0);
        rs_source_info_t s;
        rs_capture_source(ir->r.cap, (size_t)si, &s);
        gt_add_quant(g, &s, g->buf[si], &q);
    }
    rs_plan_params_init(&pp);
    assert_int_equal(rs_plan_build(ir->r.cap, g->src, &pp, &d, &plan), RS_OK);
    assert_true(rs_plan_is_complete(plan));
    size_t nq;
    const rs_quantized_t *qr = rs_plan_quantized(plan, &nq);
    for (size_t k = 0; k < nq; k++)
        if (qr[k].path != RS_QUANT_PATH_PUBLISHER)
            fail_msg("ground truth: copy %zu not read from the reference "
                     "quantization: %s", qr[k].copy, qr[k].why);
    assert_int_equal(rs_transport_create(NULL, &d, &t), RS_OK);
    for (uint32_t k = 0; k < rs_plan_num_sessions(plan); k++) {
        rs_peer_t peer = {rs_plan_session_name(plan, k), 0, g->regions, g->n,
                          NULL, 0};
        assert_int_equal(rs_transport_connect(t, k, &peer, &d), RS_OK);
    }
    assert_int_equal(rs_exec_create(plan, t, NULL, &d, &x), RS_OK);
    for (size_t p = 0; p < ir->r.nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->r.cap, p, &info);
        memset(ir->expected[p], 0xEE, info.nbytes ? info.nbytes : 1);
        assert_int_equal(rs_exec_bind(x, p, ir->expected[p], info.nbytes,
                                      RS_MEM_HOST, &d), RS_OK);
    }
    if (rs_exec_run(x, &d) != RS_OK)
        fail_msg("local replay: %s", d.msg);
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    rs_sources_destroy(g->src);
    for (size_t i = 0; i < g->n; i++) {
        free(g->buf[i]);
        free(g->names[i]);
    }
    free(g);
}

static void open_rank(world_t *w, rank_t *ir, int strike, uint64_t salt)
{
    rs_receiver_params_t rp;
    memset(ir, 0, sizeof(*ir));
    ir->w = w;
    ir->strike = strike;
    rs_receiver_params_init(&rp);
    rp.directory = w->pw.directory;
    rp.model = MODEL;
    rp.backend = "ucx";
    rp.salt = salt;
    rp.discover_timeout_s = 20;
    rp.timeout_s = WAIT_TIMEOUT_S;
    rp.progress = on_progress;
    rp.progress_ctx = ir;
    rp.progress_chunk_bytes = CHUNK_BYTES;
    rp.announce_as = salt ? "vllm-tp2-rank0-b" : "vllm-tp2-rank0";
    pfx_rank_open(&ir->r, w->pw.model, &w->pw.infer, 0, &rp, PFX_FILL_PATTERN);
    ir->expected = calloc(ir->r.nparams, sizeof(uint8_t *));
    assert_non_null(ir->expected);
    for (size_t p = 0; p < ir->r.nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->r.cap, p, &info);
        ir->expected[p] = malloc(info.nbytes ? info.nbytes : 1);
        assert_non_null(ir->expected[p]);
    }
    expected_params(ir);
}

static void close_rank(rank_t *ir)
{
    for (size_t p = 0; p < ir->r.nparams; p++)
        free(ir->expected[p]);
    free(ir->expected);
    pfx_rank_close(&ir->r);
}

/* The rank of the running case: the next case, or the teardown, closes it
 * after a failed assertion. */
static rank_t rank;

/* A case's world (world_begin) and its inference rank. */
static rank_t *begin(world_t *w, const char *train, const char *tls,
                     int strike)
{
    if (rank.r.cap != NULL)
        close_rank(&rank);
    world_begin(w, train, tls);
    open_rank(w, &rank, strike, 0);
    return &rank;
}

/* Runs on every path, failed assertions included. */
static int world_teardown(void **state)
{
    (void)state;
    world_t *w = &world;
    if (rank.r.cap != NULL)
        close_rank(&rank);
    world_end(w);
    pfx_world_close(&w->pw);
    return 0;
}

static void expect_installed(const rank_t *ir)
{
    pfx_expect_installed(&ir->r, ir->expected, 0xEE);
}

/* The plan's quantized copies by path. */
static void count_paths(rs_receiver_h r, size_t *pub_p, size_t *recv_p)
{
    size_t n = 0;
    const rs_quantized_t *q = rs_plan_quantized(rs_receiver_plan(r), &n);
    *pub_p = *recv_p = 0;
    for (size_t i = 0; i < n; i++) {
        if (q[i].path == RS_QUANT_PATH_PUBLISHER)
            ++*pub_p;
        else
            ++*recv_p;
    }
}

/* Waits (up to 20 s) until slot `slot` of version 1 holds n tables: a
 * replica that publishes after the receiver read the slot could not be
 * failed over to. */
static void wait_slot(world_t *w, int64_t slot, size_t n)
{
    rs_dir_h dir;
    rs_diag_t d;
    struct timespec nap = {0, 20 * 1000 * 1000};
    assert_int_equal(rs_dir_open(w->pw.directory, &d, &dir), RS_OK);
    for (int tries = 0; tries < 1000; tries++) {
        rs_dir_entry_t *e = NULL;
        size_t got = 0;
        if (rs_dir_read_slot(dir, MODEL, 1, slot, NULL, &e, &got) == RS_OK)
            rs_dir_entries_free(e, got);
        if (got >= n) {
            rs_dir_close(dir);
            return;
        }
        nanosleep(&nap, NULL);
    }
    rs_dir_close(dir);
    fail_msg("slot %lld never held %zu tables", (long long)slot, n);
}

/* Starts the trainers of the layout (replicas of slot 1 when asked): for
 * the publisher path after the receiver announced its record. */
static void start_trainers(world_t *w, rank_t *ir, int mode, int replicas)
{
    rs_diag_t d;
    if (mode == WANTED)
        assert_int_equal(rs_receiver_announce_cuts(ir->r.recv, &d), RS_OK);
    for (int r = 0; r < w->pw.train.world; r++)
        start_publisher(w, r, 0, mode);
    for (int k = 1; k < replicas; k++)
        start_publisher(w, 1, k, mode);
    if (replicas > 1)
        wait_slot(w, 1, (size_t)replicas);
}

/* A clean pull of version 1: exact, digests verified, and the paths. */
static void clean_case(const char *train, int mode, int want_pub,
                       int want_recv)
{
    world_t *w = &world;
    rs_diag_t d;
    rs_pull_result_t res;
    size_t npub, nrecv;
    rank_t *ir = begin(w, train, "sm,self", NO_STRIKE);
    start_trainers(w, ir, mode, 1);
    if (rs_receiver_pull(ir->r.recv, 1, &d, &res) != RS_OK)
        fail_msg("%s: %s", train, d.msg);
    assert_int_equal(ir->r.installs, 1);
    assert_true(res.exec.shards_verified > 0);
    expect_installed(ir);
    count_paths(ir->r.recv, &npub, &nrecv);
    fprintf(stderr, "%s, %s: %zu publisher, %zu receiver path, %llu wire "
            "bytes\n", train, mode == WANTED ? "quantize_wanted" : "plain",
            npub, nrecv, (unsigned long long)res.stages.bytes);
    assert_true(npub + nrecv > 0);
    assert_true(want_pub ? npub > 0 : npub == 0);
    assert_true(want_recv ? nrecv > 0 : nrecv == 0);
    close_rank(ir);
    world_end(w);
}

static void test_megatron_publisher_side(void **state)
{
    (void)state;
    clean_case("megatron:tp=2", WANTED, 1, 0);
}

static void test_megatron_receiver_side(void **state)
{
    (void)state;
    clean_case("megatron:tp=2", PLAIN, 0, 1);
}

static void test_fsdp_both_paths(void **state)
{
    (void)state;
    clean_case("fsdp:2", WANTED, 1, 1);
}

static void test_fsdp_receiver_side(void **state)
{
    (void)state;
    clean_case("fsdp:2", PLAIN, 0, 1);
}

/* Slot 1's only trainer killed mid-wire: a clean failure. */
static void test_killed_mid_wire(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t d;
    rs_pull_result_t res;
    rank_t *ir = begin(w, "megatron:tp=2", "tcp", KILL_SLOT1);
    start_trainers(w, ir, WANTED, 1);
    rs_diag_clear(&d);
    rs_status_t st = rs_receiver_pull(ir->r.recv, 1, &d, &res);
    assert_true(ir->fired);
    /* The kill lands while slot 1 still has reads outstanding, but what
     * the kernel had already sent may still arrive: either every byte
     * came (and is exact) or the pull fails naming the dead trainer with
     * nothing installed. Both are the contract; nothing else is. */
    if (st == RS_OK) {
        assert_int_equal(ir->r.installs, 1);
        expect_installed(ir);
    } else {
        if (st != RS_ERR_TRANSPORT && st != RS_ERR_TIMEOUT)
            fail_msg("pull with trainer 1 killed: %s: %s",
                     rs_status_str(st), d.msg);
        if (strstr(d.msg, "trainer-1, slot 1") == NULL)
            fail_msg("the message does not name trainer-1 and its slot: %s",
                     d.msg);
        assert_int_equal(ir->r.installs, 0);
        pfx_expect_untouched(&ir->r);
    }
    close_rank(ir);
    world_end(w);
}

/* Slot 1 has two replicas and the one this receiver's plan reads dies
 * after publishing, while the directory still lists it: the pull fails
 * over to the live replica and lands exactly. The victim is taken from a
 * dry run's plan (replica choice hashes the sessions' addresses, which
 * change per run), and killed before the pull, so that the failover does
 * not depend on how far the wire had got (test_killed_mid_wire kills
 * mid-wire). */
static void test_killed_with_replica(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t d;
    rs_pull_result_t res;
    rs_dry_run_t dry;
    size_t npub, nrecv;
    rank_t *ir = begin(w, "megatron:tp=2", "tcp", NO_STRIKE);
    start_trainers(w, ir, WANTED, 2);
    if (rs_receiver_dry_run(ir->r.recv, 1, &d, &dry) != RS_OK)
        fail_msg("dry run: %s", d.msg);
    kill_read_replica_of_slot1(w, rs_receiver_plan(ir->r.recv));
    if (rs_receiver_pull(ir->r.recv, 1, &d, &res) != RS_OK)
        fail_msg("pull after the read replica died: %s", d.msg);
    assert_int_equal(ir->r.installs, 1);
    expect_installed(ir);
    count_paths(ir->r.recv, &npub, &nrecv);
    assert_true(npub > 0);
    assert_true(res.failovers >= 1);
    if (strstr(res.failover_msg, "slot 1") == NULL)
        fail_msg("the failover does not name slot 1: %s", res.failover_msg);
    close_rank(ir);
    world_end(w);
}

int main(int argc, char **argv)
{
    if (pfx_is_publisher(argc, argv))
        return pfx_publisher_main(argv[2], NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_megatron_publisher_side),
        cmocka_unit_test(test_megatron_receiver_side),
        cmocka_unit_test(test_fsdp_both_paths),
        cmocka_unit_test(test_fsdp_receiver_side),
        cmocka_unit_test(test_killed_mid_wire),
        cmocka_unit_test(test_killed_with_replica),
    };
    return cmocka_run_group_tests(tests, world_setup, world_teardown);
}
