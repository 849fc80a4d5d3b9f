/* Whether a publisher serves a quantized copy: "<src>#<spec>" published
 * with the source's full shape in the FP8 format and "<src>#<spec>#scale"
 * as float32 over the whole block grid, and, for every block the copy
 * touches, the part of the block the view needs inside one shard of the
 * FP8 tensor and the block's scale inside one shard of the scales. A
 * publisher quantizes only blocks that lie inside one of its shards, so a
 * block split across FP8 shards was not quantized whole; such a copy takes
 * the receiver path (docs/quantized-refit.md, "When each is chosen"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "plan/plan_quant.h"
#include "model/sources_impl.h"

/* Per dim, the touched blocks [glo, glo + gn) as relative ranges. */
typedef struct grange {
    int64_t lo[RS_MAX_DIMS], hi[RS_MAX_DIMS];
} grange_t;

/* What the view needs of relative block g along dim d. */
static void need(const rs__planned_quant_t *pq, const int64_t *vlo, const int64_t *vhi,
                 int d, int64_t g, int64_t *lo, int64_t *hi)
{
    int64_t b = pq->block[d], s = (pq->bl.glo[d] + g) * b;
    *lo = s > vlo[d] ? s : vlo[d];
    *hi = s + b < vhi[d] ? s + b : vhi[d];
}

/* The blocks whose needed part lies inside the shard, per dim (a
 * contiguous range, since the needed parts grow with g); 0 when none. */
static int inside(const rs__planned_quant_t *pq, const int64_t *vlo,
                  const int64_t *vhi, const rs__source_shard_t *sh, grange_t *r)
{
    for (int d = 0; d < pq->ndim; d++) {
        r->lo[d] = -1;
        r->hi[d] = -1;
        for (int64_t g = 0; g < pq->bl.gn[d]; g++) {
            int64_t lo, hi;
            need(pq, vlo, vhi, d, g, &lo, &hi);
            if (lo < sh->offset[d] || hi > sh->offset[d] + sh->shape[d])
                continue;
            if (r->lo[d] < 0)
                r->lo[d] = g;
            r->hi[d] = g + 1;
        }
        if (r->lo[d] < 0)
            return 0;
    }
    return 1;
}

/* The touched blocks whose scale the scale shard holds. */
static int holds(const rs__planned_quant_t *pq, const rs__source_shard_t *sh, grange_t *r)
{
    for (int d = 0; d < pq->ndim; d++) {
        int64_t lo = sh->offset[d] - pq->bl.glo[d];
        int64_t hi = lo + sh->shape[d];
        r->lo[d] = lo > 0 ? lo : 0;
        r->hi[d] = hi < pq->bl.gn[d] ? hi : pq->bl.gn[d];
        if (r->lo[d] >= r->hi[d])
            return 0;
    }
    return 1;
}

/* Sets `bit` in every block of the range (row-major over the grid). */
static void mark(const rs__planned_quant_t *pq, const grange_t *r, unsigned char *m,
                 unsigned char bit)
{
    int64_t g[RS_MAX_DIMS] = {0};
    int n = pq->ndim;
    memcpy(g, r->lo, (size_t)n * sizeof(int64_t));
    for (;;) {
        int64_t at = 0;
        for (int d = 0; d < n; d++)
            at = at * pq->bl.gn[d] + g[d];
        m[at] |= bit;
        int d = n - 1;
        while (d >= 0 && ++g[d] == r->hi[d]) {
            g[d] = r->lo[d];
            d--;
        }
        if (d < 0)
            return;
    }
}

static int same_shape(const rs__source_tensor_t *t, int n, const int64_t *shape)
{
    return t->ndim == n && rs__quant_same_dims(t->shape, shape, n);
}

