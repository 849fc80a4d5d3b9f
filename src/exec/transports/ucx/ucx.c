/* The `ucx` transport: one-sided reads (ucp_get_nbx) from exposers in other
 * processes or hosts. Connect decodes the peer's blob (worker address and
 * one packed rkey per region), creates the endpoint and unpacks the rkeys
 * once; later batches reuse them. Post checks and queues reads; wait
 * (ucx_wait.c) issues every session's gets before it awaits any. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ucs/config/global_opts.h>

#include "core/clock.h"
#include "core/diag.h"
#include "exec/backend.h"
#include "exec/transports/blob.h"
#include "exec/transports/ucx/ucx_impl.h"

/* A flushed close gets this long before the endpoint is abandoned to the
 * worker's own cleanup. */
#define CLOSE_WAIT_S 2.0
/* address, size, remote address, rkey length */
#define REGION_MIN_BYTES 28u

static rs_status_t ucx_open(rs_transport_h t, rs_diag_t *diag)
{
    ucx_state_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "ucx transport state");
    /* A transport is used by one thread at a time. */
    rs_status_t st = rs__ucx_open(&s->u, 0, 0, UCS_THREAD_MODE_SINGLE,
                                  "ucx transport", diag);
    if (st != RS_OK) {
        free(s);
        return st;
    }
    t->priv = s;
    return RS_OK;
}

static void sess_free(ucx_state_t *s, ucx_sess_t *x)
{
    if (x == NULL)
        return;
    rs__ucx_sess_down(s, x, x->failed != UCS_OK);
    free(x->regions);
    free(x->blob);
    free(x);
}

static void ucx_close(rs_transport_h t)
{
    ucx_state_t *s = t->priv;
    rs__ucx_quiet_begin();
    for (size_t i = 0; i < s->nsess; i++)
        sess_free(s, s->sess[i]);
    rs__ucx_worker_quiesce(&s->u); /* the closes' own traffic */
    rs__ucx_quiet_end();
    free(s->sess);
    rs__peers_free(&s->peers);
    free(s->pieces);
    free(s->groups);
    /* Requests left behind by a peer that died over a transport that
     * cannot tell (shared memory) make UCX warn at cleanup. */
    rs__ucx_quiet_begin();
    rs__ucx_close(&s->u);
    rs__ucx_quiet_end();
    free(s);
    t->priv = NULL;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    ucx_sess_t *x = arg;
    if (x->failed == UCS_OK)
        x->failed = status;
}

/* ucp_ep_create in PEER mode without UCX's error log (unless UCX_LOG_LEVEL
 * asks for it): over shared memory the refusal is expected and answered by
 * retrying without it. */
static ucs_status_t create_quietly(ucp_worker_h worker,
                                   const ucp_ep_params_t *params,
                                   ucp_ep_h *ep_p)
{
    ucs_log_level_t level = ucs_global_opts.log_component.log_level;
    if (level > UCS_LOG_LEVEL_FATAL && getenv("UCX_LOG_LEVEL") == NULL)
        ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_FATAL;
    ucs_status_t us = ucp_ep_create(worker, params, ep_p);
    ucs_global_opts.log_component.log_level = level;
    return us;
}

void rs__ucx_add_cause(rs_diag_t *diag, unsigned long mark)
{
    char cause[200];
    if (diag == NULL || !rs__ucx_quiet_cause(mark, cause, sizeof(cause)))
        return;
    size_t len = strlen(diag->msg);
    snprintf(diag->msg + len, sizeof(diag->msg) - len, " (UCX: %s)", cause);
}

/* Where a region is mapped into this process, when UCX allocated it in
 * shared memory (an exposer's arena): reading it is then a plain copy, the
 * very copy a get over that memory makes, without the per-get cost. Any
 * other memory (registered caller memory, remote hosts) is read with
 * gets. */
static const uint8_t *map_direct(const ucx_rinfo_t *r)
{
    void *p = NULL;
    if (getenv("RESHARD_UCX_GETS") != NULL) /* always gets: for comparisons */
        return NULL;
    if (ucp_rkey_ptr(r->rkey, r->remote, &p) != UCS_OK)
        return NULL;
    return p;
}

