/* The `cma` transport: same-host reads from another process's memory with
 * process_vm_readv (cross-memory attach). Sessions map to pids; a peer's
 * regions, when given, bound what may be read. Reads are checked at post
 * and moved at wait in iovec batches of at most IOV_MAX entries per side. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "core/clock.h"
#include "core/diag.h"
#include "core/digest_copy.h"
#include "exec/backend.h"
#include "exec/transports/blob.h"
#include "exec/transports/local_work.h"

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif
/* Stay well under the kernel's per-call byte limit; short reads resume. */
#define CMA_IOV_LEN_MAX (1ull << 30)

typedef struct cma_item {
    uint64_t remote;
    uint8_t *dst;
    uint64_t n;
    uint32_t group;
    rs__tap_t *tap; /* the digest its bytes feed, or NULL */
} cma_item_t;

typedef struct cma_state {
    rs__peers_t peers;
    RS_VEC(cma_item_t, items);
    RS_VEC(rs__group_t, groups);
    struct iovec liov[IOV_MAX];
    struct iovec riov[IOV_MAX];
} cma_state_t;

/* Where wait is: item index and bytes of it already read. */
typedef struct cma_cursor {
    size_t item;
    uint64_t done;
} cma_cursor_t;

static rs_status_t cma_open(rs_transport_h t, rs_diag_t *diag)
{
    t->priv = calloc(1, sizeof(cma_state_t));
    if (t->priv == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cma transport state");
    return RS_OK;
}

static void cma_close(rs_transport_h t)
{
    cma_state_t *s = t->priv;
    rs__peers_free(&s->peers);
    free(s->items);
    free(s->groups);
    free(s);
    t->priv = NULL;
}

/* A cma blob (docs/formats.md, "Transport blobs"): the exposing pid, then
 * per region its published address, size and real address in that
 * process. Decoded into the peer form the session table keeps. */
static rs_status_t decode_blob(const rs_peer_t *peer, uint32_t session,
                               rs_peer_t *out, rs_region_t **regions_p,
                               rs_diag_t *diag)
{
    rs__blob_reader_t r = {peer->blob, peer->blob_len, 0};
    uint64_t pid;
    uint32_t n;
    if (rs__blob_read_header(&r) != RS_BLOB_CMA || !rs__blob_read_u64(&r, &pid) ||
        !rs__blob_read_u32(&r, &n) || n > (peer->blob_len - r.off) / 24)
        return rs__diag_set(diag, RS_ERR_INPUT, "session %" PRIu32 " (%s): "
                            "not a cma blob or truncated", session,
                            peer->name ? peer->name : "?");
    rs_region_t *reg = calloc((size_t)n + 1, sizeof(rs_region_t));
    if (reg == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cma: regions");
    for (uint32_t i = 0; i < n; i++) {
        uint64_t real;
        rs__blob_read_u64(&r, &reg[i].addr); /* sizes checked above */
        rs__blob_read_u64(&r, &reg[i].nbytes);
        rs__blob_read_u64(&r, &real);
        reg[i].local = (const void *)(uintptr_t)real;
    }
    *out = *peer;
    out->pid = (int64_t)pid;
    out->regions = reg;
    out->nregions = n;
    *regions_p = reg;
    return RS_OK;
}

static rs_status_t cma_connect(rs_transport_h t, uint32_t session,
                               const rs_peer_t *peer, rs_diag_t *diag)
{
    cma_state_t *s = t->priv;
    rs_peer_t decoded;
    rs_region_t *regions = NULL;
    if (peer != NULL && peer->blob != NULL && peer->pid <= 0) {
        rs_status_t st = decode_blob(peer, session, &decoded, &regions, diag);
        if (st != RS_OK)
            return st;
        peer = &decoded;
    }
    rs_status_t st = rs__peers_connect(&s->peers, session, peer,
                                       RS_PEER_NEED_PID, diag);
    free(regions); /* the session table keeps its own copy */
    return st;
}

typedef struct {
    rs_transport_h t;
    cma_state_t *s;
    uint32_t group;
    size_t first;
} piece_ctx_t;

/* Queues one piece. A region whose `local` is set says where its bytes sit
 * in the peer (the published address is then only a name for them);
 * otherwise the published address is the peer's own. */
static int push_item(void *ctx, const rs_region_t *r, uint64_t addr,
                     uint8_t *dst, uint64_t n)
{
    piece_ctx_t *p = ctx;
    cma_state_t *s = p->s;
    uint64_t remote = r != NULL && r->local != NULL
        ? (uint64_t)(uintptr_t)r->local + (addr - r->addr) : addr;
    rs__tap_t *tap = rs__transport_tap(p->t, dst, n);
    if (s->items_len > p->first) {
        cma_item_t *last = &s->items[s->items_len - 1];
        if (tap == NULL && last->tap == NULL &&
            last->remote + last->n == remote &&
            (uintptr_t)last->dst + last->n == (uintptr_t)dst) {
            last->n += n;
            return 1;
        }
    }
    cma_item_t it = {remote, dst, n, p->group, tap};
    return RS_VEC_PUSH(s, items, it);
}

static rs_status_t cma_post(rs_transport_h t, uint32_t session,
                            const rs_read_t *reads, size_t n, rs_diag_t *diag)
{
    cma_state_t *s = t->priv;
    const rs__peer_t *peer = rs__peers_get(&s->peers, session, diag);
    if (peer == NULL)
        return RS_ERR_TRANSPORT;
    size_t first = s->items_len;
    rs__group_t g = {session, n, 0};
    rs_status_t st = RS_OK;
    piece_ctx_t ctx = {t, s, (uint32_t)s->groups_len, first};
    for (size_t i = 0; i < n && st == RS_OK; i++) {
        st = rs__peer_for_pieces(peer, session, &reads[i], 1, push_item, &ctx,
                                 diag);
        g.bytes += reads[i].nbytes;
    }
    if (st == RS_OK && !RS_VEC_PUSH(s, groups, g))
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY,
                          "session %" PRIu32 ": work list", session);
    if (st != RS_OK)
        s->items_len = first;
    return st;
}

static void cma_cancel(rs_transport_h t)
{
    cma_state_t *s = t->priv;
    s->items_len = 0;
    s->groups_len = 0;
}

/* Fills the iovecs from the cursor with items of one group; returns the
 * count. An item feeding a tap goes alone, one digest step at a time, so
 * its bytes are digested while they are still in the cache. */
static int fill_iovs(cma_state_t *s, cma_cursor_t c)
{
    uint32_t group = s->items[c.item].group;
    int k = 0;
    for (size_t i = c.item; i < s->items_len && k < IOV_MAX; i++) {
        const cma_item_t *it = &s->items[i];
        if (it->group != group || (k > 0 && it->tap != NULL))
            break;
        uint64_t skip = i == c.item ? c.done : 0;
        uint64_t len = it->n - skip;
        uint64_t most = it->tap != NULL ? RS__DIGEST_STEP : CMA_IOV_LEN_MAX;
        len = len < most ? len : most;
        s->liov[k].iov_base = it->dst + skip;
        s->liov[k].iov_len = (size_t)len;
        s->riov[k].iov_base = (void *)(uintptr_t)(it->remote + skip);
        s->riov[k].iov_len = (size_t)len;
        k++;
        if (len < it->n - skip || it->tap != NULL)
            break; /* the next iovec must continue this item */
    }
    return k;
}

/* Moves the cursor over `got` bytes. */
static void advance(const cma_state_t *s, cma_cursor_t *c, uint64_t got)
{
    while (got > 0) {
        uint64_t left = s->items[c->item].n - c->done;
        uint64_t step = got < left ? got : left;
        c->done += step;
        got -= step;
        if (c->done == s->items[c->item].n) {
            c->item++;
            c->done = 0;
        }
    }
}

static rs_status_t read_error(const cma_state_t *s, cma_cursor_t c, int err,
                              rs_diag_t *diag)
{
    const cma_item_t *it = &s->items[c.item];
    uint32_t session = s->groups[it->group].session;
    const rs__peer_t *p = &s->peers.v[session];
    char where[160];
    snprintf(where, sizeof(where), "session %" PRIu32 " (%s), pid %" PRId64,
             session, p->name, p->pid);
    switch (err) {
    case EPERM:
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "%s: process_vm_readv not permitted (EPERM): "
                            "reading another process needs the same user "
                            "and a permissive kernel.yama.ptrace_scope, or "
                            "CAP_SYS_PTRACE", where);
    case ESRCH:
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "%s: no such process (ESRCH): the peer is gone",
                            where);
    case EFAULT:
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "%s: bad address (EFAULT) reading %" PRIu64
                            " bytes at 0x%" PRIx64 ": not mapped in the "
                            "peer, or a bad local destination", where,
                            it->n - c.done, it->remote + c.done);
    case 0:
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "%s: process_vm_readv made no progress at 0x%"
                            PRIx64, where, it->remote + c.done);
    default:
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "%s: process_vm_readv failed: %s", where,
                            strerror(err));
    }
}

