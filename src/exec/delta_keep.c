/* Which held copies a receiver keeps within its delta budget (docs/delta.md,
 * "The delta budget"). A copy costs as many bytes as its piece and pays
 * back, each version, what the cost model saves by reading the piece's
 * delta instead of its full bytes; the pieces that save most per byte
 * kept are kept first, until the budget is full:
 *
 *   gain(piece of B bytes) = cost(B, 1) - cost(delta read, 3 per delta)
 *
 * with the delta read estimated from the newest delta its shard lists
 * (rs__delta_estimate: this version's changes stand for the next one's).
 * A shard whose publisher serves deltas but lists none this version (its
 * first, or one that changed too much) is ranked after every listed one,
 * by the best case (a header and two index entries, no payload): its
 * copy may still pay, but nothing measured says so. A piece whose best
 * case does not pay (below about three descriptors' worth of bytes) or
 * whose shard serves no deltas keeps no copy at all.
 *
 * A copy that holds a verified version keeps its place ahead of the
 * ranking while it still pays: replacing it would cost the version's
 * saving on it and a full read of its replacement, so the choice settles
 * instead of moving from version to version as the changed shares do. */
#include <stdlib.h>
#include <string.h>

#include "core/delta.h"
#include "core/delta_estimate.h"
#include "core/vec.h"
#include "exec/delta_read.h"

/* A piece worth a copy, ranked. */
typedef struct cand {
    rs__delta_key_t key;
    int holds;       /* its copy holds a verified version */
    int listed;      /* 1: gain from a listed delta; 0: best case */
    double per_byte; /* gain per byte kept, seconds */
} cand_t;

typedef struct cands {
    RS_VEC(cand_t, v);
} cands_t;

static int key_cmp(const rs__delta_key_t *x, const rs__delta_key_t *y)
{
    if (x->session != y->session)
        return x->session < y->session ? -1 : 1;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int by_key(const void *a, const void *b)
{
    return key_cmp(&((const cand_t *)a)->key, &((const cand_t *)b)->key);
}

/* Copies holding a version first, then listed gains, then the larger gain
 * per byte; ties by key, so the choice is the same on every receiver with
 * the same plan, tables and copies. */
static int by_rank(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->holds != y->holds)
        return x->holds ? -1 : 1;
    if (x->listed != y->listed)
        return x->listed ? -1 : 1;
    if (x->per_byte != y->per_byte)
        return x->per_byte > y->per_byte ? -1 : 1;
    return key_cmp(&x->key, &y->key);
}

/* The newest delta the shard lists (NULL: none). */
static const rs__delta_ref_t *newest(const rs__delta_src_t *src,
                                     const rs__delta_ref_t *refs)
{
    const rs__delta_ref_t *best = NULL;
    for (size_t i = 0; i < src->count; i++) {
        const rs__delta_ref_t *r = &refs[src->first + i];
        if (best == NULL || r->version > best->version)
            best = r;
    }
    return best;
}

/* What a copy of piece p (in shard src) saves per version, in seconds;
 * *listed_p says whether a listed delta measured it. */
static double piece_gain(const rs_read_t *p, const rs__delta_src_t *src,
                         const rs__delta_ref_t *refs, double nic, double dns,
                         int *listed_p)
{
    const rs__delta_ref_t *r = newest(src, refs);
    double whole = rs__read_seconds((double)p->nbytes, 1, nic, dns);
    uint64_t bytes = RS__DELTA_HEADER + 2 * RS__DELTA_ENTRY;
    uint64_t descs = RS__DELTA_RANGE_READS;
    *listed_p = r != NULL;
    if (r != NULL) {
        uint64_t off = p->src_addr - src->addr;
        if (off % r->esize != 0 || p->nbytes % r->esize != 0)
            return 0; /* a delta cannot serve it */
        rs__delta_estimate(p->nbytes, src->nbytes, r->bytes, r->esize,
                           r->chunk, &bytes, &descs);
    }
    return whole - rs__read_seconds((double)bytes, (double)descs, nic, dns);
}

/* The pieces of n segments worth a copy. */
static int add_segments(cands_t *c, const rs_segment_t *segs, size_t n,
                        const rs__delta_src_t *srcs, size_t nsrc,
                        const rs__delta_ref_t *refs, double nic, double dns)
{
    for (size_t i = 0; i < n; i++) {
        rs_read_t rd = {segs[i].session, segs[i].src_addr, NULL,
                        segs[i].nbytes};
        for (uint64_t off = 0; off < rd.nbytes;) {
            const rs__delta_src_t *src;
            rs_read_t p = rs__delta_piece(srcs, nsrc, &rd, off, &src);
            off += p.nbytes;
            if (src == NULL || !src->serves || p.nbytes == 0)
                continue;
            int listed;
            double gain = piece_gain(&p, src, refs, nic, dns, &listed);
            cand_t x = {{p.session, p.src_addr, p.nbytes}, 0, listed,
                        gain / (double)p.nbytes};
            if (gain > 0 && !RS_VEC_PUSH(c, v, x))
                return 0;
        }
    }
    return 1;
}

