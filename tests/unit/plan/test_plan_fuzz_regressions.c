/* Regressions found by tests/fuzz/fuzz_plan and fuzz_sources: the saved
 * reproducers replayed through the harnesses (each builds, plans and
 * executes what its input decodes to, checking every rule). */
#include "../../fuzz/fuzz_plan.c"
#include "../../fuzz/replay.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

static void test_replay_plan_inputs(void **state)
{
    (void)state;
    assert_true(fz_replay("fuzz_plan", LLVMFuzzerTestOneInput) >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_plan_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
