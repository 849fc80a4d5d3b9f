/* What the headers claim about threads, for captures, sources and plans:
 * a built capture and built sources are only read, so plans may be built
 * from them on several threads at once (the tensors' cell grids, the one
 * part of the sources a build writes, are built once under a lock, or for
 * a tensor each of whose shards holds all of it, published by
 * compare-and-swap); a
 * built plan is only read, so several threads may query it, write its JSON
 * and summary, and run executors over it (each with its own transport and
 * destination). THREADS threads do all of that at once against shared
 * handles; every thread's plan JSON and summary must equal the ones built
 * alone beforehand on a separate sources, and every executor's bytes the
 * values computed here. Run under TSan (TSAN_TESTS in the Makefile), a
 * race between the threads fails the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard.h"

#define THREADS 4
#define TENSORS 3
#define SESSIONS 4             /* session j holds row block j of each tensor */
#define ROWS 16
#define COLS 24
#define BLOCK (ROWS / SESSIONS)
#define NARROW_START 5
#define NARROW_LEN 10
#define BASE_ADDR 0x100000u

/* Values exactly representable in bf16, so the cast's truth is the top
 * half of the f32 bits. */
static float value_at(int k, int r, int c)
{
    return (float)(r - c + 4 * k) * 0.5f;
}

static uint64_t shard_addr(int k) { return BASE_ADDR * (uint64_t)(k + 1); }

typedef struct world {
    float mem[SESSIONS][TENSORS][BLOCK * COLS];
    rs_capture_h cap;
    rs_sources_h shared;       /* grids not built before the threads start */
    rs_sources_h alone;        /* for the reference plan */
    rs_plan_h plan;            /* built alone, shared by the threads */
    char *ref_json, *ref_summary;
    size_t ref_json_len, ref_summary_len;
} world_t;

static world_t w;

typedef struct result {
    int plan_json_equal, summary_equal, bytes_exact, find_ok, shards_ok;
    rs_status_t st;
    char msg[RS_DIAG_MSG_MAX];
} result_t;

static rs_status_t add_sources(rs_sources_h s, rs_diag_t *d)
{
    const int64_t full[2] = {ROWS, COLS}, shape[2] = {BLOCK, COLS};
    char tensor[16], session[16];
    rs_status_t st = RS_OK;
    for (int k = 0; k < TENSORS && st == RS_OK; k++)
        for (int j = 0; j < SESSIONS && st == RS_OK; j++) {
            const int64_t off[2] = {j * BLOCK, 0};
            snprintf(tensor, sizeof(tensor), "t%d", k);
            snprintf(session, sizeof(session), "s%d", j);
            rs_shard_desc_t sh = {tensor, RS_DTYPE_F32, 4, 2, full, session,
                                  0, shard_addr(k), off, shape, NULL};
            st = rs_sources_add_shard(s, &sh, d);
        }
    return st;
}

/* Params p<k> = t<k>.narrow(1, 5, 10) as f32, and c1 = t1 whole as bf16. */
static void build_capture(void)
{
    rs_diag_t d;
    const int64_t pshape[2] = {ROWS, NARROW_LEN}, pstride[2] = {NARROW_LEN, 1};
    const int64_t cshape[2] = {ROWS, COLS}, cstride[2] = {COLS, 1};
    const rs_op_t nar = {.kind = RS_OP_NARROW,
                         .arg = {1, NARROW_START, NARROW_LEN}};
    char src[16], param[16];
    assert_int_equal(rs_capture_create(&w.cap), RS_OK);
    for (int k = 0; k < TENSORS; k++) {
        snprintf(src, sizeof(src), "t%d", k);
        snprintf(param, sizeof(param), "p%d", k);
        assert_int_equal(rs_capture_add_param(w.cap, param, 2, pshape,
                                              RS_DTYPE_F32, &d), RS_OK);
        rs_copy_desc_t c = {src, param, &nar, 1, 0, 2, pshape, pstride,
                            RS_DTYPE_F32};
        assert_int_equal(rs_capture_add_copy(w.cap, &c, &d), RS_OK);
    }
    assert_int_equal(rs_capture_add_param(w.cap, "c1", 2, cshape,
                                          RS_DTYPE_BF16, &d), RS_OK);
    rs_copy_desc_t c = {"t1", "c1", NULL, 0, 0, 2, cshape, cstride,
                        RS_DTYPE_BF16};
    assert_int_equal(rs_capture_add_copy(w.cap, &c, &d), RS_OK);
}

