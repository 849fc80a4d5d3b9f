/* The terminal ticker of `reshard pull`: the pull blocks in one library
 * call, so a thread of its own rewrites one line on stderr every 250 ms
 * once a second has passed: the wire's bytes and rate once the executor
 * reports progress, else how long the pull has taken. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

struct rs_cli_ticker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    int done, shown;
    int64_t rank, version;
    double t0;
    int have_progress;     /* the wire stage has reported at least once */
    rs_progress_t progress;
};

/* The ticker of the pull in flight, fed by the executor's progress
 * callback (which runs on the pulling thread). */
static rs_cli_ticker_t *active_ticker;

void rs_cli_ticker_progress(void *ctx, const rs_progress_t *p)
{
    (void)ctx;
    rs_cli_ticker_t *t = active_ticker;
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    t->progress = *p;
    t->have_progress = 1;
    pthread_mutex_unlock(&t->lock);
}

static void *tick_main(void *arg)
{
    rs_cli_ticker_t *t = arg;
    pthread_mutex_lock(&t->lock);
    while (!t->done) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 250000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&t->done_cv, &t->lock, &until);
        double el = rs_clock_seconds() - t->t0;
        if (!t->done && el >= 1.0 && t->have_progress) {
            const rs_progress_t *p = &t->progress;
            char done[RS_UNITS_TEXT_MAX], total[RS_UNITS_TEXT_MAX];
            char rate[RS_UNITS_TEXT_MAX];
            fprintf(stderr, "\rreshard pull: rank %lld version %lld: %s of "
                    "%s, %s, %zu sessions outstanding   ",
                    (long long)t->rank, (long long)t->version,
                    rs_format_bytes(done, sizeof(done), p->bytes_done),
                    rs_format_bytes(total, sizeof(total), p->bytes_total),
                    rs_format_rate(rate, sizeof(rate),
                                   p->elapsed_s > 0 ? (double)p->bytes_done /
                                                          p->elapsed_s
                                                    : 0.0),
                    p->sessions_outstanding);
            t->shown = 1;
        } else if (!t->done && el >= 1.0) {
            fprintf(stderr, "\rreshard pull: rank %lld version %lld: %.1f s "
                    "(discovering, planning, connecting)   ",
                    (long long)t->rank, (long long)t->version, el);
            t->shown = 1;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

rs_cli_ticker_t *rs_cli_ticker_start(int64_t rank, int64_t version)
{
    if (!isatty(STDOUT_FILENO))
        return NULL;
    rs_cli_ticker_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->done_cv, NULL);
    t->rank = rank;
    t->version = version;
    t->t0 = rs_clock_seconds();
    if (pthread_create(&t->thread, NULL, tick_main, t) != 0) {
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->done_cv);
        free(t);
        return NULL;
    }
    active_ticker = t;
    return t;
}

int rs_cli_ticker_stop(rs_cli_ticker_t *t)
{
    if (t == NULL)
        return 0;
    pthread_mutex_lock(&t->lock);
    active_ticker = NULL;
    t->done = 1;
    pthread_cond_signal(&t->done_cv);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->done_cv);
    int shown = t->shown;
    free(t);
    return shown;
}
