/* The coverage gate at its default floor (RS_EXEC_DEFAULT_COVERAGE_FLOOR,
 * 0.995) and one byte below it: a u8 source of 199,000 bytes copied whole
 * into one parameter, beside an unwritten u8 parameter of 1,000 bytes
 * (coverage exactly 0.995: installed) or 1,001 bytes (199,000 / 200,001,
 * 0.994995: refused with RS_ERR_INCOMPLETE naming both figures, nothing
 * written or installed). Without require_full_coverage the run below the
 * floor installs. The receiver's parameters default to the same floor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard.h"

#define SRC_BYTES 199000
#define ADDR 4096

typedef struct run {
    rs_status_t st;
    char msg[RS_DIAG_MSG_MAX];
    int installs, untouched, exact;
    double fraction;
} run_t;

static rs_status_t on_install(void *ctx, rs_exec_h x)
{
    (void)x;
    (*(int *)ctx)++;
    return RS_OK;
}

/* The whole source into "w", beside an unwritten "pad" of pad bytes. */
static run_t run(int64_t pad, int require)
{
    static uint8_t src[SRC_BYTES], w[SRC_BYTES], padbuf[2048];
    int64_t full[1] = {SRC_BYTES}, off[1] = {0}, pshape[1] = {pad};
    int64_t st1[1] = {1};
    rs_shard_desc_t d = {"s", RS_DTYPE_U8, 1, 1, full, "r0", 0, ADDR, off,
                         full, NULL};
    rs_copy_desc_t c = {"s", "w", NULL, 0, 0, 1, full, st1, RS_DTYPE_U8};
    rs_sources_h srcs;
    rs_capture_h cap;
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h x;
    rs_exec_params_t ep;
    rs_coverage_t cov;
    rs_diag_t diag;
    run_t r;
    memset(&r, 0, sizeof(r));
    for (size_t i = 0; i < SRC_BYTES; i++)
        src[i] = (uint8_t)(i * 13 + 7);
    memset(w, 0xEE, sizeof(w));
    memset(padbuf, 0xEE, sizeof(padbuf));
    assert_int_equal(rs_sources_create(&srcs), RS_OK);
    assert_int_equal(rs_sources_add_shard(srcs, &d, &diag), RS_OK);
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "w", 1, full, RS_DTYPE_U8,
                                          &diag), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "pad", 1, pshape, RS_DTYPE_U8,
                                          &diag), RS_OK);
    assert_int_equal(rs_capture_add_copy(cap, &c, &diag), RS_OK);
    assert_int_equal(rs_plan_build(cap, srcs, NULL, &diag, &plan), RS_OK);
    assert_int_equal(rs_transport_create(NULL, &diag, &t), RS_OK);
    rs_region_t reg = {ADDR, SRC_BYTES, src};
    rs_peer_t peer = {"r0", 0, &reg, 1, NULL, 0};
    assert_int_equal(rs_transport_connect(t, 0, &peer, &diag), RS_OK);
    rs_exec_params_init(&ep);
    assert_true(ep.coverage_floor == RS_EXEC_DEFAULT_COVERAGE_FLOOR);
    ep.require_full_coverage = require;
    ep.install = on_install;
    ep.install_ctx = &r.installs;
    assert_int_equal(rs_exec_create(plan, t, &ep, &diag, &x), RS_OK);
    assert_int_equal(rs_exec_bind(x, 0, w, sizeof(w), RS_MEM_HOST, &diag),
                     RS_OK);
    assert_int_equal(rs_exec_bind(x, 1, padbuf, (uint64_t)pad, RS_MEM_HOST,
                                  &diag), RS_OK);
    rs_diag_clear(&diag);
    r.st = rs_exec_run(x, &diag);
    memcpy(r.msg, diag.msg, sizeof(r.msg));
    assert_int_equal(rs_exec_coverage(x, &diag, &cov), RS_OK);
    r.fraction = cov.fraction;
    r.untouched = r.exact = 1;
    for (size_t i = 0; i < SRC_BYTES; i++) {
        r.untouched &= w[i] == 0xEE;
        r.exact &= w[i] == src[i];
    }
    for (size_t i = 0; i < sizeof(padbuf); i++) { /* pad: never written */
        r.untouched &= padbuf[i] == 0xEE;
        r.exact &= padbuf[i] == 0xEE;
    }
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rs_sources_destroy(srcs);
    return r;
}

static void test_default_floor(void **state)
{
    (void)state;
    rs_receiver_params_t rp;
    rs_receiver_params_init(&rp);
    assert_true(RS_EXEC_DEFAULT_COVERAGE_FLOOR == 0.995);
    assert_true(rp.coverage_floor == RS_EXEC_DEFAULT_COVERAGE_FLOOR);
}

static void test_at_the_floor(void **state)
{
    (void)state;
    run_t r = run(1000, 1);
    assert_true(r.fraction == 0.995);
    assert_int_equal(r.st, RS_OK);
    assert_int_equal(r.installs, 1);
    assert_true(r.exact);
}

static void test_one_byte_below(void **state)
{
    (void)state;
    run_t r = run(1001, 1);
    assert_true(r.fraction < 0.995 && r.fraction > 0.99499);
    assert_int_equal(r.st, RS_ERR_INCOMPLETE);
    if (strstr(r.msg, "covers 0.9950 of parameter bytes, below the floor "
                      "0.9950") == NULL)
        fail_msg("message: %s", r.msg);
    assert_int_equal(r.installs, 0);
    assert_true(r.untouched);
    r = run(1001, 0); /* the gate is off by default */
    assert_int_equal(r.st, RS_OK);
    assert_int_equal(r.installs, 1);
    assert_true(r.exact);
}

/* A floor outside (0, 1] is refused when the executor is made: a NaN one
 * would let every incomplete refit through the gate. */
static void test_bad_floor_refused(void **state)
{
    (void)state;
    int64_t shape[1] = {4};
    rs_sources_h srcs;
    rs_capture_h cap;
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_params_t ep;
    rs_diag_t diag;
    assert_int_equal(rs_sources_create(&srcs), RS_OK);
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "w", 1, shape, RS_DTYPE_U8,
                                          &diag), RS_OK);
    assert_int_equal(rs_plan_build(cap, srcs, NULL, &diag, &plan), RS_OK);
    assert_int_equal(rs_transport_create(NULL, &diag, &t), RS_OK);
    const double bad[] = {0.0, -0.5, 1.0000001, NAN, INFINITY};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rs_exec_h x = NULL;
        rs_exec_params_init(&ep);
        ep.coverage_floor = bad[i];
        assert_int_equal(rs_exec_create(plan, t, &ep, &diag, &x),
                         RS_ERR_INVALID_ARG);
        assert_null(x);
        assert_non_null(strstr(diag.msg, "coverage_floor"));
    }
    rs_exec_h x = NULL;
    rs_exec_params_init(&ep);
    ep.coverage_floor = 1.0;
    assert_int_equal(rs_exec_create(plan, t, &ep, &diag, &x), RS_OK);
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rs_sources_destroy(srcs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_floor),
        cmocka_unit_test(test_at_the_floor),
        cmocka_unit_test(test_one_byte_below),
        cmocka_unit_test(test_bad_floor_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
