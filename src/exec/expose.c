/* Exposers: the publishing side of transports. Picks a backend by name,
 * and checks regions once for every backend (non-empty, no wrap, no overlap
 * in published addresses, inside or outside each allocation); the
 * backends' halves live in their folders under transports/. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/checked.h"
#include "core/diag.h"
#include "core/memory.h"
#include "exec/backend.h"

rs_status_t rs_exposer_create(const char *backend, rs_diag_t *diag,
                              rs_exposer_h *exposer_p)
{
    if (backend == NULL || exposer_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "exposer: backend name and output are required");
    const rs__backend_t *b = rs__backend_find(backend);
    const rs__exposer_ops_t *ops = b != NULL ? b->exposer : NULL;
    if (ops == NULL)
        return rs__diag_set(diag, RS_ERR_UNSUPPORTED,
                            "exposer: unknown backend '%s' (known: ucx, cma)",
                            backend);
    rs_exposer_h x = calloc(1, sizeof(*x));
    if (x == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exposer: handle");
    x->ops = ops;
    rs_status_t st = ops->open(x, diag);
    if (st != RS_OK) {
        free(x);
        return st;
    }
    *exposer_p = x;
    return RS_OK;
}

void rs_exposer_destroy(rs_exposer_h x)
{
    if (x == NULL)
        return;
    rs_exposer_reset(x); /* no reader is served from what goes next */
    rs__expose_alloc_release_all(x);
    x->ops->close(x);
    free(x->regions);
    free(x->allocs);
    free(x);
}

/* Refuses a region that overlaps one already exposed. */
static rs_status_t check_overlap(rs_exposer_h x, uint64_t addr, uint64_t end,
                                 rs_diag_t *diag)
{
    for (size_t i = 0; i < x->regions_len; i++) {
        const rs__expose_region_t *r = &x->regions[i];
        if (addr < r->addr + r->nbytes && r->addr < end)
            return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                                "exposer (%s): region [0x%" PRIx64 ", +%"
                                PRIu64 ") overlaps region [0x%" PRIx64
                                ", +%" PRIu64 ")", x->ops->name, addr,
                                end - addr, r->addr, r->nbytes);
    }
    return RS_OK;
}

rs_status_t rs_exposer_add_region(rs_exposer_h x, uint64_t addr, void *ptr,
                                  uint64_t nbytes, rs_mem_type_t mem,
                                  rs_diag_t *diag)
{
    uint64_t end;
    char who[96];
    if (x == NULL || ptr == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "exposer: add_region needs an exposer and memory");
    snprintf(who, sizeof(who), "exposer (%s): region at 0x%" PRIx64,
             x->ops->name, addr);
    rs_status_t st = rs__mem_check(mem, who, diag);
    if (st != RS_OK)
        return st;
    if (x->started)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "exposer (%s): region at 0x%" PRIx64 " added "
                            "after start", x->ops->name, addr);
    if (nbytes == 0 || !rs__add_u64(addr, nbytes, &end) ||
        (uint64_t)(uintptr_t)ptr + nbytes < (uint64_t)(uintptr_t)ptr)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "exposer (%s): region [0x%" PRIx64 ", +%" PRIu64
                            ") is empty or wraps", x->ops->name, addr, nbytes);
    st = check_overlap(x, addr, end, diag);
    if (st != RS_OK)
        return st;
    int straddles;
    const rs__expose_alloc_t *a = rs__expose_alloc_find(x, ptr, nbytes, &straddles);
    if (straddles)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "exposer (%s): region [%p, +%" PRIu64 ") runs "
                            "past the end of the allocation holding its "
                            "start", x->ops->name, ptr, nbytes);
    rs__expose_region_t r = {addr, ptr, nbytes, a != NULL ? a->handle : NULL};
    if (!RS_VEC_PUSH(x, regions, r))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exposer: region list");
    st = x->ops->add(x, &x->regions[x->regions_len - 1], diag);
    if (st != RS_OK)
        x->regions_len--;
    return st;
}

rs_status_t rs_exposer_start(rs_exposer_h x, rs_diag_t *diag)
{
    if (x == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "exposer: start needs an exposer");
    if (x->started)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "exposer (%s): already started", x->ops->name);
    if (x->regions_len > UINT32_MAX)
        return rs__diag_set(diag, RS_ERR_UNSUPPORTED,
                            "exposer (%s): %zu regions do not fit a blob",
                            x->ops->name, x->regions_len);
    rs_status_t st = x->ops->start(x, diag);
    if (st != RS_OK) {
        rs__blob_write_free(&x->blob);
        return st;
    }
    x->started = 1;
    return RS_OK;
}

void rs_exposer_reset(rs_exposer_h x)
{
    if (x == NULL)
        return;
    x->ops->reset(x);
    x->regions_len = 0;
    x->started = 0;
    rs__blob_write_free(&x->blob);
}

rs_status_t rs_exposer_blob(rs_exposer_h x, const void **blob_p,
                            size_t *len_p)
{
    if (x == NULL || blob_p == NULL || len_p == NULL || !x->started)
        return RS_ERR_INVALID_ARG;
    *blob_p = x->blob.p;
    *len_p = x->blob.len;
    return RS_OK;
}
