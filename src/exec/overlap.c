/* Which local writes of a plan overlap another: replays and casts whose
 * destinations are disjoint from every other write may run at once and in
 * any order; the others keep the loader's order (a later copy wins). A
 * pipelined run also needs the direct reads into parameters: one that
 * overlaps another write is verified only after every wave. Destinations
 * are compared by their byte extent (first to last byte), a conservative
 * test for strided copies. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "exec/exec_impl.h"

typedef struct extent {
    uintptr_t lo, hi;     /* [lo, hi) */
    unsigned char *mark;  /* set to 1 when it overlaps another */
} extent_t;

static int cmp_extent(const void *a, const void *b)
{
    const extent_t *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* The bytes a copy writes, from its lowest to its highest; 0 when it
 * writes none. */
static int copy_extent(const rs__exec_copy_t *c, unsigned char *mark,
                       extent_t *e_p)
{
    int64_t lo = 0, hi = 0, es = (int64_t)rs_dtype_size(c->to);
    /* An empty copy writes nothing whatever its other extents: look for
     * an empty dim first, as only a non-empty region was checked to lie
     * inside its parameter (and so spans without overflow). */
    for (int d = 0; d < c->ndim; d++)
        if (c->shape[d] <= 0)
            return 0;
    for (int d = 0; d < c->ndim; d++) {
        int64_t span = (c->shape[d] - 1) * c->dst_stride[d];
        *(span < 0 ? &lo : &hi) += span;
    }
    uintptr_t at = (uintptr_t)c->dst; /* no pointer outside the storage */
    *e_p = (extent_t){at + (uintptr_t)(lo * es), at + (uintptr_t)((hi + 1) * es),
                      mark};
    return 1;
}

/* Marks every extent that overlaps another: sorted by start, an extent
 * overlaps an earlier one exactly when it starts before the furthest end
 * seen so far, and that end's owner overlaps it too. */
static void sweep(extent_t *e, size_t n)
{
    if (n < 2)
        return;
    qsort(e, n, sizeof(*e), cmp_extent);
    size_t far = 0;
    for (size_t i = 1; i < n; i++) {
        if (e[i].lo < e[far].hi) {
            *e[i].mark = 1;
            *e[far].mark = 1;
        }
        if (e[i].hi > e[far].hi)
            far = i;
    }
}

static int in_staging(const rs_exec_h x, const void *p)
{
    uintptr_t a = (uintptr_t)p, s = (uintptr_t)x->staging;
    return a >= s && a - s < x->staging_len;
}

/* The extents of direct reads (those landing outside staging). */
static size_t read_extents(rs_exec_h x, extent_t *e)
{
    size_t n = 0;
    for (size_t i = 0; x->wave_late != NULL && i < x->nreads; i++) {
        const rs_read_t *r = &x->wave_reads[i];
        if (r->nbytes > 0 && !in_staging(x, r->dst))
            e[n++] = (extent_t){(uintptr_t)r->dst,
                                (uintptr_t)r->dst + r->nbytes,
                                &x->wave_late[i]};
    }
    return n;
}

rs_status_t rs__exec_mark_overlaps(rs_exec_h x, rs_diag_t *diag)
{
    size_t n = 0, nr = x->replays_len, nc = x->casts_len;
    size_t nreads = x->nwaves > 0 ? x->nreads : 0;
    x->replay_ordered = calloc(nr + 1, 1);
    x->cast_ordered = calloc(nc + 1, 1);
    if (nreads > 0)
        x->wave_late = calloc(nreads, 1);
    extent_t *e = malloc((nr + nc + nreads + 1) * sizeof(extent_t));
    if (x->replay_ordered == NULL || x->cast_ordered == NULL || e == NULL ||
        (nreads > 0 && x->wave_late == NULL)) {
        free(e);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < nr; i++)
        n += copy_extent(&x->replays[i], &x->replay_ordered[i], &e[n]);
    for (size_t i = 0; i < nc; i++)
        n += copy_extent(&x->casts[i], &x->cast_ordered[i], &e[n]);
    n += read_extents(x, e + n);
    sweep(e, n);
    free(e);
    return RS_OK;
}
