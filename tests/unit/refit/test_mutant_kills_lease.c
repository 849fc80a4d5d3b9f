/* A lease case the mutation gate (tests/mutate) found untested: when the
 * directory says a receiver's lease is over (dropped from outside), the
 * renewal thread records it as lost, with the directory's reason, and
 * stops renewing; it is not counted as a renewal error (which would leave
 * the lease's state unknown and keep retrying). Then the proof before
 * install refuses. On a file: directory; waits are bounded polls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <time.h>

#include "dir_env.h"
#include "refit/refit_impl.h"
#include "reshard/reshard.h"

/* Polls (every 10 ms, up to 10 s) until the renewal thread has an
 * outcome other than success: 1 when it recorded the lease as lost. */
static int wait_outcome(rs__lease_t *l)
{
    const struct timespec tick = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&l->lock);
        int lost = l->lost;
        uint64_t errors = l->errors;
        pthread_mutex_unlock(&l->lock);
        if (lost || errors > 0)
            return lost;
        nanosleep(&tick, NULL);
    }
    return 0;
}

static void test_dropped_lease_is_lost(void **state)
{
    (void)state;
    dir_env_t e;
    memset(&e, 0, sizeof(e));
    assert_int_equal(dir_env_setup(&e, "mk-lease"), 0);
    rs_dir_h dir = dir_env_open(&e);
    rs_diag_t d;
    rs__lease_t l;
    assert_int_equal(rs_dir_create_version(dir, "m", 1, 1, &d), RS_OK);
    /* ttl 30 s: nothing lapses; a renewal every 20 ms */
    assert_int_equal(rs__lease_start(&l, dir, dir, "m", 1, "r0", 30.0, 0.02,
                                     &d), RS_OK);
    assert_int_equal(rs_dir_unlease(dir, "m", 1, "r0", &d), RS_OK);
    assert_int_equal(wait_outcome(&l), 1);
    pthread_mutex_lock(&l.lock);
    assert_int_equal(l.errors, 0);
    assert_non_null(strstr(l.why, "is not held"));
    pthread_mutex_unlock(&l.lock);
    rs_diag_clear(&d);
    assert_int_equal(rs__lease_confirm(&l, dir, 0, &d), RS_ERR_VERIFY);
    assert_non_null(strstr(d.msg, "refusing to install"));
    rs__lease_stop(&l);
    rs_dir_close(dir);
    dir_env_teardown(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropped_lease_is_lost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
