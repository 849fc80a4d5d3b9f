/* Bounded waits on the directory: for a READY version whose publishers are
 * all alive (no stale slot is ever counted towards a complete version; the
 * newest-version wait skips stale versions) and for a RELEASED one.
 * Backends only answer lookups; polling, deadlines, riding out directory
 * outages (transient errors retried with backoff until the deadline, one
 * notice when an outage begins and one when it ends), a raised cancel
 * flag (rs_dir_params_t.cancel, looked at between two looks) and the
 * "which slots are missing or stale" messages live here. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/diag.h"
#include "dir/dir_impl.h"

#define NAP_FIRST_S 0.005
#define NAP_MAX_S 0.05
#define OUTAGE_NAP_FIRST_S 0.05 /* retries of an unreachable directory */
#define OUTAGE_NAP_MAX_S 1.0
#define WHY_SLOTS_MAX 16 /* slots named in a message before "and N more" */

typedef struct why {
    char buf[RS_DIAG_MSG_MAX];
    size_t len;
} why_t;

static void why_add(why_t *w, const char *fmt, ...) RS_PRINTF(2, 3);
static void why_add(why_t *w, const char *fmt, ...)
{
    if (w->len >= sizeof(w->buf) - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->buf + w->len, sizeof(w->buf) - w->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        w->len += (size_t)n < sizeof(w->buf) - w->len
                      ? (size_t)n
                      : sizeof(w->buf) - w->len - 1;
}

/* Sleeps s seconds, in slices short enough that a raised cancel flag
 * ends the sleep within half a poll period. */
static void nap(const rs_cancel_t *cancel, double s)
{
    while (s > 0 && !rs_cancel_raised(cancel)) {
        double slice = fmin(s, RS_CANCEL_POLL_S / 2);
        rs__sleep_s(slice);
        s -= slice;
    }
}

/* Names the bad slots of one kind ("missing" or "stale") in w. */
static void explain_slots(why_t *w, const char *kind, const uint8_t *bad,
                          const double *age, int64_t n, size_t nbad)
{
    size_t named = 0;
    why_add(w, "; %s slot%s: ", kind, nbad == 1 ? "" : "s");
    for (int64_t i = 0; i < n && named < WHY_SLOTS_MAX; i++) {
        if (!bad[i])
            continue;
        why_add(w, "%s%lld", named > 0 ? ", " : "", (long long)i);
        if (age != NULL && age[i] >= 0)
            why_add(w, " (last heartbeat %.2f s ago)", age[i]);
        else if (age != NULL)
            why_add(w, " (no heartbeat)");
        named++;
    }
    if (nbad > named)
        why_add(w, " and %zu more", nbad - named);
}

/* Counts the slots of `info` that are missing (stale_s <= 0) or stale
 * (stale_s > 0: no heartbeat younger than stale_s), naming them in w when
 * `explain` is set. */
static rs_status_t bad_slots(rs_dir_h dir, const rs__dir_request_t *req,
                             const rs_version_info_t *info, double stale_s,
                             int explain, why_t *w, rs_diag_t *diag,
                             size_t *nbad_p)
{
    int64_t n = info->slots;
    rs__dir_request_t sr = *req;
    sr.version = info->version;
    sr.info = *info;
    sr.present = calloc((size_t)n, sizeof(*sr.present));
    sr.age = calloc((size_t)n, sizeof(*sr.age));
    uint8_t *bad = calloc((size_t)n, 1);
    rs_status_t st = RS_OK;
    if (sr.present == NULL || sr.age == NULL || bad == NULL)
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of memory");
    if (st == RS_OK)
        st = rs__dir_call(dir, dir->ops->slot_status, &sr, diag);
    size_t nbad = 0;
    for (int64_t i = 0; st == RS_OK && i < n; i++) {
        if (stale_s > 0)
            bad[i] = !sr.present[i] || sr.age[i] < 0 || sr.age[i] >= stale_s;
        else
            bad[i] = !sr.present[i];
        nbad += bad[i];
    }
    if (st == RS_OK && explain && nbad > 0)
        explain_slots(w, stale_s > 0 ? "stale" : "missing", bad,
                      stale_s > 0 ? sr.age : NULL, n, nbad);
    if (st == RS_OK)
        *nbad_p = nbad;
    free(bad);
    free(sr.age);
    free(sr.present);
    return st;
}

/* A specific version: not READY yet (with why), released (error), or
 * READY (info set). */
static rs_status_t probe_version(rs_dir_h dir, rs__dir_request_t *req, int explain,
                                 why_t *w, rs_diag_t *diag,
                                 rs_version_info_t *info)
{
    rs_status_t st = rs__dir_call(dir, dir->ops->lookup, req, diag);
    if (st != RS_OK)
        return st;
    *info = req->info;
    if (info->state == RS_VERSION_RELEASED) {
        char by[RS_DIR_NAME_MAX + 32];
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s' "
                            "was released%s", (long long)req->version,
                            req->model, rs__dir_by_text(req, by, sizeof(by)));
    }
    if (info->state == 0 && explain)
        why_add(w, "model '%s' has no version %lld", req->model,
                (long long)req->version);
    if (info->state != RS_VERSION_PENDING || !explain)
        return RS_OK;
    why_add(w, "version %lld of '%s' is PENDING with %lld of %lld slots "
            "published", (long long)req->version, req->model,
            (long long)info->published, (long long)info->slots);
    size_t nbad;
    return bad_slots(dir, req, info, 0, 1, w, diag, &nbad);
}

