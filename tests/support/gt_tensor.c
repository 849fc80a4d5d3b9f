/* Ground truth for op chains: every op is applied by gathering the current
 * array of source indices into a new one, and view legality is decided on
 * strides inferred from that array, never with the library's geometry. */
#include "gt_tensor.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tests only ever build small tensors; anything larger is a generator bug. */
#define GT_MAX_NUMEL ((int64_t)1 << 26)

/* A strided selection over positions of the current materialized array. */
typedef struct sv {
    int64_t offset;
    int ndim;
    int64_t shape[RS_MAX_DIMS];
    int64_t stride[RS_MAX_DIMS];
} sv_t;

static gt_status_t fail(char *why, size_t n, gt_status_t st, const char *fmt,
                        ...)
{
    if (why != NULL && n > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* PyTorch's dim wrapping: a 0-d tensor accepts dims -1 and 0. */
static int wrap_dim(int64_t d, int ndim, int *out)
{
    int64_t n = ndim > 0 ? ndim : 1;
    if (d < -n || d >= n)
        return 0;
    *out = (int)(d < 0 ? d + n : d);
    return 1;
}

static int checked_numel(int ndim, const int64_t *shape, int64_t *out)
{
    int64_t p = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(p, shape[i], &p))
            return 0;
    }
    *out = p;
    return 1;
}

void gt_unravel(int64_t pos, int ndim, const int64_t *shape, int64_t *m)
{
    for (int k = ndim - 1; k >= 0; k--) {
        m[k] = shape[k] > 0 ? pos % shape[k] : 0;
        pos = shape[k] > 0 ? pos / shape[k] : 0;
    }
}

gt_status_t gt_full(int ndim, const int64_t *shape, gt_tensor_t *out)
{
    int64_t numel;
    if (ndim < 0 || ndim > RS_MAX_DIMS || !checked_numel(ndim, shape, &numel)
        || numel > GT_MAX_NUMEL)
        return GT_ERR_OP;
    memset(out, 0, sizeof(*out));
    out->ndim = ndim;
    memcpy(out->shape, shape, (size_t)ndim * sizeof(int64_t));
    out->numel = numel;
    out->idx = malloc((size_t)(numel > 0 ? numel : 1) * sizeof(int64_t));
    if (out->idx == NULL)
        abort();
    for (int64_t i = 0; i < numel; i++)
        out->idx[i] = i;
    return GT_OK;
}

void gt_free(gt_tensor_t *t)
{
    if (t == NULL)
        return;
    free(t->idx);
    t->idx = NULL;
    t->numel = 0;
}

static void sv_from(const gt_tensor_t *t, sv_t *v)
{
    int64_t s = 1;
    v->offset = 0;
    v->ndim = t->ndim;
    for (int k = t->ndim - 1; k >= 0; k--) {
        v->shape[k] = t->shape[k];
        v->stride[k] = s;
        s *= t->shape[k];
    }
}

/* Gathers the selection v of t into a new array and replaces t with it. */
static void sv_gather(gt_tensor_t *t, const sv_t *v)
{
    int64_t numel = 1, m[RS_MAX_DIMS] = {0};
    for (int k = 0; k < v->ndim; k++)
        numel *= v->shape[k];
    int64_t *idx = malloc((size_t)(numel > 0 ? numel : 1) * sizeof(int64_t));
    if (idx == NULL)
        abort();
    for (int64_t j = 0; j < numel; j++) {
        int64_t pos = v->offset;
        for (int k = 0; k < v->ndim; k++)
            pos += m[k] * v->stride[k];
        idx[j] = t->idx[pos];
        for (int k = v->ndim - 1; k >= 0; k--) {
            if (++m[k] < v->shape[k])
                break;
            m[k] = 0;
        }
    }
    free(t->idx);
    t->idx = idx;
    t->numel = numel;
    t->ndim = v->ndim;
    memcpy(t->shape, v->shape, sizeof(t->shape));
}

