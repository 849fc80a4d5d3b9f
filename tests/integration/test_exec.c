/* The executor end to end, on every local backend: random captures over
 * random shard layouts (replicas, packed addresses, full pulls, converts),
 * executed into parameters prefilled with 0xEE and compared byte for byte
 * with a ground truth computed from the op chains alone; then the gates:
 * fallback, uncovered, coverage floor, digests, throughput, reuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gt_tensor.h"
#include "reshard/digest.h"
#include "transport_fixture.h"
#include "reshard/exec.h"
#include "reshard/reshard.h"

#define NSESS 4

static uint64_t rng;
static uint64_t rnd(uint64_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % (n ? n : 1);
}

/* The bf16 value every trainer holds for element i of source s. */
static uint16_t value_of(int s, int64_t i)
{
    uint64_t h = (uint64_t)(s + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)i * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    uint16_t v = (uint16_t)(h & 0x7f7f); /* finite, never NaN */
    return v;
}

typedef struct shard {
    int src;
    const char *session;
    uint64_t addr, nbytes;
    unsigned char *data;
    int64_t off[RS_MAX_DIMS], shape[RS_MAX_DIMS];
} shard_t;

typedef struct scenario {
    int nsrc;
    int ndim[3];
    int64_t shape[3][RS_MAX_DIMS];
    shard_t shards[256];
    int nshards;
    rs_capture_h cap;
    rs_sources_h srcs;
    /* expected bytes of the one fused f32 param and one bf16 param */
    unsigned char *expect[2];
    uint64_t pbytes[2];
} scenario_t;

static const char *const sessions[NSESS] = {"t0", "t1", "t2", "t3"};