/* Credits the groups finished before the cursor, then forgets the batch. */
static void settle(rs_transport_h t, cma_cursor_t c)
{
    cma_state_t *s = t->priv;
    uint32_t stop = c.item < s->items_len ? s->items[c.item].group
                                          : (uint32_t)s->groups_len;
    for (size_t g = 0; g < s->groups_len && g < stop; g++) {
        t->counters.reads += s->groups[g].reads;
        t->counters.bytes += s->groups[g].bytes;
    }
    cma_cancel(t);
}

static rs_status_t timed_out(rs_transport_h t, cma_cursor_t c,
                             double timeout_s, rs_diag_t *diag)
{
    cma_state_t *s = t->priv;
    rs_status_t st = rs__groups_timed_out(t, &s->peers, s->groups,
                                          s->groups_len,
                                          s->items[c.item].group, timeout_s,
                                          diag);
    cma_cancel(t);
    return st;
}

static rs_status_t cma_wait(rs_transport_h t, double timeout_s,
                            rs_diag_t *diag)
{
    cma_state_t *s = t->priv;
    double deadline = timeout_s > 0 ? rs__now_s() + timeout_s : 0;
    cma_cursor_t c = {0, 0};
    while (c.item < s->items_len) {
        if (deadline > 0 && rs__now_s() > deadline)
            return timed_out(t, c, timeout_s, diag);
        if (rs_cancel_raised(t->params.cancel)) {
            cma_cancel(t);
            return rs__diag_set(diag, RS_ERR_CANCELLED, "reads cancelled");
        }
        int k = fill_iovs(s, c);
        int64_t pid = s->peers.v[s->groups[s->items[c.item].group].session].pid;
        ssize_t got = process_vm_readv((pid_t)pid, s->liov, (unsigned long)k,
                                       s->riov, (unsigned long)k, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            rs_status_t st = read_error(s, c, got < 0 ? errno : 0, diag);
            settle(t, c);
            return st;
        }
        const cma_item_t *it = &s->items[c.item];
        if (it->tap != NULL) /* what just landed, from the cache */
            rs_digest_update(&it->tap->digest, it->dst + c.done, (size_t)got);
        advance(s, &c, (uint64_t)got);
    }
    settle(t, c);
    return RS_OK;
}

const rs__transport_ops_t rs__transport_cma = {
    .name = "cma",
    .open = cma_open,
    .close = cma_close,
    .connect = cma_connect,
    .post = cma_post,
    .wait = cma_wait,
    .cancel = cma_cancel,
    .fuses_digests = 1,
};

/* The backend's one table: this transport and its exposer. */
const rs__backend_t rs__backend_cma = {
    "cma", &rs__transport_cma, &rs__exposer_cma};
