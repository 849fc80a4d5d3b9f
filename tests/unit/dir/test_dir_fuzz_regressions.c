/* Regressions found by tests/fuzz/fuzz_dir: the saved reproducers replayed
 * through the harness, and each bug pinned by a direct call. */
#include "../../fuzz/fuzz_dir.c"
#include "../../fuzz/replay.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

/* A version's meta is read from a shared directory: a slot count far over
 * the limit once sized per-slot arrays (and a loop over every slot). */
static void test_meta_slots_over_limit(void **state)
{
    (void)state;
    static const uint8_t meta[] =
        "{\"format\": \"reshard.dir.v1\", \"slots\": 1000000000000}";
    rs_diag_t diag;
    rs_version_info_t info;
    clear_vdir();
    put("meta", meta, sizeof(meta) - 1);
    assert_int_equal(rs_dir_info(dir, "m", 1, &diag, &info), RS_ERR_INPUT);
    assert_non_null(strstr(diag.msg, "/m/1/meta"));
    assert_non_null(strstr(diag.msg, "slots"));
    assert_int_equal(rs_dir_wait_ready(dir, "m", 1, 0, 5, &diag, &info),
                     RS_ERR_INPUT);
    static const uint8_t most[] =
        "{\"format\": \"reshard.dir.v1\", \"slots\": 1048576}";
    put("meta", most, sizeof(most) - 1);
    assert_int_equal(rs_dir_info(dir, "m", 1, &diag, &info), RS_OK);
    assert_int_equal(info.slots, 1048576);
    clear_vdir();
}

static void test_replay_saved_inputs(void **state)
{
    (void)state;
    assert_true(fz_replay("fuzz_dir", LLVMFuzzerTestOneInput) >= 1);
}

int main(void)
{
    LLVMFuzzerInitialize(NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_meta_slots_over_limit),
        cmocka_unit_test(test_replay_saved_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
