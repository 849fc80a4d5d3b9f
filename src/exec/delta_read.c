/* A transport in front of the real one that serves reads from deltas
 * (delta_read.h). Posting sorts each read: one whose held copy holds the
 * start of a chain of listed deltas up to the run's version, and for which
 * the delta pays (delta_cost.c), is queued; any other is posted to the
 * real transport at once. Waiting reads the queued deltas, step by step
 * of their chains, each step as two round trips (header and index
 * entries, then the payload span), patches the held copies, reads every
 * refused one whole, waits for everything, then copies each patched copy
 * to its read's destination and refreshes the copies of the reads read
 * whole. A read landing in place is its own held copy: patched where it
 * lands, nothing copied either way. A failed wait fails as the real
 * transport's does. */
#include <stdlib.h>
#include <string.h>

#include "core/delta.h"
#include "core/delta_estimate.h"
#include "core/diag.h"
#include "core/vec.h"
#include "reshard/memory.h"
#include "exec/delta_read.h"
#include "exec/transport_impl.h"

#define MAX_CHAIN 16

/* The held copy of one read of the plan; or, for a read landing in memory
 * the receiver owns and keeps from one pull to the next (its shadows,
 * rs__delta_reads_in_place), the read's destination itself: `dst` then
 * names it (part of the key, NULL for a copy) and mem == dst, owned by
 * the receiver, never allocated, freed or counted against the budget. */
typedef struct held {
    uint32_t session;
    uint64_t addr, nbytes;
    unsigned char *dst;
    unsigned char *mem;
    int64_t held; /* the verified version mem holds; -1: none */
    int64_t now;  /* the version mem holds now; -1: none or mixed */
    int used;     /* refreshed or patched by this run */
} held_t;

/* A read posted in this batch. */
typedef struct pend {
    rs_read_t rd;
    held_t *h;
    const rs__delta_src_t *src;
    const rs__delta_ref_t *chain[MAX_CHAIN];
    int nchain, step;
    int delta;  /* queued for deltas (else posted whole) */
    int failed; /* a delta was refused: read whole */
    unsigned char *hdr, *idx, *pay;
    uint64_t first, count, idx_len, pay_len;
} pend_t;

typedef struct state {
    rs_transport_h inner;
    rs_transport_h outer; /* the wrapper: its stall bound and verdict */
    double nic, dns;
    int64_t version;
    rs__delta_src_t *srcs;
    size_t nsrc;
    rs__delta_ref_t *refs;
    size_t nref;
    held_t **tab; /* open addressing by (session, addr, nbytes) */
    size_t tab_cap, tab_n;
    RS_VEC(pend_t, pend);
    rs__delta_stats_t stats;
    /* The copies kept (rs__delta_reads_keep; keeping 0: every one), and
     * the memory this run may still take for new ones (avail_known 0:
     * not looked up yet this run). */
    int keeping;
    rs__delta_keep_t keep;
    int avail_known;
    uint64_t avail;
    /* The memory patched in place (sorted, disjoint), and the epoch it
     * was handed with (a new one: its bytes were written by others). */
    rs__delta_span_t *spans;
    size_t nspan;
    uint64_t epoch;
    /* The executor's staging when it keeps each staged read in its place
     * from run to run (rs__delta_reads_staging), and its generation. */
    rs__delta_span_t staging;
    uint64_t staging_gen;
} state_t;

static state_t *st_of(rs_transport_h t)
{
    return t->priv;
}

static uint64_t key_hash(uint32_t s, uint64_t a, uint64_t n,
                         const unsigned char *dst)
{
    uint64_t h = a * 0x9E3779B97F4A7C15ull ^ (n + ((uint64_t)s << 48)) ^
                 ((uint64_t)(uintptr_t)dst * 0xD6E8FEB86659FD93ull);
    h ^= h >> 29;
    return h * 0xBF58476D1CE4E5B9ull;
}