static void sv_remove_dim(sv_t *v, int d)
{
    for (int k = d; k + 1 < v->ndim; k++) {
        v->shape[k] = v->shape[k + 1];
        v->stride[k] = v->stride[k + 1];
    }
    v->ndim--;
}

static gt_status_t sv_narrow(sv_t *v, int64_t dim, int64_t start,
                             int64_t length, char *why, size_t n)
{
    int d;
    if (v->ndim == 0)
        return fail(why, n, GT_ERR_OP, "cannot narrow a 0-d tensor");
    if (!wrap_dim(dim, v->ndim, &d))
        return fail(why, n, GT_ERR_OP, "dim %lld out of range", (long long)dim);
    int64_t size = v->shape[d];
    if (start < -size || start > size)
        return fail(why, n, GT_ERR_OP, "start %lld out of range for size %lld",
                    (long long)start, (long long)size);
    if (start < 0)
        start += size;
    if (length < 0 || length > size - start)
        return fail(why, n, GT_ERR_OP, "length %lld out of range",
                    (long long)length);
    v->offset += start * v->stride[d];
    v->shape[d] = length;
    return GT_OK;
}

static gt_status_t sv_select(sv_t *v, int64_t dim, int64_t index, char *why,
                             size_t n)
{
    int d;
    if (v->ndim == 0)
        return fail(why, n, GT_ERR_OP, "cannot select on a 0-d tensor");
    if (!wrap_dim(dim, v->ndim, &d))
        return fail(why, n, GT_ERR_OP, "dim %lld out of range", (long long)dim);
    if (index < -v->shape[d] || index >= v->shape[d])
        return fail(why, n, GT_ERR_OP, "index %lld out of range for size %lld",
                    (long long)index, (long long)v->shape[d]);
    if (index < 0)
        index += v->shape[d];
    v->offset += index * v->stride[d];
    sv_remove_dim(v, d);
    return GT_OK;
}

/* Python slice on dim d (already wrapped); out-of-range bounds are errors. */
static gt_status_t sv_slice(sv_t *v, int d, int has_start, int64_t start,
                            int has_stop, int64_t stop, int64_t step,
                            char *why, size_t n)
{
    int64_t size = v->shape[d];
    int64_t s = has_start ? start : 0, e = has_stop ? stop : size;
    if (step < 1)
        return fail(why, n, GT_ERR_OP, "step %lld must be positive",
                    (long long)step);
    if (s < -size || s > size || e < -size || e > size)
        return fail(why, n, GT_ERR_OP, "bounds [%lld:%lld] out of range for "
                    "size %lld", (long long)s, (long long)e, (long long)size);
    s = s < 0 ? s + size : s;
    e = e < 0 ? e + size : e;
    v->offset += s * v->stride[d];
    v->shape[d] = e > s ? (e - s + step - 1) / step : 0;
    v->stride[d] *= step;
    return GT_OK;
}

static gt_status_t op_slice(sv_t *v, const rs_op_t *op, char *why, size_t n)
{
    int d;
    if (v->ndim == 0)
        return fail(why, n, GT_ERR_OP, "cannot slice a 0-d tensor");
    if (!wrap_dim(op->arg[0], v->ndim, &d))
        return fail(why, n, GT_ERR_OP, "dim %lld out of range",
                    (long long)op->arg[0]);
    int64_t step = (op->has & 8u) ? op->arg[3] : 1;
    return sv_slice(v, d, (op->has & 2u) != 0, op->arg[1],
                    (op->has & 4u) != 0, op->arg[2], step, why, n);
}

static gt_status_t op_getitem(sv_t *v, const rs_op_t *op, char *why, size_t n)
{
    int d = 0;
    gt_status_t st = GT_OK;
    if ((int64_t)op->nkeys > v->ndim)
        return fail(why, n, GT_ERR_OP, "too many indices (%zu) for %d dims",
                    op->nkeys, v->ndim);
    for (size_t i = 0; i < op->nkeys && st == GT_OK; i++) {
        const rs_key_t *k = &op->keys[i];
        if (k->kind == RS_KEY_INDEX) {
            st = sv_select(v, d, k->index, why, n);
        } else if (k->kind == RS_KEY_FULL) {
            d++;
        } else if (k->kind == RS_KEY_SLICE) {
            st = sv_slice(v, d, k->has_start, k->start, k->has_stop, k->stop,
                          k->has_step ? k->step : 1, why, n);
            d++;
        } else {
            st = fail(why, n, GT_ERR_OP, "bad key kind %d", (int)k->kind);
        }
    }
    return st;
}

