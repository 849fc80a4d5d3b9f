/* The cut set: per source tensor and dim, the sorted unique indices where
 * some receiver's box begins or ends; adding, merging, reading and
 * splitting a box at them (the one splitter publishers, the simulator and
 * the tests share). */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "model/cuts_impl.h"

rs_status_t rs_cuts_create(rs_diag_t *diag, rs_cuts_h *cuts_p)
{
    if (cuts_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: NULL output");
    rs_cuts_h c = calloc(1, sizeof(*c));
    if (c == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts: out of memory");
    rs__strmap_init(&c->index);
    *cuts_p = c;
    return RS_OK;
}

void rs_cuts_destroy(rs_cuts_h cuts)
{
    if (cuts == NULL)
        return;
    for (size_t i = 0; i < cuts->tensors_len; i++) {
        rs__cut_tensor_t *t = &cuts->tensors[i];
        for (int d = 0; d < t->ndim; d++)
            free(t->dims[d].at);
        free(t->name);
    }
    free(cuts->tensors);
    free(cuts->order);
    rs__strmap_free(&cuts->index);
    rs__cuts_free_quants(cuts);
    free(cuts->model);
    free(cuts);
}

rs__cut_tensor_t *rs__cuts_find(rs_cuts_h cuts, const char *name)
{
    uint32_t i;
    if (!rs__strmap_get(&cuts->index, name, &i))
        return NULL;
    return &cuts->tensors[i];
}

int rs__cuts_same_shape(const rs__cut_tensor_t *t, int ndim,
                        const int64_t *shape, rs_diag_t *diag)
{
    char a[256], b[256];
    if (t->ndim == ndim &&
        (ndim == 0 || memcmp(t->shape, shape, (size_t)ndim * 8) == 0))
        return 1;
    rs__diag_set(diag, RS_ERR_INPUT, "cuts: tensor '%s': shape %s disagrees "
                 "with %s held for it", t->name,
                 rs__format_dims(a, sizeof(a), shape, ndim),
                 rs__format_dims(b, sizeof(b), t->shape, t->ndim));
    return 0;
}

static rs_status_t check_shape(const char *name, int ndim,
                               const int64_t *shape, rs_diag_t *diag)
{
    if (ndim < 0 || ndim > RS_MAX_DIMS || (ndim > 0 && shape == NULL))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: tensor '%s': "
                            "rank %d outside 0..%d", name, ndim, RS_MAX_DIMS);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: tensor '%s': "
                                "negative size %lld in dim %d", name,
                                (long long)shape[d], d);
    return RS_OK;
}

/* Room for one more tensor in both arrays. The NULL tests restate what
 * a successful reserve guarantees, for the analyzer's benefit. */
static int reserve_tensor(rs_cuts_h cuts)
{
    size_t n = cuts->tensors_len + 1;
    return rs__vec_reserve((void **)&cuts->tensors, &cuts->tensors_cap, n,
                           sizeof(rs__cut_tensor_t)) &&
           rs__vec_reserve((void **)&cuts->order, &cuts->order_cap, n,
                           sizeof(uint32_t)) &&
           cuts->tensors != NULL && cuts->order != NULL;
}

/* Appends a tensor without cuts; the key the map borrows is its name. */
static rs_status_t append_tensor(rs_cuts_h cuts, const char *name, int ndim,
                                 const int64_t *shape, rs__cut_tensor_t **t_p)
{
    uint32_t id = (uint32_t)cuts->tensors_len;
    char *copy = strdup(name);
    if (copy == NULL || !reserve_tensor(cuts) ||
        !rs__strmap_put(&cuts->index, copy, id)) {
        free(copy);
        return RS_ERR_NO_MEMORY;
    }
    rs__cut_tensor_t *t = &cuts->tensors[id];
    memset(t, 0, sizeof(*t));
    t->name = copy;
    t->ndim = ndim;
    if (ndim > 0)
        memcpy(t->shape, shape, (size_t)ndim * sizeof(int64_t));
    cuts->tensors_len++;
    cuts->order[cuts->order_len++] = id;
    *t_p = t;
    return RS_OK;
}

