/* The `local-mt` transport: the local backend's reads run by a worker pool
 * made once at open. At wait the batch's bytes are seen as one stream cut
 * into equal tasks, so huge segments are split and small ones batched, and
 * the pool's workers take tasks in turn until the stream is done or
 * cancelled at the deadline. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/diag.h"
#include "core/pool.h"
#include "exec/backend.h"
#include "exec/transports/local_work.h"

#define MT_MAX_THREADS 256
#define MT_TASK_MIN (256u << 10)
#define MT_TASK_MAX (16u << 20)
#define MT_TASKS_PER_THREAD 4

typedef struct mt_state {
    rs__local_base_t base; /* first: the shared ops take t->priv as one */
    _Atomic uint64_t *remaining; /* bytes left per group of `work` */
    size_t remaining_cap;
    rs__pool_t *pool;
    uint64_t task_bytes, ntasks;
} mt_state_t;

/* The copy holding stream offset `off` (copies are in stream order). */
static size_t find_copy(const rs__worklist_t *w, uint64_t off)
{
    size_t lo = 0, hi = w->copies_len;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->copies[mid].off <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Copies stream bytes [start, end), crediting each group as it goes. A
 * copy that feeds a tap belongs whole to the task holding the first byte of
 * the tap's first copy, which runs all of that tap's copies in order (a
 * digest is one sequential stream); other tasks skip them. */
static void copy_range(mt_state_t *s, uint64_t start, uint64_t end)
{
    const rs__worklist_t *w = &s->base.work;
    size_t i = find_copy(w, start);
    uint32_t group = w->copies[i].group;
    uint64_t credit = 0;
    for (; i < w->copies_len; i++) {
        const rs__copy_t *c = &w->copies[i];
        uint64_t skip = 0, n = c->n;
        if (c->tap != NULL) {
            if (c->tap_off < start)
                continue; /* an earlier task's */
            if (c->tap_off >= end)
                break;
        } else {
            if (c->off >= end)
                break;
            skip = start > c->off ? start - c->off : 0;
            n = c->n - skip < end - c->off - skip ? c->n - skip
                                                  : end - c->off - skip;
        }
        if (c->group != group) {
            atomic_fetch_sub(&s->remaining[group], credit);
            group = c->group;
            credit = 0;
        }
        rs__copy_run(c, skip, n);
        credit += n;
    }
    atomic_fetch_sub(&s->remaining[group], credit);
}

/* Task k of the batch: the k-th task_bytes of the stream. */
static void run_task(void *ctx, size_t k)
{
    mt_state_t *s = ctx;
    uint64_t start = k * s->task_bytes;
    uint64_t end = start + s->task_bytes;
    uint64_t total = s->base.work.bytes;
    copy_range(s, start, end < total ? end : total);
}

static unsigned pick_threads(unsigned asked)
{
    long n = asked;
    if (n == 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > MT_MAX_THREADS ? MT_MAX_THREADS : (unsigned)n;
}

static rs_status_t mt_open(rs_transport_h t, rs_diag_t *diag)
{
    mt_state_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "local-mt: state");
    rs_status_t st = rs__pool_create(pick_threads(t->params.threads),
                                     "local-mt", diag, &s->pool);
    if (st != RS_OK) {
        free(s);
        return st;
    }
    t->priv = s;
    return RS_OK;
}

static void mt_close(rs_transport_h t)
{
    mt_state_t *s = t->priv;
    rs__pool_destroy(s->pool);
    rs__local_base_free(&s->base);
    free(s->remaining);
    free(s);
    t->priv = NULL;
}

/* Sizes tasks and the per-group byte counts for the batch. */
static rs_status_t plan_tasks(mt_state_t *s, rs_diag_t *diag)
{
    const rs__worklist_t *w = &s->base.work;
    if (w->groups_len > s->remaining_cap) {
        void *p = realloc(s->remaining, w->groups_len * sizeof(*s->remaining));
        if (p == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY,
                                "local-mt: %zu groups", w->groups_len);
        s->remaining = p;
        s->remaining_cap = w->groups_len;
    }
    for (size_t g = 0; g < w->groups_len; g++)
        atomic_init(&s->remaining[g], w->groups[g].bytes);
    uint64_t threads = rs__pool_workers(s->pool);
    uint64_t grain = w->bytes / (threads * MT_TASKS_PER_THREAD);
    grain = grain < MT_TASK_MIN ? MT_TASK_MIN : grain;
    s->task_bytes = grain > MT_TASK_MAX ? MT_TASK_MAX : grain;
    s->ntasks = (w->bytes + s->task_bytes - 1) / s->task_bytes;
    return RS_OK;
}

/* Wakes the pool and waits for it; on timeout cancels the remaining tasks
 * and drains the ones in flight (settle then finds what is left). */
static void run_pool(mt_state_t *s, double timeout_s)
{
    struct timespec until;
    const struct timespec *deadline = NULL;
    /* decades: the same as no limit, and no overflow */
    if (timeout_s > 0 && timeout_s <= 1e9) {
        until = rs__mono_after(timeout_s);
        deadline = &until;
    }
    rs__pool_start(s->pool, run_task, s, s->ntasks);
    if (rs__pool_join_until(s->pool, deadline, NULL, NULL) == RS_OK)
        return;
    (void)rs__pool_cancel(s->pool);
    (void)rs__pool_join_until(s->pool, NULL, NULL, NULL);
}

/* Credits what completed and names the groups that did not. */
static rs_status_t settle(rs_transport_h t, double timeout_s, rs_diag_t *diag)
{
    mt_state_t *s = t->priv;
    const rs__worklist_t *w = &s->base.work;
    rs_status_t st = RS_OK;
    int32_t last_named = -1;
    for (size_t g = 0; g < w->groups_len; g++) {
        uint64_t left = atomic_load(&s->remaining[g]);
        t->counters.bytes += w->groups[g].bytes - left;
        if (left == 0) {
            t->counters.reads += w->groups[g].reads;
            continue;
        }
        if (st == RS_OK)
            st = rs__timeout_begin(diag, timeout_s);
        if ((int64_t)w->groups[g].session != last_named)
            rs__timeout_add(diag, &s->base.peers, w->groups[g].session);
        last_named = (int32_t)w->groups[g].session;
    }
    rs__worklist_clear(&s->base.work);
    return st;
}

static rs_status_t mt_wait(rs_transport_h t, double timeout_s,
                           rs_diag_t *diag)
{
    mt_state_t *s = t->priv;
    rs_status_t st = plan_tasks(s, diag);
    if (st != RS_OK) {
        rs__worklist_clear(&s->base.work);
        return st;
    }
    if (s->ntasks == 1)
        run_task(s, 0); /* not worth waking the pool */
    else if (s->ntasks > 1)
        run_pool(s, timeout_s);
    return settle(t, timeout_s, diag);
}

static unsigned mt_workers(rs_transport_h t)
{
    return rs__pool_workers(((const mt_state_t *)t->priv)->pool);
}

const rs__transport_ops_t rs__transport_local_mt = {
    .name = "local-mt",
    .open = mt_open,
    .close = mt_close,
    .connect = rs__local_connect,
    .post = rs__local_post,
    .wait = mt_wait,
    .cancel = rs__local_cancel, /* the pool only runs inside wait */
    .workers = mt_workers,
    .fuses_digests = 1,
};

/* The backend's one table: this transport (it exposes nothing). */
const rs__backend_t rs__backend_local_mt = {
    "local-mt", &rs__transport_local_mt, NULL};