/* Explains why READY version `info` does not count: stale slots. */
static rs_status_t explain_stale(rs_dir_h dir, const rs__dir_request_t *req,
                                 const rs_version_info_t *info, double stale_s,
                                 int newest, why_t *w, rs_diag_t *diag)
{
    size_t nbad = 0;
    why_add(w, "%sversion %lld of '%s' is READY but not every publisher sent "
            "a heartbeat in the last %g s", newest ? "newest READY " : "",
            (long long)info->version, req->model, stale_s);
    return bad_slots(dir, req, info, stale_s, 1, w, diag, &nbad);
}

/* The newest READY version whose slots are all alive (stale_s > 0), or
 * simply the newest READY one; state 0 in *out when there is none. */
static rs_status_t newest_live(rs_dir_h dir, const rs__dir_request_t *req,
                               double stale_s, int explain, why_t *w,
                               rs_diag_t *diag, rs_version_info_t *out)
{
    rs__dir_request_t lr = *req;
    rs_status_t st = rs__dir_call(dir, dir->ops->list, &lr, diag);
    if (st != RS_OK)
        return st;
    const rs_version_info_t *newest_stale = NULL;
    memset(out, 0, sizeof(*out));
    for (size_t i = lr.count; st == RS_OK && i-- > 0;) {
        if (lr.infos[i].state != RS_VERSION_READY)
            continue;
        size_t nbad = 0;
        if (stale_s > 0)
            st = bad_slots(dir, req, &lr.infos[i], stale_s, 0, w, diag, &nbad);
        if (st == RS_OK && nbad == 0) {
            *out = lr.infos[i];
            break;
        }
        if (newest_stale == NULL)
            newest_stale = &lr.infos[i];
    }
    if (st == RS_OK && out->state == 0 && explain && newest_stale == NULL)
        why_add(w, "model '%s' has no READY version", req->model);
    else if (st == RS_OK && out->state == 0 && explain)
        st = explain_stale(dir, req, newest_stale, stale_s, 1, w, diag);
    free(lr.infos);
    return st;
}

/* One look: *ready_p says whether the wait is over (info_p then set). */
static rs_status_t probe(rs_dir_h dir, rs__dir_request_t *req, double stale_s,
                         int explain, why_t *w, rs_diag_t *diag,
                         int *ready_p, rs_version_info_t *info_p)
{
    rs_version_info_t info;
    rs_status_t st;
    *ready_p = 0;
    if (req->version < 0)
        st = newest_live(dir, req, stale_s, explain, w, diag, &info);
    else
        st = probe_version(dir, req, explain, w, diag, &info);
    if (st != RS_OK || info.state != RS_VERSION_READY)
        return st;
    if (stale_s > 0 && req->version >= 0) {
        size_t nbad = 0;
        st = bad_slots(dir, req, &info, stale_s, 0, w, diag, &nbad);
        if (st == RS_OK && nbad > 0 && explain)
            st = explain_stale(dir, req, &info, stale_s, 0, w, diag);
        if (st != RS_OK || nbad > 0)
            return st;
    }
    *ready_p = 1;
    *info_p = info;
    return RS_OK;
}

/* A wait's deadline and the directory outage it may be riding out. */
typedef struct waiter {
    rs_dir_h dir;
    const char *what;     /* "version 3 of 'm'", for notices */
    double timeout_s, deadline, delay;
    double down_since;    /* < 0: the directory answers */
    double look_start;    /* when the latest look began */
    double start;
    int looked;           /* a first look was made (it is never cancelled) */
} waiter_t;