rs_status_t rs__cuts_tensor_for(rs_cuts_h cuts, const char *name, int ndim,
                                const int64_t *shape, rs_diag_t *diag,
                                rs__cut_tensor_t **t_p)
{
    rs_status_t st = check_shape(name, ndim, shape, diag);
    if (st != RS_OK)
        return st;
    rs__cut_tensor_t *t = rs__cuts_find(cuts, name);
    if (t != NULL) {
        if (!rs__cuts_same_shape(t, ndim, shape, diag))
            return RS_ERR_INPUT;
        *t_p = t;
        return RS_OK;
    }
    if (append_tensor(cuts, name, ndim, shape, t_p) != RS_OK)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts: out of memory");
    return RS_OK;
}

/* Index of the first element of a[0..n) that is >= x. */
static size_t lower_bound(const int64_t *a, size_t n, int64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int rs__cuts_insert(rs__cut_tensor_t *t, int dim, int64_t at)
{
    rs__cut_dim_t *d = &t->dims[dim];
    size_t i = lower_bound(d->at, d->at_len, at);
    if (i < d->at_len && d->at[i] == at)
        return 1;
    if (!rs__vec_reserve((void **)&d->at, &d->at_cap, d->at_len + 1,
                         sizeof(int64_t)))
        return 0;
    memmove(d->at + i + 1, d->at + i, (d->at_len - i) * sizeof(int64_t));
    d->at[i] = at;
    d->at_len++;
    return 1;
}

static int by_name(const void *a, const void *b, void *arg)
{
    const rs__cut_tensor_t *t = arg;
    return strcmp(t[*(const uint32_t *)a].name, t[*(const uint32_t *)b].name);
}

void rs__cuts_sort(rs_cuts_h cuts)
{
    uint32_t *o = cuts->order;
    size_t n = cuts->order_len, s = cuts->sorted;
    if (n - s == 1) { /* one new tensor: insert it where it belongs */
        uint32_t id = o[s];
        size_t i = s;
        while (i > 0 && strcmp(cuts->tensors[o[i - 1]].name,
                               cuts->tensors[id].name) > 0) {
            o[i] = o[i - 1];
            i--;
        }
        o[i] = id;
    } else if (n - s > 1) {
        qsort_r(o, n, sizeof(uint32_t), by_name, cuts->tensors);
    }
    cuts->sorted = n;
}

rs_status_t rs_cuts_add(rs_cuts_h cuts, const char *tensor, int ndim,
                        const int64_t *shape, int dim, int64_t at,
                        rs_diag_t *diag)
{
    rs__cut_tensor_t *t;
    if (cuts == NULL || tensor == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: NULL set or "
                            "tensor name");
    rs_status_t st = check_shape(tensor, ndim, shape, diag);
    if (st != RS_OK)
        return st;
    if (dim < 0 || dim >= ndim || at < 0 || at > shape[dim])
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: tensor '%s': cut "
                            "at %lld of dim %d outside its rank %d or size",
                            tensor, (long long)at, dim, ndim);
    if ((st = rs__cuts_tensor_for(cuts, tensor, ndim, shape, diag, &t)) !=
        RS_OK)
        return st;
    int ok = at == 0 || at == shape[dim] || rs__cuts_insert(t, dim, at);
    rs__cuts_sort(cuts);
    if (!ok)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts: out of memory");
    return RS_OK;
}

size_t rs_cuts_num_tensors(rs_cuts_h cuts)
{
    return cuts == NULL ? 0 : cuts->tensors_len;
}

const char *rs_cuts_tensor(rs_cuts_h cuts, size_t index)
{
    if (cuts == NULL || index >= cuts->order_len)
        return NULL;
    return cuts->tensors[cuts->order[index]].name;
}

const int64_t *rs_cuts_shape(rs_cuts_h cuts, const char *tensor, int *ndim_p)
{
    const rs__cut_tensor_t *t =
        cuts == NULL || tensor == NULL ? NULL : rs__cuts_find(cuts, tensor);
    *ndim_p = t == NULL ? -1 : t->ndim;
    return t == NULL ? NULL : t->shape;
}

const int64_t *rs_cuts_get(rs_cuts_h cuts, const char *tensor, int dim,
                           size_t *count_p)
{
    const rs__cut_tensor_t *t =
        cuts == NULL || tensor == NULL ? NULL : rs__cuts_find(cuts, tensor);
    *count_p = 0;
    if (t == NULL || dim < 0 || dim >= t->ndim || t->dims[dim].at_len == 0)
        return NULL;
    *count_p = t->dims[dim].at_len;
    return t->dims[dim].at;
}

