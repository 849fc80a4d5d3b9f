/* Op-chain replay: each op transforms a strided view exactly as PyTorch's
 * view functions do. Ops that would copy (a non-view reshape, contiguous on a
 * non-contiguous view) are refused rather than approximated. Also the ops'
 * names as captures write them, and the geometry layer's one formatter of
 * refusals (why.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "geom/view.h"
#include "geom/why.h"

#if defined(__clang_analyzer__) /* rs__geom_why()'s result made visible: core/diag.h */
#define BAD(...)                                                             \
    RS__RETURNS(RS_ERR_INPUT, rs__geom_why(RS_ERR_INPUT, why, whylen, __VA_ARGS__))
#define UNSUP(...)                                                           \
    RS__RETURNS(RS_ERR_UNSUPPORTED,                                          \
                rs__geom_why(RS_ERR_UNSUPPORTED, why, whylen, __VA_ARGS__))
#else
#define BAD(...) rs__geom_why(RS_ERR_INPUT, why, whylen, __VA_ARGS__)
#define UNSUP(...) rs__geom_why(RS_ERR_UNSUPPORTED, why, whylen, __VA_ARGS__)
#endif

/* The names of the view ops as captures write them ("narrow"), for the
 * capture reader and writer and for messages naming an op. */
static const char *const op_names[] = {
    [RS_OP_NARROW] = "narrow",       [RS_OP_SLICE] = "slice",
    [RS_OP_SELECT] = "select",       [RS_OP_GETITEM] = "getitem",
    [RS_OP_TRANSPOSE] = "transpose", [RS_OP_T] = "t",
    [RS_OP_PERMUTE] = "permute",     [RS_OP_VIEW] = "view",
    [RS_OP_RESHAPE] = "reshape",     [RS_OP_FLATTEN] = "flatten",
    [RS_OP_UNFLATTEN] = "unflatten", [RS_OP_UNSQUEEZE] = "unsqueeze",
    [RS_OP_SQUEEZE] = "squeeze",     [RS_OP_CHUNK] = "chunk",
    [RS_OP_SPLIT] = "split",         [RS_OP_UNBIND] = "unbind",
    [RS_OP_CONTIGUOUS] = "contiguous",
};

const char *rs_op_name(rs_op_kind_t kind)
{
    if ((int)kind <= 0 || (size_t)kind >= sizeof(op_names) / sizeof(op_names[0]))
        return "?";
    return op_names[kind];
}

