/* A pull's deadline and its lease, seen from the receiver: what is left of
 * pull_timeout_s for each wait, a stage's failure once the deadline passed
 * reported as RS_ERR_TIMEOUT naming the stage, and the lease on the version
 * taken before the transfer (lease.c renews it), ended when the version is
 * applied or discarded, and the release that release_after asks for. */
#include <stdio.h>
#include <time.h>

#include "core/clock.h"
#include "core/diag.h"
#include "refit/receiver_impl.h"

/* How long the end of a pull keeps trying to drop its lease through a
 * directory outage (each try also waits up to the client's timeout). */
#define UNLEASE_RETRY_S 15.0

/* What is left of the pull's deadline, capped at `cap` (<= 0: no cap). */
double rs__receiver_budget(const rs_receiver_h r, double cap)
{
    if (r->deadline <= 0)
        return cap;
    double left = r->deadline - rs__now_s();
    left = left > 1e-3 ? left : 1e-3;
    return cap > 0 && cap < left ? cap : left;
}

int rs__receiver_past_deadline(const rs_receiver_h r)
{
    return r->deadline > 0 && rs__now_s() >= r->deadline;
}

/* A stage that failed once the deadline had passed failed because of it:
 * RS_ERR_TIMEOUT naming the stage (the executor names its own). */
rs_status_t rs__receiver_deadline_status(rs_receiver_h r, int64_t version,
                                         rs_status_t st, rs_diag_t *diag)
{
    if (st == RS_OK || st == RS_ERR_CANCELLED ||
        !rs__receiver_past_deadline(r) ||
        (r->stage == NULL && st != RS_ERR_TIMEOUT))
        return st;
    char subject[192];
    if (version >= 0)
        snprintf(subject, sizeof(subject), "version %lld of '%s'",
                 (long long)version, r->model);
    else
        snprintf(subject, sizeof(subject), "the newest READY version of "
                 "'%s'", r->model);
    if (r->stage == NULL) { /* the failure's own status, whatever diag holds */
        (void)rs__diag_prefix(diag, "pull of %s (timeout %g s): ", subject,
                              r->params.pull_timeout_s);
        return st;
    }
    char cause[RS_DIAG_MSG_MAX];
    snprintf(cause, sizeof(cause), "%s", diag != NULL && diag->msg[0]
                                             ? diag->msg : rs_status_str(st));
    return rs__diag_set(diag, RS_ERR_TIMEOUT, "pull of %s (timeout %g s): "
                        "deadline passed in the %s stage: %s", subject,
                        r->params.pull_timeout_s, r->stage, cause);
}

/* Moves on to `stage`, unless the deadline passed already. */
rs_status_t rs__receiver_enter(rs_receiver_h r, const char *stage,
                               int64_t version, rs_diag_t *diag)
{
    if (rs__receiver_past_deadline(r))
        return rs__receiver_deadline_status(
            r, version, rs__diag_set(diag, RS_ERR_TIMEOUT, "the %s stage did "
                                     "not start", stage), diag);
    r->stage = stage;
    return RS_OK;
}

rs_status_t rs__receiver_start_lease(rs_receiver_h r, int64_t version,
                                     rs_diag_t *diag)
{
    rs_status_t st = RS_OK;
    if (r->lease_dir == NULL)
        /* renewals: no wait */
        st = rs__receiver_open_dir(r, NULL, diag, &r->lease_dir);
    if (st == RS_OK)
        st = rs__lease_start(&r->lease, r->dir, r->lease_dir, r->model,
                             version, r->holder, r->params.lease_ttl_s,
                             r->params.lease_renew_s, diag);
    return st;
}

/* After a failed transfer: the directory ended the pull's lease meanwhile
 * (the version released or abandoned under it, the lease lapsed or taken
 * again), so the publishers may
 * have refilled or unregistered their buffers mid-read; reads that failed
 * or digests that mismatched then are consequences, and the lease is what
 * to report. One renewal asks the directory (a directory that does not
 * answer keeps the transfer's failure). */
rs_status_t rs__receiver_lease_cause(rs_receiver_h r, int64_t version,
                                     rs_status_t st, rs_diag_t *diag)
{
    rs__lease_t *l = &r->lease;
    char why[RS_DIAG_MSG_MAX], seen[RS_DIAG_MSG_MAX];
    if ((st != RS_ERR_TRANSPORT && st != RS_ERR_TIMEOUT &&
         st != RS_ERR_VERIFY) || !l->taken)
        return st;
    pthread_mutex_lock(&l->lock);
    int lost = l->lost;
    snprintf(why, sizeof(why), "%s", l->why);
    pthread_mutex_unlock(&l->lock);
    if (!lost) {
        rs_diag_t d;
        rs_diag_clear(&d);
        rs_status_t ls = rs_dir_lease_renew(r->dir, r->model, version,
                                            r->holder, l->epoch, l->ttl_s,
                                            &d);
        lost = ls == RS_ERR_INCOMPLETE ||
               (ls == RS_ERR_INPUT && !rs_dir_transient(r->dir));
        snprintf(why, sizeof(why), "%s", d.msg);
    }
    if (!lost)
        return st;
    snprintf(seen, sizeof(seen), "%s", diag != NULL && diag->msg[0]
                                           ? diag->msg : rs_status_str(st));
    return rs__diag_set(diag, RS_ERR_VERIFY, "version %lld of '%s': lease "
                        "'%s' (epoch %llu) lost mid-pull (%s), so the "
                        "publishers may have refilled or dropped their "
                        "buffers while they were read; nothing installed; "
                        "what the reads saw then: %s", (long long)version,
                        r->model, r->holder, (unsigned long long)l->epoch,
                        why, seen);
}

/* Drops the pull's lease, riding out a short directory outage: a lease
 * left behind would make this receiver's own release_after refuse, and
 * block every other rank's release until its ttl ran out. Never longer
 * than the ttl: by then the lease has ended by itself. */
static void unlease_now(rs_receiver_h r, int64_t version)
{
    double retry = r->params.lease_ttl_s > 0 &&
                           r->params.lease_ttl_s < UNLEASE_RETRY_S
                       ? r->params.lease_ttl_s : UNLEASE_RETRY_S;
    double wait = 0.05, until = rs__now_s() + retry;
    while (rs_dir_unlease(r->dir, r->model, version, r->holder, NULL) !=
               RS_OK &&
           rs_dir_transient(r->dir) && rs__now_s() + wait < until) {
        struct timespec ts = {(time_t)wait,
                              (long)((wait - (double)(time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
        wait = wait * 2 < 1 ? wait * 2 : 1;
    }
}

/* Stops the renewals, keeps their figures, drops the lease. */
void rs__receiver_end_lease(rs_receiver_h r, int64_t version,
                            rs_pull_result_t *res)
{
    rs__lease_stop(&r->lease);
    res->lease_epoch = r->lease.epoch;
    res->lease_renewals = r->lease.renewals;
    res->lease_renew_errors = r->lease.errors;
    unlease_now(r, version);
}

/* release_after: a refused release (another receiver's live lease) or a
 * failed one is kept in the result, not dropped. */
void rs__receiver_release(rs_receiver_h r, int64_t version,
                          rs_pull_result_t *res)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    res->release_status = rs_dir_release_as(r->dir, r->model, version,
                                            r->holder, &d);
    snprintf(res->release_msg, sizeof(res->release_msg), "%s",
             res->release_status == RS_OK ? "" : d.msg);
}