static void waiter_init(waiter_t *wt, rs_dir_h dir, const char *what,
                        double timeout_s)
{
    memset(wt, 0, sizeof(*wt));
    wt->dir = dir;
    wt->what = what;
    wt->timeout_s = timeout_s;
    wt->start = rs__now_s();
    wt->deadline = wt->start + timeout_s;
    wt->delay = NAP_FIRST_S;
    wt->down_since = -1;
}

/* After a failed look: 1 when the failure is transient and time is left
 * (the wait naps and goes on), 0 to return it. */
static int outage_retry(waiter_t *wt, const rs_diag_t *diag)
{
    double now = rs__now_s();
    if (!rs_dir_transient(wt->dir))
        return 0;
    int first = wt->down_since < 0;
    /* the outage counts from the start of the first look that failed: a
     * server that hangs rather than refuses holds that look for the
     * client's timeout */
    if (first)
        wt->down_since = wt->look_start;
    if (now >= wt->deadline)
        return 0;
    if (first) {
        wt->delay = OUTAGE_NAP_FIRST_S;
        rs_dir_notice(wt->dir, "directory %s unreachable while waiting for "
                      "%s: %s; retrying for up to %.1f s more",
                      rs_dir_name(wt->dir), wt->what,
                      diag != NULL ? diag->msg : "", wt->deadline - now);
    }
    nap(wt->dir->cancel, fmin(wt->delay, wt->deadline - now));
    wt->delay = fmin(wt->delay * 2, OUTAGE_NAP_MAX_S);
    return 1;
}

/* A look succeeded: an outage in progress is over. */
static void outage_over(waiter_t *wt)
{
    if (wt->down_since < 0)
        return;
    rs_dir_notice(wt->dir, "directory %s reachable again after %.1f s "
                  "(waiting for %s)", rs_dir_name(wt->dir),
                  rs__now_s() - wt->down_since, wt->what);
    wt->down_since = -1;
    wt->delay = NAP_FIRST_S;
}

/* The failure a wait returns: a transient one at the deadline becomes a
 * timeout naming the outage. */
static rs_status_t wait_failed(const waiter_t *wt, rs_status_t st,
                               rs_diag_t *diag)
{
    if (!rs_dir_transient(wt->dir))
        return st;
    char cause[RS_DIAG_MSG_MAX];
    snprintf(cause, sizeof(cause), "%s", diag != NULL ? diag->msg : "");
    double down = wt->down_since >= 0 ? rs__now_s() - wt->down_since : 0;
    return rs__diag_set(diag, RS_ERR_TIMEOUT, "timed out after %g s waiting "
                        "for %s: directory %s unreachable for the last %.1f "
                        "s (%s)", wt->timeout_s, wt->what,
                        rs_dir_name(wt->dir), down, cause);
}

static void wait_nap(waiter_t *wt)
{
    nap(wt->dir->cancel, fmin(wt->delay, wt->deadline - rs__now_s()));
    wt->delay = fmin(wt->delay * 2, NAP_MAX_S);
}

/* Before each look but the first: 1 when the caller raised the handle's
 * cancel flag (the wait then returns waiter_cancelled). */
static int waiter_stop(waiter_t *wt)
{
    int stop = wt->looked && rs_cancel_raised(wt->dir->cancel);
    wt->looked = 1;
    return stop;
}

static rs_status_t waiter_cancelled(const waiter_t *wt, rs_diag_t *diag)
{
    return rs__diag_set(diag, RS_ERR_CANCELLED, "cancelled while waiting "
                        "for %s (after %.2f s)", wt->what,
                        rs__now_s() - wt->start);
}

