/* The session table shared by the transport backends: copies what connect
 * is given, keeps regions sorted for binary search, and checks each read
 * against them so a bad batch is refused before any byte moves. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "exec/transports/peers.h"

static int region_cmp(const void *a, const void *b)
{
    const rs_region_t *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Regions must be non-empty, not wrap, and not overlap once sorted. */
static rs_status_t check_regions(const rs_region_t *r, size_t n,
                                 uint32_t session, unsigned need,
                                 rs_diag_t *diag)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t end;
        if (r[i].nbytes == 0 || !rs__add_u64(r[i].addr, r[i].nbytes, &end))
            return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                                "session %" PRIu32 ": region [0x%" PRIx64
                                ", +%" PRIu64 ") is empty or wraps",
                                session, r[i].addr, r[i].nbytes);
        if ((need & RS_PEER_NEED_LOCAL) && r[i].local == NULL)
            return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                                "session %" PRIu32 ": region at 0x%" PRIx64
                                " has no local pointer (required by an "
                                "in-process backend)",
                                session, r[i].addr);
        if (i + 1 < n && end > r[i + 1].addr)
            return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                                "session %" PRIu32 ": regions at 0x%" PRIx64
                                " and 0x%" PRIx64 " overlap",
                                session, r[i].addr, r[i + 1].addr);
    }
    return RS_OK;
}

static void peer_clear(rs__peer_t *p)
{
    free(p->name);
    free(p->regions);
    memset(p, 0, sizeof(*p));
}

rs_status_t rs__session_table_grow(void **table, size_t *len, size_t elsize,
                                   uint32_t session, const char *what,
                                   rs_diag_t *diag)
{
    if (session < *len)
        return RS_OK;
    if (session >= RS_PEERS_MAX_SESSIONS)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "session %" PRIu32 " is out of range (max %u)",
                            session, RS_PEERS_MAX_SESSIONS - 1);
    size_t n = (size_t)session + 1;
    if (n < 2 * *len)
        n = 2 * *len;
    unsigned char *v = realloc(*table, n * elsize);
    if (v == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "%s: %zu sessions", what,
                            n);
    memset(v + *len * elsize, 0, (n - *len) * elsize);
    *table = v;
    *len = n;
    return RS_OK;
}

static rs_status_t grow(rs__peers_t *peers, uint32_t session, rs_diag_t *diag)
{
    void *v = peers->v;
    rs_status_t st = rs__session_table_grow(&v, &peers->len, sizeof(*peers->v),
                                            session, "session table", diag);
    peers->v = v;
    return st;
}

static rs_status_t copy_peer(const rs_peer_t *peer, uint32_t session,
                             unsigned need, rs__peer_t *out, rs_diag_t *diag)
{
    out->pid = peer->pid;
    out->nregions = peer->nregions;
    out->name = strdup(peer->name != NULL ? peer->name : "");
    if (peer->nregions > 0)
        out->regions = malloc(peer->nregions * sizeof(rs_region_t));
    if (out->name == NULL || (peer->nregions > 0 && out->regions == NULL))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY,
                            "session %" PRIu32 ": copying %zu regions",
                            session, peer->nregions);
    if (peer->nregions > 0) {
        memcpy(out->regions, peer->regions,
               peer->nregions * sizeof(rs_region_t));
        qsort(out->regions, peer->nregions, sizeof(rs_region_t), region_cmp);
    }
    return check_regions(out->regions, out->nregions, session, need, diag);
}

rs_status_t rs__peers_connect(rs__peers_t *peers, uint32_t session,
                              const rs_peer_t *peer, unsigned need,
                              rs_diag_t *diag)
{
    if (peer == NULL || (peer->nregions > 0 && peer->regions == NULL))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "session %" PRIu32 ": no peer or no regions "
                            "array", session);
    if ((need & RS_PEER_NEED_PID) && peer->pid <= 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "session %" PRIu32 ": pid %" PRId64
                            " is not a process id", session, peer->pid);
    rs_status_t st = grow(peers, session, diag);
    if (st != RS_OK)
        return st;
    rs__peer_t fresh = {0};
    st = copy_peer(peer, session, need, &fresh, diag);
    if (st != RS_OK) {
        peer_clear(&fresh);
        return st;
    }
    peer_clear(&peers->v[session]);
    fresh.connected = 1;
    peers->v[session] = fresh;
    return RS_OK;
}