static void fill_shard(shard_t *sh, int ndim, const int64_t *full)
{
    int64_t n = 1, m[RS_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        n *= sh->shape[d];
    sh->nbytes = (uint64_t)n * 2;
    sh->data = malloc(sh->nbytes ? sh->nbytes : 1);
    for (int64_t k = 0; k < n; k++) {
        gt_unravel(k, ndim, sh->shape, m);
        int64_t g = 0;
        for (int d = 0; d < ndim; d++)
            g = g * full[d] + m[d] + sh->off[d];
        uint16_t v = value_of(sh->src, g);
        memcpy(sh->data + k * 2, &v, 2);
    }
}

/* Tiles each source with a random grid; every tile goes to 1-2 sessions,
 * shards of a session packed back to back in its address range. */
static void publish(scenario_t *sc, int with_digest)
{
    uint64_t next[NSESS];
    for (int s = 0; s < NSESS; s++)
        next[s] = 4096 + (uint64_t)s * (1u << 24);
    assert_int_equal(rs_sources_create(&sc->srcs), RS_OK);
    for (int s = 0; s < sc->nsrc; s++) {
        int nd = sc->ndim[s];
        int64_t cut[RS_MAX_DIMS][3], ncut[RS_MAX_DIMS], idx[RS_MAX_DIMS] = {0};
        for (int d = 0; d < nd; d++) {
            ncut[d] = 1 + (sc->shape[s][d] > 1 ? (int64_t)rnd(2) : 0);
            cut[d][0] = 0;
            cut[d][1] = ncut[d] == 2 ? 1 + (int64_t)rnd((uint64_t)sc->shape[s][d] - 1) : sc->shape[s][d];
            cut[d][2] = sc->shape[s][d];
        }
        for (;;) {
            int reps = 1 + (int)rnd(2), first = (int)rnd(NSESS);
            for (int r = 0; r < reps; r++) {
                shard_t *sh = &sc->shards[sc->nshards++];
                sh->src = s;
                int sess = (first + r) % NSESS;
                sh->session = sessions[sess];
                for (int d = 0; d < nd; d++) {
                    sh->off[d] = cut[d][idx[d]];
                    sh->shape[d] = cut[d][idx[d] + 1] - cut[d][idx[d]];
                }
                fill_shard(sh, nd, sc->shape[s]);
                sh->addr = next[sess];
                next[sess] += sh->nbytes;
                char name[16], dg[RS_DIGEST_STR_LEN + 1];
                snprintf(name, sizeof(name), "src%d", s);
                rs_digest_format(rs_digest(sh->data, sh->nbytes), dg);
                rs_shard_desc_t desc = {name, RS_DTYPE_BF16, 2, nd, sc->shape[s],
                                        sh->session, 0, sh->addr, sh->off,
                                        sh->shape, with_digest ? dg : NULL};
                assert_int_equal(rs_sources_add_shard(sc->srcs, &desc, NULL), RS_OK);
            }
            int d = nd - 1;
            for (; d >= 0; d--) {
                if (++idx[d] < ncut[d])
                    break;
                idx[d] = 0;
            }
            if (d < 0)
                break;
        }
    }
}

/* A random view chain the ground truth accepts; 0 if none was found. */
static int random_ops(int nd, const int64_t *shape, rs_op_t *ops, int64_t *store,
                      gt_tensor_t *out)
{
    for (int attempt = 0; attempt < 20; attempt++) {
        int n = (int)rnd(3);
        gt_tensor_t t;
        int cur = nd;
        int64_t sh[RS_MAX_DIMS];
        memcpy(sh, shape, sizeof(int64_t) * (size_t)nd);
        for (int i = 0; i < n; i++) {
            int d = (int)rnd((uint64_t)cur);
            switch (rnd(4)) {
            case 0:
                ops[i] = (rs_op_t){.kind = RS_OP_NARROW, .arg = {d, 0, 1}};
                if (sh[d] > 1) {
                    ops[i].arg[1] = (int64_t)rnd((uint64_t)sh[d]);
                    ops[i].arg[2] = 1 + (int64_t)rnd((uint64_t)(sh[d] - ops[i].arg[1]));
                }
                sh[d] = ops[i].arg[2];
                break;
            case 1:
                ops[i] = (rs_op_t){.kind = RS_OP_SLICE, .arg = {d, 0, sh[d], 2}, .has = 0xf};
                sh[d] = (sh[d] + 1) / 2;
                break;
            case 2: {
                int e = (int)rnd((uint64_t)cur);
                ops[i] = (rs_op_t){.kind = RS_OP_TRANSPOSE, .arg = {d, e}};
                int64_t tmp = sh[d];
                sh[d] = sh[e];
                sh[e] = tmp;
                break;
            }
            default:
                store[0] = -1;
                ops[i] = (rs_op_t){.kind = RS_OP_FLATTEN};
                break;
            }
        }
        if (gt_replay(nd, shape, ops, (size_t)n, &t, NULL, 0) != GT_OK)
            continue;
        if (!gt_is_aligned_box(&t, nd, shape)) {
            gt_free(&t);
            continue;
        }
        *out = t;
        return n + 1; /* +1 so that 0 means failure */
    }
    return 0;
}

/* Captures copies of random views into two fused params (f32 via convert,
 * bf16 exact) and records the expected bytes. */
static void capture(scenario_t *sc)
{
    rs_op_t ops[8];
    int64_t store[4];
    gt_tensor_t views[16];
    int vsrc[16], vconv[16], nops_of[16];
    rs_op_t vops[16][8];
    int nv = 0;
    int64_t used[2] = {0, 0};
    assert_int_equal(rs_capture_create(&sc->cap), RS_OK);
    for (int c = 0; c < 6; c++) {
        int s = (int)rnd((uint64_t)sc->nsrc);
        gt_tensor_t t;
        int n = random_ops(sc->ndim[s], sc->shape[s], ops, store, &t);
        if (n == 0)
            continue;
        views[nv] = t;
        vsrc[nv] = s;
        vconv[nv] = (int)rnd(3) == 0;
        nops_of[nv] = n - 1;
        memcpy(vops[nv], ops, sizeof(ops));
        used[vconv[nv] ? 0 : 1] += t.numel + (int64_t)rnd(3);
        nv++;
    }
    int64_t pshape[2] = {used[0] + 1, used[1] + 1};
    rs_dtype_t pdt[2] = {RS_DTYPE_F32, RS_DTYPE_BF16};
    const char *pname[2] = {"fused_f32", "fused_bf16"};
    for (int p = 0; p < 2; p++) {
        assert_int_equal(rs_capture_add_param(sc->cap, pname[p], 1, &pshape[p], pdt[p], NULL), RS_OK);
        sc->pbytes[p] = (uint64_t)pshape[p] * rs_dtype_size(pdt[p]);
        sc->expect[p] = malloc(sc->pbytes[p]);
        memset(sc->expect[p], 0xEE, sc->pbytes[p]);
    }
    int64_t off[2] = {0, 0};
    for (int v = 0; v < nv; v++) {
        int p = vconv[v] ? 0 : 1;
        gt_tensor_t *t = &views[v];
        /* destination: the view's shape, row-major, reversed dims order
         * (a transposed layout) half of the time */
        int64_t stride[RS_MAX_DIMS], acc = 1;
        int rev = (int)rnd(2);
        for (int k = 0; k < t->ndim; k++) {
            int d = rev ? k : t->ndim - 1 - k;
            stride[d] = acc;
            acc *= t->shape[d];
        }
        char src[16];
        snprintf(src, sizeof(src), "src%d", vsrc[v]);
        rs_copy_desc_t cd = {src, pname[p], vops[v], (size_t)nops_of[v], off[p], t->ndim,
                             t->shape, stride, pdt[p]};
        assert_int_equal(rs_capture_add_copy(sc->cap, &cd, NULL), RS_OK);
        int64_t m[RS_MAX_DIMS];
        for (int64_t k = 0; k < t->numel; k++) {
            gt_unravel(k, t->ndim, t->shape, m);
            int64_t de = off[p];
            for (int d = 0; d < t->ndim; d++)
                de += m[d] * stride[d];
            uint16_t bf = value_of(vsrc[v], t->idx[k]);
            if (p == 0) {
                uint32_t f = (uint32_t)bf << 16;
                memcpy(sc->expect[0] + de * 4, &f, 4);
            } else {
                memcpy(sc->expect[1] + de * 2, &bf, 2);
            }
        }
        off[p] += acc;
        gt_free(t);
    }
}

static void scenario_free(scenario_t *sc)
{
    for (int i = 0; i < sc->nshards; i++)
        free(sc->shards[i].data);
    free(sc->expect[0]);
    free(sc->expect[1]);
    rs_capture_destroy(sc->cap);
    rs_sources_destroy(sc->srcs);
}

static void make_scenario(scenario_t *sc, int with_digest)
{
    memset(sc, 0, sizeof(*sc));
    sc->nsrc = 1 + (int)rnd(3);
    for (int s = 0; s < sc->nsrc; s++) {
        sc->ndim[s] = 1 + (int)rnd(3);
        for (int d = 0; d < sc->ndim[s]; d++)
            sc->shape[s][d] = 1 + (int64_t)rnd(7);
    }
    publish(sc, with_digest);
    capture(sc);
}

/* Connects every session: in-process regions, or (cma) a child holding
 * copies of the shard buffers at the same addresses. */
static pid_t connect_all(rs_transport_h t, rs_plan_h plan, scenario_t *sc, int cma)
{
    pid_t child = 0;
    if (cma) {
        child = tfx_paused_child();
        assert_true(child >= 0);
        for (int i = 0; i < sc->nshards; i++) /* only the child's copy is right */
            memset(sc->shards[i].data, 0x5A, sc->shards[i].nbytes);
    }
    for (uint32_t s = 0; s < rs_plan_num_sessions(plan); s++) {
        const char *name = rs_plan_session_name(plan, s);
        rs_region_t reg[256];
        size_t n = 0;
        for (int i = 0; i < sc->nshards; i++) {
            if (strcmp(sc->shards[i].session, name) == 0)
                reg[n++] = (rs_region_t){sc->shards[i].addr, sc->shards[i].nbytes,
                                         sc->shards[i].data};
        }
        rs_peer_t peer = {name, child, reg, n, NULL, 0};
        rs_diag_t diag;
        assert_int_equal(rs_transport_connect(t, s, &peer, &diag), RS_OK);
    }
    return child;
}

static void stop_child(pid_t child)
{
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
}

typedef struct install_log {
    int calls;
} install_log_t;

static rs_status_t on_install(void *ctx, rs_exec_h exec)
{
    (void)exec;
    ((install_log_t *)ctx)->calls++;
    return RS_OK;
}

static const char *const backends[] = {"local", "local-mt", "cma"};

/* A scenario planned, connected over a transport (a child holding the
 * shards for cma) and prepared, its two params bound to buffers filled
 * with 0xEE. */
typedef struct rig {
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h x;
    pid_t child;
    unsigned char *buf[2];
} rig_t;

static void rig_open(rig_t *r, scenario_t *sc, const rs_plan_params_t *pp,
                     const rs_transport_params_t *tp,
                     const rs_exec_params_t *ep)
{
    rs_diag_t diag;
    assert_int_equal(rs_plan_build(sc->cap, sc->srcs, pp, &diag, &r->plan),
                     RS_OK);
    assert_int_equal(rs_transport_create(tp, &diag, &r->t), RS_OK);
    r->child = connect_all(r->t, r->plan, sc, strcmp(tp->backend, "cma") == 0);
    assert_int_equal(rs_exec_create(r->plan, r->t, ep, &diag, &r->x), RS_OK);
    for (int p = 0; p < 2; p++) {
        r->buf[p] = malloc(sc->pbytes[p]);
        assert_non_null(r->buf[p]);
        memset(r->buf[p], 0xEE, sc->pbytes[p]);
        assert_int_equal(rs_exec_bind(r->x, (size_t)p, r->buf[p],
                                      sc->pbytes[p], RS_MEM_HOST, &diag),
                         RS_OK);
    }
}

/* Both params hold what the scenario expects. */
static void rig_expect(const rig_t *r, const scenario_t *sc)
{
    for (int p = 0; p < 2; p++)
        assert_memory_equal(r->buf[p], sc->expect[p], sc->pbytes[p]);
}

static void rig_close(rig_t *r)
{
    rs_exec_destroy(r->x);
    stop_child(r->child);
    rs_transport_destroy(r->t);
    rs_plan_destroy(r->plan);
    free(r->buf[0]);
    free(r->buf[1]);
}

static void run_one(scenario_t *sc, const char *backend, int64_t max_segs, int verify)
{
    rs_plan_params_t pp;
    rs_diag_t diag;
    rs_plan_params_init(&pp);
    pp.max_segments_per_copy = max_segs;
    rs_transport_params_t tp;
    rs_transport_params_init(&tp);
    tp.backend = backend;
    tp.threads = 3;
    install_log_t log = {0};
    rs_exec_params_t ep;
    rs_exec_params_init(&ep);
    ep.install = on_install;
    ep.install_ctx = &log;
    ep.verify_digests = verify;
    ep.verify_partial = verify;
    rig_t r;
    rig_open(&r, sc, &pp, &tp, &ep);
    assert_true(rs_plan_is_complete(r.plan));
    rs_exec_h x = r.x;
    unsigned char **buf = r.buf;
    for (int round = 0; round < 2; round++) { /* the second reuses the prepared state */
        for (int p = 0; p < 2; p++)
            memset(buf[p], 0xEE, sc->pbytes[p]);
        rs_status_t st = rs_exec_run(x, &diag);
        if (st != RS_OK)
            fail_msg("%s: %s", backend, diag.msg);
        rig_expect(&r, sc);
    }
    /* a staged run: every byte in place, install not called until
     * rs_exec_install, which runs once */
    for (int p = 0; p < 2; p++)
        memset(buf[p], 0xEE, sc->pbytes[p]);
    if (rs_exec_run_staged(x, &diag) != RS_OK)
        fail_msg("%s staged: %s", backend, diag.msg);
    rig_expect(&r, sc);
    assert_int_equal(log.calls, 2);
    rs_exec_stages_t sg;
    rs_exec_stages(x, &sg);
    assert_true(sg.ok);
    assert_true(sg.wire_s >= 0);
    assert_true(sg.install_s < 0); /* not run yet: absent */
    assert_int_equal(rs_exec_install(x, &diag), RS_OK);
    assert_int_equal(log.calls, 3);
    rs_exec_stages(x, &sg);
    assert_true(sg.install_s >= 0);
    assert_int_equal(rs_exec_install(x, &diag), RS_ERR_INVALID_ARG);
    assert_int_equal(log.calls, 3);
    rs_exec_stats_t es;
    rs_exec_stats(x, &es);
    assert_int_equal(es.prepares, 1);
    assert_int_equal(sg.bytes, es.bytes);
    assert_int_equal(sg.descriptors, es.descriptors);
    assert_int_equal(sg.shards_verified, es.shards_verified);
    rig_close(&r);
}

static void test_random_refits(void **state)
{
    (void)state;
    rng = 777;
    for (int i = 0; i < 60; i++) {
        for (int b = 0; b < 3; b++) {
            scenario_t sc;
            uint64_t seed = rng;
            make_scenario(&sc, b == 0);
            run_one(&sc, backends[b], 1 + (int64_t)rnd(6), b == 0);
            scenario_free(&sc);
            rng = seed * 31 + (uint64_t)b + 1;
        }
    }
}

/* A small fixed plan: a [4, 6] bf16 source split in two row halves. */
/* The digests fixed() publishes: the shards' own (0), none as a table
 * without digests spells it, "" (1), or none at all, NULL (2). */
static int fixed_digests;

static void fixed(scenario_t *sc, int drop_half)
{
    memset(sc, 0, sizeof(*sc));
    sc->nsrc = 1;
    sc->ndim[0] = 2;
    sc->shape[0][0] = 4;
    sc->shape[0][1] = 6;
    assert_int_equal(rs_sources_create(&sc->srcs), RS_OK);
    for (int h = 0; h < 2 - drop_half; h++) {
        shard_t *sh = &sc->shards[sc->nshards++];
        sh->session = sessions[h];
        sh->off[0] = 2 * h;
        sh->shape[0] = 2;
        sh->shape[1] = 6;
        fill_shard(sh, 2, sc->shape[0]);
        sh->addr = 4096;
        char dg[RS_DIGEST_STR_LEN + 1];
        rs_digest_format(rs_digest(sh->data, sh->nbytes), dg);
        rs_shard_desc_t d = {"src0", RS_DTYPE_BF16, 2, 2, sc->shape[0], sh->session, 0,
                             sh->addr, sh->off, sh->shape,
                             fixed_digests == 0 ? dg
                             : fixed_digests == 1 ? "" : NULL};
        assert_int_equal(rs_sources_add_shard(sc->srcs, &d, NULL), RS_OK);
    }
    assert_int_equal(rs_capture_create(&sc->cap), RS_OK);
    int64_t pshape[2] = {4, 8};
    assert_int_equal(rs_capture_add_param(sc->cap, "w", 2, pshape, RS_DTYPE_BF16, NULL), RS_OK);
    rs_op_t nar = {.kind = RS_OP_NARROW, .arg = {1, 0, 6}};
    int64_t ds[2] = {4, 6}, st[2] = {8, 1};
    rs_copy_desc_t c = {"src0", "w", &nar, 1, 0, 2, ds, st, RS_DTYPE_BF16};
    assert_int_equal(rs_capture_add_copy(sc->cap, &c, NULL), RS_OK);
    sc->pbytes[0] = 64;
}

typedef struct gate_run {
    rs_status_t st;
    char msg[RS_DIAG_MSG_MAX];
    int installs;
    int untouched;
} gate_run_t;

static gate_run_t gate_run(scenario_t *sc, rs_exec_params_t ep, int corrupt)
{
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h x;
    rs_diag_t diag;
    gate_run_t r = {0};
    install_log_t log = {0};
    rs_transport_params_t tp;
    unsigned char buf[64];
    assert_int_equal(rs_plan_build(sc->cap, sc->srcs, NULL, &diag, &plan), RS_OK);
    rs_transport_params_init(&tp);
    assert_int_equal(rs_transport_create(&tp, &diag, &t), RS_OK);
    connect_all(t, plan, sc, 0);
    if (corrupt)
        sc->shards[0].data[3] ^= 0x40;
    ep.install = on_install;
    ep.install_ctx = &log;
    assert_int_equal(rs_exec_create(plan, t, &ep, &diag, &x), RS_OK);
    memset(buf, 0xEE, sizeof(buf));
    assert_int_equal(rs_exec_bind(x, 0, buf, sizeof(buf), RS_MEM_HOST, &diag), RS_OK);
    rs_diag_clear(&diag);
    r.st = rs_exec_run(x, &diag);
    memcpy(r.msg, diag.msg, sizeof(r.msg));
    /* nothing staged is left to install, after a failure or an install */
    rs_diag_t later;
    assert_int_equal(rs_exec_install(x, &later), RS_ERR_INVALID_ARG);
    r.installs = log.calls;
    r.untouched = 1;
    for (size_t i = 0; i < sizeof(buf); i++)
        r.untouched &= buf[i] == 0xEE;
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    return r;
}

static void test_gates(void **state)
{
    (void)state;
    scenario_t sc;
    rs_exec_params_t ep;
    gate_run_t r;

    /* complete plan: 48 of 64 bytes covered (the param is padded) */
    fixed(&sc, 0);
    rs_exec_params_init(&ep);
    r = gate_run(&sc, ep, 0);
    assert_int_equal(r.st, RS_OK);
    assert_int_equal(r.installs, 1);
    ep.require_full_coverage = 1; /* 0.75 < 0.995 */
    r = gate_run(&sc, ep, 0);
    assert_int_equal(r.st, RS_ERR_INCOMPLETE);
    assert_non_null(strstr(r.msg, "incomplete refit"));
    assert_int_equal(r.installs, 0);
    assert_true(r.untouched);
    ep.coverage_floor = 0.7;
    r = gate_run(&sc, ep, 0);
    assert_int_equal(r.st, RS_OK);
    /* an implausible throughput ceiling */
    rs_exec_params_init(&ep);
    ep.max_gbps = 1e-12;
    r = gate_run(&sc, ep, 0);
    assert_int_equal(r.st, RS_ERR_VERIFY);
    assert_non_null(strstr(r.msg, "throughput"));
    assert_int_equal(r.installs, 0);
    /* a corrupted shard fails its digest and names it */
    rs_exec_params_init(&ep);
    ep.verify_digests = 1;
    r = gate_run(&sc, ep, 1);
    assert_int_equal(r.st, RS_ERR_VERIFY);
    assert_non_null(strstr(r.msg, "src0"));
    assert_non_null(strstr(r.msg, "t0"));
    assert_int_equal(r.installs, 0);
    scenario_free(&sc);

    /* half the source unpublished: refused before any byte moves */
    fixed(&sc, 1);
    rs_exec_params_init(&ep);
    r = gate_run(&sc, ep, 0);
    assert_int_equal(r.st, RS_ERR_INCOMPLETE);
    assert_int_equal(r.installs, 0);
    assert_true(r.untouched);
    scenario_free(&sc);

    /* an unsupported source: fallback is refused as unsupported geometry */
    fixed(&sc, 0);
    assert_int_equal(rs_capture_add_unsupported(sc.cap, "src0", "op 'expand' is not supported", NULL), RS_OK);
    r = gate_run(&sc, ep, 0);
    assert_int_equal(r.st, RS_ERR_UNSUPPORTED);
    assert_non_null(strstr(r.msg, "expand"));
    assert_true(r.untouched);
    scenario_free(&sc);
}

typedef struct progress_log {
    int calls;
    uint64_t last, total;
    int monotonic;
} progress_log_t;

static void on_progress(void *ctx, const rs_progress_t *p)
{
    progress_log_t *l = ctx;
    if (p->bytes_done < l->last || p->bytes_done > p->bytes_total)
        l->monotonic = 0;
    l->last = p->bytes_done;
    l->total = p->bytes_total;
    l->calls++;
}

/* Verification is strict: a shard published without a digest (missing or
 * empty) fails a verifying run before any byte moves, naming it; without
 * verification the same plan runs. */
static void test_verify_needs_digests(void **state)
{
    (void)state;
    for (int k = 1; k <= 2; k++) {
        scenario_t sc;
        rs_exec_params_t ep;
        gate_run_t r;
        fixed_digests = k;
        fixed(&sc, 0);
        fixed_digests = 0;
        rs_exec_params_init(&ep);
        ep.verify_digests = 1;
        r = gate_run(&sc, ep, 0);
        assert_int_equal(r.st, RS_ERR_VERIFY);
        if (strstr(r.msg, "tensor 'src0'") == NULL ||
            strstr(r.msg, "without a digest") == NULL ||
            strstr(r.msg, "at addr 4096") == NULL)
            fail_msg("message: %s", r.msg);
        assert_int_equal(r.installs, 0);
        assert_true(r.untouched);
        ep.verify_digests = 0;
        r = gate_run(&sc, ep, 0);
        assert_int_equal(r.st, RS_OK);
        assert_int_equal(r.installs, 1);
        scenario_free(&sc);
    }
}

/* Chunked wire with progress: same bytes, reported as they land. */
static void test_progress(void **state)
{
    (void)state;
    for (int b = 0; b < 3; b++) {
        scenario_t sc;
        rig_t r;
        rs_diag_t diag;
        rs_transport_params_t tp;
        rs_exec_params_t ep;
        progress_log_t log = {0, 0, 0, 1};
        rng = 4242 + (uint64_t)b;
        make_scenario(&sc, 0);
        rs_transport_params_init(&tp);
        tp.backend = backends[b];
        rs_exec_params_init(&ep);
        ep.progress = on_progress;
        ep.progress_ctx = &log;
        ep.progress_chunk_bytes = 16;
        rig_open(&r, &sc, NULL, &tp, &ep);
        if (rs_exec_run(r.x, &diag) != RS_OK)
            fail_msg("%s: %s", backends[b], diag.msg);
        rig_expect(&r, &sc);
        rs_exec_stats_t es;
        rs_exec_stats(r.x, &es);
        assert_true(log.monotonic);
        assert_int_equal(log.last, es.bytes);
        assert_int_equal(log.total, es.bytes);
        if (es.bytes > 64)
            assert_true(log.calls > 1);
        rig_close(&r);
        scenario_free(&sc);
    }
}

typedef struct slow_log {
    int calls;
} slow_log_t;

static void on_slow_progress(void *ctx, const rs_progress_t *p)
{
    (void)p;
    struct timespec nap = {0, 40 * 1000 * 1000};
    ((slow_log_t *)ctx)->calls++;
    nanosleep(&nap, NULL);
}

/* One deadline for the whole run: a wire slowed between chunks runs past
 * it, fails with RS_ERR_TIMEOUT naming the wire stage before install; with
 * the deadline lifted the same prepared executor delivers exact bytes. */
static void test_run_deadline(void **state)
{
    (void)state;
    scenario_t sc;
    rig_t r;
    rs_diag_t diag;
    rs_transport_params_t tp;
    rs_exec_params_t ep;
    install_log_t log = {0};
    slow_log_t slow = {0};
    rng = 777;
    make_scenario(&sc, 0);
    rs_transport_params_init(&tp);
    tp.backend = "local";
    rs_exec_params_init(&ep);
    ep.install = on_install;
    ep.install_ctx = &log;
    ep.progress = on_slow_progress;
    ep.progress_ctx = &slow;
    ep.progress_chunk_bytes = 8;
    ep.run_timeout_s = 0.1;
    rig_open(&r, &sc, NULL, &tp, &ep);
    rs_exec_h x = r.x;
    rs_status_t st = rs_exec_run(x, &diag);
    rs_exec_stats_t es;
    rs_exec_stats(x, &es);
    if (es.bytes <= 8 * 4) /* the fixed seed gives a wire of many chunks */
        fail_msg("scenario of %llu bytes: too small", (unsigned long long)es.bytes);
    if (st != RS_ERR_TIMEOUT)
        fail_msg("got %s (%s), want RS_ERR_TIMEOUT", rs_status_str(st), diag.msg);
    assert_non_null(strstr(diag.msg, "deadline passed in the wire stage"));
    assert_non_null(strstr(diag.msg, "bytes read"));
    assert_int_equal(log.calls, 0);
    int slow_calls = slow.calls;
    assert_true(slow_calls >= 1 && (uint64_t)slow_calls * 8 < es.bytes);
    rs_exec_set_run_timeout(x, 0);
    st = rs_exec_run(x, &diag);
    if (st != RS_OK)
        fail_msg("without a deadline: %s", diag.msg);
    rig_expect(&r, &sc);
    assert_int_equal(log.calls, 1);
    rig_close(&r);
    scenario_free(&sc);
}

static void test_coverage_record(void **state)
{
    (void)state;
    scenario_t sc;
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h x;
    rs_coverage_t cov;
    rs_diag_t diag;
    fixed(&sc, 0);
    assert_int_equal(rs_plan_build(sc.cap, sc.srcs, NULL, &diag, &plan), RS_OK);
    assert_int_equal(rs_transport_create(NULL, &diag, &t), RS_OK);
    assert_int_equal(rs_exec_create(plan, t, NULL, &diag, &x), RS_OK);
    assert_int_equal(rs_exec_coverage(x, &diag, &cov), RS_OK);
    assert_int_equal(cov.params_total, 1);
    assert_int_equal(cov.params_partial, 1);
    assert_int_equal(cov.bytes_total, 64);
    assert_int_equal(cov.bytes_covered, 48);
    assert_int_equal(cov.bytes_multi, 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(rs_exec_write_coverage_json(x, f, &diag), RS_OK);
    fclose(f);
    assert_non_null(strstr(text, "\"bytes_covered\": 48"));
    assert_non_null(strstr(text, "\"partial_params\": [\n    \"w\""));
    free(text);
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    scenario_free(&sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gates),
        cmocka_unit_test(test_verify_needs_digests),
        cmocka_unit_test(test_coverage_record),
        cmocka_unit_test(test_progress),
        cmocka_unit_test(test_run_deadline),
        cmocka_unit_test(test_random_refits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