const char *rs_cuts_model(rs_cuts_h cuts)
{
    return cuts == NULL ? NULL : cuts->model;
}

rs_status_t rs_cuts_set_model(rs_cuts_h cuts, const char *model,
                              rs_diag_t *diag)
{
    char *m = NULL;
    if (cuts == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: NULL set");
    if (model != NULL && (m = strdup(model)) == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts: out of memory");
    free(cuts->model);
    cuts->model = m;
    return RS_OK;
}

/* A merge checks every tensor before it adds a cut, so that a
 * disagreement leaves `into` as it was. */
static rs_status_t check_merge(rs_cuts_h into, rs_cuts_h from,
                               rs_diag_t *diag)
{
    if (into->model != NULL && from->model != NULL &&
        strcmp(into->model, from->model) != 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "cuts: model '%s' disagrees "
                            "with '%s' held", from->model, into->model);
    for (size_t i = 0; i < from->tensors_len; i++) {
        const rs__cut_tensor_t *f = &from->tensors[i];
        const rs__cut_tensor_t *t = rs__cuts_find(into, f->name);
        if (t != NULL && !rs__cuts_same_shape(t, f->ndim, f->shape, diag))
            return RS_ERR_INPUT;
    }
    return RS_OK;
}

static rs_status_t merge_tensor(rs_cuts_h into, const rs__cut_tensor_t *f,
                                rs_diag_t *diag)
{
    rs__cut_tensor_t *t;
    rs_status_t st = rs__cuts_tensor_for(into, f->name, f->ndim, f->shape,
                                         diag, &t);
    for (int d = 0; st == RS_OK && d < f->ndim; d++)
        for (size_t k = 0; k < f->dims[d].at_len; k++)
            if (!rs__cuts_insert(t, d, f->dims[d].at[k]))
                return rs__diag_set(diag, RS_ERR_NO_MEMORY,
                                    "cuts: out of memory");
    return st;
}

rs_status_t rs_cuts_merge(rs_cuts_h into, rs_cuts_h from, rs_diag_t *diag)
{
    if (into == NULL || from == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: NULL set");
    if (into == from)
        return RS_OK;
    rs_status_t st = check_merge(into, from, diag);
    if (st == RS_OK && into->model == NULL && from->model != NULL)
        st = rs_cuts_set_model(into, from->model, diag);
    for (size_t i = 0; st == RS_OK && i < from->tensors_len; i++)
        st = merge_tensor(into, &from->tensors[i], diag);
    rs__cuts_sort(into);
    if (st == RS_OK)
        st = rs__cuts_merge_quants(into, from, diag);
    return st;
}

/* The split of one dim: the box's pieces are [lo, c_0), [c_0, c_1), ...,
 * [c_{n-1}, hi) for the cuts c_i strictly inside (lo, hi). */
typedef struct split_dim {
    int64_t lo, hi;
    const int64_t *cut; /* the cuts inside, n of them */
    size_t n;
} split_dim_t;

static void split_dim_init(split_dim_t *s, const rs__cut_tensor_t *t, int d,
                           int64_t lo, int64_t hi)
{
    s->lo = lo;
    s->hi = hi;
    s->cut = NULL;
    s->n = 0;
    if (t == NULL || t->dims[d].at_len == 0)
        return;
    const rs__cut_dim_t *cd = &t->dims[d];
    size_t a = lower_bound(cd->at, cd->at_len, lo + 1);
    size_t b = lower_bound(cd->at, cd->at_len, hi);
    s->cut = cd->at + a;
    s->n = b > a ? b - a : 0;
}

/* Bounds of piece i of a split dim. */
static void split_piece(const split_dim_t *s, size_t i, int64_t *off,
                        int64_t *len)
{
    int64_t lo = i == 0 ? s->lo : s->cut[i - 1];
    int64_t hi = i == s->n ? s->hi : s->cut[i];
    *off = lo;
    *len = hi - lo;
}

static rs_status_t check_box(const char *tensor, int ndim,
                             const int64_t *offset, const int64_t *shape,
                             rs_diag_t *diag)
{
    int64_t end;
    if (ndim < 0 || ndim > RS_MAX_DIMS ||
        (ndim > 0 && (offset == NULL || shape == NULL)))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: split of '%s': "
                            "rank %d outside 0..%d or NULL box", tensor, ndim,
                            RS_MAX_DIMS);
    for (int d = 0; d < ndim; d++)
        if (offset[d] < 0 || shape[d] < 0 ||
            __builtin_add_overflow(offset[d], shape[d], &end))
            return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: split of "
                                "'%s': dim %d has offset %lld and extent %lld",
                                tensor, d, (long long)offset[d],
                                (long long)shape[d]);
    return RS_OK;
}

/* Visits the grid of pieces in row-major order (an odometer over dims). */
static rs_status_t visit_grid(const split_dim_t *s, int ndim,
                              rs_cuts_box_fn fn, void *ctx)
{
    size_t idx[RS_MAX_DIMS] = {0};
    int64_t off[RS_MAX_DIMS], len[RS_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        split_piece(&s[d], 0, &off[d], &len[d]);
    for (;;) {
        rs_status_t st = fn(ctx, off, len);
        int d = ndim - 1;
        if (st != RS_OK)
            return st;
        while (d >= 0 && idx[d] == s[d].n) {
            idx[d] = 0;
            split_piece(&s[d], 0, &off[d], &len[d]);
            d--;
        }
        if (d < 0)
            return RS_OK;
        idx[d]++;
        split_piece(&s[d], idx[d], &off[d], &len[d]);
    }
}

/* Keeps the cuts of s that fall on a multiple of `b`, copied into `keep`. */
static void keep_on_blocks(split_dim_t *s, int64_t b, int64_t *keep)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->cut[i] % b == 0)
            keep[n++] = s->cut[i];
    s->cut = keep;
    s->n = n;
}