static rs_status_t sess_up(ucx_state_t *s, ucx_sess_t *x, const char *name,
                           unsigned long mark, rs_diag_t *diag)
{
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = (const ucp_address_t *)(x->blob + x->addr_off);
    /* A dead peer fails requests instead of leaving them hanging. */
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_ep_error;
    ep.err_handler.arg = x;
    x->failed = UCS_OK;
    ucs_status_t us = create_quietly(s->u.worker, &ep, &x->ep);
    if (us == UCS_ERR_UNREACHABLE) {
        /* Shared-memory transports cannot detect a dead peer (UCX refuses
         * PEER mode over them); the wait's timeout covers that case. */
        ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        us = ucp_ep_create(s->u.worker, &ep, &x->ep);
    }
    if (us != UCS_OK) {
        x->ep = NULL;
        return rs__ucx_peer_failed(diag, x->session, name, "ucp_ep_create",
                                   us, mark);
    }
    for (size_t i = 0; i < x->nregions; i++) {
        ucx_rinfo_t *r = &x->regions[i];
        us = ucp_ep_rkey_unpack(x->ep, x->blob + r->rkey_off, &r->rkey);
        if (us != UCS_OK) {
            r->rkey = NULL;
            rs__ucx_sess_down(s, x, 1);
            char what[64];
            snprintf(what, sizeof(what), "unpacking the rkey of region %zu",
                     i);
            return rs__ucx_peer_failed(diag, x->session, name, what, us,
                                       mark);
        }
        r->direct = map_direct(r);
    }
    return RS_OK;
}

rs_status_t rs__ucx_sess_up(ucx_state_t *s, ucx_sess_t *x, const char *name,
                            rs_diag_t *diag)
{
    if (x->ep != NULL)
        return RS_OK;
    unsigned long mark = rs__ucx_quiet_begin();
    rs_status_t st = sess_up(s, x, name, mark, diag);
    rs__ucx_quiet_end();
    return st;
}

static void destroy_rkeys(ucx_sess_t *x)
{
    for (size_t i = 0; i < x->nregions; i++) {
        if (x->regions[i].rkey != NULL)
            ucp_rkey_destroy(x->regions[i].rkey);
        x->regions[i].rkey = NULL;
        x->regions[i].direct = NULL; /* the mapping went with the rkey */
    }
}

static void sess_down(ucx_state_t *s, ucx_sess_t *x, int force)
{
    if (!force) /* nothing is outstanding: keys go before their endpoint */
        destroy_rkeys(x);
    if (x->ep == NULL) {
        destroy_rkeys(x);
        return;
    }
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void *req = ucp_ep_close_nbx(x->ep, &p);
    x->ep = NULL;
    /* A forced close has completed every get as cancelled: the keys are
     * no longer in use. */
    destroy_rkeys(x);
    if (req == NULL || UCS_PTR_IS_ERR(req))
        return;
    double end = rs__now_s() + CLOSE_WAIT_S;
    while (ucp_request_check_status(req) == UCS_INPROGRESS &&
           rs__now_s() < end)
        ucp_worker_progress(s->u.worker);
    ucp_request_free(req);
}

void rs__ucx_sess_down(ucx_state_t *s, ucx_sess_t *x, int force)
{
    rs__ucx_quiet_begin();
    sess_down(s, x, force);
    rs__ucx_quiet_end();
}

/* ---- blob decoding ---------------------------------------------------- */

/* A region as decoded, before sorting. */
typedef struct raw_region {
    rs_region_t reg;
    ucx_rinfo_t info;
} raw_region_t;

static int raw_cmp(const void *a, const void *b)
{
    const raw_region_t *x = a, *y = b;
    return x->reg.addr < y->reg.addr ? -1 : x->reg.addr > y->reg.addr;
}

static rs_status_t malformed(uint32_t session, const rs_peer_t *peer,
                             rs_diag_t *diag, const char *fmt, ...)
    RS_PRINTF(4, 5);

