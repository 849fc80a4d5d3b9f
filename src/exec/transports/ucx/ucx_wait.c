/* Wait of the `ucx` transport: issues the gets of every queued session
 * before awaiting any, each with a completion callback, and progresses the
 * worker until every get has completed, one has failed, an endpoint has
 * failed, the deadline passes or the transport's cancel flag is raised. A post succeeds only when every one of
 * its gets completed with UCS_OK on an endpoint that never failed. Then it
 * drains: sessions that failed or are still outstanding get their endpoint
 * force-closed (their gets complete as cancelled and write nothing more)
 * and are reconnected from the blob on the next batch; every request is
 * released before wait returns, so no callback outlives its batch. */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "core/diag.h"
#include "core/digest_copy.h"
#include "exec/transports/ucx/ucx_impl.h"

/* Draining waits while the worker still makes progress, giving up after
 * this long without any event or this long in all. */
#define DRAIN_IDLE_S 0.25
#define DRAIN_MAX_S 30.0

/* The first failure is worded when the wait ends, once UCX has said why
 * (its error line comes with the drain), unless connecting failed: that
 * message is whole already. */
typedef struct wait_ctx {
    ucx_state_t *s;
    int failed;        /* groups that failed */
    int first_worded;  /* `first` holds the whole message */
    rs_diag_t first;
    uint32_t first_session;
    const char *first_what;
    ucs_status_t first_status;
} wait_ctx_t;

void rs__ucx_get_done(void *request, ucs_status_t status, void *user_data)
{
    (void)request; /* released by the wait, with every other request */
    ucx_group_t *g = user_data;
    g->outstanding--;
    if (status != UCS_OK && g->get_status == UCS_OK)
        g->get_status = status;
}

ucs_status_t rs__ucx_group_verdict(const ucx_group_t *g, ucs_status_t ep,
                                   const char **what_p)
{
    if (g->get_status != UCS_OK) {
        *what_p = "read failed";
        return g->get_status;
    }
    if (ep != UCS_OK) {
        *what_p = "endpoint failed";
        return ep;
    }
    return g->outstanding == 0 ? UCS_OK : UCS_INPROGRESS;
}

static void group_failed(wait_ctx_t *w, ucx_group_t *g, ucs_status_t us,
                         const char *what)
{
    g->status = us;
    if (w->failed++ > 0)
        return;
    w->first_session = g->session;
    w->first_what = what;
    w->first_status = us;
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
        if (w->failed++ == 0) {
            w->first = d;
            w->first_worded = 1;
        }
        return NULL;
    }
    return x;
}

static void issue_group(wait_ctx_t *w, ucx_group_t *g, ucp_request_param_t *gp)
{
    ucx_state_t *s = w->s;
    ucx_sess_t *x = ready_sess(w, g);
    if (x == NULL)
        return;
    gp->user_data = g;
    for (size_t i = g->first; i < g->end; i++) {
        ucx_piece_t *p = &s->pieces[i];
        const ucx_rinfo_t *r = &x->regions[p->region];
        if (r->direct != NULL) { /* mapped: the get's own copy, done here */
            const uint8_t *src = r->direct + (p->remote - r->remote);
            if (p->tap != NULL) /* in order: pieces of a tap are queued so */
                rs__digest_copy(&p->tap->digest, p->dst, src, (size_t)p->n);
            else
                memcpy(p->dst, src, p->n);
            p->req = NULL;
            continue;
        }
        /* Counted before the call: its callback may come at any time
         * after. A get done at once (NULL) has no callback. */
        g->outstanding++;
        void *req = ucp_get_nbx(x->ep, p->dst, (size_t)p->n, p->remote,
                                x->regions[p->region].rkey, gp);
        if (UCS_PTR_IS_ERR(req)) {
            g->outstanding--;
            group_failed(w, g, UCS_PTR_STATUS(req), "ucp_get_nbx");
            return;
        }
        if (req == NULL)
            g->outstanding--;
        p->req = req;
    }
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
        const char *what = NULL;
        ucs_status_t us = rs__ucx_group_verdict(g, s->sess[g->session]->failed,
                                                &what);
        if (us == UCS_OK)
            g->status = UCS_OK;
        else if (us != UCS_INPROGRESS)
            group_failed(w, g, us, what);
        else
            pending++;
    }
    return pending;
}

static int gets_pending(const ucx_state_t *s)
{
    for (size_t i = 0; i < s->groups_len; i++) {
        if (s->groups[i].outstanding > 0)
            return 1;
    }
    return 0;
}

/* Progresses until every get is back, or nothing has happened for
 * `idle_s` seconds (a dead peer over a transport that cannot say so), or
 * `max_s` have passed. */
static void await_gets(ucx_state_t *s, double idle_s, double max_s)
{
    double start = rs__now_s(), last = start;
    while (gets_pending(s)) {
        double now = rs__now_s();
        if (now - last > idle_s || now - start > max_s)
            return;
        if (ucp_worker_progress(s->u.worker) != 0)
            last = now;
    }
}

/* After a failure or timeout: gets still moving are let finish (over
 * shared memory a forced close does not stop replies already on their way
 * from landing in the destination, so stopping early would let bytes
 * arrive after wait returned); the sessions of every post that did not
 * succeed get their endpoint force-closed. */
