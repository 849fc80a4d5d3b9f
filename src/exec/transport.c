/* Transport dispatch: picks a backend's ops table by name, groups each batch
 * of reads by session, posts every group before anything is awaited, and
 * drains what was posted when a later group is refused. A transport is used
 * by one thread at a time; backends may run their own threads inside. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "core/params.h"
#include "exec/backend.h"

static void transport_defaults(rs_transport_params_t *params)
{
    params->backend = "local";
}

RS__PARAMS_DEFINE(transport, transport_defaults, threads)

static const rs__transport_ops_t *find_backend(const char *name)
{
    const rs__backend_t *b = rs__backend_find(name);
    return b != NULL ? b->transport : NULL;
}

rs_status_t rs_transport_create(const rs_transport_params_t *params,
                                rs_diag_t *diag, rs_transport_h *transport_p)
{
    rs_transport_params_t given; /* NULL means the defaults: local */
    rs_status_t st = rs__transport_params_take(params, diag, &given);
    if (st != RS_OK)
        return st;
    params = &given;
    if (params->backend == NULL || transport_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "transport: backend name and output are required");
    const rs__transport_ops_t *ops = find_backend(params->backend);
    if (ops == NULL)
        return rs__diag_set(diag, RS_ERR_UNSUPPORTED,
                            "transport: unknown backend '%s' (known: local, "
                            "local-mt, cma, ucx)", params->backend);
    rs_transport_h t = calloc(1, sizeof(*t));
    if (t == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "transport: handle");
    t->ops = ops;
    t->params = *params;
    t->params.backend = ops->name; /* the caller's string may not outlive us */
    st = ops->open(t, diag);
    if (st != RS_OK) {
        free(t);
        return st;
    }
    *transport_p = t;
    return RS_OK;
}

void rs_transport_destroy(rs_transport_h t)
{
    if (t == NULL)
        return;
    t->ops->cancel(t);
    t->ops->close(t);
    free(t);
}

const char *rs_transport_backend(rs_transport_h t)
{
    return t != NULL ? t->ops->name : NULL;
}

rs_status_t rs_transport_connect(rs_transport_h t, uint32_t session,
                                 const rs_peer_t *peer, rs_diag_t *diag)
{
    if (t == NULL || peer == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "transport: connect needs a transport and a peer");
    rs_status_t st = t->ops->connect(t, session, peer, diag);
    if (st != RS_OK)
        t->counters.errors++;
    return st;
}

/* Posts reads[0..n), which are grouped by session already. */
static rs_status_t post_groups(rs_transport_h t, const rs_read_t *reads,
                               size_t n, rs_diag_t *diag)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i + 1;
        while (j < n && reads[j].session == reads[i].session)
            j++;
        rs_status_t st = t->ops->post(t, reads[i].session, reads + i, j - i,
                                      diag);
        if (st != RS_OK) {
            t->ops->cancel(t); /* drain the groups already posted */
            t->counters.errors++;
            return st;
        }
        t->counters.posts++;
        i = j;
    }
    return RS_OK;
}

static int key_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A stable by-session copy of an ungrouped batch: sorts (session, index)
 * keys so reads of one session keep their order. */
static rs_status_t post_sorted(rs_transport_h t, const rs_read_t *reads,
                               size_t n, rs_diag_t *diag)
{
    if (n > UINT32_MAX)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "transport: an ungrouped batch of %zu reads is "
                            "too large; group it by session", n);
    uint64_t *keys = malloc(n * sizeof(*keys));
    rs_read_t *sorted = malloc(n * sizeof(*sorted));
    rs_status_t st = RS_ERR_NO_MEMORY;
    if (keys == NULL || sorted == NULL) {
        rs__diag_set(diag, st, "transport: grouping %zu reads", n);
        goto free_copies;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = (uint64_t)reads[i].session << 32 | (uint64_t)i;
    qsort(keys, n, sizeof(*keys), key_cmp);
    for (size_t i = 0; i < n; i++)
        sorted[i] = reads[keys[i] & UINT32_MAX];
    st = post_groups(t, sorted, n, diag);
free_copies:
    free(sorted);
    free(keys);
    return st;
}

rs_status_t rs_transport_post(rs_transport_h t, const rs_read_t *reads,
                              size_t n, rs_diag_t *diag)
{
    if (t == NULL || (n > 0 && reads == NULL))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "transport: post needs a transport and reads");
    /* The executor builds batches in session order; only others pay for a
     * sorted copy. */
    for (size_t i = 1; i < n; i++) {
        if (reads[i].session < reads[i - 1].session)
            return post_sorted(t, reads, n, diag);
    }
    return post_groups(t, reads, n, diag);
}

rs_status_t rs_transport_wait(rs_transport_h t, double timeout_s,
                              rs_diag_t *diag)
{
    if (t == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "transport: wait needs a transport");
    t->stalled = 0;
    rs_status_t st = t->ops->wait(t, timeout_s, diag);
    if (st != RS_OK)
        t->counters.errors++;
    return st;
}

void rs__transport_set_stall(rs_transport_h t, double stall_s)
{
    if (t == NULL)
        return;
    t->stall_s = stall_s > 0 ? stall_s : 0;
    t->stalled = 0; /* a run's verdict is its own */
}

int rs__transport_stalled(rs_transport_h t)
{
    return t != NULL && t->stalled;
}

void rs_transport_cancel(rs_transport_h t)
{
    if (t != NULL)
        t->ops->cancel(t);
}

void rs_transport_counters(rs_transport_h t,
                           rs_transport_counters_t *counters_p)
{
    if (t != NULL && counters_p != NULL)
        *counters_p = t->counters;
}

void rs__transport_set_taps(rs_transport_h t, rs__tap_t *taps, size_t n)
{
    t->taps = n > 0 && t->ops->fuses_digests ? taps : NULL;
    t->ntaps = t->taps != NULL ? n : 0;
}

rs__tap_t *rs__transport_tap(rs_transport_h t, const uint8_t *dst,
                             uint64_t n)
{
    size_t lo = 0, hi = t->ntaps;
    while (lo < hi) { /* the last tap starting at or before dst */
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)t->taps[mid].dst <= (uintptr_t)dst)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    rs__tap_t *tap = &t->taps[lo - 1];
    uintptr_t off = (uintptr_t)dst - (uintptr_t)tap->dst;
    return off < tap->nbytes && n <= tap->nbytes - off ? tap : NULL;
}

unsigned rs__transport_workers(rs_transport_h t)
{
    unsigned n = t != NULL && t->ops->workers != NULL ? t->ops->workers(t) : 1;
    return n > 0 ? n : 1;
}

rs_status_t rs__transport_unsupported(rs_transport_h t, rs_diag_t *diag)
{
    return rs__diag_set(diag, RS_ERR_UNSUPPORTED,
                        "transport '%s': operation not supported",
                        t != NULL ? t->ops->name : "?");
}

const rs_region_t *rs__region_find(const rs_region_t *regions, size_t n,
                                   uint64_t addr, uint64_t nbytes)
{
    /* Last region starting at or before addr. */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (regions[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const rs_region_t *r = &regions[lo - 1];
    uint64_t off = addr - r->addr;
    if (off > r->nbytes || nbytes > r->nbytes - off)
        return NULL;
    return r;
}