static gt_status_t op_transpose(sv_t *v, int64_t d0, int64_t d1, char *why,
                                size_t n)
{
    int a, b;
    if (!wrap_dim(d0, v->ndim, &a) || !wrap_dim(d1, v->ndim, &b))
        return fail(why, n, GT_ERR_OP, "dims (%lld, %lld) out of range",
                    (long long)d0, (long long)d1);
    if (v->ndim == 0)
        return GT_OK;
    int64_t s = v->shape[a], st = v->stride[a];
    v->shape[a] = v->shape[b];
    v->stride[a] = v->stride[b];
    v->shape[b] = s;
    v->stride[b] = st;
    return GT_OK;
}

static gt_status_t op_permute(sv_t *v, const rs_op_t *op, char *why, size_t n)
{
    sv_t out = *v;
    int used[RS_MAX_DIMS] = {0};
    if ((int64_t)op->nlist != v->ndim)
        return fail(why, n, GT_ERR_OP, "permute of %zu dims on %d dims",
                    op->nlist, v->ndim);
    for (int k = 0; k < v->ndim; k++) {
        int d;
        if (!wrap_dim(op->list[k], v->ndim, &d) || used[d])
            return fail(why, n, GT_ERR_OP, "bad permutation entry %lld",
                        (long long)op->list[k]);
        used[d] = 1;
        out.shape[k] = v->shape[d];
        out.stride[k] = v->stride[d];
    }
    *v = out;
    return GT_OK;
}

static gt_status_t op_unsqueeze(sv_t *v, int64_t dim, char *why, size_t n)
{
    int d;
    if (!wrap_dim(dim, v->ndim + 1, &d))
        return fail(why, n, GT_ERR_OP, "dim %lld out of range", (long long)dim);
    if (v->ndim + 1 > RS_MAX_DIMS)
        return fail(why, n, GT_ERR_OP, "too many dims");
    for (int k = v->ndim; k > d; k--) {
        v->shape[k] = v->shape[k - 1];
        v->stride[k] = v->stride[k - 1];
    }
    v->shape[d] = 1;
    v->stride[d] = 0;
    v->ndim++;
    return GT_OK;
}

static gt_status_t op_squeeze(sv_t *v, const rs_op_t *op, char *why, size_t n)
{
    if (op->has & 1u) {
        int d;
        if (!wrap_dim(op->arg[0], v->ndim, &d))
            return fail(why, n, GT_ERR_OP, "dim %lld out of range",
                        (long long)op->arg[0]);
        if (v->ndim > 0 && v->shape[d] == 1)
            sv_remove_dim(v, d);
        return GT_OK;
    }
    for (int k = v->ndim - 1; k >= 0; k--) {
        if (v->shape[k] == 1)
            sv_remove_dim(v, k);
    }
    return GT_OK;
}

/* Number of pieces and the bounds of piece i (Python tuple indexing). */
static gt_status_t piece_bounds(int64_t size, int64_t piece, int64_t i,
                                int64_t *start_p, int64_t *len_p, char *why,
                                size_t n)
{
    int64_t count = piece > 0 ? (size + piece - 1) / piece : 1;
    if (count == 0)
        count = 1;
    if (i < -count || i >= count)
        return fail(why, n, GT_ERR_OP, "piece %lld of %lld", (long long)i,
                    (long long)count);
    if (i < 0)
        i += count;
    *start_p = i * piece;
    *len_p = size - *start_p < piece ? size - *start_p : piece;
    return GT_OK;
}