static void drain(ucx_state_t *s)
{
    await_gets(s, DRAIN_IDLE_S, DRAIN_MAX_S);
    for (size_t i = 0; i < s->groups_len; i++) {
        if (s->groups[i].status != UCS_OK)
            rs__ucx_sess_down(s, s->sess[s->groups[i].session], 1);
    }
    await_gets(s, DRAIN_IDLE_S, DRAIN_IDLE_S);
}

/* Releases every request of the batch: from here on UCX calls none of
 * their callbacks, so the group records can be reused. */
static void release_requests(ucx_state_t *s)
{
    for (size_t i = 0; i < s->pieces_len; i++) {
        if (s->pieces[i].req != NULL)
            ucp_request_free(s->pieces[i].req);
        s->pieces[i].req = NULL;
    }
}

/* Names each session with a group still outstanding, once; `stalled`:
 * the wait ended because nothing moved for the stall bound. */
static rs_status_t timed_out(ucx_state_t *s, double timeout_s, int stalled,
                             rs_diag_t *diag)
{
    rs_status_t st = stalled ? rs__stall_begin(diag, timeout_s)
                             : rs__timeout_begin(diag, timeout_s);
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
                          double timeout_s, int cancelled, int stalled,
                          unsigned long mark, rs_diag_t *diag)
{
    ucx_state_t *s = t->priv;
    for (size_t i = 0; i < s->groups_len; i++) {
        if (s->groups[i].status == UCS_OK) {
            t->counters.reads += s->groups[i].reads;
            t->counters.bytes += s->groups[i].bytes;
        }
    }
    rs_status_t st = RS_OK;
    if (w->failed > 0 || pending > 0)
        drain(s);
    if (w->failed > 0) {
        st = RS_ERR_TRANSPORT;
        if (w->first_worded && diag != NULL)
            *diag = w->first;
        else if (!w->first_worded)
            rs__ucx_peer_failed(diag, w->first_session,
                                rs__peers_name(&s->peers, w->first_session),
                                w->first_what, w->first_status, mark);
        if (w->failed > 1)
            rs__diag_prefix(diag, "%d posts failed; first: ",
                            w->failed);
    } else if (pending > 0 && cancelled) {
        st = rs__diag_set(diag, RS_ERR_CANCELLED, "reads cancelled with %zu "
                          "post(s) outstanding", pending);
    } else if (pending > 0) {
        t->stalled = stalled;
        st = timed_out(s, stalled ? t->stall_s : timeout_s, stalled, diag);
        rs__ucx_add_cause(diag, mark);
    }
    release_requests(s);
    s->pieces_len = 0;
    s->groups_len = 0;
    return st;
}

static rs_status_t wait_quietly(rs_transport_h t, double timeout_s,
                                unsigned long mark, rs_diag_t *diag)
{
    ucx_state_t *s = t->priv;
    wait_ctx_t w;
    memset(&w, 0, sizeof(w));
    w.s = s;
    double deadline = timeout_s > 0 ? rs__now_s() + timeout_s : 0;
    ucp_request_param_t gp;
    memset(&gp, 0, sizeof(gp));
    /* Saves a memory-type lookup per get: destinations are host memory. */
    gp.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE |
                      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    gp.memory_type = UCS_MEMORY_TYPE_HOST;
    gp.cb.send = rs__ucx_get_done;
    for (size_t i = 0; i < s->groups_len; i++)
        issue_group(&w, &s->groups[i], &gp);
    if (s->fail_after_issue != UCS_OK) {
        await_gets(s, DRAIN_IDLE_S, DRAIN_MAX_S); /* every get is back */
        for (size_t i = 0; i < s->groups_len; i++)
            s->sess[s->groups[i].session]->failed = s->fail_after_issue;
    }
    size_t pending = poll_groups(&w);
    unsigned idle = 0;
    int cancelled = 0, stalled = 0;
    /* the last moment the worker had an event or a post completed */
    double moved = rs__now_s();
    while (pending > 0) {
        /* The exposer may share this core: give it the core when there is
         * nothing to do (see the exposer's progress loop). */
        int events = ucp_worker_progress(s->u.worker) != 0;
        if (!events && ++idle % 16 == 0)
            sched_yield();
        size_t before = pending;
        pending = poll_groups(&w);
        double now = rs__now_s();
        if (events || pending < before)
            moved = now;
        if (pending > 0 && deadline > 0 && now > deadline)
            break;
        stalled = pending > 0 && t->stall_s > 0 && now - moved > t->stall_s;
        cancelled = pending > 0 && !stalled &&
                    rs_cancel_raised(t->params.cancel);
        if (cancelled || stalled)
            break;
    }
    return finish(t, &w, pending, timeout_s, cancelled, stalled, mark, diag);
}

/* UCX's own lines about a failing peer stay quiet: the failure comes back
 * in diag, with UCX's latest error line as its cause. */
rs_status_t rs__ucx_wait(rs_transport_h t, double timeout_s, rs_diag_t *diag)
{
    unsigned long mark = rs__ucx_quiet_begin();
    rs_status_t st = wait_quietly(t, timeout_s, mark, diag);
    rs__ucx_quiet_end();
    return st;
}
