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

/* The state is the shared in-process base alone. */
typedef rs__local_base_t local_state_t;

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
    rs__local_base_free(t->priv);
    free(t->priv);
    t->priv = NULL;
}

/* Counts the groups before `stop` as done, names the others, drops all. */
static rs_status_t local_timed_out(rs_transport_h t, size_t stop,
                                   double timeout_s, rs_diag_t *diag)
{
    local_state_t *s = t->priv;
    const rs__worklist_t *w = &s->work;
    rs_status_t st = rs__groups_timed_out(t, &s->peers, w->groups,
                                          w->groups_len, w->copies[stop].group,
                                          timeout_s, diag);
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
        rs__copy_run(c, 0, c->n);
        since_clock += c->n;
    }
    count_done(t, w);
    rs__worklist_clear(&s->work);
    return RS_OK;
}

const rs__transport_ops_t rs__transport_local = {
    .name = "local",
    .open = local_open,
    .close = local_close,
    .connect = rs__local_connect,
    .post = rs__local_post,
    .wait = local_wait,
    .cancel = rs__local_cancel,
    .fuses_digests = 1,
};

/* The backend's one table: this transport (it exposes nothing). */
const rs__backend_t rs__backend_local = {
    "local", &rs__transport_local, NULL};