/* rs_cuts_split, keeping only the cuts on a multiple of block[d] when
 * block is not NULL. */
static rs_status_t split_box(rs_cuts_h cuts, const char *tensor, int ndim,
                             const int64_t *block, const int64_t *offset,
                             const int64_t *shape, rs_cuts_box_fn fn,
                             void *ctx, rs_diag_t *diag)
{
    split_dim_t s[RS_MAX_DIMS];
    int empty = 0;
    if (cuts == NULL || tensor == NULL || fn == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: NULL set, tensor "
                            "or callback");
    rs_status_t st = check_box(tensor, ndim, offset, shape, diag);
    if (st != RS_OK)
        return st;
    for (int d = 0; block != NULL && d < ndim; d++)
        if (block[d] <= 0)
            return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: split of "
                                "'%s': block extent %lld in dim %d", tensor,
                                (long long)block[d], d);
    const rs__cut_tensor_t *t = rs__cuts_find(cuts, tensor);
    if (t != NULL && t->ndim != ndim)
        return rs__diag_set(diag, RS_ERR_INPUT, "cuts: split of '%s': box of "
                            "rank %d, the set holds rank %d", tensor, ndim,
                            t->ndim);
    for (int d = 0; d < ndim; d++)
        empty |= shape[d] == 0;
    size_t total = 0;
    for (int d = 0; d < ndim; d++) {
        split_dim_init(&s[d], empty ? NULL : t, d, offset[d],
                       offset[d] + shape[d]);
        total += s[d].n;
    }
    int64_t *keep = NULL;
    if (block != NULL && total > 0) {
        if ((keep = malloc(total * sizeof(int64_t))) == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts: out of memory");
        for (int d = 0, at = 0; d < ndim; d++) {
            size_t n = s[d].n;
            keep_on_blocks(&s[d], block[d], keep + at);
            at += (int)n;
        }
    }
    st = visit_grid(s, ndim, fn, ctx);
    free(keep);
    return st;
}

rs_status_t rs_cuts_split(rs_cuts_h cuts, const char *tensor, int ndim,
                          const int64_t *offset, const int64_t *shape,
                          rs_cuts_box_fn fn, void *ctx, rs_diag_t *diag)
{
    return split_box(cuts, tensor, ndim, NULL, offset, shape, fn, ctx, diag);
}

rs_status_t rs_cuts_split_blocks(rs_cuts_h cuts, const char *tensor, int ndim,
                                 const int64_t *block, const int64_t *offset,
                                 const int64_t *shape, rs_cuts_box_fn fn,
                                 void *ctx, rs_diag_t *diag)
{
    if (block == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: NULL block");
    return split_box(cuts, tensor, ndim, block, offset, shape, fn, ctx, diag);
}