static char *plan_text(rs_plan_h plan, int summary, size_t *len_p)
{
    char *buf = NULL;
    size_t len = 0;
    rs_diag_t d;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    rs_status_t st = summary ? rs_plan_write_summary(plan, f, &d)
                             : rs_plan_write_json(plan, f, &d);
    fclose(f);
    if (st != RS_OK) {
        free(buf);
        return NULL;
    }
    *len_p = len;
    return buf;
}

static int setup(void **state)
{
    (void)state;
    rs_diag_t d;
    memset(&w, 0, sizeof(w));
    for (int j = 0; j < SESSIONS; j++)
        for (int k = 0; k < TENSORS; k++)
            for (int r = 0; r < BLOCK; r++)
                for (int c = 0; c < COLS; c++)
                    w.mem[j][k][r * COLS + c] = value_at(k, j * BLOCK + r, c);
    build_capture();
    if (rs_sources_create(&w.shared) != RS_OK ||
        rs_sources_create(&w.alone) != RS_OK ||
        add_sources(w.shared, &d) != RS_OK || add_sources(w.alone, &d) != RS_OK ||
        rs_plan_build(w.cap, w.alone, NULL, &d, &w.plan) != RS_OK ||
        !rs_plan_is_complete(w.plan))
        return -1;
    w.ref_json = plan_text(w.plan, 0, &w.ref_json_len);
    w.ref_summary = plan_text(w.plan, 1, &w.ref_summary_len);
    return w.ref_json != NULL && w.ref_summary != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    free(w.ref_json);
    free(w.ref_summary);
    rs_plan_destroy(w.plan);
    rs_sources_destroy(w.shared);
    rs_sources_destroy(w.alone);
    rs_capture_destroy(w.cap);
    return 0;
}

/* 1 when the plan's JSON (or summary) is byte for byte `want`. */
static int same_text(rs_plan_h plan, int summary, const char *want,
                     size_t want_len)
{
    size_t len = 0;
    char *got = plan_text(plan, summary, &len);
    int same = got != NULL && len == want_len && memcmp(got, want, len) == 0;
    free(got);
    return same;
}

/* Connects every session of the shared plan to this process's memory. */
static rs_status_t connect_sessions(rs_transport_h t, rs_diag_t *d)
{
    rs_status_t st = RS_OK;
    for (uint32_t i = 0; i < rs_plan_num_sessions(w.plan) && st == RS_OK; i++) {
        int j = atoi(rs_plan_session_name(w.plan, i) + 1);
        rs_region_t regions[TENSORS];
        for (int k = 0; k < TENSORS; k++)
            regions[k] = (rs_region_t){shard_addr(k), sizeof(w.mem[j][k]),
                                       w.mem[j][k]};
        rs_peer_t peer = {rs_plan_session_name(w.plan, i), 0, regions,
                          TENSORS, NULL, 0};
        st = rs_transport_connect(t, i, &peer, d);
    }
    return st;
}

typedef struct dest {
    float p[TENSORS][ROWS * NARROW_LEN];
    uint16_t c1[ROWS * COLS];
} dest_t;

static int dest_exact(const dest_t *x)
{
    for (int k = 0; k < TENSORS; k++)
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < NARROW_LEN; c++) {
                float want = value_at(k, r, NARROW_START + c);
                if (memcmp(&x->p[k][r * NARROW_LEN + c], &want, 4) != 0)
                    return 0;
            }
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            float f = value_at(1, r, c);
            uint32_t u;
            memcpy(&u, &f, 4);
            if (x->c1[r * COLS + c] != (uint16_t)(u >> 16))
                return 0;
        }
    return 1;
}