/* The tensors exist with the shapes and dtypes the copy needs. */
static int published(const rs__planned_quant_t *pq, const rs__source_tensor_t *tq,
                     const rs__source_tensor_t *ts, const char *qname,
                     const char *sname, char *why, size_t whylen)
{
    char got[160], want[160];
    const rs__source_tensor_t *bad = NULL;
    const int64_t *shape = pq->shape;
    rs_dtype_t dt = pq->format;
    if (tq == NULL || ts == NULL) {
        snprintf(why, whylen, RS_QUANT_UNSERVED "%s",
                 tq == NULL ? qname : sname);
        return 0;
    }
    if (tq->dtype != pq->format || !same_shape(tq, pq->ndim, pq->shape))
        bad = tq;
    else if (ts->dtype != RS_DTYPE_F32 || !same_shape(ts, pq->ndim, pq->bl.grid)) {
        bad = ts;
        shape = pq->bl.grid;
        dt = RS_DTYPE_F32;
    }
    if (bad == NULL)
        return 1;
    snprintf(why, whylen, "%s is published as %s %s, not %s %s", bad->name,
             rs__format_dims(got, sizeof(got), bad->shape, bad->ndim),
             rs_dtype_name(bad->dtype),
             rs__format_dims(want, sizeof(want), shape, pq->ndim),
             rs_dtype_name(dt));
    return 0;
}

/* Whether some FP8 shard meets relative block g's needed part at all. */
static int meets(const rs__planned_quant_t *pq, const rs__source_tensor_t *tq,
                 const int64_t *vlo, const int64_t *vhi, const int64_t *g)
{
    for (size_t i = 0; i < tq->shards_len; i++) {
        const rs__source_shard_t *sh = &tq->shards[i];
        int m = sh->numel > 0;
        for (int d = 0; m && d < pq->ndim; d++) {
            int64_t lo, hi;
            need(pq, vlo, vhi, d, g[d], &lo, &hi);
            m = lo < sh->offset[d] + sh->shape[d] && sh->offset[d] < hi;
        }
        if (m)
            return 1;
    }
    return 0;
}

/* The first block not served, named in grid coordinates, and the share
 * of the touched blocks that are. */
static void explain(const rs__planned_quant_t *pq, const rs__source_tensor_t *tq,
                    const char *src, const char *sname, const int64_t *vlo,
                    const int64_t *vhi, const unsigned char *m, int64_t nb,
                    char *why, size_t whylen)
{
    int64_t served = 0, first = -1, g[RS_MAX_DIMS] = {0},
            abs_g[RS_MAX_DIMS] = {0};
    char at[160];
    for (int64_t i = 0; i < nb; i++) {
        served += m[i] == 3;
        if (m[i] != 3 && first < 0)
            first = i;
    }
    for (int d = pq->ndim - 1; d >= 0; d--) {
        g[d] = first % pq->bl.gn[d];
        first /= pq->bl.gn[d];
        abs_g[d] = pq->bl.glo[d] + g[d];
    }
    int64_t pct = served * 100 / nb;
    rs__format_dims(at, sizeof(at), abs_g, pq->ndim);
    at[0] = '(';
    at[strlen(at) - 1] = ')';
    int64_t at_i = 0;
    for (int d = 0; d < pq->ndim; d++)
        at_i = at_i * pq->bl.gn[d] + g[d];
    if (m[at_i] & 1)
        snprintf(why, whylen, "the scale of block %s of %s is not published "
                 "in %s: %lld%% of the blocks needed are served", at, src,
                 sname, (long long)pct);
    else
        snprintf(why, whylen, "block %s of %s %s %s: it covers %lld%% of the "
                 "blocks needed", at, src,
                 meets(pq, tq, vlo, vhi, g) ? "straddles publisher shards of"
                                            : "is not published in",
                 tq->name, (long long)pct);
}

int rs__quant_shard_holds(const rs__source_shard_t *sh, int n,
                          const int64_t *lo, const int64_t *hi)
{
    for (int d = 0; d < n; d++)
        if (lo[d] < sh->offset[d] || hi[d] > sh->offset[d] + sh->shape[d])
            return 0;
    return sh->numel > 0;
}

