/* Run walking. A source dim's index range [lo, hi) is not a box in the space
 * of its factors (digits of a mixed radix), so it is first cut into at most
 * 2m-1 aligned blocks; the cartesian product of every dim's blocks gives
 * boxes in factor space, and each is walked as an odometer over the factors
 * that do not fold into the contiguous run. */
#include "geom/walk.h"

/* One factor-space box under construction: a start digit and a count per
 * factor of the box. */
typedef struct {
    int64_t start[RS_MAX_FACTORS];
    int64_t count[RS_MAX_FACTORS];
} fbox_t;

typedef struct {
    const rs__box_t *box;
    const rs__source_buffer_t *buf;
    int64_t pitch[RS_MAX_DIMS];       /* row-major strides of the buffer */
    int64_t src_stride[RS_MAX_FACTORS];
    int first[RS_MAX_DIMS];           /* first factor index of each dim */
    int nf[RS_MAX_DIMS];              /* factor count of each dim */
    int64_t radix[RS_MAX_FACTORS];    /* digit weight inside its dim */
    int64_t src_base, dst_base;       /* buffer/dest offset of k = 0 */
    rs__run_cb cb;
    void *ctx;
} walk_t;

/* Odometer over the factors that do not fold into the run, outermost
 * destination stride first so runs come out in destination order. */
static void walk_fbox(const walk_t *w, const fbox_t *fb)
{
    const rs__factor_t *f = w->box->factors;
    int n = w->box->nfactors, order[RS_MAX_FACTORS], no = 0;
    int64_t src = w->src_base, dst = w->dst_base, run = 1;
    uint64_t used = 0; /* bit j: factor j folds into the run */
    int64_t idx[RS_MAX_FACTORS];

    /* only the box's factors: the arrays are sized for the largest box */
    for (int j = 0; j < n; j++) {
        src += fb->start[j] * w->src_stride[j];
        dst += fb->start[j] * f[j].dstride;
    }
    /* Grow the run while some factor continues it in both buffers. */
    for (int grew = 1; grew;) {
        grew = 0;
        for (int j = 0; j < n; j++) {
            if (!(used >> j & 1) && fb->count[j] > 1 &&
                w->src_stride[j] == run && f[j].dstride == run) {
                run *= fb->count[j];
                used |= (uint64_t)1 << j;
                grew = 1;
            }
        }
    }
    for (int j = 0; j < n; j++) {
        if (!(used >> j & 1) && fb->count[j] > 1)
            order[no++] = j;
    }
    for (int a = 1; a < no; a++) { /* few factors: insertion sort */
        int t = order[a], b = a;
        for (; b > 0 && f[order[b - 1]].dstride < f[t].dstride; b--)
            order[b] = order[b - 1];
        order[b] = t;
    }
    for (int k = 0; k < no; k++)
        idx[k] = 0;
    for (;;) {
        w->cb(w->ctx, src, dst, run);
        int k = no - 1;
        for (; k >= 0; k--) {
            int j = order[k];
            if (++idx[k] < fb->count[j]) {
                src += w->src_stride[j];
                dst += f[j].dstride;
                break;
            }
            src -= (fb->count[j] - 1) * w->src_stride[j];
            dst -= (fb->count[j] - 1) * f[j].dstride;
            idx[k] = 0;
        }
        if (k < 0)
            return;
    }
}

/* The aligned blocks of one dim: digits relative to the dim's first factor. */
typedef struct {
    int n;
    int64_t start[2 * RS_MAX_DIM_FACTORS][RS_MAX_DIM_FACTORS];
    int64_t count[2 * RS_MAX_DIM_FACTORS][RS_MAX_DIM_FACTORS];
} blocks_t;

/* The digits of one dim pinned so far, relative to its first factor. */
typedef struct {
    int64_t start[RS_MAX_DIM_FACTORS];
    int64_t count[RS_MAX_DIM_FACTORS];
} digits_t;

static void push_block(blocks_t *out, const digits_t *dg, int nf)
{
    for (int k = 0; k < nf; k++) {
        out->start[out->n][k] = dg->start[k];
        out->count[out->n][k] = dg->count[k];
    }
    out->n++;
}

/* Cuts [lo, hi) over digits 0..j of one dim (relative to its first factor
 * `first`) into aligned blocks; `fixed` carries the digits already pinned
 * by outer levels. */
static void cut_range(const walk_t *w, int first, int nf, int j, int64_t lo,
                      int64_t hi, digits_t *fixed, blocks_t *out)
{
    if (lo >= hi)
        return;
    int64_t r = w->radix[first + j];
    if (j == 0) {
        fixed->start[0] = lo;
        fixed->count[0] = hi - lo;
        push_block(out, fixed, nf);
        return;
    }
    int64_t dl = lo / r, dh = hi / r;
    if (dl == dh) {
        fixed->start[j] = dl;
        fixed->count[j] = 1;
        cut_range(w, first, nf, j - 1, lo - dl * r, hi - dl * r, fixed, out);
        return;
    }
    if (lo % r != 0) {
        fixed->start[j] = dl;
        fixed->count[j] = 1;
        cut_range(w, first, nf, j - 1, lo % r, r, fixed, out);
        dl++;
    }
    if (dh > dl) {
        digits_t full = *fixed;
        full.start[j] = dl;
        full.count[j] = dh - dl;
        for (int k = 0; k < j; k++) {
            full.start[k] = 0;
            full.count[k] = w->box->factors[first + k].count;
        }
        push_block(out, &full, nf);
    }
    if (hi % r != 0) {
        fixed->start[j] = dh;
        fixed->count[j] = 1;
        cut_range(w, first, nf, j - 1, 0, hi % r, fixed, out);
    }
}