/* One executor over the shared plan, with its own transport and dest. */
static rs_status_t run_exec(dest_t *x, rs_diag_t *d)
{
    rs_transport_h t = NULL;
    rs_exec_h ex = NULL;
    rs_status_t st = rs_transport_create(NULL, d, &t);
    if (st == RS_OK)
        st = connect_sessions(t, d);
    if (st == RS_OK)
        st = rs_exec_create(w.plan, t, NULL, d, &ex);
    for (size_t k = 0; k < TENSORS && st == RS_OK; k++)
        st = rs_exec_bind(ex, k, x->p[k], sizeof(x->p[k]), RS_MEM_HOST, d);
    if (st == RS_OK)
        st = rs_exec_bind(ex, TENSORS, x->c1, sizeof(x->c1), RS_MEM_HOST, d);
    if (st == RS_OK)
        st = rs_exec_run(ex, d);
    rs_exec_destroy(ex);
    rs_transport_destroy(t);
    return st;
}

/* The read-only accessors of the shared capture and sources. */
static void read_accessors(result_t *res)
{
    char name[16];
    res->find_ok = 1;
    for (int k = 0; k < TENSORS; k++) {
        snprintf(name, sizeof(name), "p%d", k);
        res->find_ok &= rs_capture_find_param(w.cap, name) == k;
    }
    res->find_ok &= rs_capture_find_param(w.cap, "c1") == TENSORS;
    size_t n = rs_sources_num_shards(w.shared);
    res->shards_ok = n == TENSORS * SESSIONS;
    for (size_t i = 0; i < n; i++) {
        rs_shard_desc_t sh;
        rs_sources_shard(w.shared, i, &sh);
        res->shards_ok &= sh.addr == shard_addr(sh.tensor[1] - '0') &&
                          sh.offset[0] == BLOCK * (sh.session[1] - '0');
    }
}

static void *thread_main(void *arg)
{
    result_t *res = arg;
    rs_diag_t d;
    rs_plan_h mine = NULL;
    dest_t *x = malloc(sizeof(*x));
    rs_diag_clear(&d);
    res->st = x == NULL ? RS_ERR_NO_MEMORY
                        : rs_plan_build(w.cap, w.shared, NULL, &d, &mine);
    if (res->st == RS_OK) {
        res->plan_json_equal = same_text(mine, 0, w.ref_json,
                                         w.ref_json_len);
        res->summary_equal = same_text(w.plan, 1, w.ref_summary,
                                       w.ref_summary_len);
        read_accessors(res);
        memset(x, 0xEE, sizeof(*x));
        res->st = run_exec(x, &d);
        res->bytes_exact = res->st == RS_OK && dest_exact(x);
    }
    memcpy(res->msg, d.msg, sizeof(res->msg));
    rs_plan_destroy(mine);
    free(x);
    return NULL;
}

static void test_shared_handles(void **state)
{
    (void)state;
    pthread_t threads[THREADS];
    result_t res[THREADS];
    memset(res, 0, sizeof(res));
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, thread_main,
                                        &res[i]), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < THREADS; i++) {
        if (res[i].st != RS_OK)
            fail_msg("thread %d: %s: %s", i, rs_status_str(res[i].st),
                     res[i].msg);
        if (!res[i].plan_json_equal)
            fail_msg("thread %d: its plan differs from the one built alone", i);
        if (!res[i].summary_equal)
            fail_msg("thread %d: the shared plan's summary differs", i);
        if (!res[i].bytes_exact)
            fail_msg("thread %d: the executor's bytes are not exact", i);
        if (!res[i].find_ok || !res[i].shards_ok)
            fail_msg("thread %d: capture or sources accessors differ", i);
    }
}

/* Tensors each published whole (WHOLE_REPLICAS replicas of the whole
 * tensor, one per session): their one-cell grids are built without the
 * lock and published by compare-and-swap, so threads planning at once race
 * to build the same grid. Every thread's plan must equal the one built
 * alone; under TSan a race on the grids fails the test. */
#define WHOLE_TENSORS 64
#define WHOLE_REPLICAS 2

typedef struct whole_world {
    rs_capture_h cap;
    rs_sources_h shared, alone;
    char *ref_json;
    size_t ref_json_len;
} whole_world_t;

