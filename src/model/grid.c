/* Grid construction and lookup. Boundaries per dim are the sorted union of
 * every shard's edges; a cell is one interval per dim. Cell lists are kept
 * in compressed rows (one offsets array, one shard-id array). */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "model/grid.h"
#include "model/sources_impl.h"

struct rs__grid {
    int ndim;
    int64_t *bounds[RS_MAX_DIMS];
    size_t nint[RS_MAX_DIMS];    /* intervals per dim */
    size_t cstride[RS_MAX_DIMS]; /* row-major cell strides */
    size_t ncells;
    uint32_t *row;               /* ncells + 1 offsets into ids */
    uint32_t *ids;               /* in the same block as row */
    int row_in_g;                /* row and ids follow the bounds in g's
                                  * block (a one-cell grid) */
    int64_t bound_store[];       /* every dim's bounds, one block with g */
};

void rs__grid_destroy(rs__grid_t *g)
{
    if (g == NULL)
        return;
    if (!g->row_in_g)
        free(g->row);
    free(g);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Most tensors have a handful of shards: insertion sort below this many
 * edges, qsort above. */
#define SMALL_SORT 32

static void sort_edges(int64_t *b, size_t n)
{
    if (n > SMALL_SORT) {
        qsort(b, n, sizeof(int64_t), cmp_i64);
        return;
    }
    for (size_t i = 1; i < n; i++) {
        int64_t t = b[i];
        size_t k = i;
        for (; k > 0 && b[k - 1] > t; k--)
            b[k] = b[k - 1];
        b[k] = t;
    }
}

/* Sorted unique edges of dim d over non-empty shards, plus 0 and the size,
 * in dim d's slot of the grid's bound store. */
static void build_bounds(rs__grid_t *g, const rs__source_tensor_t *t, int d)
{
    size_t n = 0;
    int64_t *b = g->bound_store + (size_t)d * (2 * t->shards_len + 2);
    b[n++] = 0;
    b[n++] = t->shape[d];
    for (size_t i = 0; i < t->shards_len; i++) {
        if (t->shards[i].numel == 0)
            continue;
        b[n++] = t->shards[i].offset[d];
        b[n++] = t->shards[i].offset[d] + t->shards[i].shape[d];
    }
    sort_edges(b, n);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u == 0 || b[u - 1] != b[i])
            b[u++] = b[i];
    }
    g->bounds[d] = b;
    g->nint[d] = u - 1;
}

/* Index of the interval of dim d starting at coordinate x (x is an edge). */
static size_t interval_at(const rs__grid_t *g, int d, int64_t x)
{
    size_t lo = 0, hi = g->nint[d];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g->bounds[d][mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Calls fn for every cell inside shard s (as a box of intervals). */
typedef void (*cell_fn)(rs__grid_t *g, size_t cell, uint32_t shard);

static void for_shard_cells(rs__grid_t *g, const rs__source_shard_t *s,
                            uint32_t id, cell_fn fn)
{
    /* zeroed: a rank-0 shard reads none of them, which analyzers miss */
    size_t lo[RS_MAX_DIMS] = {0}, hi[RS_MAX_DIMS] = {0};
    size_t idx[RS_MAX_DIMS] = {0};
    size_t cell = 0;
    for (int d = 0; d < g->ndim; d++) {
        lo[d] = interval_at(g, d, s->offset[d]);
        hi[d] = interval_at(g, d, s->offset[d] + s->shape[d]);
        idx[d] = lo[d];
        cell += lo[d] * g->cstride[d];
    }
    for (;;) {
        fn(g, cell, id);
        int d = g->ndim - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < hi[d]) {
                cell += g->cstride[d];
                break;
            }
            cell -= (idx[d] - 1 - lo[d]) * g->cstride[d];
            idx[d] = lo[d];
        }
        if (d < 0)
            return;
    }
}

static void count_cell(rs__grid_t *g, size_t cell, uint32_t shard)
{
    (void)shard;
    g->row[cell + 1]++;
}

