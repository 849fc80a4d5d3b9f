/* Bounded waits on the directory: for a READY version whose publishers are
 * all alive (no stale slot is ever counted towards a complete version) and
 * for a RELEASED one. Backends only answer lookups; polling, deadlines and
 * the "which slots are missing or stale" messages live here. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/diag.h"
#include "dir/dir_impl.h"

#define NAP_FIRST_S 0.005
#define NAP_MAX_S 0.05
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

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap(double s)
{
    if (s <= 0)
        return;
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

static rs_status_t newest_ready(rs_dir_h dir, const rs_dir_req_t *req,
                                rs_diag_t *diag, rs_version_info_t *out)
{
    rs_dir_req_t lr = *req;
    rs_status_t st = dir->ops->list(dir, &lr, diag);
    if (st != RS_OK)
        return st;
    memset(out, 0, sizeof(*out));
    for (size_t i = lr.count; i-- > 0;) {
        if (lr.infos[i].state == RS_VERSION_READY) {
            *out = lr.infos[i];
            break;
        }
    }
    free(lr.infos);
    return RS_OK;
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
static rs_status_t bad_slots(rs_dir_h dir, const rs_dir_req_t *req,
                             const rs_version_info_t *info, double stale_s,
                             int explain, why_t *w, rs_diag_t *diag,
                             size_t *nbad_p)
{
    int64_t n = info->slots;
    rs_dir_req_t sr = *req;
    sr.version = info->version;
    sr.info = *info;
    sr.present = calloc((size_t)n, sizeof(*sr.present));
    sr.age = calloc((size_t)n, sizeof(*sr.age));
    uint8_t *bad = calloc((size_t)n, 1);
    rs_status_t st = RS_OK;
    if (sr.present == NULL || sr.age == NULL || bad == NULL)
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of memory");
    if (st == RS_OK)
        st = dir->ops->slot_status(dir, &sr, diag);
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
static rs_status_t probe_version(rs_dir_h dir, rs_dir_req_t *req, int explain,
                                 why_t *w, rs_diag_t *diag,
                                 rs_version_info_t *info)
{
    rs_status_t st = dir->ops->lookup(dir, req, diag);
    if (st != RS_OK)
        return st;
    *info = req->info;
    if (info->state == RS_VERSION_RELEASED)
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s' "
                            "was released", (long long)req->version,
                            req->model);
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

/* One look: *ready_p says whether the wait is over (info_p then set). */
static rs_status_t probe(rs_dir_h dir, rs_dir_req_t *req, double stale_s,
                         int explain, why_t *w, rs_diag_t *diag,
                         int *ready_p, rs_version_info_t *info_p)
{
    rs_version_info_t info;
    rs_status_t st;
    *ready_p = 0;
    if (req->version < 0) {
        st = newest_ready(dir, req, diag, &info);
        if (st == RS_OK && info.state == 0 && explain)
            why_add(w, "model '%s' has no READY version", req->model);
    } else {
        st = probe_version(dir, req, explain, w, diag, &info);
    }
    if (st != RS_OK || info.state != RS_VERSION_READY)
        return st;
    if (stale_s > 0) {
        size_t nbad = 0;
        if (explain)
            why_add(w, "%sversion %lld of '%s' is READY but not every "
                    "publisher sent a heartbeat in the last %g s",
                    req->version < 0 ? "newest READY " : "",
                    (long long)info.version, req->model, stale_s);
        st = bad_slots(dir, req, &info, stale_s, explain, w, diag, &nbad);
        if (st != RS_OK || nbad > 0)
            return st;
    }
    *ready_p = 1;
    *info_p = info;
    return RS_OK;
}

static rs_status_t check_timeout(const char *what, double timeout_s,
                                 rs_diag_t *diag)
{
    if (!isfinite(timeout_s) || timeout_s < 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s: timeout %g s (expected "
                            "a finite value >= 0)", what, timeout_s);
    return RS_OK;
}

rs_status_t rs_dir_wait_ready(rs_dir_h dir, const char *model,
                              int64_t version, double timeout_s,
                              double stale_s, rs_diag_t *diag,
                              rs_version_info_t *info_p)
{
    rs_dir_req_t req;
    rs_status_t st = rs__dir_start(dir, model, version < 0 ? 0 : version,
                                   diag, &req);
    if (st == RS_OK)
        st = check_timeout("rs_dir_wait_ready", timeout_s, diag);
    if (st != RS_OK)
        return st;
    if (info_p == NULL || isnan(stale_s))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dir_wait_ready: "
                            "NULL output or NaN stale_s");
    req.version = version < 0 ? -1 : version;
    double deadline = mono_now() + timeout_s, delay = NAP_FIRST_S;
    for (;;) {
        int last = mono_now() >= deadline, ready;
        why_t w = {.len = 0};
        rs_version_info_t info;
        st = probe(dir, &req, stale_s, last, &w, diag, &ready, &info);
        if (st != RS_OK)
            return st;
        if (ready) {
            *info_p = info;
            return RS_OK;
        }
        if (last)
            return rs__diag_set(diag, RS_ERR_TIMEOUT, "%s (after waiting %g "
                                "s)", w.buf, timeout_s);
        nap(fmin(delay, deadline - mono_now()));
        delay = fmin(delay * 2, NAP_MAX_S);
    }
}

rs_status_t rs_dir_wait_released(rs_dir_h dir, const char *model,
                                 int64_t version, double timeout_s,
                                 rs_diag_t *diag)
{
    rs_dir_req_t req;
    rs_status_t st = rs__dir_start(dir, model, version, diag, &req);
    if (st == RS_OK)
        st = check_timeout("rs_dir_wait_released", timeout_s, diag);
    if (st != RS_OK)
        return st;
    double deadline = mono_now() + timeout_s, delay = NAP_FIRST_S;
    for (;;) {
        int last = mono_now() >= deadline;
        st = dir->ops->lookup(dir, &req, diag);
        if (st != RS_OK)
            return st;
        if (req.info.state == 0)
            return rs__diag_set(diag, RS_ERR_INPUT, "model '%s' has no "
                                "version %lld", model, (long long)version);
        if (req.info.state == RS_VERSION_RELEASED)
            return RS_OK;
        if (last)
            return rs__diag_set(diag, RS_ERR_TIMEOUT, "version %lld of '%s' "
                                "is still %s after waiting %g s",
                                (long long)version, model,
                                rs__dir_state_name(req.info.state),
                                timeout_s);
        nap(fmin(delay, deadline - mono_now()));
        delay = fmin(delay * 2, NAP_MAX_S);
    }
}