/* The one formatter of geometry refusals (why.h). */
rs_status_t rs__geom_why(rs_status_t st, char *why, size_t n, const char *fmt,
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

rs_status_t rs__view_init(rs__view_t *v, int ndim, const int64_t *shape)
{
    int64_t numel;
    if (ndim < 0 || ndim > RS_MAX_DIMS || !rs__numel(shape, ndim, &numel))
        return RS_ERR_INPUT;
    v->offset = 0;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        v->shape[i] = shape[i];
    return rs__row_major(shape, ndim, v->stride) ? RS_OK : RS_ERR_INPUT;
}

int rs__view_is_contiguous(const rs__view_t *v)
{
    int64_t expected = 1;
    for (int i = v->ndim - 1; i >= 0; i--) {
        if (v->shape[i] == 0)
            return 1;
        if (v->shape[i] != 1 && v->stride[i] != expected)
            return 0;
        expected *= v->shape[i];
    }
    return 1;
}

/* Wraps a possibly negative dim into [0, ndim); 0 when out of range. */
static int wrap_dim(int64_t d, int ndim, int *out)
{
    int64_t n = ndim > 0 ? ndim : 1; /* PyTorch lets 0-d tensors name dim 0/-1 */
    if (d < -n || d >= n)
        return 0;
    *out = (int)(d < 0 ? d + n : d);
    return 1;
}

static void remove_dim(rs__view_t *v, int d)
{
    for (int i = d; i < v->ndim - 1; i++) {
        v->shape[i] = v->shape[i + 1];
        v->stride[i] = v->stride[i + 1];
    }
    v->ndim--;
}

static rs_status_t insert_dim(rs__view_t *v, int d, int64_t size, int64_t stride)
{
    if (v->ndim >= RS_MAX_DIMS)
        return RS_ERR_UNSUPPORTED;
    for (int i = v->ndim; i > d; i--) {
        v->shape[i] = v->shape[i - 1];
        v->stride[i] = v->stride[i - 1];
    }
    v->shape[d] = size;
    v->stride[d] = stride;
    v->ndim++;
    return RS_OK;
}

/* Restricts dim d to elements start, start+step, ... (count of them). The
 * caller has proved the range lies inside the dim. 0 (the view unchanged)
 * when the new offset or stride overflows: views of empty tensors may
 * carry strides no element is ever addressed by. */
static int restrict_dim(rs__view_t *v, int d, int64_t start, int64_t count,
                        int64_t step)
{
    int64_t offset = v->offset, stride = v->stride[d], by;
    if (count > 0 && (!rs__mul_i64(start, stride, &by) ||
                      !rs__add_i64(offset, by, &offset)))
        return 0;
    /* a single element's stride is irrelevant and may overflow */
    if (count > 1 && !rs__mul_i64(stride, step, &stride))
        return 0;
    v->offset = offset;
    v->shape[d] = count;
    v->stride[d] = stride;
    return 1;
}

#define RESTRICT_OR_FAIL(v, d, start, count, step)                            \
    do {                                                                      \
        if (!restrict_dim((v), (d), (start), (count), (step)))                \
            return BAD("dim %d: the view's offset or stride overflows", (d)); \
    } while (0)

#define DIM_OR_FAIL(arg, var)                                                 \
    do {                                                                      \
        if (v->ndim == 0 || !wrap_dim((arg), v->ndim, &(var)))                \
            return BAD("dim %lld out of range for rank %d", (long long)(arg), \
                       v->ndim);                                              \
    } while (0)

static rs_status_t op_narrow(rs__view_t *v, const rs_op_t *op, char *why,
                             size_t whylen)
{
    int d;
    DIM_OR_FAIL(op->arg[0], d);
    int64_t size = v->shape[d], start = op->arg[1], len = op->arg[2];
    if (start < -size || start > size)
        return BAD("start %lld out of range for dim %d of size %lld",
                   (long long)start, d, (long long)size);
    if (start < 0)
        start += size;
    if (len < 0 || len > size - start)
        return BAD("length %lld out of range: start %lld, dim %d of size %lld",
                   (long long)len, (long long)start, d, (long long)size);
    RESTRICT_OR_FAIL(v, d, start, len, 1);
    return RS_OK;
}

/* Python slice bounds with wrap-around for negatives; out of range is an
 * error, never a clamp. Sets start/count for the given step. */
static rs_status_t slice_bounds(int64_t size, int has_start, int64_t start,
                                int has_stop, int64_t stop, int64_t step,
                                int64_t *start_p, int64_t *count_p, char *why,
                                size_t whylen)
{
    if (step < 1)
        return BAD("step %lld must be >= 1", (long long)step);
    if (!has_start)
        start = 0;
    if (!has_stop)
        stop = size;
    if (start < -size || start > size)
        return BAD("start %lld out of range for size %lld", (long long)start,
                   (long long)size);
    if (stop < -size || stop > size)
        return BAD("stop %lld out of range for size %lld", (long long)stop,
                   (long long)size);
    if (start < 0)
        start += size;
    if (stop < 0)
        stop += size;
    /* ceil((stop - start) / step) without overflow for steps near the max */
    int64_t count = stop > start ? 1 + (stop - start - 1) / step : 0;
    *start_p = start;
    *count_p = count;
    return RS_OK;
}

static rs_status_t op_slice(rs__view_t *v, const rs_op_t *op, char *why,
                            size_t whylen)
{
    int d;
    int64_t start, count;
    DIM_OR_FAIL(op->arg[0], d);
    int64_t step = (op->has & 8u) ? op->arg[3] : 1;
    rs_status_t st = slice_bounds(v->shape[d], (op->has & 2u) != 0, op->arg[1],
                                  (op->has & 4u) != 0, op->arg[2], step,
                                  &start, &count, why, whylen);
    if (st != RS_OK)
        return st;
    RESTRICT_OR_FAIL(v, d, start, count, step);
    return RS_OK;
}

static rs_status_t select_dim(rs__view_t *v, int d, int64_t index, char *why,
                              size_t whylen)
{
    int64_t size = v->shape[d];
    if (index < -size || index >= size)
        return BAD("index %lld out of range for dim %d of size %lld",
                   (long long)index, d, (long long)size);
    if (index < 0)
        index += size;
    int64_t by, offset;
    if (!rs__mul_i64(index, v->stride[d], &by) ||
        !rs__add_i64(v->offset, by, &offset))
        return BAD("dim %d: the view's offset overflows at index %lld", d,
                   (long long)index);
    v->offset = offset;
    remove_dim(v, d);
    return RS_OK;
}

static rs_status_t op_select(rs__view_t *v, const rs_op_t *op, char *why,
                             size_t whylen)
{
    int d;
    DIM_OR_FAIL(op->arg[0], d);
    return select_dim(v, d, op->arg[1], why, whylen);
}

static rs_status_t op_getitem(rs__view_t *v, const rs_op_t *op, char *why,
                              size_t whylen)
{
    int d = 0;
    if (op->nkeys > (size_t)v->ndim)
        return BAD("%zu keys index a tensor of rank %d", op->nkeys, v->ndim);
    for (size_t k = 0; k < op->nkeys; k++) {
        const rs_key_t *key = &op->keys[k];
        rs_status_t st = RS_OK;
        int64_t start, count, step = key->has_step ? key->step : 1;
        if (key->kind == RS_KEY_INDEX) {
            st = select_dim(v, d, key->index, why, whylen);
            if (st != RS_OK)
                return st;
            continue; /* the dim is gone; the next key names the next one */
        }
        if (key->kind == RS_KEY_SLICE) {
            st = slice_bounds(v->shape[d], key->has_start, key->start,
                              key->has_stop, key->stop, step, &start, &count,
                              why, whylen);
            if (st != RS_OK)
                return st;
            RESTRICT_OR_FAIL(v, d, start, count, step);
        } else if (key->kind != RS_KEY_FULL) {
            return BAD("key %zu has an unknown kind", k);
        }
        d++;
    }
    return RS_OK;
}

static rs_status_t op_transpose(rs__view_t *v, const rs_op_t *op, char *why,
                                size_t whylen)
{
    int a, b;
    if (v->ndim == 0) {
        if (!wrap_dim(op->arg[0], 0, &a) || !wrap_dim(op->arg[1], 0, &b))
            return BAD("dims out of range for rank 0");
        return RS_OK;
    }
    DIM_OR_FAIL(op->arg[0], a);
    DIM_OR_FAIL(op->arg[1], b);
    int64_t t = v->shape[a];
    v->shape[a] = v->shape[b];
    v->shape[b] = t;
    t = v->stride[a];
    v->stride[a] = v->stride[b];
    v->stride[b] = t;
    return RS_OK;
}

static rs_status_t op_t(rs__view_t *v, char *why, size_t whylen)
{
    if (v->ndim > 2)
        return BAD("t() expects a tensor of rank <= 2, got rank %d", v->ndim);
    if (v->ndim == 2) {
        rs_op_t swap = {.kind = RS_OP_TRANSPOSE, .arg = {0, 1}};
        return op_transpose(v, &swap, why, whylen);
    }
    return RS_OK;
}

static rs_status_t op_permute(rs__view_t *v, const rs_op_t *op, char *why,
                              size_t whylen)
{
    rs__view_t out = *v;
    int seen[RS_MAX_DIMS] = {0};
    if (op->nlist != (size_t)v->ndim)
        return BAD("permute of %zu dims applied to rank %d", op->nlist,
                   v->ndim);
    for (int i = 0; i < v->ndim; i++) {
        int d;
        if (!wrap_dim(op->list[i], v->ndim, &d))
            return BAD("dim %lld out of range for rank %d",
                       (long long)op->list[i], v->ndim);
        if (seen[d]++)
            return BAD("dim %d repeated in permute", d);
        out.shape[i] = v->shape[d];
        out.stride[i] = v->stride[d];
    }
    *v = out;
    return RS_OK;
}

/* Resolves one -1 in a size list against numel; checks the product. */
static rs_status_t infer_sizes(const int64_t *in, size_t n, int64_t numel,
                               int64_t *out, char *why, size_t whylen)
{
    int infer = -1;
    int64_t prod = 1;
    if (n > RS_MAX_DIMS)
        return BAD("%zu sizes exceed rank %d", n, RS_MAX_DIMS);
    for (size_t i = 0; i < n; i++) {
        out[i] = in[i];
        if (in[i] == -1) {
            if (infer >= 0)
                return BAD("more than one -1 in sizes");
            infer = (int)i;
        } else if (in[i] < 0) {
            return BAD("size %lld is negative", (long long)in[i]);
        } else if (!rs__mul_i64(prod, in[i], &prod)) {
            return BAD("sizes overflow");
        }
    }
    if (infer >= 0) {
        if (prod == 0 || numel % prod != 0)
            return BAD("cannot infer -1: %lld elements over sizes of product "
                       "%lld", (long long)numel, (long long)prod);
        out[infer] = numel / prod;
        prod = numel;
    }
    if (prod != numel)
        return BAD("sizes of product %lld do not match %lld elements",
                   (long long)prod, (long long)numel);
    /* a 0 among the sizes hides an overflow of the others' strides */
    if (!rs__numel(out, (int)n, &prod))
        return BAD("sizes overflow");
    return RS_OK;
}

/* The strides a view of new shape would have over the same memory, or 0 when
 * PyTorch's view would refuse (merging dims that are not adjacent in
 * memory). Walks the old dims from the back in chunks that are contiguous
 * among themselves and hands each chunk's elements to new dims. */
static int view_strides(const rs__view_t *v, const int64_t *shape, int n,
                        int64_t *stride)
{
    int64_t numel = 0;
    rs__numel(v->shape, v->ndim, &numel);
    if (numel == 0 || v->ndim == 0)
        return rs__row_major(shape, n, stride);
    int nd = n - 1;
    int64_t base = v->stride[v->ndim - 1], chunk = 1, got = 1;
    for (int od = v->ndim - 1; od >= 0; od--) {
        chunk *= v->shape[od];
        int chunk_ends = od == 0 || (v->shape[od - 1] != 1 &&
                                     v->stride[od - 1] != chunk * base);
        if (!chunk_ends)
            continue;
        while (nd >= 0 && (got < chunk || shape[nd] == 1)) {
            stride[nd] = got * base;
            got *= shape[nd];
            nd--;
        }
        if (got != chunk)
            return 0;
        if (od > 0) {
            base = v->stride[od - 1];
            chunk = 1;
            got = 1;
        }
    }
    return nd == -1;
}

static rs_status_t reshape_to(rs__view_t *v, const int64_t *sizes, size_t n,
                              const char *what, char *why, size_t whylen)
{
    int64_t shape[RS_MAX_DIMS], stride[RS_MAX_DIMS], numel = 0;
    rs__numel(v->shape, v->ndim, &numel);
    rs_status_t st = infer_sizes(sizes, n, numel, shape, why, whylen);
    if (st != RS_OK)
        return st;
    if (!view_strides(v, shape, (int)n, stride))
        return UNSUP("%s would copy: the dims it merges are not contiguous "
                     "in memory", what);
    v->ndim = (int)n;
    memcpy(v->shape, shape, n * sizeof(int64_t));
    memcpy(v->stride, stride, n * sizeof(int64_t));
    return RS_OK;
}

static rs_status_t op_flatten(rs__view_t *v, const rs_op_t *op, char *why,
                              size_t whylen)
{
    int s = 0, e = v->ndim - 1;
    int64_t sizes[RS_MAX_DIMS];
    if ((op->has & 1u) && !wrap_dim(op->arg[0], v->ndim, &s))
        return BAD("start_dim %lld out of range for rank %d",
                   (long long)op->arg[0], v->ndim);
    if ((op->has & 2u) && !wrap_dim(op->arg[1], v->ndim, &e))
        return BAD("end_dim %lld out of range for rank %d",
                   (long long)op->arg[1], v->ndim);
    if (v->ndim == 0) /* dims checked first, as PyTorch does */
        return reshape_to(v, (int64_t[]){1}, 1, "flatten", why, whylen);
    if (s > e)
        return BAD("start_dim %d is after end_dim %d", s, e);
    int n = 0;
    for (int i = 0; i < s; i++)
        sizes[n++] = v->shape[i];
    int64_t merged = 1;
    for (int i = s; i <= e; i++)
        merged *= v->shape[i];
    sizes[n++] = merged;
    for (int i = e + 1; i < v->ndim; i++)
        sizes[n++] = v->shape[i];
    return reshape_to(v, sizes, (size_t)n, "flatten", why, whylen);
}

static rs_status_t op_unflatten(rs__view_t *v, const rs_op_t *op, char *why,
                                size_t whylen)
{
    int d;
    int64_t sizes[RS_MAX_DIMS];
    DIM_OR_FAIL(op->arg[0], d);
    if (op->nlist == 0)
        return BAD("unflatten needs at least one size");
    if (v->ndim - 1 + (int)op->nlist > RS_MAX_DIMS)
        return UNSUP("result rank exceeds %d", RS_MAX_DIMS);
    rs_status_t st = infer_sizes(op->list, op->nlist, v->shape[d], sizes, why,
                                 whylen);
    if (st != RS_OK)
        return st;
    int64_t stride = v->stride[d], numel;
    remove_dim(v, d);
    for (int i = (int)op->nlist - 1; i >= 0; i--) {
        insert_dim(v, d, sizes[i], stride);
        if (!rs__mul_i64(stride, sizes[i] > 0 ? sizes[i] : 1, &stride))
            return BAD("sizes overflow");
    }
    /* an empty dim's sizes fit alone but may overflow beside the others */
    if (!rs__numel(v->shape, v->ndim, &numel))
        return BAD("sizes overflow the view");
    return RS_OK;
}

static rs_status_t op_unsqueeze(rs__view_t *v, const rs_op_t *op, char *why,
                                size_t whylen)
{
    int d;
    if (!wrap_dim(op->arg[0], v->ndim + 1, &d))
        return BAD("dim %lld out of range for unsqueeze of rank %d",
                   (long long)op->arg[0], v->ndim);
    int64_t stride = 1;
    if (d < v->ndim && !rs__mul_i64(v->shape[d], v->stride[d], &stride))
        return BAD("dim %d's size times its stride overflows in unsqueeze",
                   d);
    if (insert_dim(v, d, 1, stride) != RS_OK)
        return UNSUP("result rank exceeds %d", RS_MAX_DIMS);
    return RS_OK;
}

static rs_status_t op_squeeze(rs__view_t *v, const rs_op_t *op, char *why,
                              size_t whylen)
{
    if (op->has & 1u) {
        int d;
        if (v->ndim == 0) {
            if (!wrap_dim(op->arg[0], 0, &d))
                return BAD("dim out of range for rank 0");
            return RS_OK;
        }
        DIM_OR_FAIL(op->arg[0], d);
        if (v->shape[d] == 1)
            remove_dim(v, d);
        return RS_OK;
    }
    for (int i = v->ndim - 1; i >= 0; i--) {
        if (v->shape[i] == 1)
            remove_dim(v, i);
    }
    return RS_OK;
}

/* Takes piece i of dim d cut at the given boundaries (sizes[]). */
static rs_status_t take_piece(rs__view_t *v, int d, const int64_t *sizes,
                              size_t npieces, int64_t i, char *why,
                              size_t whylen)
{
    if (i < -(int64_t)npieces || i >= (int64_t)npieces)
        return BAD("piece %lld out of range: %zu pieces", (long long)i,
                   npieces);
    if (i < 0)
        i += (int64_t)npieces;
    int64_t start = 0;
    for (int64_t k = 0; k < i; k++)
        start += sizes[k];
    RESTRICT_OR_FAIL(v, d, start, sizes[i], 1);
    return RS_OK;
}

/* Piece i of equal pieces of `size` (the last may be shorter). */
static rs_status_t take_equal_piece(rs__view_t *v, int d, int64_t piece,
                                    int64_t i, char *why, size_t whylen)
{
    int64_t dim = v->shape[d];
    int64_t npieces = dim == 0 ? 1 : dim / piece + (dim % piece != 0);
    if (i < -npieces || i >= npieces)
        return BAD("piece %lld out of range: %lld pieces", (long long)i,
                   (long long)npieces);
    if (i < 0)
        i += npieces;
    int64_t start = i * piece;
    int64_t len = dim - start < piece ? dim - start : piece;
    RESTRICT_OR_FAIL(v, d, start, len, 1);
    return RS_OK;
}

static rs_status_t op_chunk(rs__view_t *v, const rs_op_t *op, char *why,
                            size_t whylen)
{
    int d;
    int64_t chunks = op->arg[0];
    DIM_OR_FAIL(op->arg[1], d);
    if (chunks < 1)
        return BAD("chunks %lld must be >= 1", (long long)chunks);
    int64_t dim = v->shape[d];
    int64_t piece = dim / chunks + (dim % chunks != 0);
    if (dim == 0) { /* PyTorch returns `chunks` empty pieces */
        if (op->arg[2] < -chunks || op->arg[2] >= chunks)
            return BAD("piece %lld out of range: %lld pieces",
                       (long long)op->arg[2], (long long)chunks);
        return RS_OK;
    }
    return take_equal_piece(v, d, piece, op->arg[2], why, whylen);
}

static rs_status_t op_split(rs__view_t *v, const rs_op_t *op, char *why,
                            size_t whylen)
{
    int d;
    DIM_OR_FAIL(op->arg[1], d);
    if (op->nlist == 0) {
        int64_t piece = op->arg[0];
        if (piece < 1 && !(piece == 0 && v->shape[d] == 0))
            return BAD("split_size %lld must be >= 1", (long long)piece);
        return take_equal_piece(v, d, piece ? piece : 1, op->arg[2], why,
                                whylen);
    }
    int64_t total = 0;
    for (size_t k = 0; k < op->nlist; k++) {
        if (op->list[k] < 0 || !rs__add_i64(total, op->list[k], &total))
            return BAD("split size %lld is negative or overflows",
                       (long long)op->list[k]);
    }
    if (total != v->shape[d])
        return BAD("split sizes sum to %lld, dim %d has size %lld",
                   (long long)total, d, (long long)v->shape[d]);
    return take_piece(v, d, op->list, op->nlist, op->arg[2], why, whylen);
}

rs_status_t rs__view_apply(rs__view_t *v, const rs_op_t *op, char *why,
                          size_t whylen)
{
    switch (op->kind) {
    case RS_OP_NARROW: return op_narrow(v, op, why, whylen);
    case RS_OP_SLICE: return op_slice(v, op, why, whylen);
    case RS_OP_SELECT:
    case RS_OP_UNBIND: /* the piece unbind yields is a select */
        return op_select(v, op, why, whylen);
    case RS_OP_GETITEM: return op_getitem(v, op, why, whylen);
    case RS_OP_TRANSPOSE: return op_transpose(v, op, why, whylen);
    case RS_OP_T: return op_t(v, why, whylen);
    case RS_OP_PERMUTE: return op_permute(v, op, why, whylen);
    case RS_OP_VIEW: return reshape_to(v, op->list, op->nlist, "view", why, whylen);
    case RS_OP_RESHAPE:
        return reshape_to(v, op->list, op->nlist, "reshape", why, whylen);
    case RS_OP_FLATTEN: return op_flatten(v, op, why, whylen);
    case RS_OP_UNFLATTEN: return op_unflatten(v, op, why, whylen);
    case RS_OP_UNSQUEEZE: return op_unsqueeze(v, op, why, whylen);
    case RS_OP_SQUEEZE: return op_squeeze(v, op, why, whylen);
    case RS_OP_CHUNK: return op_chunk(v, op, why, whylen);
    case RS_OP_SPLIT: return op_split(v, op, why, whylen);
    case RS_OP_CONTIGUOUS:
        if (!rs__view_is_contiguous(v))
            return UNSUP("contiguous() on a non-contiguous view would copy");
        return RS_OK;
    }
    return BAD("unknown op kind %d", (int)op->kind);
}