static void fill_cell(rs__grid_t *g, size_t cell, uint32_t shard)
{
    g->ids[g->row[cell]++] = shard;
}

/* Counts cells; sets ncells and strides, 0 when over the ceiling. */
static int size_cells(rs__grid_t *g, size_t max_cells)
{
    size_t n = 1;
    for (int d = g->ndim - 1; d >= 0; d--) {
        g->cstride[d] = n;
        if (g->nint[d] != 0 && n > max_cells / g->nint[d])
            return 0;
        n *= g->nint[d];
    }
    g->ncells = n;
    return 1;
}

/* Cells inside shard s: the product of its interval spans. */
static size_t shard_cells(const rs__grid_t *g, const rs__source_shard_t *s)
{
    size_t n = 1;
    for (int d = 0; d < g->ndim; d++)
        n *= interval_at(g, d, s->offset[d] + s->shape[d]) -
             interval_at(g, d, s->offset[d]);
    return n;
}

/* Row offsets and shard ids in one block: the incidences are summed per
 * shard first (each shard's cells are a box of intervals), so the block is
 * sized before any cell is counted. */
static rs_status_t fill_rows(rs__grid_t *g, const rs__source_tensor_t *t,
                             size_t max_cells)
{
    size_t total = 0;
    for (size_t i = 0; i < t->shards_len; i++) {
        if (t->shards[i].numel == 0)
            continue;
        total += shard_cells(g, &t->shards[i]); /* <= max_cells each */
        if (total > max_cells)
            return RS_ERR_UNSUPPORTED;
    }
    g->row = calloc(g->ncells + 1 + (total ? total : 1), sizeof(uint32_t));
    if (g->row == NULL)
        return RS_ERR_NO_MEMORY;
    g->ids = g->row + g->ncells + 1;
    for (size_t i = 0; i < t->shards_len; i++) {
        if (t->shards[i].numel != 0)
            for_shard_cells(g, &t->shards[i], (uint32_t)i, count_cell);
    }
    for (size_t c = 0; c < g->ncells; c++)
        g->row[c + 1] += g->row[c];
    for (size_t i = 0; i < t->shards_len; i++) {
        if (t->shards[i].numel != 0)
            for_shard_cells(g, &t->shards[i], (uint32_t)i, fill_cell);
    }
    /* fill_cell advanced each row start to the next row's: shift back. */
    memmove(g->row + 1, g->row, g->ncells * sizeof(uint32_t));
    g->row[0] = 0;
    return RS_OK;
}

/* The number of non-empty shards when each of them holds the whole tensor
 * and no dim is empty (a tensor one rank publishes whole, or its replicas):
 * the grid is then one cell listing them, built without sorting edges.
 * SIZE_MAX otherwise. */
static size_t whole_shards(const rs__source_tensor_t *t)
{
    size_t n = 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 1)
            return SIZE_MAX;
    for (size_t i = 0; i < t->shards_len; i++) {
        const rs__source_shard_t *s = &t->shards[i];
        if (s->numel == 0)
            continue;
        if (!rs__shard_is_whole(t, s))
            return SIZE_MAX;
        n++;
    }
    return n;
}

/* What rs__grid_build makes of n whole shards (bounds 0 and the size in
 * every dim, one cell), in one block: most tensors of a MoE model are
 * published whole by one rank, and a plan builds ten thousand of these. */
static rs_status_t build_whole(const rs__source_tensor_t *t, size_t n,
                               rs__grid_t **grid_p)
{
    size_t nd = (size_t)t->ndim;
    rs__grid_t *g = malloc(sizeof(rs__grid_t) + 2 * nd * sizeof(int64_t) +
                          (2 + n) * sizeof(uint32_t));
    if (g == NULL)
        return RS_ERR_NO_MEMORY;
    g->ndim = t->ndim;
    for (size_t d = 0; d < nd; d++) {
        g->bounds[d] = g->bound_store + 2 * d;
        g->bounds[d][0] = 0;
        g->bounds[d][1] = t->shape[d];
        g->nint[d] = 1;
        g->cstride[d] = 1;
    }
    g->ncells = 1;
    g->row_in_g = 1;
    g->row = (uint32_t *)(g->bound_store + 2 * nd);
    g->ids = g->row + 2;
    g->row[0] = 0;
    g->row[1] = (uint32_t)n;
    for (size_t i = 0, k = 0; i < t->shards_len; i++)
        if (t->shards[i].numel != 0)
            g->ids[k++] = (uint32_t)i;
    *grid_p = g;
    return RS_OK;
}