/* The common case, decided without the table of blocks: one FP8 shard
 * holds the view's whole box (so every block's needed part) and one scale
 * shard the whole touched grid. Where it says yes the table would too; a
 * no only sends the copy to the table. Checking every block for every
 * copy made the blocks, not the shards, what planning FP8 cost. */
static int one_shard_each(rs__quant_tensors_t *t,
                          const rs__planned_quant_t *pq, const int64_t *vlo,
                          const int64_t *vhi)
{
    const rs__source_tensor_t *tq = t->q, *ts = t->s;
    int64_t ghi[RS_MAX_DIMS];
    size_t fp8 = SIZE_MAX, scale = SIZE_MAX;
    for (int d = 0; d < pq->ndim; d++)
        ghi[d] = pq->bl.glo[d] + pq->bl.gn[d];
    for (size_t i = 0; fp8 == SIZE_MAX && i < tq->shards_len; i++)
        if (rs__quant_shard_holds(&tq->shards[i], pq->ndim, vlo, vhi))
            fp8 = i;
    for (size_t i = 0; fp8 != SIZE_MAX && scale == SIZE_MAX &&
                       i < ts->shards_len; i++)
        if (rs__quant_shard_holds(&ts->shards[i], pq->ndim, pq->bl.glo, ghi))
            scale = i;
    if (fp8 == SIZE_MAX || scale == SIZE_MAX)
        return 0;
    t->q_holder = fp8;
    t->s_holder = scale;
    return 1;
}

/* The check block by block, where no one shard of each holds all the
 * copy needs: a table of the touched blocks, each marked as its needed
 * part lies inside an FP8 shard and its scale inside a scale shard. Out
 * of line: its table's range is cleared per call, which the common path
 * does not need. */
__attribute__((noinline))
static int served_by_blocks(const rs__planned_quant_t *pq,
                            const rs__source_tensor_t *tq,
                            const rs__source_tensor_t *ts, const char *src,
                            const char *qname, const char *sname,
                            const int64_t *view_lo, const int64_t *view_hi,
                            char *why, size_t whylen)
{
    int64_t nb = 1;
    grange_t r = {{0}, {0}};
    for (int d = 0; d < pq->ndim; d++)
        nb *= pq->bl.gn[d]; /* inside the source's checked element count */
    unsigned char *m = calloc((size_t)nb + 1, 1);
    if (m == NULL) { /* the receiver path needs no table */
        snprintf(why, whylen, "out of memory checking %s", qname);
        return 0;
    }
    for (size_t i = 0; i < tq->shards_len; i++)
        if (inside(pq, view_lo, view_hi, &tq->shards[i], &r))
            mark(pq, &r, m, 1);
    for (size_t i = 0; i < ts->shards_len; i++)
        if (holds(pq, &ts->shards[i], &r))
            mark(pq, &r, m, 2);
    int all = 1;
    for (int64_t i = 0; all && i < nb; i++)
        all = m[i] == 3;
    if (!all)
        explain(pq, tq, src, sname, view_lo, view_hi, m, nb, why, whylen);
    free(m);
    return all;
}

int rs__quant_publisher_serves(rs__quant_tensors_t *t,
                               const rs__planned_quant_t *pq,
                               const char *src, const char *qname,
                               const char *sname, const int64_t *view_lo,
                               const int64_t *view_hi, char *why,
                               size_t whylen)
{
    const rs__source_tensor_t *tq = t->q, *ts = t->s;
    if (!published(pq, tq, ts, qname, sname, why, whylen))
        return 0;
    if (one_shard_each(t, pq, view_lo, view_hi))
        return 1;
    return served_by_blocks(pq, tq, ts, src, qname, sname, view_lo, view_hi,
                            why, whylen);
}
