/* Option structs across library versions. The size rule itself runs on a
 * test struct defined with the library's own macro (RS__PARAMS_DEFINE): a
 * caller built against the first version's header (a smaller struct) gets
 * the defaults for the fields it does not know and keeps its own, and init
 * writes only its bytes. Every public struct's consumer refuses a struct
 * larger than the library's or smaller than the first version's, naming
 * the struct. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/params.h"
#include "reshard/reshard.h"

/* Today's struct and its first version, as an older header declared it. */
typedef struct rs_demo_params {
    size_t size;
    int a;
    double b; /* the first version ends here */
    const char *c;
    uint64_t d;
} rs_demo_params_t;

typedef struct demo_v1 {
    size_t size;
    int a;
    double b;
} demo_v1_t;

static void demo_defaults(rs_demo_params_t *p)
{
    p->a = 1;
    p->b = 2.5;
    p->c = "default";
    p->d = 99;
}

RS__PARAMS_DEFINE(demo, demo_defaults, b)
#define rs_demo_params_init(p) rs_demo_params_init_sized((p), sizeof(*(p)))

/* rs_transport_params_t as a newer library's, with a field this one lacks. */
typedef struct new_transport_params {
    rs_transport_params_t known;
    uint64_t unknown;
} new_transport_params_t;

static void test_init_sets_size_and_defaults(void **state)
{
    (void)state;
    rs_transport_params_t tp;
    rs_dir_params_t dp;
    rs_receiver_params_t rp;
    memset(&tp, 0xab, sizeof(tp));
    rs_transport_params_init(&tp);
    assert_int_equal(tp.size, sizeof(tp));
    assert_string_equal(tp.backend, "local");
    assert_int_equal(tp.threads, 0);
    rs_dir_params_init(&dp);
    assert_int_equal(dp.size, sizeof(dp));
    assert_int_equal(dp.create, 1);
    rs_receiver_params_init(&rp);
    assert_int_equal(rp.size, sizeof(rp));
}

/* An old caller's init writes only its own bytes, with the defaults. */
static void test_init_of_older_struct_stays_inside(void **state)
{
    (void)state;
    struct {
        demo_v1_t p;
        unsigned char guard[32];
    } buf;
    memset(&buf, 0x5a, sizeof(buf));
    rs_demo_params_init_sized((rs_demo_params_t *)&buf.p, sizeof(buf.p));
    assert_int_equal(buf.p.size, sizeof(buf.p));
    assert_int_equal(buf.p.a, 1);
    assert_true(buf.p.b == 2.5);
    for (size_t i = 0; i < sizeof(buf.guard); i++)
        assert_int_equal(buf.guard[i], 0x5a);
}

/* The caller's fields up to its size, the defaults after them, whatever
 * lies in memory past the caller's struct. */
static void test_older_struct_gets_defaults(void **state)
{
    (void)state;
    struct {
        demo_v1_t p;
        unsigned char beyond[32];
    } buf;
    rs_demo_params_t out;
    memset(&buf, 0xff, sizeof(buf));
    rs_demo_params_init_sized((rs_demo_params_t *)&buf.p, sizeof(buf.p));
    buf.p.a = 7;
    assert_int_equal(rs__demo_params_take((rs_demo_params_t *)&buf.p, NULL,
                                          &out), RS_OK);
    assert_int_equal(out.size, sizeof(out));
    assert_int_equal(out.a, 7);
    assert_true(out.b == 2.5);
    assert_string_equal(out.c, "default");
    assert_int_equal(out.d, 99);
    assert_int_equal(rs__demo_params_take(NULL, NULL, &out), RS_OK);
    assert_int_equal(out.a, 1);
}

static void test_demo_sizes_refused(void **state)
{
    (void)state;
    struct {
        rs_demo_params_t p;
        uint64_t newer;
    } big;
    rs_demo_params_t out, small;
    rs_diag_t d;
    memset(&big, 0xcd, sizeof(big));
    rs_demo_params_init_sized(&big.p, sizeof(big));
    assert_int_equal(big.newer, 0); /* zeroed, never left as garbage */
    memset(&out, 0x11, sizeof(out));
    rs_diag_clear(&d);
    assert_int_equal(rs__demo_params_take(&big.p, &d, &out),
                     RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "rs_demo_params_t"));
    assert_int_equal(out.a, 0x11111111); /* untouched */
    rs_demo_params_init(&small);
    small.size = offsetof(rs_demo_params_t, b); /* below the first version */
    assert_int_equal(rs__demo_params_take(&small, NULL, &out),
                     RS_ERR_INVALID_ARG);
}