/* Every read the executor posts for the plan: exact segments (unless they
 * land in place, needing no copy), staged reads, casts' and quantized
 * boxes' segments. */
static int add_plan(cands_t *c, rs_plan_h plan, unsigned in_place,
                    const rs__delta_src_t *srcs, size_t nsrc,
                    const rs__delta_ref_t *refs, double nic, double dns)
{
    size_t n;
    const rs_segment_t *segs = rs_plan_segments(plan, &n);
    int ok = (in_place & RS__DELTA_IN_PLACE_EXACT) ||
             add_segments(c, segs, n, srcs, nsrc, refs, nic, dns);
    if (in_place & RS__DELTA_IN_PLACE_STAGED)
        return ok;
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &n);
    for (size_t i = 0; ok && i < n; i++)
        ok = add_segments(c, fp[i].segments, fp[i].nsegments, srcs, nsrc,
                          refs, nic, dns);
    const rs_convert_t *cv = rs_plan_converts(plan, &n);
    for (size_t i = 0; ok && i < n; i++)
        ok = add_segments(c, cv[i].segments, cv[i].nsegments, srcs, nsrc,
                          refs, nic, dns);
    const rs_quantized_t *q = rs_plan_quantized(plan, &n);
    for (size_t i = 0; ok && i < n; i++)
        ok = add_segments(c, q[i].segments, q[i].nsegments, srcs, nsrc, refs,
                          nic, dns);
    return ok;
}

/* One candidate per piece (a source range read into two places keeps one
 * copy). */
static void dedupe(cands_t *c)
{
    if (c->v_len == 0)
        return;
    qsort(c->v, c->v_len, sizeof(*c->v), by_key);
    size_t k = 0;
    for (size_t i = 0; i < c->v_len; i++)
        if (k == 0 || key_cmp(&c->v[k - 1].key, &c->v[i].key) != 0)
            c->v[k++] = c->v[i];
    c->v_len = k;
}

int rs__delta_key_cmp(const void *a, const void *b)
{
    return key_cmp(a, b);
}

/* Marks the candidates whose copies hold a version (held: sorted). */
static void mark_holders(cands_t *c, const rs__delta_keep_t *held)
{
    for (size_t i = 0; i < c->v_len; i++)
        c->v[i].holds = rs__delta_keep_has(held, c->v[i].key.session,
                                           c->v[i].key.addr,
                                           c->v[i].key.nbytes);
}

rs_status_t rs__delta_keep_choose(rs_plan_h plan, const rs__delta_src_t *srcs,
                                  size_t nsrc, const rs__delta_ref_t *refs,
                                  const rs__delta_keep_t *held,
                                  uint64_t budget, unsigned in_place,
                                  double nic_gbps, double descriptor_ns,
                                  rs__delta_keep_t *out)
{
    cands_t c = {NULL, 0, 0};
    memset(out, 0, sizeof(*out));
    if (budget > 0 && !add_plan(&c, plan, in_place, srcs, nsrc, refs,
                                nic_gbps, descriptor_ns)) {
        free(c.v);
        return RS_ERR_NO_MEMORY;
    }
    dedupe(&c);
    mark_holders(&c, held);
    if (c.v_len > 0)
        qsort(c.v, c.v_len, sizeof(*c.v), by_rank);
    out->keys = malloc((c.v_len + 1) * sizeof(*out->keys));
    if (out->keys == NULL) {
        free(c.v);
        return RS_ERR_NO_MEMORY;
    }
    /* greedy by rank; a piece too large for what is left is skipped, so
     * a smaller one after it may still fit */
    for (size_t i = 0; i < c.v_len; i++) {
        uint64_t b = c.v[i].key.nbytes;
        if (b <= budget - out->bytes) {
            out->keys[out->n++] = c.v[i].key;
            out->bytes += b;
        } else {
            out->over_runs++;
            out->over_bytes += b;
        }
    }
    free(c.v);
    qsort(out->keys, out->n, sizeof(*out->keys), rs__delta_key_cmp);
    return RS_OK;
}

int rs__delta_keep_has(const rs__delta_keep_t *k, uint32_t session,
                       uint64_t addr, uint64_t nbytes)
{
    rs__delta_key_t key = {session, addr, nbytes};
    return k->n > 0 && bsearch(&key, k->keys, k->n, sizeof(key),
                               rs__delta_key_cmp) != NULL;
}

void rs__delta_keep_free(rs__delta_keep_t *k)
{
    free(k->keys);
    memset(k, 0, sizeof(*k));
}