static rs_status_t malformed(uint32_t session, const rs_peer_t *peer,
                             rs_diag_t *diag, const char *fmt, ...)
{
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    return rs__diag_set(diag, RS_ERR_INPUT,
                        "session %" PRIu32 " (%s): malformed ucx blob of %zu "
                        "bytes: %s", session,
                        peer->name != NULL ? peer->name : "", peer->blob_len,
                        detail);
}

/* The header and worker address; leaves the reader at the region count. */
static rs_status_t decode_head(rs__blob_reader_t *r, uint32_t session,
                               const rs_peer_t *peer, ucx_sess_t *x,
                               rs_diag_t *diag)
{
    int backend = rs__blob_read_header(r);
    if (backend < 0)
        return malformed(session, peer, diag, "it does not start with the "
                         "magic \"RSB1\" and a backend byte");
    if (backend != RS_BLOB_UCX)
        return malformed(session, peer, diag, "backend byte %d (%s), not "
                         "ucx (%d)", backend, rs__blob_backend_name(backend),
                         RS_BLOB_UCX);
    uint32_t len;
    const uint8_t *addr;
    if (!rs__blob_read_u32(r, &len))
        return malformed(session, peer, diag, "truncated before the worker "
                         "address length");
    if (len == 0)
        return malformed(session, peer, diag, "empty worker address");
    if (!rs__blob_read_bytes(r, len, &addr))
        return malformed(session, peer, diag, "worker address of %" PRIu32
                         " bytes with only %zu left", len, r->len - r->off);
    x->addr_off = (size_t)(addr - r->p);
    x->addr_len = len;
    return RS_OK;
}

static rs_status_t decode_region(rs__blob_reader_t *r, uint32_t session,
                                 const rs_peer_t *peer, uint32_t k,
                                 raw_region_t *out, rs_diag_t *diag)
{
    uint32_t klen;
    const uint8_t *key;
    if (!rs__blob_read_u64(r, &out->reg.addr) || !rs__blob_read_u64(r, &out->reg.nbytes) ||
        !rs__blob_read_u64(r, &out->info.remote) || !rs__blob_read_u32(r, &klen))
        return malformed(session, peer, diag, "region %" PRIu32 " is "
                         "truncated", k);
    if (klen == 0)
        return malformed(session, peer, diag, "region %" PRIu32 " has an "
                         "empty rkey", k);
    if (!rs__blob_read_bytes(r, klen, &key))
        return malformed(session, peer, diag, "rkey of region %" PRIu32
                         " has %" PRIu32 " bytes with only %zu left", k, klen,
                         r->len - r->off);
    if (out->info.remote + out->reg.nbytes < out->info.remote)
        return malformed(session, peer, diag, "region %" PRIu32 " wraps "
                         "around the remote address space", k);
    out->reg.local = NULL;
    out->info.rkey_off = (size_t)(key - r->p);
    out->info.rkey_len = klen;
    out->info.rkey = NULL;
    return RS_OK;
}

/* Decodes x->blob (a copy of peer->blob) into x and *raw_p (sorted by
 * published address); never reads past the blob. */
static rs_status_t decode(uint32_t session, const rs_peer_t *peer,
                          ucx_sess_t *x, raw_region_t **raw_p,
                          rs_diag_t *diag)
{
    rs__blob_reader_t r = {x->blob, peer->blob_len, 0};
    rs_status_t st = decode_head(&r, session, peer, x, diag);
    uint32_t n;
    if (st != RS_OK)
        return st;
    if (!rs__blob_read_u32(&r, &n))
        return malformed(session, peer, diag, "truncated before the region "
                         "count");
    if (n > (r.len - r.off) / REGION_MIN_BYTES)
        return malformed(session, peer, diag, "%" PRIu32 " regions cannot "
                         "fit in the %zu bytes left", n, r.len - r.off);
    raw_region_t *raw = calloc(n > 0 ? n : 1, sizeof(*raw));
    if (raw == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "session %" PRIu32
                            ": %" PRIu32 " regions", session, n);
    for (uint32_t k = 0; k < n && st == RS_OK; k++)
        st = decode_region(&r, session, peer, k, &raw[k], diag);
    if (st == RS_OK && r.off != r.len)
        st = malformed(session, peer, diag, "%zu trailing bytes after the "
                       "last region", r.len - r.off);
    if (st != RS_OK) {
        free(raw);
        return st;
    }
    qsort(raw, n, sizeof(*raw), raw_cmp);
    x->nregions = n;
    *raw_p = raw;
    return RS_OK;
}