static rs_status_t check_timeout(const char *what, double timeout_s,
                                 rs_diag_t *diag)
{
    if (!isfinite(timeout_s) || timeout_s < 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s: timeout %g s (expected "
                            "a finite value >= 0)", what, timeout_s);
    return RS_OK;
}

/* One look of a wait at the directory: a failed look returns its status
 * with *done_p clear (an outage is ridden out); an answered one sets
 * *done_p when the wait is over, with the status it returns. `last`: the
 * deadline has passed, so a look not over says why in a timeout. */
typedef rs_status_t (*look_fn)(void *ctx, int last, rs_diag_t *diag,
                               int *done_p);

/* Looks until a look is over, riding out outages, napping between looks
 * and stopping at a raised cancel flag. */
static rs_status_t wait_until(waiter_t *wt, look_fn look, void *ctx,
                              rs_diag_t *diag)
{
    for (;;) {
        if (waiter_stop(wt))
            return waiter_cancelled(wt, diag);
        wt->look_start = rs__now_s();
        int last = wt->look_start >= wt->deadline, done = 0;
        rs_status_t st = look(ctx, last, diag, &done);
        if (!done && st != RS_OK && outage_retry(wt, diag))
            continue;
        if (!done && st != RS_OK)
            return wait_failed(wt, st, diag);
        outage_over(wt);
        if (done)
            return st;
        wait_nap(wt);
    }
}

/* What the two waits look at. */
typedef struct wait_for {
    rs_dir_h dir;
    rs__dir_request_t req;
    double timeout_s, stale_s;
    rs_version_info_t *info_p;
} wait_for_t;

static rs_status_t look_ready(void *ctx, int last, rs_diag_t *diag,
                              int *done_p)
{
    wait_for_t *f = ctx;
    why_t w = {.len = 0};
    rs_version_info_t info;
    int ready;
    rs_status_t st = probe(f->dir, &f->req, f->stale_s, last, &w, diag,
                           &ready, &info);
    if (st != RS_OK)
        return st;
    *done_p = ready || last;
    if (ready)
        *f->info_p = info;
    else if (last)
        return rs__diag_set(diag, RS_ERR_TIMEOUT, "%s (after waiting %.2f "
                            "s)", w.buf, f->timeout_s);
    return RS_OK;
}

rs_status_t rs_dir_wait_ready(rs_dir_h dir, const char *model,
                              int64_t version, double timeout_s,
                              double stale_s, rs_diag_t *diag,
                              rs_version_info_t *info_p)
{
    wait_for_t f = {.dir = dir, .timeout_s = timeout_s, .stale_s = stale_s,
                    .info_p = info_p};
    rs_status_t st = rs__dir_start(dir, model, version < 0 ? 0 : version,
                                   diag, &f.req);
    if (st == RS_OK)
        st = check_timeout("rs_dir_wait_ready", timeout_s, diag);
    if (st != RS_OK)
        return st;
    if (info_p == NULL || isnan(stale_s))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dir_wait_ready: "
                            "NULL output or NaN stale_s");
    f.req.version = version < 0 ? -1 : version;
    char what[RS_DIR_NAME_MAX + 64];
    if (version < 0)
        snprintf(what, sizeof(what), "the newest READY version of '%s'",
                 model);
    else
        snprintf(what, sizeof(what), "version %lld of '%s'",
                 (long long)version, model);
    waiter_t wt;
    waiter_init(&wt, dir, what, timeout_s);
    return wait_until(&wt, look_ready, &f, diag);
}

static rs_status_t look_released(void *ctx, int last, rs_diag_t *diag,
                                 int *done_p)
{
    wait_for_t *f = ctx;
    rs_status_t st = rs__dir_call(f->dir, f->dir->ops->lookup, &f->req, diag);
    if (st != RS_OK)
        return st;
    rs_version_state_t state = f->req.info.state;
    *done_p = state == 0 || state == RS_VERSION_RELEASED || last;
    if (state == 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "model '%s' has no "
                            "version %lld", f->req.model,
                            (long long)f->req.version);
    if (state != RS_VERSION_RELEASED && last)
        return rs__diag_set(diag, RS_ERR_TIMEOUT, "version %lld of '%s' "
                            "is still %s after waiting %.2f s",
                            (long long)f->req.version, f->req.model,
                            rs__dir_state_name(state), f->timeout_s);
    return RS_OK;
}

rs_status_t rs_dir_wait_released(rs_dir_h dir, const char *model,
                                 int64_t version, double timeout_s,
                                 rs_diag_t *diag)
{
    wait_for_t f = {.dir = dir, .timeout_s = timeout_s};
    rs_status_t st = rs__dir_start(dir, model, version, diag, &f.req);
    if (st == RS_OK)
        st = check_timeout("rs_dir_wait_released", timeout_s, diag);
    if (st != RS_OK)
        return st;
    char what[RS_DIR_NAME_MAX + 64];
    snprintf(what, sizeof(what), "the release of version %lld of '%s'",
             (long long)version, model);
    waiter_t wt;
    waiter_init(&wt, dir, what, timeout_s);
    return wait_until(&wt, look_released, &f, diag);
}