const rs__peer_t *rs__peers_get(const rs__peers_t *peers, uint32_t session,
                                rs_diag_t *diag)
{
    if (session < peers->len && peers->v[session].connected)
        return &peers->v[session];
    rs__diag_set(diag, RS_ERR_TRANSPORT,
                 "session %" PRIu32 " is not connected", session);
    return NULL;
}

rs_status_t rs__peer_check_read(const rs__peer_t *peer, uint32_t session,
                                const rs_read_t *read, int unbounded,
                                const rs_region_t **region_p, rs_diag_t *diag)
{
    if (read->nbytes > 0 && read->dst == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "session %" PRIu32 " (%s): read of %" PRIu64
                            " bytes at 0x%" PRIx64 " has no destination",
                            session, peer->name, read->nbytes,
                            read->src_addr);
    if (read->nbytes == 0 || (unbounded && peer->nregions == 0)) {
        *region_p = NULL;
        return RS_OK;
    }
    const rs_region_t *r = rs__region_find(peer->regions, peer->nregions,
                                           read->src_addr, read->nbytes);
    if (r == NULL)
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "session %" PRIu32 " (%s): read of %" PRIu64
                            " bytes at 0x%" PRIx64
                            " lies outside every published region",
                            session, peer->name, read->nbytes,
                            read->src_addr);
    *region_p = r;
    return RS_OK;
}

rs_status_t rs__peer_for_pieces(const rs__peer_t *peer, uint32_t session,
                                const rs_read_t *read, int unbounded,
                                rs__piece_fn fn, void *ctx, rs_diag_t *diag)
{
    const rs_region_t *r = NULL;
    rs_read_t rest = *read;
    rs_status_t st = RS_OK;
    if (read->nbytes == 0 || (unbounded && peer->nregions == 0)) {
        st = rs__peer_check_read(peer, session, read, unbounded, &r, diag);
        if (st == RS_OK && read->nbytes > 0 &&
            !fn(ctx, NULL, read->src_addr, read->dst, read->nbytes))
            st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "session %" PRIu32
                              ": work list", session);
        return st;
    }
    while (rest.nbytes > 0) {
        r = rs__region_find(peer->regions, peer->nregions, rest.src_addr, 1);
        if (r == NULL) /* names the whole read, not just the tail */
            return rs__peer_check_read(peer, session, read, 0, &r, diag);
        uint64_t room = r->nbytes - (rest.src_addr - r->addr);
        uint64_t take = rest.nbytes < room ? rest.nbytes : room;
        if (!fn(ctx, r, rest.src_addr, rest.dst, take))
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "session %" PRIu32
                                ": work list", session);
        rest.src_addr += take;
        rest.dst = (uint8_t *)rest.dst + take;
        rest.nbytes -= take;
    }
    return RS_OK;
}

const char *rs__peers_name(const rs__peers_t *peers, uint32_t session)
{
    if (session < peers->len && peers->v[session].connected)
        return peers->v[session].name;
    return "?";
}

void rs__peers_free(rs__peers_t *peers)
{
    for (size_t i = 0; i < peers->len; i++)
        peer_clear(&peers->v[i]);
    free(peers->v);
    peers->v = NULL;
    peers->len = 0;
}

rs_status_t rs__timeout_begin(rs_diag_t *diag, double timeout_s)
{
    return rs__diag_set(diag, RS_ERR_TIMEOUT,
                        "transport: timed out after %.3g s; sessions still "
                        "outstanding:", timeout_s);
}

rs_status_t rs__stall_begin(rs_diag_t *diag, double stall_s)
{
    return rs__diag_set(diag, RS_ERR_TIMEOUT,
                        "transport: no progress for %.3g s (the stall "
                        "bound); sessions stalled:", stall_s);
}

void rs__timeout_add(rs_diag_t *diag, const rs__peers_t *peers,
                     uint32_t session)
{
    if (diag == NULL)
        return;
    size_t len = strlen(diag->msg);
    size_t room = sizeof(diag->msg) - len;
    char item[96];
    int k = snprintf(item, sizeof(item), " %" PRIu32 " (%.64s)", session,
                     rs__peers_name(peers, session));
    if (k > 0 && (size_t)k + 5 < room)
        memcpy(diag->msg + len, item, (size_t)k + 1);
    else if (room > 5 && strcmp(diag->msg + len - 4, " ...") != 0)
        memcpy(diag->msg + len, " ...", 5);
}