/* Cartesian product of every dim's blocks, recursing dim by dim. */
static void product(const walk_t *w, blocks_t *per_dim, int d, fbox_t *acc)
{
    if (d == w->box->ndim) {
        walk_fbox(w, acc);
        return;
    }
    if (w->nf[d] == 0) {
        product(w, per_dim, d + 1, acc);
        return;
    }
    for (int b = 0; b < per_dim[d].n; b++) {
        for (int k = 0; k < w->nf[d]; k++) {
            acc->start[w->first[d] + k] = per_dim[d].start[b][k];
            acc->count[w->first[d] + k] = per_dim[d].count[b][k];
        }
        product(w, per_dim, d + 1, acc);
    }
}

/* Sets only what the walk reads (dims below ndim, factors below
 * nfactors): a walk is set up once per cell, and the arrays are sized for
 * the largest box. */
static void walk_init(walk_t *w, const rs__box_t *box, const rs__source_buffer_t *buf,
                      int64_t dst_base, rs__run_cb cb, void *ctx)
{
    int64_t p = 1;
    w->box = box;
    w->buf = buf;
    w->cb = cb;
    w->ctx = ctx;
    w->dst_base = dst_base;
    w->src_base = 0;
    for (int d = box->ndim - 1; d >= 0; d--) {
        w->pitch[d] = p;
        p *= buf->shape[d];
        w->first[d] = -1;
        w->nf[d] = 0;
    }
    for (int j = 0; j < box->nfactors; j++) {
        const rs__factor_t *f = &box->factors[j];
        if (w->first[f->sdim] < 0)
            w->first[f->sdim] = j;
        w->nf[f->sdim]++;
        w->radix[j] = f->mult;
        w->src_stride[j] = f->dmult * w->pitch[f->sdim];
    }
    for (int d = 0; d < box->ndim; d++)
        w->src_base += (box->start[d] - buf->offset[d]) * w->pitch[d];
}

void rs__walk_runs(const rs__box_t *box, const rs__index_range_t *kr,
                  const rs__source_buffer_t *buf, int64_t dst_base, rs__run_cb cb,
                  void *ctx)
{
    walk_t w;
    blocks_t per_dim[RS_MAX_DIMS];
    fbox_t acc; /* product() sets every factor's digit before walk_fbox */

    for (int d = 0; d < box->ndim; d++) {
        if (kr->lo[d] >= kr->hi[d])
            return;
    }
    walk_init(&w, box, buf, dst_base, cb, ctx);
    int simple = 1; /* at most one factor per dim: one block each */
    for (int d = 0; d < box->ndim && simple; d++)
        simple = w.nf[d] <= 1;
    if (simple) { /* factor j is its dim's only one: the dim's range */
        for (int j = 0; j < box->nfactors; j++) {
            int d = box->factors[j].sdim;
            acc.start[j] = kr->lo[d];
            acc.count[j] = kr->hi[d] - kr->lo[d];
        }
        walk_fbox(&w, &acc);
        return;
    }
    digits_t fixed = {{0}, {0}};
    for (int d = 0; d < box->ndim; d++) {
        per_dim[d].n = 0;
        if (w.nf[d] == 0)
            continue;
        cut_range(&w, w.first[d], w.nf[d], w.nf[d] - 1, kr->lo[d], kr->hi[d],
                  &fixed, &per_dim[d]);
    }
    product(&w, per_dim, 0, &acc);
}

/* Elements between consecutive indices of dim d in buf (row-major). */
static int64_t buf_pitch(const rs__source_buffer_t *buf, int ndim, int d)
{
    int64_t p = 1;
    for (int e = ndim - 1; e > d; e--)
        p *= buf->shape[e];
    return p;
}

/* The folding walk_fbox does over a whole box: when every factor folds into
 * the run, its odometer is empty and it reports the one run from the base.
 * walk_fbox grows the run by the factor whose source and destination steps
 * equal it (counts are > 1, so the run only grows and at most one unused
 * factor can match it): the box is one run when such a factor is found for
 * every step, factors as many. */
int rs__walk_one_run(const rs__box_t *box, const rs__source_buffer_t *buf,
                     int64_t *src_elem_p)
{
    int64_t p = 1, src = 0, run = 1;
    const rs__factor_t *f = box->factors;
    int nf = box->nfactors;
    uint64_t used = 0;
    for (int d = box->ndim - 1; d >= 0; d--) {
        src += (box->start[d] - buf->offset[d]) * p;
        p *= buf->shape[d];
    }
    for (int n = 0; n < nf; n++) {
        int k = 0;
        /* the destination step first: it rules out all but one factor,
         * whose source step is then computed */
        while (k < nf && ((used >> k & 1) || f[k].dstride != run ||
                          f[k].dmult * buf_pitch(buf, box->ndim, f[k].sdim) !=
                              run))
            k++;
        if (k == nf)
            return 0;
        used |= (uint64_t)1 << k;
        run *= f[k].count;
    }
    *src_elem_p = src;
    return 1;
}
