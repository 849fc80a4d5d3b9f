/* The receiver's lease for one pull: taken with a fresh epoch, renewed by a
 * thread of its own for as long as the pull reads (the pulling thread may sit
 * in a transport wait for a long time), and proven continuous before install.
 * Renewal uses its own directory connection: a redis handle serves one
 * thread at a time. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/diag.h"
#include "refit/refit_impl.h"

/* Renewing three times per ttl leaves two renewals' worth of slack. */
#define RENEWALS_PER_TTL 3.0
/* After an error that says nothing about the lease (directory unreachable),
 * the next attempt comes sooner, but not in a busy loop. */
#define RETRY_FRACTION 0.1
#define RETRY_MIN_S 0.05

/* One renewal, outside the lock; records its outcome under it. Returns the
 * delay until the next one, or < 0 when the lease is lost. */
static double renew_once(rs__lease_t *l)
{
    rs_diag_t diag;
    rs_diag_clear(&diag);
    rs_status_t st = rs_dir_lease_renew(l->dir, l->model, l->version,
                                        l->holder, l->epoch, l->ttl_s, &diag);
    double retry = l->ttl_s * RETRY_FRACTION;
    pthread_mutex_lock(&l->lock);
    if (st == RS_OK) {
        l->renewals++;
    } else if (st == RS_ERR_INCOMPLETE || st == RS_ERR_INPUT) {
        /* the directory says the lease is over: continuity is broken */
        l->lost = 1;
        snprintf(l->why, sizeof(l->why), "%s", diag.msg);
    } else {
        l->errors++;
        snprintf(l->last_error, sizeof(l->last_error), "%s",
                 diag.msg[0] ? diag.msg : rs_status_str(st));
    }
    int lost = l->lost;
    pthread_mutex_unlock(&l->lock);
    if (lost)
        return -1;
    if (st == RS_OK)
        return l->period_s;
    return retry > RETRY_MIN_S ? (retry < l->period_s ? retry : l->period_s)
                               : RETRY_MIN_S;
}

static void *renew_main(void *arg)
{
    rs__lease_t *l = arg;
    double delay = l->period_s;
    pthread_mutex_lock(&l->lock);
    while (!l->stop && delay >= 0) {
        struct timespec until = rs__mono_after(delay);
        while (!l->stop &&
               pthread_cond_timedwait(&l->wake, &l->lock, &until) == 0)
            ; /* woken without a stop: keep waiting for the deadline */
        if (l->stop)
            break;
        pthread_mutex_unlock(&l->lock);
        delay = renew_once(l);
        pthread_mutex_lock(&l->lock);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

rs_status_t rs__lease_start(rs__lease_t *l, rs_dir_h dir, rs_dir_h renew_dir,
                            const char *model, int64_t version,
                            const char *holder, double ttl_s,
                            double period_s, rs_diag_t *diag)
{
    uint64_t epoch = 0;
    memset(l, 0, sizeof(*l));
    rs_status_t st = rs_dir_lease_take(dir, model, version, holder, ttl_s,
                                       diag, &epoch);
    if (st != RS_OK)
        return st;
    l->dir = renew_dir;
    l->model = model;
    l->holder = holder;
    l->version = version;
    l->epoch = epoch;
    l->ttl_s = ttl_s;
    l->period_s = period_s > 0 ? period_s : ttl_s / RENEWALS_PER_TTL;
    l->taken = 1;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&l->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&l->lock, NULL);
    l->running = pthread_create(&l->thread, NULL, renew_main, l) == 0;
    if (!l->running) {
        rs__lease_stop(l);
        rs_dir_unlease(dir, model, version, holder, NULL);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "version %lld of '%s': "
                            "cannot start the lease renewal thread",
                            (long long)version, model);
    }
    return RS_OK;
}

/* The last renewal, riding out a directory outage for up to patience_s
 * (never past the ttl: a lease not renewed for that long has lapsed, and
 * the renewal would say so). Only an answer from the directory proves
 * anything; until one comes, nothing is installed. */
static rs_status_t final_renewal(rs__lease_t *l, rs_dir_h dir,
                                 double patience_s, rs_diag_t *d)
{
    double wait = RETRY_MIN_S, until = rs__now_s() +
                  (patience_s < l->ttl_s ? patience_s : l->ttl_s);
    for (;;) {
        rs_status_t st = rs_dir_lease_renew(dir, l->model, l->version,
                                            l->holder, l->epoch, l->ttl_s, d);
        if (st == RS_OK || !rs_dir_transient(dir) ||
            rs__now_s() + wait >= until)
            return st;
        struct timespec ts = rs__mono_after(wait);
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        wait = wait * 2 < 1 ? wait * 2 : 1;
    }
}

rs_status_t rs__lease_confirm(rs__lease_t *l, rs_dir_h dir, double patience_s,
                              rs_diag_t *diag)
{
    char why[RS_DIAG_MSG_MAX];
    rs_diag_t d;
    if (!l->taken) /* the executor run outside rs_receiver_pull */
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: no pull in "
                            "flight holds a lease, nothing may be installed");
    rs_diag_clear(&d);
    pthread_mutex_lock(&l->lock);
    int lost = l->lost;
    snprintf(why, sizeof(why), "%s", l->why);
    pthread_mutex_unlock(&l->lock);
    rs_status_t st = lost ? RS_ERR_INCOMPLETE : final_renewal(l, dir,
                                                              patience_s, &d);
    if (st == RS_OK)
        return RS_OK;
    if (!lost)
        snprintf(why, sizeof(why), "%s", d.msg[0] ? d.msg : rs_status_str(st));
    pthread_mutex_lock(&l->lock);
    unsigned long long errors = l->errors;
    pthread_mutex_unlock(&l->lock);
    return rs__diag_set(diag, RS_ERR_VERIFY, "version %lld of '%s': refusing "
                        "to install: lease '%s' (epoch %llu) was not held "
                        "throughout the pull, so the publishers may have "
                        "refilled their buffers mid-read (%s; %llu renewal "
                        "error%s)", (long long)l->version, l->model,
                        l->holder, (unsigned long long)l->epoch, why, errors,
                        errors == 1 ? "" : "s");
}

void rs__lease_stop(rs__lease_t *l)
{
    if (!l->taken)
        return;
    if (l->running) {
        pthread_mutex_lock(&l->lock);
        l->stop = 1;
        pthread_cond_signal(&l->wake);
        pthread_mutex_unlock(&l->lock);
        pthread_join(l->thread, NULL);
        l->running = 0;
    }
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->wake);
    l->taken = 0;
}
