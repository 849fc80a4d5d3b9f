/* Wait of the `ucx` transport: issues the gets of every queued session and
 * one flush per post before awaiting any, progresses the worker until each
 * flush completes, fails or the deadline passes, then drains: sessions that
 * failed or are still outstanding get their endpoint force-closed (their
 * gets complete as cancelled and write nothing more) and are reconnected
 * from the blob on the next batch. */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "core/diag.h"
#include "exec/transports/ucx_impl.h"

/* Draining waits while the worker still makes progress, giving up after
 * this long without any event or this long in all. */
#define DRAIN_IDLE_S 0.25
#define DRAIN_MAX_S 30.0

typedef struct wait_ctx {
    ucx_state_t *s;
    rs_diag_t first;   /* the first failure */
    int failed;        /* groups that failed */
} wait_ctx_t;

static void group_failed(wait_ctx_t *w, ucx_group_t *g, ucs_status_t us,
                         const char *what)
{
    g->status = us;
    if (w->failed++ > 0)
        return;
    rs__diag_set(&w->first, RS_ERR_TRANSPORT,
                 "session %" PRIu32 " (%s): %s: %s", g->session,
                 rs__peers_name(&w->s->peers, g->session), what,
                 ucs_status_string(us));
}

/* The endpoint of a group's session, brought back up if an earlier batch
 * closed it or it failed while idle; NULL after recording a failure. */
static ucx_sess_t *ready_sess(wait_ctx_t *w, ucx_group_t *g)
{
    ucx_sess_t *x = w->s->sess[g->session];
    if (x->ep != NULL && x->failed != UCS_OK)
        rs__ucx_sess_down(w->s, x, 1);
    if (x->ep != NULL)
        return x;
    rs_diag_t d;
    if (rs__ucx_sess_up(w->s, x, rs__peers_name(&w->s->peers, g->session),
                        &d) != RS_OK) {
        g->status = UCS_ERR_UNREACHABLE;
        if (w->failed++ == 0)
            w->first = d;
        return NULL;
    }
    return x;
}

static void issue_group(wait_ctx_t *w, ucx_group_t *g,
                        const ucp_request_param_t *gp)
{
    ucx_state_t *s = w->s;
    ucx_sess_t *x = ready_sess(w, g);
    if (x == NULL)
        return;
    for (size_t i = g->first; i < g->end; i++) {
        const ucx_piece_t *p = &s->pieces[i];
        void *req = ucp_get_nbx(x->ep, p->dst, (size_t)p->n, p->remote,
                                x->regions[p->region].rkey, gp);
        if (UCS_PTR_IS_ERR(req)) {
            group_failed(w, g, UCS_PTR_STATUS(req), "ucp_get_nbx");
            return;
        }
        /* Completion is observed through the flush below. */
        if (req != NULL)
            ucp_request_free(req);
    }
    ucp_request_param_t fp;
    memset(&fp, 0, sizeof(fp));
    void *req = ucp_ep_flush_nbx(x->ep, &fp);
    if (UCS_PTR_IS_ERR(req))
        group_failed(w, g, UCS_PTR_STATUS(req), "read failed");
    else if (req == NULL)
        g->status = UCS_OK;
    else
        g->flush = req;
}

/* Settles what has finished; returns the groups still outstanding. */
static size_t poll_groups(wait_ctx_t *w)
{
    ucx_state_t *s = w->s;
    size_t pending = 0;
    for (size_t i = 0; i < s->groups_len; i++) {
        ucx_group_t *g = &s->groups[i];
        if (g->status != UCS_INPROGRESS)
            continue;
        ucs_status_t us = ucp_request_check_status(g->flush);
        if (us != UCS_INPROGRESS) {
            ucp_request_free(g->flush);
            g->flush = NULL;
            if (us == UCS_OK)
                g->status = UCS_OK;
            else
                group_failed(w, g, us, "read failed");
        } else if (s->sess[g->session]->failed != UCS_OK) {
            group_failed(w, g, s->sess[g->session]->failed,
                         "endpoint failed");
        } else {
            pending++;
        }
    }
    return pending;
}

static int flushes_pending(const ucx_state_t *s)
{
    for (size_t i = 0; i < s->groups_len; i++) {
        if (s->groups[i].flush != NULL &&
            ucp_request_check_status(s->groups[i].flush) == UCS_INPROGRESS)
            return 1;
    }
    return 0;
}

/* Progresses until every flush is back, or nothing has happened for
 * `idle_s` seconds (a dead peer over a transport that cannot say so), or
 * `max_s` have passed. */