/* ---- sessions ----------------------------------------------------------- */

static rs_status_t slot(ucx_state_t *s, uint32_t session, rs_diag_t *diag)
{
    void *v = s->sess;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): the elements are pointers
    rs_status_t st = rs__session_table_grow(&v, &s->nsess, sizeof(*s->sess),
                                            session, "ucx sessions", diag);
    s->sess = v;
    return st;
}

/* Region table entries of the decoded session (sorted like raw). */
static rs_status_t check_regions(const raw_region_t *raw, ucx_sess_t *x,
                                 const rs_peer_t *peer, rs__peers_t *staged,
                                 rs_diag_t *diag)
{
    rs_region_t *regs = calloc(x->nregions > 0 ? x->nregions : 1,
                               sizeof(rs_region_t));
    x->regions = calloc(x->nregions > 0 ? x->nregions : 1,
                        sizeof(ucx_rinfo_t));
    if (regs == NULL || x->regions == NULL) {
        free(regs);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "session %" PRIu32
                            ": regions", x->session);
    }
    for (size_t i = 0; i < x->nregions; i++) {
        x->regions[i] = raw[i].info;
        regs[i] = raw[i].reg;
    }
    rs_peer_t checked = {peer->name, peer->pid, regs, x->nregions, NULL, 0};
    rs_status_t st = rs__peers_connect(staged, x->session, &checked, 0, diag);
    free(regs);
    if (st == RS_ERR_INVALID_ARG && diag != NULL) {
        /* The peer's blob is at fault, not our caller. */
        char inner[RS_DIAG_MSG_MAX];
        memcpy(inner, diag->msg, sizeof(inner));
        st = malformed(x->session, peer, diag, "%.600s", inner);
    } else if (st == RS_ERR_INVALID_ARG) {
        st = RS_ERR_INPUT;
    }
    return st;
}

/* Decodes and checks the peer into a new session (endpoint not yet up) and
 * its session-table entry in `staged`. */
static rs_status_t build_sess(uint32_t session, const rs_peer_t *peer,
                              rs__peers_t *staged, ucx_sess_t **x_p,
                              rs_diag_t *diag)
{
    ucx_sess_t *x = calloc(1, sizeof(*x));
    if (x == NULL || (x->blob = malloc(peer->blob_len)) == NULL) {
        free(x);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "session %" PRIu32
                            ": blob copy", session);
    }
    x->session = session;
    memcpy(x->blob, peer->blob, peer->blob_len);
    raw_region_t *raw = NULL;
    rs_status_t st = decode(session, peer, x, &raw, diag);
    if (st == RS_OK)
        st = check_regions(raw, x, peer, staged, diag);
    free(raw);
    if (st != RS_OK) {
        free(x->regions);
        free(x->blob);
        free(x);
        return st;
    }
    *x_p = x;
    return RS_OK;
}

/* Moves the staged table entry of `session` into the live table. */
static rs_status_t adopt_peer(ucx_state_t *s, uint32_t session,
                              const rs__peers_t *staged, rs_diag_t *diag)
{
    const rs__peer_t *p = &staged->v[session];
    rs_peer_t checked = {p->name, p->pid, p->regions, p->nregions, NULL, 0};
    return rs__peers_connect(&s->peers, session, &checked, 0, diag);
}

/* Connecting again replaces the session; until the new peer is decoded,
 * checked and reachable, the old one stays in place. */