static gt_status_t op_chunk(sv_t *v, const rs_op_t *op, char *why, size_t n)
{
    int d;
    int64_t start = 0, len = 0;
    if (op->arg[0] <= 0)
        return fail(why, n, GT_ERR_OP, "chunks %lld must be positive",
                    (long long)op->arg[0]);
    if (v->ndim == 0 || !wrap_dim(op->arg[1], v->ndim, &d))
        return fail(why, n, GT_ERR_OP, "dim %lld out of range",
                    (long long)op->arg[1]);
    int64_t size = v->shape[d];
    int64_t piece = (size + op->arg[0] - 1) / op->arg[0];
    gt_status_t st = piece_bounds(size, piece, op->arg[2], &start, &len, why, n);
    return st != GT_OK ? st : sv_narrow(v, d, start, len, why, n);
}

static gt_status_t op_split(sv_t *v, const rs_op_t *op, char *why, size_t n)
{
    int d;
    int64_t start = 0, len = 0;
    if (v->ndim == 0 || !wrap_dim(op->arg[1], v->ndim, &d))
        return fail(why, n, GT_ERR_OP, "dim %lld out of range",
                    (long long)op->arg[1]);
    int64_t size = v->shape[d], i = op->arg[2];
    if (op->nlist == 0) {
        if (op->arg[0] < 0 || (op->arg[0] == 0 && size != 0))
            return fail(why, n, GT_ERR_OP, "split size %lld",
                        (long long)op->arg[0]);
        gt_status_t st = piece_bounds(size, op->arg[0], i, &start, &len, why, n);
        return st != GT_OK ? st : sv_narrow(v, d, start, len, why, n);
    }
    int64_t sum = 0, count = (int64_t)op->nlist;
    for (size_t k = 0; k < op->nlist; k++) {
        if (op->list[k] < 0 || __builtin_add_overflow(sum, op->list[k], &sum))
            return fail(why, n, GT_ERR_OP, "bad split size %lld",
                        (long long)op->list[k]);
    }
    if (sum != size)
        return fail(why, n, GT_ERR_OP, "split sizes sum to %lld, dim is %lld",
                    (long long)sum, (long long)size);
    if (i < -count || i >= count)
        return fail(why, n, GT_ERR_OP, "piece %lld of %lld", (long long)i,
                    (long long)count);
    if (i < 0)
        i += count;
    for (int64_t k = 0; k < i; k++)
        start += op->list[k];
    return sv_narrow(v, d, start, op->list[i], why, n);
}

int gt_strides(const gt_tensor_t *t, int64_t *stride)
{
    int64_t cs = 1, m[RS_MAX_DIMS];
    for (int k = t->ndim - 1; k >= 0; k--) {
        stride[k] = (t->shape[k] > 1 && t->numel > 0) ? t->idx[cs] - t->idx[0] : 0;
        cs *= t->shape[k];
    }
    for (int64_t j = 0; j < t->numel; j++) {
        int64_t want = t->idx[0];
        gt_unravel(j, t->ndim, t->shape, m);
        for (int k = 0; k < t->ndim; k++)
            want += m[k] * stride[k];
        if (want != t->idx[j])
            return 0;
    }
    return 1;
}

int gt_is_contiguous(const gt_tensor_t *t)
{
    int64_t stride[RS_MAX_DIMS], expect = 1;
    if (t->numel == 0)
        return 1;
    if (!gt_strides(t, stride))
        return 0;
    for (int k = t->ndim - 1; k >= 0; k--) {
        if (t->shape[k] == 1)
            continue;
        if (stride[k] != expect)
            return 0;
        expect *= t->shape[k];
    }
    return 1;
}

/* Products of maximal runs of non-1 dims that are mutually contiguous
 * (stride[a] == stride[b] * size[b] for consecutive non-1 dims a, b). */
static int contiguous_chunks(const gt_tensor_t *t, int64_t *chunk)
{
    int64_t stride[RS_MAX_DIMS];
    int nchunks = 0, prev = -1;
    if (!gt_strides(t, stride))
        return -1;
    for (int k = 0; k < t->ndim; k++) {
        if (t->shape[k] == 1)
            continue;
        if (prev >= 0 && stride[prev] == stride[k] * t->shape[k])
            chunk[nchunks - 1] *= t->shape[k];
        else
            chunk[nchunks++] = t->shape[k];
        prev = k;
    }
    return nchunks;
}