int rs__grid_whole(const rs__grid_t *g) { return g->row_in_g; }

rs_status_t rs__grid_build_whole(const rs__source_tensor_t *t, size_t max_cells,
                                rs__grid_t **grid_p)
{
    size_t whole = whole_shards(t);
    if (whole > max_cells || max_cells < 1)
        return RS_ERR_UNSUPPORTED;
    return build_whole(t, whole, grid_p);
}

rs_status_t rs__grid_build(const rs__source_tensor_t *t, size_t max_cells,
                          rs__grid_t **grid_p)
{
    rs_status_t st = rs__grid_build_whole(t, max_cells, grid_p);
    if (st != RS_ERR_UNSUPPORTED)
        return st;
    st = RS_OK;
    uint64_t nb = 0, per_dim = 0;
    if (!rs__mul_u64(t->shards_len, 2, &per_dim) ||
        !rs__add_u64(per_dim, 2, &per_dim) ||
        !rs__mul_u64(per_dim, (uint64_t)t->ndim, &nb) ||
        !rs__mul_u64(nb, sizeof(int64_t), &nb) ||
        !rs__add_u64(nb, sizeof(rs__grid_t), &nb) || nb > SIZE_MAX)
        return RS_ERR_NO_MEMORY;
    rs__grid_t *g = calloc(1, (size_t)nb); /* row_in_g 0: rows apart */
    if (g == NULL)
        return RS_ERR_NO_MEMORY;
    g->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++)
        build_bounds(g, t, d);
    if (!size_cells(g, max_cells))
        st = RS_ERR_UNSUPPORTED;
    if (st == RS_OK)
        st = fill_rows(g, t, max_cells);
    if (st != RS_OK) {
        rs__grid_destroy(g);
        return st;
    }
    *grid_p = g;
    return RS_OK;
}

/* Intervals per dim held on the stack; a box crossing more in some dim
 * allocates (most copies touch one or two shards per dim). */
#define HITS_INLINE 16

/* Per dim, the intervals the visited indices touch and its index range in each. */
typedef struct {
    size_t n;
    size_t *cell;
    int64_t *lo, *hi;
    size_t cell_in[HITS_INLINE];
    int64_t lo_in[HITS_INLINE], hi_in[HITS_INLINE];
} dim_hits_t;

static int64_t clamp(int64_t x, int64_t hi)
{
    return x < 0 ? 0 : x > hi ? hi : x;
}

/* Per dim, the source index of the box's last visited index: what
 * rs__box_coord(box, d, count[d] - 1) gives, for every dim in one pass over
 * the factors, without a division for a digit that is the index itself. */
static void last_coords(const rs__box_t *box, int64_t *last)
{
    for (int d = 0; d < box->ndim; d++)
        last[d] = box->start[d];
    for (int j = 0; j < box->nfactors; j++) {
        const rs__factor_t *f = &box->factors[j];
        int64_t q = box->count[f->sdim] - 1;
        if (f->mult != 1)
            q /= f->mult;
        if (q >= f->count)
            q %= f->count;
        last[f->sdim] += q * f->dmult;
    }
}