static int held_grow(state_t *s)
{
    size_t cap = s->tab_cap ? s->tab_cap * 2 : 64;
    held_t **tab = calloc(cap, sizeof(held_t *));
    if (tab == NULL)
        return 0;
    for (size_t i = 0; i < s->tab_cap; i++) {
        held_t *h = s->tab[i];
        if (h == NULL)
            continue;
        size_t k = key_hash(h->session, h->addr, h->nbytes, h->dst) &
                   (cap - 1);
        while (tab[k] != NULL)
            k = (k + 1) & (cap - 1);
        tab[k] = h;
    }
    free(s->tab);
    s->tab = tab;
    s->tab_cap = cap;
    return 1;
}

/* Memory for a new copy of n bytes, when it fits half of what
 * rs_memory_available reported at the run's first new copy, less the
 * copies made since (one look a run: new copies are made only while reads
 * are posted). Half: the copies are an optimization, so they leave the
 * engine, and the other ranks of the node looking at the same figure,
 * the other half. NULL (counted) when it does not fit or malloc fails:
 * the read is whole, never an out-of-memory kill. */
static unsigned char *copy_alloc(state_t *s, uint64_t n)
{
    const char *source;
    if (!s->avail_known) {
        if (rs_memory_available(&s->avail, &source) != RS_OK)
            s->avail = 0; /* a malformed override: keep nothing new */
        s->avail /= 2;
    }
    s->avail_known = 1;
    unsigned char *m = n <= s->avail ? malloc(n > 0 ? (size_t)n : 1) : NULL;
    if (m == NULL) {
        s->stats.no_memory_runs++;
        s->stats.no_memory_bytes += n;
        return NULL;
    }
    s->avail -= n;
    return m;
}

/* 1 when [a, a + n) lies wholly inside span sp. */
static int within(const rs__delta_span_t *sp, uintptr_t a, uint64_t n)
{
    const uintptr_t base = (uintptr_t)sp->base;
    return sp->base != NULL && a >= base && a - base < sp->nbytes &&
           n <= sp->nbytes - (a - base);
}

/* 1 when the read lands wholly inside memory patched in place. */
static int lands_in_place(const state_t *s, const rs_read_t *rd)
{
    uintptr_t a = (uintptr_t)rd->dst;
    size_t lo = 0, hi = s->nspan;
    if (rd->dst == NULL || rd->nbytes == 0)
        return 0;
    if (within(&s->staging, a, rd->nbytes))
        return 1;
    while (lo < hi) { /* the first span starting past a */
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)s->spans[mid].base <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && within(&s->spans[lo - 1], a, rd->nbytes);
}

/* The held copy of a read, made (holding nothing) when new: the read's
 * destination when it lands in place, else a copy of its own; NULL when
 * the budget keeps no copy of it or its memory is not there (the read is
 * then read whole, without a copy). */
static held_t *held_get(state_t *s, const rs_read_t *rd)
{
    unsigned char *dst = lands_in_place(s, rd) ? rd->dst : NULL;
    if (dst == NULL && s->keeping &&
        !rs__delta_keep_has(&s->keep, rd->session, rd->src_addr, rd->nbytes))
        return NULL;
    if ((s->tab_n + 1) * 2 > s->tab_cap && !held_grow(s))
        return NULL;
    size_t k = key_hash(rd->session, rd->src_addr, rd->nbytes, dst) &
               (s->tab_cap - 1);
    for (; s->tab[k] != NULL; k = (k + 1) & (s->tab_cap - 1)) {
        held_t *h = s->tab[k];
        if (h->session == rd->session && h->addr == rd->src_addr &&
            h->nbytes == rd->nbytes && h->dst == dst) {
            if (h->mem == NULL) /* dropped by an earlier budget */
                h->mem = copy_alloc(s, h->nbytes);
            return h->mem != NULL ? h : NULL;
        }
    }
    held_t *h = calloc(1, sizeof(*h));
    if (h == NULL ||
        (h->mem = dst != NULL ? dst : copy_alloc(s, rd->nbytes)) == NULL) {
        free(h);
        return NULL;
    }
    h->dst = dst;
    h->session = rd->session;
    h->addr = rd->src_addr;
    h->nbytes = rd->nbytes;
    h->held = h->now = -1;
    s->tab[k] = h;
    s->tab_n++;
    return h;
}