/* A view of t as newshape is legal iff the non-1 new sizes group, in order,
 * into consecutive runs whose products are exactly the contiguous chunks. */
static int view_legal(const gt_tensor_t *t, int nd, const int64_t *newshape)
{
    int64_t chunk[RS_MAX_DIMS], acc = 1;
    int c = 0;
    if (t->numel == 0)
        return 1;
    int nchunks = contiguous_chunks(t, chunk);
    if (nchunks < 0)
        return 0;
    for (int k = 0; k < nd; k++) {
        if (newshape[k] == 1)
            continue;
        if (c >= nchunks)
            return 0;
        acc *= newshape[k];
        if (acc > chunk[c])
            return 0;
        if (acc == chunk[c]) {
            c++;
            acc = 1;
        }
    }
    return c == nchunks && acc == 1;
}

/* Resolves one -1 in sizes against numel. */
static gt_status_t infer_sizes(const int64_t *list, size_t nl, int64_t numel,
                               int64_t *out, char *why, size_t n)
{
    int64_t prod = 1;
    long neg = -1;
    if (nl > RS_MAX_DIMS)
        return fail(why, n, GT_ERR_OP, "too many sizes (%zu)", nl);
    for (size_t k = 0; k < nl; k++) {
        out[k] = list[k];
        if (list[k] == -1 && neg < 0)
            neg = (long)k;
        else if (list[k] < 0)
            return fail(why, n, GT_ERR_OP, "bad size %lld", (long long)list[k]);
        else if (__builtin_mul_overflow(prod, list[k], &prod))
            return fail(why, n, GT_ERR_OP, "sizes overflow");
    }
    if (neg >= 0) {
        if (prod == 0 || numel % prod != 0)
            return fail(why, n, GT_ERR_OP, "cannot infer -1 for %lld elements",
                        (long long)numel);
        out[neg] = numel / prod;
    } else if (prod != numel) {
        return fail(why, n, GT_ERR_OP, "sizes hold %lld elements, tensor has "
                    "%lld", (long long)prod, (long long)numel);
    }
    return GT_OK;
}

/* Gives t a new shape over the same data if PyTorch would allow the view. */
static gt_status_t reshape_to(gt_tensor_t *t, int nd, const int64_t *shape,
                              char *why, size_t n)
{
    if (!view_legal(t, nd, shape))
        return fail(why, n, GT_ERR_NOT_VIEW, "not expressible as a view of the "
                    "current strides");
    t->ndim = nd;
    memcpy(t->shape, shape, (size_t)nd * sizeof(int64_t));
    return GT_OK;
}

static gt_status_t op_view(gt_tensor_t *t, const rs_op_t *op, char *why,
                           size_t n)
{
    int64_t shape[RS_MAX_DIMS];
    gt_status_t st = infer_sizes(op->list, op->nlist, t->numel, shape, why, n);
    return st != GT_OK ? st : reshape_to(t, (int)op->nlist, shape, why, n);
}

static gt_status_t op_flatten(gt_tensor_t *t, const rs_op_t *op, char *why,
                              size_t n)
{
    int64_t shape[RS_MAX_DIMS], s0 = (op->has & 1u) ? op->arg[0] : 0;
    int64_t s1 = (op->has & 2u) ? op->arg[1] : -1;
    int a, b, nd = 0;
    if (!wrap_dim(s0, t->ndim, &a) || !wrap_dim(s1, t->ndim, &b))
        return fail(why, n, GT_ERR_OP, "dims (%lld, %lld) out of range",
                    (long long)s0, (long long)s1);
    if (a > b)
        return fail(why, n, GT_ERR_OP, "start dim after end dim");
    if (t->ndim == 0) {
        shape[0] = 1;
        return reshape_to(t, 1, shape, why, n);
    }
    for (int k = 0; k < t->ndim; k++) {
        if (k <= a || k > b)
            shape[nd++] = t->shape[k];
        else
            shape[nd - 1] *= t->shape[k];
    }
    return reshape_to(t, nd, shape, why, n);
}

