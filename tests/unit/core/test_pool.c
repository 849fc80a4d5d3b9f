/* The worker pool: every task runs once, a cancel names exactly the tasks
 * that never ran, and a join by a deadline names the tasks still running.
 * Tasks that must be in flight block on a gate the test opens, so no test
 * depends on how fast anything runs. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "assert_status.h"
#include "core/clock.h"
#include "core/pool.h"

#define NTASKS 64

/* The pool's calls write no diagnostic; ASSERT_ST prints this one. */
static const rs_diag_t no_diag = {RS_OK, ""};

typedef struct job {
    rs__pool_t *pool;
    atomic_int ran[NTASKS];   /* how often each task ran */
    size_t gated;             /* tasks below this wait for the gate */
    size_t cancel_in;         /* the task that cancels the job, or NTASKS */
    size_t stop_at;           /* what that cancel returned */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t entered;           /* gated tasks that have begun */
    int open;
} job_t;

static void job_init(job_t *j, rs__pool_t *pool, size_t gated)
{
    *j = (job_t){.pool = pool, .gated = gated, .cancel_in = NTASKS};
    for (size_t k = 0; k < NTASKS; k++)
        atomic_init(&j->ran[k], 0);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
}

static void job_fini(job_t *j)
{
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
}

static void task(void *ctx, size_t k)
{
    job_t *j = ctx;
    atomic_fetch_add(&j->ran[k], 1);
    if (k == j->cancel_in)
        j->stop_at = rs__pool_cancel(j->pool);
    if (k >= j->gated)
        return;
    pthread_mutex_lock(&j->mu);
    j->entered++;
    pthread_cond_broadcast(&j->cv);
    while (!j->open)
        pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

/* Waits until `n` gated tasks have begun. */
static void wait_entered(job_t *j, size_t n)
{
    pthread_mutex_lock(&j->mu);
    while (j->entered < n)
        pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

static void open_gate(job_t *j)
{
    pthread_mutex_lock(&j->mu);
    j->open = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Tasks [0, stop) ran once each, the rest never. */
static void expect_ran_below(job_t *j, size_t stop)
{
    for (size_t k = 0; k < NTASKS; k++)
        if (atomic_load(&j->ran[k]) != (k < stop ? 1 : 0))
            fail_msg("task %zu ran %d times, want %d", k,
                     atomic_load(&j->ran[k]), k < stop ? 1 : 0);
}

static rs__pool_t *make_pool(unsigned workers)
{
    rs_diag_t d = {RS_OK, ""};
    rs__pool_t *pool = NULL;
    ASSERT_ST(rs__pool_create(workers, "test", &d, &pool), RS_OK, d);
    assert_int_equal(rs__pool_workers(pool), workers);
    return pool;
}

static void test_every_task_once(void **state)
{
    (void)state;
    rs__pool_t *pool = make_pool(3);
    for (int round = 0; round < 3; round++) {
        job_t j;
        job_init(&j, pool, 0);
        rs__pool_start(pool, task, &j, NTASKS);
        rs__pool_join(pool);
        expect_ran_below(&j, NTASKS);
        /* finished: a cancel now names no task, a passed deadline is met */
        assert_int_equal(rs__pool_cancel(pool), NTASKS);
        struct timespec now = rs__mono_after(0);
        ASSERT_ST(rs__pool_join_until(pool, &now, NULL, NULL), RS_OK, no_diag);
        job_fini(&j);
    }
    rs__pool_destroy(pool);
    rs__pool_destroy(NULL);
}

/* One worker blocked in task 0: a cancel stops tasks 1.. from running. */
static void test_cancel_names_unrun(void **state)
{
    (void)state;
    rs__pool_t *pool = make_pool(1);
    job_t j;
    job_init(&j, pool, 1);
    rs__pool_start(pool, task, &j, NTASKS);
    wait_entered(&j, 1);
    assert_int_equal(rs__pool_cancel(pool), 1);
    assert_int_equal(rs__pool_cancel(pool), 1); /* the same answer again */
    open_gate(&j);
    rs__pool_join(pool);
    expect_ran_below(&j, 1);
    job_fini(&j);
    rs__pool_destroy(pool);
}

/* A task cancels its own job while the joining thread takes tasks too:
 * whatever the interleaving, the tasks below the answer ran once each and
 * the others never. */
static void test_cancel_from_task(void **state)
{
    (void)state;
    rs__pool_t *pool = make_pool(4);
    for (int round = 0; round < 20; round++) {
        job_t j;
        job_init(&j, pool, 0);
        j.cancel_in = 5;
        rs__pool_start(pool, task, &j, NTASKS);
        rs__pool_join(pool);
        assert_in_range(j.stop_at, 6, NTASKS);
        expect_ran_below(&j, j.stop_at);
        job_fini(&j);
    }
    rs__pool_destroy(pool);
}

/* Two workers blocked in tasks 0 and 1 at a deadline that has passed: the
 * join says so and names both; it drains once they finish. */
static void test_join_until_names_late(void **state)
{
    (void)state;
    rs__pool_t *pool = make_pool(2);
    job_t j;
    job_init(&j, pool, 2);
    rs__pool_start(pool, task, &j, NTASKS);
    wait_entered(&j, 2);
    size_t late[2] = {99, 99}, nlate = 0;
    struct timespec passed = rs__mono_after(0);
    ASSERT_ST(rs__pool_join_until(pool, &passed, late, &nlate),
              RS_ERR_TIMEOUT, no_diag);
    assert_int_equal(nlate, 2);
    assert_int_equal(late[0] + late[1], 1); /* tasks 0 and 1, any order */
    assert_int_equal(late[0] * late[1], 0);
    ASSERT_ST(rs__pool_join_until(pool, &passed, NULL, NULL), RS_ERR_TIMEOUT,
              no_diag);
    assert_int_equal(rs__pool_cancel(pool), 2);
    open_gate(&j);
    ASSERT_ST(rs__pool_join_until(pool, NULL, late, &nlate), RS_OK, no_diag);
    expect_ran_below(&j, 2);
    job_fini(&j);

    /* the pool takes the next job whole */
    job_init(&j, pool, 0);
    rs__pool_start(pool, task, &j, NTASKS);
    struct timespec far = rs__mono_after(3600);
    ASSERT_ST(rs__pool_join_until(pool, &far, NULL, NULL), RS_OK, no_diag);
    expect_ran_below(&j, NTASKS);
    job_fini(&j);
    rs__pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_once),
        cmocka_unit_test(test_cancel_names_unrun),
        cmocka_unit_test(test_cancel_from_task),
        cmocka_unit_test(test_join_until_names_late),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