static rs_status_t add_whole_sources(rs_sources_h s, rs_diag_t *d)
{
    const int64_t full[2] = {ROWS, COLS}, off[2] = {0, 0};
    char tensor[16], session[16];
    rs_status_t st = RS_OK;
    for (int k = 0; k < WHOLE_TENSORS && st == RS_OK; k++)
        for (int j = 0; j < WHOLE_REPLICAS && st == RS_OK; j++) {
            snprintf(tensor, sizeof(tensor), "w%d", k);
            snprintf(session, sizeof(session), "s%d", j);
            rs_shard_desc_t sh = {tensor, RS_DTYPE_F32, 4, 2, full, session,
                                  0, shard_addr(k), off, full, NULL};
            st = rs_sources_add_shard(s, &sh, d);
        }
    return st;
}

/* Param q<k> = w<k>.narrow(1, 5, 10). */
static void build_whole_capture(rs_capture_h *cap_p)
{
    rs_diag_t d;
    const int64_t pshape[2] = {ROWS, NARROW_LEN}, pstride[2] = {NARROW_LEN, 1};
    const rs_op_t nar = {.kind = RS_OP_NARROW,
                         .arg = {1, NARROW_START, NARROW_LEN}};
    char src[16], param[16];
    assert_int_equal(rs_capture_create(cap_p), RS_OK);
    for (int k = 0; k < WHOLE_TENSORS; k++) {
        snprintf(src, sizeof(src), "w%d", k);
        snprintf(param, sizeof(param), "q%d", k);
        assert_int_equal(rs_capture_add_param(*cap_p, param, 2, pshape,
                                              RS_DTYPE_F32, &d), RS_OK);
        rs_copy_desc_t c = {src, param, &nar, 1, 0, 2, pshape, pstride,
                            RS_DTYPE_F32};
        assert_int_equal(rs_capture_add_copy(*cap_p, &c, &d), RS_OK);
    }
}

typedef struct whole_arg {
    whole_world_t *ww;
    result_t res;
} whole_arg_t;

static void *whole_thread(void *arg)
{
    whole_arg_t *a = arg;
    rs_diag_t d;
    rs_plan_h mine = NULL;
    rs_diag_clear(&d);
    a->res.st = rs_plan_build(a->ww->cap, a->ww->shared, NULL, &d, &mine);
    if (a->res.st == RS_OK)
        a->res.plan_json_equal = same_text(mine, 0, a->ww->ref_json,
                                           a->ww->ref_json_len);
    memcpy(a->res.msg, d.msg, sizeof(a->res.msg));
    rs_plan_destroy(mine);
    return NULL;
}

static void test_whole_grids_race(void **state)
{
    (void)state;
    whole_world_t ww;
    rs_diag_t d;
    rs_plan_h alone = NULL;
    pthread_t threads[THREADS];
    whole_arg_t args[THREADS];
    memset(&ww, 0, sizeof(ww));
    memset(args, 0, sizeof(args));
    build_whole_capture(&ww.cap);
    assert_int_equal(rs_sources_create(&ww.shared), RS_OK);
    assert_int_equal(rs_sources_create(&ww.alone), RS_OK);
    assert_int_equal(add_whole_sources(ww.shared, &d), RS_OK);
    assert_int_equal(add_whole_sources(ww.alone, &d), RS_OK);
    assert_int_equal(rs_plan_build(ww.cap, ww.alone, NULL, &d, &alone), RS_OK);
    assert_true(rs_plan_is_complete(alone));
    ww.ref_json = plan_text(alone, 0, &ww.ref_json_len);
    assert_non_null(ww.ref_json);
    for (int i = 0; i < THREADS; i++) {
        args[i].ww = &ww;
        assert_int_equal(pthread_create(&threads[i], NULL, whole_thread,
                                        &args[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < THREADS; i++) {
        if (args[i].res.st != RS_OK)
            fail_msg("thread %d: %s: %s", i, rs_status_str(args[i].res.st),
                     args[i].res.msg);
        if (!args[i].res.plan_json_equal)
            fail_msg("thread %d: its plan differs from the one built alone", i);
    }
    free(ww.ref_json);
    rs_plan_destroy(alone);
    rs_sources_destroy(ww.shared);
    rs_sources_destroy(ww.alone);
    rs_capture_destroy(ww.cap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_handles),
        cmocka_unit_test(test_whole_grids_race),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