static gt_status_t op_unflatten(gt_tensor_t *t, const rs_op_t *op, char *why,
                                size_t n)
{
    int64_t sizes[RS_MAX_DIMS], shape[RS_MAX_DIMS];
    int d, nd = 0;
    if (t->ndim == 0 || !wrap_dim(op->arg[0], t->ndim, &d))
        return fail(why, n, GT_ERR_OP, "dim %lld out of range",
                    (long long)op->arg[0]);
    if (op->nlist == 0 || t->ndim - 1 + (int64_t)op->nlist > RS_MAX_DIMS)
        return fail(why, n, GT_ERR_OP, "bad number of sizes (%zu)", op->nlist);
    gt_status_t st = infer_sizes(op->list, op->nlist, t->shape[d], sizes, why, n);
    if (st != GT_OK)
        return st;
    for (int k = 0; k < t->ndim; k++) {
        if (k != d) {
            shape[nd++] = t->shape[k];
            continue;
        }
        for (size_t j = 0; j < op->nlist; j++)
            shape[nd++] = sizes[j];
    }
    return reshape_to(t, nd, shape, why, n);
}

/* Ops that select a strided part of the current array, then gather it. */
static gt_status_t apply_strided(gt_tensor_t *t, const rs_op_t *op, char *why,
                                 size_t n)
{
    sv_t v;
    gt_status_t st;
    sv_from(t, &v);
    switch (op->kind) {
    case RS_OP_NARROW:
        st = sv_narrow(&v, op->arg[0], op->arg[1], op->arg[2], why, n);
        break;
    case RS_OP_SLICE: st = op_slice(&v, op, why, n); break;
    case RS_OP_SELECT: st = sv_select(&v, op->arg[0], op->arg[1], why, n); break;
    case RS_OP_GETITEM: st = op_getitem(&v, op, why, n); break;
    case RS_OP_TRANSPOSE:
        st = op_transpose(&v, op->arg[0], op->arg[1], why, n);
        break;
    case RS_OP_T:
        st = v.ndim > 2 ? fail(why, n, GT_ERR_OP, "t() on %d dims", v.ndim)
                        : op_transpose(&v, 0, v.ndim > 1 ? 1 : 0, why, n);
        break;
    case RS_OP_PERMUTE: st = op_permute(&v, op, why, n); break;
    case RS_OP_UNSQUEEZE: st = op_unsqueeze(&v, op->arg[0], why, n); break;
    case RS_OP_SQUEEZE: st = op_squeeze(&v, op, why, n); break;
    case RS_OP_CHUNK: st = op_chunk(&v, op, why, n); break;
    case RS_OP_SPLIT: st = op_split(&v, op, why, n); break;
    case RS_OP_UNBIND: st = sv_select(&v, op->arg[0], op->arg[1], why, n); break;
    default: st = fail(why, n, GT_ERR_OP, "unknown op kind %d", (int)op->kind);
    }
    if (st == GT_OK)
        sv_gather(t, &v);
    return st;
}

gt_status_t gt_apply(gt_tensor_t *t, const rs_op_t *op, char *why,
                     size_t whylen)
{
    switch (op->kind) {
    case RS_OP_VIEW:
    case RS_OP_RESHAPE: return op_view(t, op, why, whylen);
    case RS_OP_FLATTEN: return op_flatten(t, op, why, whylen);
    case RS_OP_UNFLATTEN: return op_unflatten(t, op, why, whylen);
    case RS_OP_CONTIGUOUS:
        return gt_is_contiguous(t) ? GT_OK
                                   : fail(why, whylen, GT_ERR_NOT_VIEW,
                                          "not contiguous");
    default: return apply_strided(t, op, why, whylen);
    }
}