/* rs_plan_build and rs_exec_create take their params by the same rule. */
static void test_plan_and_exec_check_size(void **state)
{
    (void)state;
    rs_capture_h cap;
    rs_sources_h src;
    rs_plan_h plan = NULL;
    rs_diag_t d;
    const int64_t shape[1] = {8};
    rs_plan_params_t pp;
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "w", 1, shape, RS_DTYPE_F32,
                                          NULL), RS_OK);
    assert_int_equal(rs_sources_create(&src), RS_OK);
    rs_plan_params_init(&pp);
    pp.size = sizeof(pp) + 1;
    rs_diag_clear(&d);
    assert_int_equal(rs_plan_build(cap, src, &pp, &d, &plan),
                     RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "rs_plan_params_t"));
    assert_null(plan);
    rs_plan_params_init(&pp);
    assert_int_equal(rs_plan_build(cap, src, &pp, &d, &plan), RS_OK);
    rs_transport_h t;
    rs_exec_h x = NULL;
    rs_exec_params_t ep;
    assert_int_equal(rs_transport_create(NULL, NULL, &t), RS_OK);
    rs_exec_params_init(&ep);
    ep.size += 8;
    rs_diag_clear(&d);
    assert_int_equal(rs_exec_create(plan, t, &ep, &d, &x), RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "rs_exec_params_t"));
    assert_null(x);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    rs_sources_destroy(src);
    rs_capture_destroy(cap);
}

static void test_oversized_and_undersized_refused(void **state)
{
    (void)state;
    new_transport_params_t big;
    rs_transport_params_t tp;
    rs_transport_h t = NULL;
    rs_diag_t d;
    memset(&big, 0xcd, sizeof(big));
    rs_transport_params_init_sized(&big.known, sizeof(big));
    assert_int_equal(big.known.size, sizeof(big));
    assert_string_equal(big.known.backend, "local");
    assert_int_equal(big.unknown, 0); /* zeroed, never left as garbage */
    rs_diag_clear(&d);
    assert_int_equal(rs_transport_create(&big.known, &d, &t),
                     RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "rs_transport_params_t"));
    assert_null(t);
    rs_transport_params_init(&tp);
    tp.size = sizeof(size_t); /* below the first version */
    rs_diag_clear(&d);
    assert_int_equal(rs_transport_create(&tp, &d, &t), RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "rs_transport_params_t"));
    tp.size = 0; /* a struct never initialised */
    assert_int_equal(rs_transport_create(&tp, NULL, &t), RS_ERR_INVALID_ARG);
    assert_null(t);
    rs_transport_params_init(&tp);
    assert_int_equal(rs_transport_create(&tp, NULL, &t), RS_OK);
    rs_transport_destroy(t);
}

/* Every public struct's consumer refuses a bad size. */
static void test_every_consumer_checks_size(void **state)
{
    (void)state;
    rs_dir_params_t dp;
    rs_publisher_params_t pp;
    rs_receiver_params_t rp;
    rs_exec_params_t ep;
    rs_plan_params_t plp;
    rs_dir_h dir = NULL;
    rs_publisher_h pub = NULL;
    rs_receiver_h rcv = NULL;
    rs_diag_t d;
    rs_dir_params_init(&dp);
    dp.size = sizeof(dp) + 8;
    rs_diag_clear(&d);
    assert_int_equal(rs_dir_open_params("file:/nonexistent", &dp, &d, &dir),
                     RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "rs_dir_params_t"));
    rs_publisher_params_init(&pp);
    pp.directory = "file:/nonexistent";
    pp.model = "m";
    pp.world = 1;
    pp.size = 1;
    rs_diag_clear(&d);
    assert_int_equal(rs_publisher_create(&pp, &d, &pub), RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "rs_publisher_params_t"));
    rs_receiver_params_init(&rp);
    rp.directory = "file:/nonexistent";
    rp.model = "m";
    rp.size = sizeof(rp) * 2;
    rs_capture_h cap;
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    rs_diag_clear(&d);
    assert_int_equal(rs_receiver_create(&rp, cap, &d, &rcv),
                     RS_ERR_INVALID_ARG);
    assert_non_null(strstr(d.msg, "rs_receiver_params_t"));
    assert_null(pub);
    assert_null(rcv);
    assert_null(dir);
    rs_exec_params_init(&ep);
    rs_plan_params_init(&plp);
    assert_int_equal(ep.size, sizeof(ep));
    assert_int_equal(plp.size, sizeof(plp));
    rs_capture_destroy(cap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_sets_size_and_defaults),
        cmocka_unit_test(test_init_of_older_struct_stays_inside),
        cmocka_unit_test(test_older_struct_gets_defaults),
        cmocka_unit_test(test_demo_sizes_refused),
        cmocka_unit_test(test_plan_and_exec_check_size),
        cmocka_unit_test(test_oversized_and_undersized_refused),
        cmocka_unit_test(test_every_consumer_checks_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
