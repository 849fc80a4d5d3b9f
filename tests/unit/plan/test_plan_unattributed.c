/* A capture with unattributed writes (loader writes the capture could not
 * tie to a source) is refused by the planner itself, with the message a
 * receiver gives, so every consumer of a capture refuses it alike. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "reshard/reshard.h"

#define REFUSAL "the capture has 1 unattributed write(s) (loader writes " \
                "not tied to a source); refusing it"

/* One f32 parameter of 4 elements copied whole from source "w". */
static rs_capture_h load_capture(int unattributed)
{
    char json[512];
    snprintf(json, sizeof(json),
             "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p\": "
             "{\"shape\": [4], \"dtype\": \"f32\"}}, \"copies\": [{\"src\": "
             "\"w\", \"ops\": [], \"param\": \"p\", \"dest_offset\": 0, "
             "\"dest_shape\": [4], \"dest_stride\": [1], \"dest_dtype\": "
             "\"f32\"}], \"unattributed\": %d}", unattributed);
    rs_capture_h cap = NULL;
    assert_int_equal(rs_capture_load_string(json, strlen(json), "c.json",
                                            NULL, &cap), RS_OK);
    return cap;
}

static rs_sources_h load_sources(void)
{
    static const char json[] =
        "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"t0\", "
        "\"metadata_endpoint\": \"\", \"agent_meta_b64\": \"\", \"tensors\": "
        "[{\"name\": \"w\", \"dtype\": \"torch.float32\", \"elsize\": 4, "
        "\"full_shape\": [4], \"shards\": [{\"agent_name\": \"t0\", "
        "\"device_id\": 0, \"addr\": 4096, \"shard_offset\": [0], "
        "\"shape\": [4], \"digest\": \"\"}]}]}";
    rs_sources_h src = NULL;
    assert_int_equal(rs_sources_create(&src), RS_OK);
    assert_int_equal(rs_sources_load_string(src, json, sizeof(json) - 1,
                                            "s.json", NULL), RS_OK);
    return src;
}

static void test_planner_refuses(void **state)
{
    (void)state;
    rs_capture_h cap = load_capture(1);
    rs_sources_h src = load_sources();
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_plan_h plan = (rs_plan_h)&d; /* must stay untouched */
    assert_int_equal(rs_plan_build(cap, src, NULL, &d, &plan), RS_ERR_INPUT);
    assert_ptr_equal(plan, (rs_plan_h)&d);
    assert_string_equal(d.msg, REFUSAL);
    rs_sources_destroy(src);
    rs_capture_destroy(cap);
}

/* The receiver refuses with the very same text, before it opens anything
 * (the directory named does not exist). */
static void test_receiver_says_the_same(void **state)
{
    (void)state;
    rs_capture_h cap = load_capture(1);
    rs_receiver_params_t rp;
    rs_receiver_params_init(&rp);
    rp.directory = "file:/nonexistent/reshard-dir";
    rp.model = "m";
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_receiver_h r = NULL;
    assert_int_equal(rs_receiver_create(&rp, cap, &d, &r), RS_ERR_INPUT);
    assert_null(r);
    assert_string_equal(d.msg, REFUSAL);
    rs_capture_destroy(cap);
}

/* Without unattributed writes the same inputs plan completely. */
static void test_attributed_plans(void **state)
{
    (void)state;
    rs_capture_h cap = load_capture(0);
    rs_sources_h src = load_sources();
    rs_plan_h plan = NULL;
    assert_int_equal(rs_plan_build(cap, src, NULL, NULL, &plan), RS_OK);
    assert_true(rs_plan_is_complete(plan));
    rs_plan_destroy(plan);
    rs_sources_destroy(src);
    rs_capture_destroy(cap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planner_refuses),
        cmocka_unit_test(test_receiver_says_the_same),
        cmocka_unit_test(test_attributed_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