gt_status_t gt_replay(int src_ndim, const int64_t *src_shape,
                      const rs_op_t *ops, size_t nops, gt_tensor_t *out,
                      char *why, size_t whylen)
{
    gt_tensor_t t;
    gt_status_t st = gt_full(src_ndim, src_shape, &t);
    if (st != GT_OK) {
        memset(out, 0, sizeof(*out));
        return fail(why, whylen, st, "bad source shape");
    }
    for (size_t i = 0; i < nops && st == GT_OK; i++)
        st = gt_apply(&t, &ops[i], why, whylen);
    if (st != GT_OK) {
        gt_free(&t);
        memset(out, 0, sizeof(*out));
        return st;
    }
    *out = t;
    return GT_OK;
}

/* 1 when the sorted values present in seen[0..size) are equally spaced. */
static int is_progression(const unsigned char *seen, int64_t size,
                          int64_t *count_p)
{
    int64_t count = 0, prev = -1, step = 0;
    for (int64_t v = 0; v < size; v++) {
        if (!seen[v])
            continue;
        if (count == 1)
            step = v - prev;
        else if (count > 1 && v - prev != step)
            return 0;
        prev = v;
        count++;
    }
    *count_p = count;
    return 1;
}

int gt_is_box(const gt_tensor_t *t, int src_ndim, const int64_t *src_shape)
{
    int64_t src_numel, m[RS_MAX_DIMS], prod = 1;
    int ok = 1;
    if (!checked_numel(src_ndim, src_shape, &src_numel))
        return 0;
    unsigned char *all = calloc((size_t)src_numel + 1, 1);
    unsigned char *seen[RS_MAX_DIMS];
    for (int d = 0; d < src_ndim; d++)
        seen[d] = calloc((size_t)src_shape[d] + 1, 1);
    for (int64_t j = 0; j < t->numel && ok; j++) {
        if (all[t->idx[j]])
            ok = 0;
        all[t->idx[j]] = 1;
        gt_unravel(t->idx[j], src_ndim, src_shape, m);
        for (int d = 0; d < src_ndim; d++)
            seen[d][m[d]] = 1;
    }
    for (int d = 0; d < src_ndim && ok && t->numel > 0; d++) {
        int64_t count = 0;
        ok = is_progression(seen[d], src_shape[d], &count);
        prod *= count;
    }
    for (int d = 0; d < src_ndim; d++)
        free(seen[d]);
    free(all);
    return ok && (t->numel == 0 || prod == t->numel);
}

/* The single source coordinate that differs between a and b, -1 when none
 * or several do. */
static int moved_coordinate(int64_t a, int64_t b, int src_ndim,
                            const int64_t *src_shape)
{
    int64_t ma[RS_MAX_DIMS], mb[RS_MAX_DIMS];
    int moved = -1;
    gt_unravel(a, src_ndim, src_shape, ma);
    gt_unravel(b, src_ndim, src_shape, mb);
    for (int d = 0; d < src_ndim; d++) {
        if (ma[d] == mb[d])
            continue;
        if (moved >= 0)
            return -1;
        moved = d;
    }
    return moved;
}

int gt_is_aligned_box(const gt_tensor_t *t, int src_ndim,
                      const int64_t *src_shape)
{
    int64_t cs[RS_MAX_DIMS], m[RS_MAX_DIMS], s = 1;
    int dim_of[RS_MAX_DIMS];
    if (!gt_is_box(t, src_ndim, src_shape))
        return 0;
    for (int k = t->ndim - 1; k >= 0; k--) {
        cs[k] = s;
        s *= t->shape[k];
        dim_of[k] = -2; /* not seen yet */
    }
    for (int64_t j = 0; j < t->numel; j++) {
        gt_unravel(j, t->ndim, t->shape, m);
        for (int k = 0; k < t->ndim; k++) {
            if (m[k] + 1 >= t->shape[k])
                continue;
            int d = moved_coordinate(t->idx[j], t->idx[j + cs[k]], src_ndim,
                                     src_shape);
            if (d < 0 || (dim_of[k] != -2 && dim_of[k] != d))
                return 0;
            dim_of[k] = d;
        }
    }
    return 1;
}
