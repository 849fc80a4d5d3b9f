/* A fixed set of threads sleeping on a condition variable between jobs. A
 * job is a task count and a function; threads take task numbers from one
 * atomic counter, so tasks of uneven sizes balance themselves, and a cancel
 * moves the counter past the end, so no thread takes another. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/diag.h"
#include "core/pool.h"

struct rs__pool {
    pthread_t *threads;
    atomic_size_t *running; /* per worker: its task + 1, 0 between tasks */
    unsigned nthreads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* a new job, or quit */
    pthread_cond_t done_cv; /* active dropped to zero; CLOCK_MONOTONIC */
    unsigned long gen;      /* jobs started */
    unsigned active;        /* workers still in the current job */
    unsigned slots;         /* running[] entries taken by started workers */
    int quit;
    int cancelled;          /* the current job was cancelled at stop_at */
    size_t stop_at;

    rs__pool_task_fn fn;
    void *ctx;
    size_t ntasks;
    atomic_size_t next;
};

/* Takes and runs tasks until none are left; `slot` (NULL on the joining
 * thread) shows which task this worker is in. */
static void run_tasks(rs__pool_t *p, atomic_size_t *slot)
{
    for (;;) {
        size_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->ntasks)
            return;
        if (slot != NULL)
            atomic_store(slot, k + 1);
        p->fn(p->ctx, k);
        if (slot != NULL)
            atomic_store(slot, 0);
    }
}

static void *worker_main(void *arg)
{
    rs__pool_t *p = arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    unsigned index = p->slots++;
    for (;;) {
        while (p->gen == seen && !p->quit)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->quit)
            break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, &p->running[index]);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0)
            pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void stop(rs__pool_t *p, unsigned started)
{
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < started; i++)
        pthread_join(p->threads[i], NULL);
}

static void free_pool(rs__pool_t *p)
{
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->mu);
    free(p->running);
    free(p->threads);
    free(p);
}

/* The done condition waits on CLOCK_MONOTONIC, for rs__pool_join_until. */
static int init_sync(rs__pool_t *p)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return -1;
    int bad = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
              pthread_mutex_init(&p->mu, NULL) != 0 ||
              pthread_cond_init(&p->work_cv, NULL) != 0 ||
              pthread_cond_init(&p->done_cv, &ca) != 0;
    pthread_condattr_destroy(&ca);
    return bad ? -1 : 0;
}

rs_status_t rs__pool_create(unsigned workers, const char *who,
                            rs_diag_t *diag, rs__pool_t **pool_p)
{
    rs__pool_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "%s: worker pool", who);
    if (init_sync(p) != 0) {
        free(p); /* a failed init leaves nothing to destroy on Linux */
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "%s: worker pool "
                            "mutex/condition init failed", who);
    }
    p->nthreads = workers > 0 ? workers : 1;
    p->threads = calloc(p->nthreads, sizeof(pthread_t));
    p->running = calloc(p->nthreads, sizeof(atomic_size_t));
    unsigned made = 0;
    while (p->threads != NULL && p->running != NULL && made < p->nthreads &&
           pthread_create(&p->threads[made], NULL, worker_main, p) == 0)
        made++;
    if (made < p->nthreads) {
        stop(p, made);
        free_pool(p);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "%s: could not start "
                            "%u worker threads (started %u)", who, workers,
                            made);
    }
    *pool_p = p;
    return RS_OK;
}

void rs__pool_destroy(rs__pool_t *p)
{
    if (p == NULL)
        return;
    stop(p, p->nthreads);
    free_pool(p);
}

unsigned rs__pool_workers(const rs__pool_t *p) { return p->nthreads; }

void rs__pool_start(rs__pool_t *p, rs__pool_task_fn fn, void *ctx,
                    size_t ntasks)
{
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    p->cancelled = 0;
    atomic_store(&p->next, 0);
    p->active = p->nthreads;
    p->gen++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
}

void rs__pool_join(rs__pool_t *p)
{
    run_tasks(p, NULL);
    (void)rs__pool_join_until(p, NULL, NULL, NULL);
}

size_t rs__pool_cancel(rs__pool_t *p)
{
    pthread_mutex_lock(&p->mu);
    if (!p->cancelled) {
        size_t k = atomic_exchange(&p->next, p->ntasks);
        p->stop_at = k < p->ntasks ? k : p->ntasks;
        p->cancelled = 1;
    }
    size_t stop_at = p->stop_at;
    pthread_mutex_unlock(&p->mu);
    return stop_at;
}

/* The tasks the workers are in now (called with mu held). */
static size_t list_running(rs__pool_t *p, size_t *late)
{
    size_t n = 0;
    for (unsigned i = 0; i < p->nthreads; i++) {
        size_t k = atomic_load(&p->running[i]);
        if (k != 0 && late != NULL)
            late[n] = k - 1;
        n += k != 0;
    }
    return n;
}

rs_status_t rs__pool_join_until(rs__pool_t *p, const struct timespec *until,
                                size_t *late, size_t *nlate_p)
{
    rs_status_t st = RS_OK;
    pthread_mutex_lock(&p->mu);
    while (p->active > 0 && st == RS_OK) {
        if (until == NULL)
            pthread_cond_wait(&p->done_cv, &p->mu);
        else if (pthread_cond_timedwait(&p->done_cv, &p->mu, until) ==
                     ETIMEDOUT && p->active > 0)
            st = RS_ERR_TIMEOUT;
    }
    if (st != RS_OK) {
        size_t n = list_running(p, late);
        if (nlate_p != NULL)
            *nlate_p = n;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}