/* The published shard holding byte addr of the session (NULL: none), and
 * where the session's next one starts (UINT64_MAX: none). */
static const rs__delta_src_t *src_at(const rs__delta_src_t *srcs, size_t nsrc,
                                     uint32_t session, uint64_t addr,
                                     uint64_t *next_p)
{
    size_t lo = 0, hi = nsrc;
    while (lo < hi) { /* the first shard past (session, addr) */
        size_t mid = lo + (hi - lo) / 2;
        const rs__delta_src_t *m = &srcs[mid];
        if (m->session < session || (m->session == session && m->addr <= addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    *next_p = lo < nsrc && srcs[lo].session == session ? srcs[lo].addr
                                                        : UINT64_MAX;
    if (lo == 0)
        return NULL;
    const rs__delta_src_t *c = &srcs[lo - 1];
    return c->session == session && addr - c->addr < c->nbytes ? c : NULL;
}

rs_read_t rs__delta_piece(const rs__delta_src_t *srcs, size_t nsrc,
                          const rs_read_t *rd, uint64_t off,
                          const rs__delta_src_t **src_p)
{
    uint64_t addr = rd->src_addr + off, next, len = rd->nbytes - off;
    const rs__delta_src_t *c = src_at(srcs, nsrc, rd->session, addr, &next);
    if (c != NULL && c->addr + c->nbytes - addr < len)
        len = c->addr + c->nbytes - addr;
    else if (c == NULL && next > addr && next - addr < len)
        len = next - addr;
    *src_p = c;
    return (rs_read_t){rd->session, addr,
                       rd->dst != NULL ? (unsigned char *)rd->dst + off : NULL,
                       len};
}

/* The next piece of a read from byte `off` on (rs__delta_piece: a plan
 * reads adjacent bytes of several shards as one run); its shard when it
 * lists deltas and the run may use them. */
static rs_read_t next_piece(const state_t *s, const rs_read_t *rd,
                            uint64_t off, const rs__delta_src_t **src_p)
{
    const rs__delta_src_t *c;
    rs_read_t p = rs__delta_piece(s->srcs, s->nsrc, rd, off, &c);
    *src_p = c != NULL && c->count > 0 && s->version >= 0 ? c : NULL;
    return p;
}

/* The chain of listed deltas from `from` to the run's version (into p),
 * whose reads cost less than the whole range; 0 when there is none. */
static int plan_chain(const state_t *s, pend_t *p, int64_t from)
{
    const rs__delta_src_t *src = p->src;
    uint64_t bytes = 0, descs = 0, off = p->rd.src_addr - src->addr;
    int n = 0;
    for (int64_t at = from; at != s->version;) {
        const rs__delta_ref_t *next = NULL;
        for (size_t i = 0; i < src->count; i++) {
            const rs__delta_ref_t *r = &s->refs[src->first + i];
            if (r->base == at && r->version > at && r->version <= s->version)
                next = r;
        }
        if (next == NULL || n == MAX_CHAIN || next->esize == 0 ||
            off % next->esize != 0 || p->rd.nbytes % next->esize != 0 ||
            src->nbytes % next->esize != 0)
            return 0;
        uint64_t b, d;
        rs__delta_estimate(p->rd.nbytes, src->nbytes, next->bytes,
                           next->esize, next->chunk, &b, &d);
        bytes += b;
        descs += d;
        p->chain[n++] = next;
        at = next->version;
    }
    p->nchain = n;
    return n > 0 && rs__delta_read_pays(p->rd.nbytes, (double)bytes, descs,
                                        s->nic, s->dns);
}

static rs_status_t post_whole(state_t *s, rs_transport_h t,
                              const rs_read_t *reads, size_t n,
                              rs_diag_t *diag)
{
    if (n == 0)
        return RS_OK;
    rs__transport_set_taps(s->inner, t->taps, t->ntaps);
    return rs_transport_post(s->inner, reads, n, diag);
}

static rs_status_t add_read(rs_read_t **v, size_t *n, size_t *cap,
                            rs_read_t r)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        rs_read_t *g = realloc(*v, c * sizeof(*g));
        if (g == NULL)
            return RS_ERR_NO_MEMORY;
        *v = g;
        *cap = c;
    }
    (*v)[(*n)++] = r;
    return RS_OK;
}

/* Queues the pieces of one read: those a delta serves, and the others,
 * posted whole (the read as it is when no piece takes a delta). */
static rs_status_t sort_read(state_t *s, const rs_read_t *rd,
                             rs_read_t **whole, size_t *nwhole, size_t *cap)
{
    size_t first = s->pend_len;
    int any = 0;
    for (uint64_t off = 0; off < rd->nbytes || (off == 0 && rd->nbytes == 0);) {
        pend_t p;
        memset(&p, 0, sizeof(p));
        p.rd = next_piece(s, rd, off, &p.src);
        p.h = held_get(s, &p.rd);
        p.delta = p.src != NULL && p.h != NULL && p.h->held >= 0 &&
                  p.h->now == p.h->held && plan_chain(s, &p, p.h->held);
        any |= p.delta;
        if (!RS_VEC_PUSH(s, pend, p))
            return RS_ERR_NO_MEMORY;
        if (p.rd.nbytes == 0)
            break;
        off += p.rd.nbytes;
    }
    if (!any)
        return add_read(whole, nwhole, cap, *rd);
    for (size_t i = first; i < s->pend_len; i++)
        if (!s->pend[i].delta) {
            rs_status_t st = add_read(whole, nwhole, cap, s->pend[i].rd);
            if (st != RS_OK)
                return st;
        }
    return RS_OK;
}

static rs_status_t d_post(rs_transport_h t, uint32_t session,
                          const rs_read_t *reads, size_t n, rs_diag_t *diag)
{
    (void)session;
    state_t *s = st_of(t);
    rs_read_t *whole = NULL;
    size_t nwhole = 0, cap = 0;
    rs_status_t st = RS_OK;
    for (size_t i = 0; st == RS_OK && i < n; i++)
        st = sort_read(s, &reads[i], &whole, &nwhole, &cap);
    if (st != RS_OK)
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    else
        st = post_whole(s, t, whole, nwhole, diag);
    free(whole);
    return st;
}

static void pend_scratch_free(pend_t *p)
{
    free(p->hdr);
    free(p->idx);
    free(p->pay);
    p->hdr = p->idx = p->pay = NULL;
}

/* Waits for the real transport under the stall bound set on the wrapper
 * (the receiver's failover reads the wrapper's verdict), so a publisher
 * frozen while its deltas or whole bytes are read is failed over as in a
 * full pull. */
static rs_status_t inner_wait(state_t *s, double timeout, rs_diag_t *diag)
{
    s->inner->stall_s = s->outer->stall_s;
    rs_status_t st = rs_transport_wait(s->inner, timeout, diag);
    if (rs__transport_stalled(s->inner))
        s->outer->stalled = 1;
    return st;
}

/* Posts the n reads gathered (st: how gathering went) and waits for
 * them; frees the list. */
static rs_status_t round_trip(state_t *s, rs_status_t st, rs_read_t *v,
                              size_t n, double timeout, rs_diag_t *diag)
{
    if (st != RS_OK)
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (st == RS_OK && n > 0)
        st = rs_transport_post(s->inner, v, n, diag);
    if (st == RS_OK && n > 0)
        st = inner_wait(s, timeout, diag);
    free(v);
    return st;
}

/* The element range [a, b) of the read in its shard, for the step's
 * delta. */
static void step_range(const pend_t *p, uint64_t *a, uint64_t *b)
{
    const rs__delta_ref_t *r = p->chain[p->step];
    *a = (p->rd.src_addr - p->src->addr) / r->esize;
    *b = *a + p->rd.nbytes / r->esize;
}

/* Round trip one of a step: every active read's header and index
 * entries (sized from the table's element size and chunk). */
static rs_status_t post_heads(state_t *s, int step, double timeout,
                              rs_diag_t *diag, size_t *active_p)
{
    rs_read_t *v = NULL;
    size_t n = 0, cap = 0, active = 0;
    rs_status_t st = RS_OK;
    for (size_t i = 0; st == RS_OK && i < s->pend_len; i++) {
        pend_t *p = &s->pend[i];
        if (!p->delta || p->failed || step >= p->nchain)
            continue;
        p->step = step;
        const rs__delta_ref_t *r = p->chain[step];
        rs__delta_hdr_t h = {r->esize, r->chunk, p->src->nbytes / r->esize,
                             r->base, r->version, 0, 0};
        uint64_t a, b, off, len;
        step_range(p, &a, &b);
        if (a >= b || rs__delta_index_span(&h, a, b, NULL, &p->first,
                                           &p->count, &off, &len) != RS_OK ||
            off + len > r->bytes) {
            p->failed = 1;
            continue;
        }
        p->hdr = malloc(RS__DELTA_HEADER);
        p->idx = malloc((size_t)len);
        p->idx_len = len;
        if (p->hdr == NULL || p->idx == NULL) {
            st = RS_ERR_NO_MEMORY;
            break;
        }
        st = add_read(&v, &n, &cap, (rs_read_t){p->rd.session, r->addr,
                                                 p->hdr, RS__DELTA_HEADER});
        if (st == RS_OK)
            st = add_read(&v, &n, &cap, (rs_read_t){p->rd.session,
                                                     r->addr + off, p->idx,
                                                     len});
        active++;
    }
    st = round_trip(s, st, v, n, timeout, diag);
    *active_p = active;
    return st;
}

/* Round trip two: each read's header checked against the table, and the
 * payload span its index entries give. */
static rs_status_t post_payloads(state_t *s, double timeout, rs_diag_t *diag)
{
    rs_read_t *v = NULL;
    size_t n = 0, cap = 0;
    rs_status_t st = RS_OK;
    for (size_t i = 0; st == RS_OK && i < s->pend_len; i++) {
        pend_t *p = &s->pend[i];
        if (p->hdr == NULL || p->failed)
            continue;
        const rs__delta_ref_t *r = p->chain[p->step];
        rs__delta_hdr_t h;
        uint64_t off, len;
        if (rs__delta_parse_header(p->hdr, RS__DELTA_HEADER, NULL, &h) !=
                RS_OK ||
            h.esize != r->esize || h.chunk != r->chunk ||
            h.n != p->src->nbytes / r->esize || h.base != r->base ||
            h.version != r->version ||
            rs__delta_payload_span(&h, p->idx, p->count, NULL, &off, &len) !=
                RS_OK ||
            off + len > r->bytes) {
            p->failed = 1;
            continue;
        }
        p->pay_len = len;
        p->pay = malloc(len > 0 ? (size_t)len : 1);
        if (p->pay == NULL)
            st = RS_ERR_NO_MEMORY;
        else if (len > 0)
            st = add_read(&v, &n, &cap, (rs_read_t){p->rd.session,
                                                     r->addr + off, p->pay,
                                                     len});
    }
    st = round_trip(s, st, v, n, timeout, diag);
    return st;
}

/* Patches each read's held copy with its step's delta: every check first,
 * so a refused delta leaves the copy as it was. */
static void apply_step(state_t *s)
{
    for (size_t i = 0; i < s->pend_len; i++) {
        pend_t *p = &s->pend[i];
        if (p->hdr == NULL)
            continue;
        if (!p->failed) {
            const rs__delta_ref_t *r = p->chain[p->step];
            uint64_t a, b;
            step_range(p, &a, &b);
            s->stats.delta_bytes += RS__DELTA_HEADER + p->idx_len + p->pay_len;
            /* a copy already patched for another read of the batch (one
             * source range read into two places) is not patched again */
            int done = p->h->now == r->version;
            if (!done && (p->pay == NULL ||
                          rs__delta_apply_range(p->h->mem, a, b, p->h->now,
                                                p->hdr, p->idx, p->first,
                                                p->count, p->pay, p->pay_len,
                                                NULL) != RS_OK))
                p->failed = 1;
            else
                p->h->now = r->version;
        }
        pend_scratch_free(p);
    }
}

/* The deltas of every queued read, step by step of their chains. */
static rs_status_t read_deltas(state_t *s, double timeout, rs_diag_t *diag)
{
    for (int step = 0; step < MAX_CHAIN; step++) {
        size_t active = 0;
        rs_status_t st = post_heads(s, step, timeout, diag, &active);
        if (st == RS_OK && active > 0)
            st = post_payloads(s, timeout, diag);
        apply_step(s);
        if (st != RS_OK)
            return st;
        if (active == 0)
            return RS_OK;
    }
    return RS_OK;
}

/* The reads whose delta was refused, read whole. */
static rs_status_t post_refused(state_t *s, rs_transport_h t, rs_diag_t *diag)
{
    rs_read_t *v = NULL;
    size_t n = 0, cap = 0;
    rs_status_t st = RS_OK;
    for (size_t i = 0; st == RS_OK && i < s->pend_len; i++) {
        pend_t *p = &s->pend[i];
        if (p->delta && (p->failed || p->h->now != s->version)) {
            p->failed = 1;
            s->stats.refused++;
            st = add_read(&v, &n, &cap, p->rd);
        }
    }
    if (st != RS_OK)
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    else
        st = post_whole(s, t, v, n, diag);
    free(v);
    return st;
}

/* Every read is in: patched copies to their destinations (feeding the
 * read's digest tap, as the real transport does for what it copies), and
 * the bytes of reads read whole into their copies. A read patched in place
 * is its own copy: its tap is fed, nothing is copied. */
static void finish_reads(state_t *s, rs_transport_h t)
{
    for (size_t i = 0; i < s->pend_len; i++) {
        pend_t *p = &s->pend[i];
        if (p->delta && !p->failed) {
            if (p->h->dst == NULL)
                memcpy(p->rd.dst, p->h->mem, (size_t)p->rd.nbytes);
            rs__tap_t *tap = t->ntaps > 0
                                 ? rs__transport_tap(t, p->rd.dst, p->rd.nbytes)
                                 : NULL;
            if (tap != NULL)
                rs_digest_update(&tap->digest, p->rd.dst, (size_t)p->rd.nbytes);
            s->stats.delta_runs++;
            s->stats.delta_full += p->rd.nbytes;
            if (p->h->dst != NULL) {
                s->stats.in_place_runs++;
                s->stats.in_place_bytes += p->rd.nbytes;
            }
        } else {
            if (p->h != NULL) {
                if (p->h->dst == NULL)
                    memcpy(p->h->mem, p->rd.dst, (size_t)p->rd.nbytes);
                p->h->now = s->version;
            }
            s->stats.whole_runs++;
            s->stats.whole_bytes += p->rd.nbytes;
        }
        if (p->h != NULL)
            p->h->used = 1;
    }
}

static void drop_pending(state_t *s)
{
    for (size_t i = 0; i < s->pend_len; i++) {
        pend_scratch_free(&s->pend[i]);
        if (s->pend[i].h != NULL) /* its copy's bytes are unknown now */
            s->pend[i].h->now = -1;
    }
    s->pend_len = 0;
}

static void sync_counters(state_t *s, rs_transport_h t)
{
    rs_transport_counters_t c;
    rs_transport_counters(s->inner, &c);
    t->counters.reads = c.reads;
    t->counters.bytes = c.bytes;
}

static rs_status_t d_wait(rs_transport_h t, double timeout_s, rs_diag_t *diag)
{
    state_t *s = st_of(t);
    rs_status_t st = read_deltas(s, timeout_s, diag);
    if (st == RS_OK)
        st = post_refused(s, t, diag);
    if (st == RS_OK)
        st = inner_wait(s, timeout_s, diag);
    else
        rs_transport_cancel(s->inner);
    if (st == RS_OK)
        finish_reads(s, t);
    else
        for (size_t i = 0; i < s->pend_len; i++)
            if (s->pend[i].h != NULL)
                s->pend[i].h->used = 1;
    if (st == RS_OK)
        s->pend_len = 0;
    else
        drop_pending(s);
    sync_counters(s, t);
    return st;
}

static void d_cancel(rs_transport_h t)
{
    state_t *s = st_of(t);
    rs_transport_cancel(s->inner);
    drop_pending(s);
    sync_counters(s, t);
}

static rs_status_t d_open(rs_transport_h t, rs_diag_t *diag)
{
    (void)t;
    (void)diag;
    return RS_OK;
}

static void d_close(rs_transport_h t)
{
    state_t *s = st_of(t);
    if (s == NULL)
        return;
    drop_pending(s);
    for (size_t i = 0; i < s->tab_cap; i++) {
        if (s->tab[i] != NULL && s->tab[i]->dst == NULL)
            free(s->tab[i]->mem);
        free(s->tab[i]);
    }
    free(s->tab);
    free(s->spans);
    free(s->pend);
    free(s->srcs);
    free(s->refs);
    rs__delta_keep_free(&s->keep);
    rs_transport_destroy(s->inner);
    free(s);
    t->priv = NULL;
}

static rs_status_t d_connect(rs_transport_h t, uint32_t session,
                             const rs_peer_t *peer, rs_diag_t *diag)
{
    return rs_transport_connect(st_of(t)->inner, session, peer, diag);
}

static unsigned d_workers(rs_transport_h t)
{
    return rs__transport_workers(st_of(t)->inner);
}

/* Two tables: the wrapper fuses digests exactly when the real transport
 * does (it feeds the taps of the reads it patches itself). */
static const rs__transport_ops_t delta_ops = {
    "delta", d_open, d_close, d_connect, d_post, d_wait, d_cancel,
    d_workers, 0};
static const rs__transport_ops_t delta_ops_fused = {
    "delta", d_open, d_close, d_connect, d_post, d_wait, d_cancel,
    d_workers, 1};

rs_status_t rs__delta_reads_wrap(rs_transport_h inner, double nic_gbps,
                                 double descriptor_ns, rs_diag_t *diag,
                                 rs_transport_h *t_p)
{
    rs_transport_h t = calloc(1, sizeof(*t));
    state_t *s = calloc(1, sizeof(*s));
    if (t == NULL || s == NULL) {
        free(t);
        free(s);
        rs_transport_destroy(inner);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    s->inner = inner;
    s->outer = t;
    s->nic = nic_gbps > 0 ? nic_gbps : 400.0;
    s->dns = descriptor_ns > 0 ? descriptor_ns : 100.0;
    s->version = -1;
    t->ops = inner->ops->fuses_digests ? &delta_ops_fused : &delta_ops;
    t->params = inner->params;
    t->priv = s;
    *t_p = t;
    return RS_OK;
}

int rs__delta_reads_is(rs_transport_h t)
{
    return t != NULL && (t->ops == &delta_ops || t->ops == &delta_ops_fused);
}

rs_status_t rs__delta_reads_set(rs_transport_h t, int64_t version,
                                const rs__delta_src_t *srcs, size_t nsrc,
                                const rs__delta_ref_t *refs, size_t nref,
                                rs_diag_t *diag)
{
    state_t *s = st_of(t);
    rs__delta_src_t *sc = malloc((nsrc + 1) * sizeof(*sc));
    rs__delta_ref_t *rc = malloc((nref + 1) * sizeof(*rc));
    if (sc == NULL || rc == NULL) {
        free(sc);
        free(rc);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    if (nsrc > 0)
        memcpy(sc, srcs, nsrc * sizeof(*sc));
    if (nref > 0)
        memcpy(rc, refs, nref * sizeof(*rc));
    free(s->srcs);
    free(s->refs);
    s->srcs = sc;
    s->nsrc = nsrc;
    s->refs = rc;
    s->nref = nref;
    s->version = version;
    memset(&s->stats, 0, sizeof(s->stats));
    s->avail_known = 0;
    for (size_t i = 0; i < s->tab_cap; i++)
        if (s->tab[i] != NULL)
            s->tab[i]->used = 0;
    return RS_OK;
}

void rs__delta_reads_done(rs_transport_h t, int ok)
{
    state_t *s = st_of(t);
    for (size_t i = 0; i < s->tab_cap; i++) {
        held_t *h = s->tab[i];
        if (h == NULL)
            continue;
        if (!ok) /* nothing read in a failed run is trusted */
            h->held = h->now = -1;
        else if (h->used)
            h->held = h->now;
        h->used = 0;
    }
}

void rs__delta_reads_stats(rs_transport_h t, rs__delta_stats_t *out)
{
    const state_t *s = st_of(t);
    *out = s->stats;
    for (size_t i = 0; i < s->tab_cap; i++)
        if (s->tab[i] != NULL && s->tab[i]->mem != NULL &&
            s->tab[i]->dst == NULL) {
            out->held_runs++;
            out->held_bytes += s->tab[i]->nbytes;
        }
}

/* The copies holding a verified version, as sorted keys. */
static rs_status_t held_keys(const state_t *s, rs__delta_keep_t *out)
{
    memset(out, 0, sizeof(*out));
    out->keys = malloc((s->tab_n + 1) * sizeof(*out->keys));
    if (out->keys == NULL)
        return RS_ERR_NO_MEMORY;
    for (size_t i = 0; i < s->tab_cap; i++) {
        const held_t *h = s->tab[i];
        if (h != NULL && h->mem != NULL && h->dst == NULL && h->held >= 0)
            out->keys[out->n++] = (rs__delta_key_t){h->session, h->addr,
                                                    h->nbytes};
    }
    qsort(out->keys, out->n, sizeof(*out->keys), rs__delta_key_cmp);
    return RS_OK;
}

rs_status_t rs__delta_reads_keep(rs_transport_h t, rs_plan_h plan,
                                 uint64_t budget, unsigned in_place,
                                 rs_diag_t *diag)
{
    state_t *s = st_of(t);
    rs__delta_keep_t k, held;
    rs_status_t st = held_keys(s, &held);
    if (st == RS_OK)
        st = rs__delta_keep_choose(plan, s->srcs, s->nsrc, s->refs, &held,
                                   budget, in_place, s->nic, s->dns,
                                   &k);
    rs__delta_keep_free(&held);
    if (st != RS_OK)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    rs__delta_keep_free(&s->keep);
    s->keep = k;
    s->keeping = 1;
    s->stats.over_budget_runs = k.over_runs;
    s->stats.over_budget_bytes = k.over_bytes;
    /* copies the budget no longer keeps go now, before any new one is
     * made, so the copies never pass the budget */
    for (size_t i = 0; i < s->tab_cap; i++) {
        held_t *h = s->tab[i];
        if (h != NULL && h->mem != NULL && h->dst == NULL &&
            !rs__delta_keep_has(&k, h->session, h->addr, h->nbytes)) {
            free(h->mem);
            h->mem = NULL;
            h->held = h->now = -1;
        }
    }
    return RS_OK;
}

static int by_base(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const rs__delta_span_t *)a)->base;
    uintptr_t y = (uintptr_t)((const rs__delta_span_t *)b)->base;
    return (x > y) - (x < y);
}

/* Nothing patched in place holds a version any more. */
static void drop_in_place(state_t *s)
{
    for (size_t i = 0; i < s->tab_cap; i++)
        if (s->tab[i] != NULL && s->tab[i]->dst != NULL)
            s->tab[i]->held = s->tab[i]->now = -1;
}

rs_status_t rs__delta_reads_in_place(rs_transport_h t,
                                     const rs__delta_span_t *spans, size_t n,
                                     uint64_t epoch, rs_diag_t *diag)
{
    state_t *s = st_of(t);
    rs__delta_span_t *v = malloc((n + 1) * sizeof(*v));
    if (v == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (n > 0)
        memcpy(v, spans, n * sizeof(*v));
    qsort(v, n, sizeof(*v), by_base);
    free(s->spans);
    s->spans = v;
    s->nspan = n;
    if (epoch != s->epoch) /* written by others since: holds no version */
        drop_in_place(s);
    s->epoch = epoch;
    return RS_OK;
}

void rs__delta_reads_staging(rs_transport_h t, unsigned char *base,
                             uint64_t nbytes, uint64_t gen)
{
    state_t *s = st_of(t);
    if (gen != s->staging_gen) /* new staging: it holds nothing yet */
        drop_in_place(s);
    s->staging_gen = gen;
    s->staging = (rs__delta_span_t){nbytes > 0 ? base : NULL, nbytes};
}
