/* Memory an exposer allocates for the memory it serves (rs_exposer_alloc):
 * the bookkeeping every backend shares, and the lookups by address that
 * regions and callers make. The backend's alloc hook obtains the memory
 * (ucx: ucx_xalloc.c; cma: cma_expose.c). */
#include <inttypes.h>
#include <string.h>

#include "core/diag.h"
#include "exec/expose_impl.h"

rs__expose_alloc_t *rs__expose_alloc_find(rs_exposer_h x, const void *ptr,
                              uint64_t nbytes, int *straddles)
{
    uintptr_t p = (uintptr_t)ptr;
    *straddles = 0;
    for (size_t i = 0; i < x->allocs_len; i++) {
        rs__expose_alloc_t *a = &x->allocs[i];
        uintptr_t base = (uintptr_t)a->ptr;
        if (p < base || p - base >= a->nbytes)
            continue;
        if (nbytes > a->nbytes - (p - base)) {
            *straddles = 1;
            return NULL;
        }
        return a;
    }
    return NULL;
}

void rs__expose_alloc_release_all(rs_exposer_h x)
{
    for (size_t i = 0; i < x->allocs_len; i++)
        x->ops->release(x, &x->allocs[i]);
    x->allocs_len = 0;
}

rs_status_t rs_exposer_alloc(rs_exposer_h x, uint64_t nbytes,
                             rs_diag_t *diag, void **ptr_p)
{
    if (x == NULL || ptr_p == NULL || nbytes == 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "exposer: alloc needs "
                            "an exposer, an output and a size above 0");
    if (nbytes > (UINT64_MAX >> 2))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exposer (%s): cannot "
                            "allocate %" PRIu64 " bytes", x->ops->name,
                            nbytes);
    if (!rs__vec_reserve((void **)&x->allocs, &x->allocs_cap,
                         x->allocs_len + 1, sizeof(rs__expose_alloc_t)))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exposer: allocations");
    rs__expose_alloc_t a;
    memset(&a, 0, sizeof(a));
    rs_status_t st = x->ops->alloc(x, nbytes, &a, diag);
    if (st != RS_OK)
        return st;
    x->allocs[x->allocs_len++] = a;
    *ptr_p = a.ptr;
    return RS_OK;
}

rs_status_t rs_exposer_free(rs_exposer_h x, void *ptr, rs_diag_t *diag)
{
    if (x == NULL || ptr == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "exposer: free needs "
                            "an exposer and an allocation");
    size_t i = 0;
    while (i < x->allocs_len && x->allocs[i].ptr != ptr)
        i++;
    if (i == x->allocs_len)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "exposer (%s): %p is "
                            "not an allocation of this exposer",
                            x->ops->name, ptr);
    for (size_t k = 0; k < x->regions_len; k++)
        if (x->regions[k].alloc == x->allocs[i].handle)
            return rs__diag_set(diag, RS_ERR_INVALID_ARG, "exposer (%s): "
                                "cannot free %p: region at 0x%" PRIx64
                                " lies in it (reset the exposer first)",
                                x->ops->name, ptr, x->regions[k].addr);
    x->ops->release(x, &x->allocs[i]);
    x->allocs[i] = x->allocs[--x->allocs_len];
    return RS_OK;
}

rs_status_t rs_exposer_memory(rs_exposer_h x, const void *ptr,
                              rs_exposer_memory_t *info_p)
{
    int straddles;
    if (x == NULL || ptr == NULL || info_p == NULL)
        return RS_ERR_INVALID_ARG;
    const rs__expose_alloc_t *a = rs__expose_alloc_find(x, ptr, 1, &straddles);
    if (a == NULL)
        return RS_ERR_INVALID_ARG;
    info_p->base = a->ptr;
    info_p->nbytes = a->nbytes;
    info_p->one_sided = a->one_sided;
    info_p->fallback = a->fallback;
    return RS_OK;
}