static rs_status_t ucx_connect(rs_transport_h t, uint32_t session,
                               const rs_peer_t *peer, rs_diag_t *diag)
{
    ucx_state_t *s = t->priv;
    if (peer->blob == NULL || peer->blob_len == 0)
        return rs__diag_set(diag, RS_ERR_INPUT,
                            "session %" PRIu32 " (%s): no ucx blob (the "
                            "peer's worker address and rkeys)", session,
                            peer->name != NULL ? peer->name : "");
    rs_status_t st = slot(s, session, diag);
    if (st != RS_OK)
        return st;
    rs__peers_t staged = {0};
    ucx_sess_t *x = NULL;
    st = build_sess(session, peer, &staged, &x, diag);
    if (st == RS_OK)
        st = rs__ucx_sess_up(s, x, staged.v[session].name, diag);
    if (st == RS_OK)
        st = adopt_peer(s, session, &staged, diag);
    rs__peers_free(&staged);
    if (st != RS_OK) {
        sess_free(s, x);
        return st;
    }
    sess_free(s, s->sess[session]);
    s->sess[session] = x;
    return RS_OK;
}

/* ---- post ---------------------------------------------------------------- */

typedef struct piece_ctx {
    rs_transport_h t;
    ucx_state_t *s;
    const rs__peer_t *peer;
    const ucx_sess_t *x;
    size_t first;
} piece_ctx_t;

/* Queues one piece, merged with the previous one when both its source (in
 * the same region) and its destination continue it and both feed the same
 * tap (or none), so a mapped copy feeds each tap alone and in order. */
static int push_piece(void *ctx, const rs_region_t *r, uint64_t addr,
                      uint8_t *dst, uint64_t n)
{
    piece_ctx_t *p = ctx;
    ucx_state_t *s = p->s;
    uint32_t region = (uint32_t)(r - p->peer->regions);
    uint64_t remote = p->x->regions[region].remote + (addr - r->addr);
    rs__tap_t *tap = rs__transport_tap(p->t, dst, n);
    if (s->pieces_len > p->first) {
        ucx_piece_t *last = &s->pieces[s->pieces_len - 1];
        if (last->region == region && last->remote + last->n == remote &&
            (uintptr_t)last->dst + last->n == (uintptr_t)dst &&
            last->tap == tap) {
            last->n += n;
            return 1;
        }
    }
    ucx_piece_t piece = {dst, remote, n, region, NULL, tap};
    return RS_VEC_PUSH(s, pieces, piece);
}

/* Checks and queues; nothing is issued before wait, so a batch refused in
 * a later session has moved no byte. */
static rs_status_t ucx_post(rs_transport_h t, uint32_t session,
                            const rs_read_t *reads, size_t n, rs_diag_t *diag)
{
    ucx_state_t *s = t->priv;
    const rs__peer_t *peer = rs__peers_get(&s->peers, session, diag);
    if (peer == NULL)
        return RS_ERR_TRANSPORT;
    piece_ctx_t ctx = {t, s, peer, s->sess[session], s->pieces_len};
    ucx_group_t g = {session, n, 0, ctx.first, 0, 0, UCS_OK,
                     UCS_INPROGRESS};
    rs_status_t st = RS_OK;
    for (size_t i = 0; i < n && st == RS_OK; i++) {
        st = rs__peer_for_pieces(peer, session, &reads[i], 0, push_piece,
                                 &ctx, diag);
        g.bytes += reads[i].nbytes;
    }
    g.end = s->pieces_len;
    if (st == RS_OK && !RS_VEC_PUSH(s, groups, g))
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY,
                          "session %" PRIu32 ": work list", session);
    if (st != RS_OK)
        s->pieces_len = ctx.first;
    return st;
}

/* Nothing is in flight outside wait, which drains before it returns: the
 * queue is simply forgotten. */
static void ucx_cancel(rs_transport_h t)
{
    ucx_state_t *s = t->priv;
    s->pieces_len = 0;
    s->groups_len = 0;
}

const rs__transport_ops_t rs__transport_ucx = {
    .name = "ucx",
    .open = ucx_open,
    .close = ucx_close,
    .connect = ucx_connect,
    .post = ucx_post,
    .wait = rs__ucx_wait,
    .cancel = ucx_cancel,
    /* only reads of mapped regions (shared memory) feed their taps: gets
     * leave theirs unfed, and the executor digests those after the wire */
    .fuses_digests = 1,
};

/* The backend's one table: this transport and its exposer. */
const rs__backend_t rs__backend_ucx = {
    "ucx", &rs__transport_ucx, &rs__exposer_ucx};
