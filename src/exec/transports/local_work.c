/* Resolving reads of in-process peers into copies: the region lookup and
 * the refusal happen here, once per read, at post time. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "core/digest_copy.h"
#include "exec/transports/local_work.h"

static int push_copy(rs__worklist_t *w, const uint8_t *src, uint8_t *dst,
                     uint64_t n, uint32_t group, size_t first, rs__tap_t *tap)
{
    if (w->copies_len > first) {
        rs__copy_t *last = &w->copies[w->copies_len - 1];
        if (tap == NULL && last->tap == NULL &&
            (uintptr_t)last->src + last->n == (uintptr_t)src &&
            (uintptr_t)last->dst + last->n == (uintptr_t)dst) {
            last->n += n;
            w->bytes += n;
            return 1;
        }
    }
    uint64_t tap_off = w->bytes;
    if (tap != NULL && w->copies_len > first &&
        w->copies[w->copies_len - 1].tap == tap) /* the same read, on */
        tap_off = w->copies[w->copies_len - 1].tap_off;
    rs__copy_t c = {src, dst, n, w->bytes, group, tap, tap_off};
    if (!RS_VEC_PUSH(w, copies, c))
        return 0;
    w->bytes += n;
    return 1;
}

/* Undoes a partial append. */
static rs_status_t roll_back(rs__worklist_t *w, size_t copies, uint64_t bytes,
                             rs_status_t st)
{
    w->copies_len = copies;
    w->bytes = bytes;
    return st;
}

typedef struct {
    rs_transport_h t;
    rs__worklist_t *w;
    uint32_t group;
    size_t first;
} piece_ctx_t;

static int local_piece(void *ctx, const rs_region_t *r, uint64_t addr,
                       uint8_t *dst, uint64_t n)
{
    piece_ctx_t *p = ctx;
    const uint8_t *src = (const uint8_t *)r->local + (addr - r->addr);
    return push_copy(p->w, src, dst, n, p->group, p->first,
                     rs__transport_tap(p->t, dst, n));
}

rs_status_t rs__worklist_add(rs_transport_h t, rs__worklist_t *w,
                             const rs__peers_t *peers,
                             uint32_t session, const rs_read_t *reads,
                             size_t n, rs_diag_t *diag)
{
    const rs__peer_t *peer = rs__peers_get(peers, session, diag);
    if (peer == NULL)
        return RS_ERR_TRANSPORT;
    size_t first = w->copies_len;
    uint64_t bytes0 = w->bytes;
    uint32_t group = (uint32_t)w->groups_len;
    piece_ctx_t ctx = {t, w, group, first};
    for (size_t i = 0; i < n; i++) {
        rs_status_t st = rs__peer_for_pieces(peer, session, &reads[i], 0,
                                             local_piece, &ctx, diag);
        if (st != RS_OK)
            return roll_back(w, first, bytes0, st);
    }
    rs__group_t g = {session, n, w->bytes - bytes0};
    if (!RS_VEC_PUSH(w, groups, g))
        return roll_back(w, first, bytes0,
                         rs__diag_set(diag, RS_ERR_NO_MEMORY,
                                      "session %" PRIu32 ": work list",
                                      session));
    return RS_OK;
}

rs_status_t rs__groups_timed_out(rs_transport_h t, const rs__peers_t *peers,
                                 const rs__group_t *groups, size_t n,
                                 size_t first, double timeout_s,
                                 rs_diag_t *diag)
{
    rs_status_t st = rs__timeout_begin(diag, timeout_s);
    for (size_t g = 0; g < n; g++) {
        if (g < first) {
            t->counters.reads += groups[g].reads;
            t->counters.bytes += groups[g].bytes;
        } else if (g == first || groups[g].session != groups[g - 1].session) {
            rs__timeout_add(diag, peers, groups[g].session);
        }
    }
    return st;
}

void rs__worklist_clear(rs__worklist_t *w)
{
    w->copies_len = 0;
    w->groups_len = 0;
    w->bytes = 0;
}

void rs__worklist_free(rs__worklist_t *w)
{
    free(w->copies);
    free(w->groups);
    w->copies = NULL;
    w->groups = NULL;
    w->copies_len = w->copies_cap = 0;
    w->groups_len = w->groups_cap = 0;
    w->bytes = 0;
}

void rs__local_base_free(rs__local_base_t *b)
{
    rs__peers_free(&b->peers);
    rs__worklist_free(&b->work);
}

rs_status_t rs__local_connect(rs_transport_h t, uint32_t session,
                              const rs_peer_t *peer, rs_diag_t *diag)
{
    rs__local_base_t *b = t->priv;
    return rs__peers_connect(&b->peers, session, peer, RS_PEER_NEED_LOCAL,
                             diag);
}

rs_status_t rs__local_post(rs_transport_h t, uint32_t session,
                           const rs_read_t *reads, size_t n, rs_diag_t *diag)
{
    rs__local_base_t *b = t->priv;
    return rs__worklist_add(t, &b->work, &b->peers, session, reads, n, diag);
}

void rs__local_cancel(rs_transport_h t)
{
    rs__local_base_t *b = t->priv;
    rs__worklist_clear(&b->work);
}

void rs__copy_run(const rs__copy_t *c, uint64_t skip, uint64_t n)
{
    if (c->tap != NULL)
        rs__digest_copy(&c->tap->digest, c->dst + skip, c->src + skip,
                        (size_t)n);
    else
        memcpy(c->dst + skip, c->src + skip, (size_t)n);
}