static void await_flushes(ucx_state_t *s, double idle_s, double max_s)
{
    double start = rs__ucx_now(), last = start;
    while (flushes_pending(s)) {
        double now = rs__ucx_now();
        if (now - last > idle_s || now - start > max_s)
            return;
        if (ucp_worker_progress(s->u.worker) != 0)
            last = now;
    }
}

/* After a failure or timeout: reads still moving are let finish (over
 * shared memory a forced close does not stop replies already on their way
 * from landing in the destination, so stopping early would let bytes
 * arrive after wait returned); what has stalled gets its endpoint
 * force-closed, and every flush request is released. */
static void drain(ucx_state_t *s)
{
    await_flushes(s, DRAIN_IDLE_S, DRAIN_MAX_S);
    for (size_t i = 0; i < s->groups_len; i++) {
        ucx_group_t *g = &s->groups[i];
        ucs_status_t us = g->flush != NULL
            ? ucp_request_check_status(g->flush) : UCS_INPROGRESS;
        if (us == UCS_INPROGRESS)
            continue;
        if (g->status == UCS_INPROGRESS) /* late: already reported */
            g->status = us;
        ucp_request_free(g->flush);
        g->flush = NULL;
    }
    for (size_t i = 0; i < s->groups_len; i++) {
        if (s->groups[i].status != UCS_OK)
            rs__ucx_sess_down(s, s->sess[s->groups[i].session], 1);
    }
    await_flushes(s, DRAIN_IDLE_S, DRAIN_IDLE_S);
    for (size_t i = 0; i < s->groups_len; i++) {
        if (s->groups[i].flush != NULL)
            ucp_request_free(s->groups[i].flush);
        s->groups[i].flush = NULL;
    }
}

/* Names each session with a group still outstanding, once. */
static rs_status_t timed_out(ucx_state_t *s, double timeout_s,
                             rs_diag_t *diag)
{
    rs_status_t st = rs__timeout_begin(diag, timeout_s);
    uint32_t last = UINT32_MAX;
    for (size_t i = 0; i < s->groups_len; i++) {
        const ucx_group_t *g = &s->groups[i];
        if (g->status == UCS_INPROGRESS && g->session != last) {
            rs__timeout_add(diag, &s->peers, g->session);
            last = g->session;
        }
    }
    return st;
}

/* Credits the groups that completed, drains the rest, forgets the batch. */
static rs_status_t finish(rs_transport_h t, wait_ctx_t *w, size_t pending,
                          double timeout_s, rs_diag_t *diag)
{
    ucx_state_t *s = t->priv;
    for (size_t i = 0; i < s->groups_len; i++) {
        if (s->groups[i].status == UCS_OK) {
            t->counters.reads += s->groups[i].reads;
            t->counters.bytes += s->groups[i].bytes;
        }
    }
    rs_status_t st = RS_OK;
    if (w->failed > 0) {
        st = RS_ERR_TRANSPORT;
        if (diag != NULL)
            *diag = w->first;
        if (w->failed > 1)
            rs__diag_prefix(diag, "%d posts failed; first: ",
                            w->failed);
    } else if (pending > 0) {
        st = timed_out(s, timeout_s, diag);
    }
    if (st != RS_OK)
        drain(s);
    s->pieces_len = 0;
    s->groups_len = 0;
    return st;
}

rs_status_t rs__ucx_wait(rs_transport_h t, double timeout_s, rs_diag_t *diag)
{
    ucx_state_t *s = t->priv;
    wait_ctx_t w = {s, {RS_OK, ""}, 0};
    double deadline = timeout_s > 0 ? rs__ucx_now() + timeout_s : 0;
    ucp_request_param_t gp;
    memset(&gp, 0, sizeof(gp));
    /* Saves a memory-type lookup per get: destinations are host memory. */
    gp.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    gp.memory_type = UCS_MEMORY_TYPE_HOST;
    for (size_t i = 0; i < s->groups_len; i++)
        issue_group(&w, &s->groups[i], &gp);
    size_t pending = poll_groups(&w);
    unsigned idle = 0;
    while (pending > 0) {
        /* The exposer may share this core: give it the core when there is
         * nothing to do (see the exposer's progress loop). */
        if (ucp_worker_progress(s->u.worker) == 0 && ++idle % 16 == 0)
            sched_yield();
        pending = poll_groups(&w);
        if (pending > 0 && deadline > 0 && rs__ucx_now() > deadline)
            break;
    }
    return finish(t, &w, pending, timeout_s, diag);
}