static rs_status_t hits_for_dim(const rs__grid_t *g, const rs__box_t *box,
                                int d, int64_t last, dim_hits_t *h)
{
    int64_t s = box->start[d], c = box->count[d];
    size_t first = interval_at(g, d, s + 1) - 1; /* interval holding s */
    size_t end = interval_at(g, d, last + 1);
    h->n = 0;
    h->cell = h->cell_in;
    h->lo = h->lo_in;
    h->hi = h->hi_in;
    if (end <= first) /* no interval touched (never for a non-empty box) */
        return RS_OK;
    size_t cap = end - first;
    if (cap > HITS_INLINE) {
        h->cell = malloc(cap * sizeof(size_t));
        h->lo = malloc(cap * sizeof(int64_t));
        h->hi = malloc(cap * sizeof(int64_t));
        if (h->cell == NULL || h->lo == NULL || h->hi == NULL)
            return RS_ERR_NO_MEMORY;
    }
    /* c distinct increasing indices spanning c: the range [s, s + c) */
    int contiguous = last - s + 1 == c;
    for (size_t i = first; i < end; i++) {
        int64_t lo = contiguous ? clamp(g->bounds[d][i] - s, c)
                                : rs__box_count_below(box, d, g->bounds[d][i]);
        int64_t hi = contiguous ? clamp(g->bounds[d][i + 1] - s, c)
                                : rs__box_count_below(box, d,
                                                      g->bounds[d][i + 1]);
        if (lo >= hi)
            continue; /* the view steps over this interval */
        h->cell[h->n] = i;
        h->lo[h->n] = lo;
        h->hi[h->n] = hi;
        h->n++;
    }
    return RS_OK;
}

static void free_hits(dim_hits_t *h)
{
    if (h->cell != h->cell_in)
        free(h->cell);
    if (h->lo != h->lo_in)
        free(h->lo);
    if (h->hi != h->hi_in)
        free(h->hi);
}

/* ndim: the dims whose hits are set (all of g's once built). */
static void visit_product(const rs__grid_t *g, int ndim, const dim_hits_t *h,
                          rs__cell_cb cb, void *ctx)
{
    size_t idx[RS_MAX_DIMS] = {0};
    rs__index_range_t kr;
    for (int d = 0; d < ndim; d++) {
        if (h[d].n == 0)
            return;
    }
    for (;;) {
        size_t cell = 0;
        for (int d = 0; d < ndim; d++) {
            cell += h[d].cell[idx[d]] * g->cstride[d];
            kr.lo[d] = h[d].lo[idx[d]];
            kr.hi[d] = h[d].hi[idx[d]];
        }
        cb(ctx, cell, &kr, g->ids + g->row[cell],
           g->row[cell + 1] - g->row[cell]);
        int d = ndim - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < h[d].n)
                break;
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

rs_status_t rs__grid_visit(const rs__grid_t *g, const rs__box_t *box,
                          rs__cell_cb cb, void *ctx)
{
    dim_hits_t h[RS_MAX_DIMS]; /* set by hits_for_dim, dims below ndim */
    int64_t last[RS_MAX_DIMS] = {0}; /* set for the box's dims, g's too */
    rs_status_t st = RS_OK;
    int built = 0;

    if (box->numel == 0)
        return RS_OK;
    last_coords(box, last);
    for (; built < g->ndim && st == RS_OK; built++)
        st = hits_for_dim(g, box, built, last[built], &h[built]);
    if (st == RS_OK)
        visit_product(g, built, h, cb, ctx);
    for (int d = 0; d < built; d++)
        free_hits(&h[d]);
    return st;
}

int rs__grid_sole(const rs__grid_t *g, const rs__box_t *box, size_t *cell_p,
                  uint32_t *shard_p)
{
    size_t cell = 0;
    if (g->ncells != 1) { /* one cell spans the tensor: the box is inside */
        int64_t last[RS_MAX_DIMS] = {0}; /* set for the box's dims */
        last_coords(box, last);
        for (int d = 0; d < g->ndim; d++) {
            size_t i = interval_at(g, d, box->start[d] + 1) - 1;
            if (last[d] >= g->bounds[d][i + 1])
                return 0;
            cell += i * g->cstride[d];
        }
    }
    if (g->row[cell + 1] - g->row[cell] != 1)
        return 0;
    *cell_p = cell;
    *shard_p = g->ids[g->row[cell]];
    return 1;
}
