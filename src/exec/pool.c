/* A fixed set of threads sleeping on a condition variable between jobs. A
 * job is a task count and a function; threads take task numbers from one
 * atomic counter, so tasks of uneven sizes balance themselves. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/diag.h"
#include "exec/pool.h"

struct rs__pool {
    pthread_t *threads;
    unsigned nthreads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* a new job, or quit */
    pthread_cond_t done_cv; /* active dropped to zero */
    unsigned long gen;      /* jobs started */
    unsigned active;        /* workers still in the current job */
    int quit;

    rs__pool_task_fn fn;
    void *ctx;
    size_t ntasks;
    atomic_size_t next;
};

static void run_tasks(rs__pool_t *p)
{
    for (;;) {
        size_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->ntasks)
            return;
        p->fn(p->ctx, k);
    }
}

static void *worker_main(void *arg)
{
    rs__pool_t *p = arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->quit)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->quit)
            break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p);
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
    free(p->threads);
    free(p);
}

rs_status_t rs__pool_create(unsigned workers, rs_diag_t *diag,
                            rs__pool_t **pool_p)
{
    rs__pool_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exec: worker pool");
    if (pthread_mutex_init(&p->mu, NULL) != 0 ||
        pthread_cond_init(&p->work_cv, NULL) != 0 ||
        pthread_cond_init(&p->done_cv, NULL) != 0) {
        free(p); /* a failed init leaves nothing to destroy on Linux */
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exec: worker pool "
                            "mutex/condition init failed");
    }
    p->nthreads = workers > 0 ? workers : 1;
    p->threads = calloc(p->nthreads, sizeof(pthread_t));
    unsigned made = 0;
    while (p->threads != NULL && made < p->nthreads &&
           pthread_create(&p->threads[made], NULL, worker_main, p) == 0)
        made++;
    if (made < p->nthreads) {
        if (p->threads != NULL)
            stop(p, made);
        free_pool(p);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exec: could not start "
                            "%u worker threads (started %u)", workers, made);
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
    atomic_store(&p->next, 0);
    p->active = p->nthreads;
    p->gen++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
}

void rs__pool_join(rs__pool_t *p)
{
    run_tasks(p);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
