/* The `local` transport: reads from memory of this process (each region's
 * `local` pointer) with memcpy on the calling thread. It is the reference
 * every other backend is tested against. Reads are checked and resolved at
 * post and copied at wait, so a refused batch moves nothing. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/diag.h"
#include "exec/backend.h"
#include "exec/transports/local_work.h"

typedef struct local_state {
    rs__peers_t peers;
    rs__worklist_t work;
} local_state_t;

/* Checking the clock costs little next to a megabyte of copying. */
#define LOCAL_CLOCK_EVERY_BYTES (1u << 20)
#define LOCAL_CLOCK_EVERY_COPIES 64

static rs_status_t local_open(rs_transport_h t, rs_diag_t *diag)
{
    t->priv = calloc(1, sizeof(local_state_t));
    if (t->priv == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "local transport state");
    return RS_OK;
}

static void local_close(rs_transport_h t)
{
    local_state_t *s = t->priv;
    rs__peers_free(&s->peers);
    rs__worklist_free(&s->work);
    free(s);
    t->priv = NULL;
}

static rs_status_t local_connect(rs_transport_h t, uint32_t session,
                                 const rs_peer_t *peer, rs_diag_t *diag)
{
    local_state_t *s = t->priv;
    return rs__peers_connect(&s->peers, session, peer, RS_PEER_NEED_LOCAL,
                             diag);
}

static rs_status_t local_post(rs_transport_h t, uint32_t session,
                              const rs_read_t *reads, size_t n,
                              rs_diag_t *diag)
{
    local_state_t *s = t->priv;
    return rs__worklist_add(&s->work, &s->peers, session, reads, n, diag);
}

/* Counts the groups before `stop` as done, names the others, drops all. */
static rs_status_t local_timed_out(rs_transport_h t, size_t stop,
                                   double timeout_s, rs_diag_t *diag)
{
    local_state_t *s = t->priv;
    const rs__worklist_t *w = &s->work;
    uint32_t first = w->copies[stop].group;
    rs_status_t st = rs__timeout_begin(diag, timeout_s);
    for (size_t g = 0; g < w->groups_len; g++) {
        if (g < first) {
            t->counters.reads += w->groups[g].reads;
            t->counters.bytes += w->groups[g].bytes;
        } else if (g == first || w->groups[g].session !=
                                     w->groups[g - 1].session) {
            rs__timeout_add(diag, &s->peers, w->groups[g].session);
        }
    }
    rs__worklist_clear(&s->work);
    return st;
}

static void count_done(rs_transport_h t, const rs__worklist_t *w)
{
    for (size_t g = 0; g < w->groups_len; g++)
        t->counters.reads += w->groups[g].reads;
    t->counters.bytes += w->bytes;
}

static rs_status_t local_wait(rs_transport_h t, double timeout_s,
                              rs_diag_t *diag)
{
    local_state_t *s = t->priv;
    const rs__worklist_t *w = &s->work;
    double deadline = timeout_s > 0 ? rs__now_s() + timeout_s : 0;
    uint64_t since_clock = 0;
    for (size_t i = 0; i < w->copies_len; i++) {
        const rs__copy_t *c = &w->copies[i];
        if (deadline > 0 && (since_clock >= LOCAL_CLOCK_EVERY_BYTES ||
                             i % LOCAL_CLOCK_EVERY_COPIES == 0)) {
            if (rs__now_s() > deadline)
                return local_timed_out(t, i, timeout_s, diag);
            since_clock = 0;
        }
        memcpy(c->dst, c->src, c->n);
        since_clock += c->n;
    }
    count_done(t, w);
    rs__worklist_clear(&s->work);
    return RS_OK;
}

static void local_cancel(rs_transport_h t)
{
    local_state_t *s = t->priv;
    rs__worklist_clear(&s->work);
}

const rs_transport_ops_t rs__transport_local = {
    .name = "local",
    .open = local_open,
    .close = local_close,
    .connect = local_connect,
    .post = local_post,
    .wait = local_wait,
    .cancel = local_cancel,
};

/* The backend's one table: this transport (it exposes nothing). */
const rs__backend_t rs__backend_local = {
    "local", &rs__transport_local, NULL};
