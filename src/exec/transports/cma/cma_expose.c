/* The `cma` exposer, the publishing half of cma: readers use
 * process_vm_readv on this process, so there is nothing to register and the
 * blob is just the pid and where each region really lives. */
#include <stdint.h>
#include <unistd.h>

#include "core/diag.h"
#include "exec/expose_impl.h"

static rs_status_t cma_open(rs_exposer_h x, rs_diag_t *diag)
{
    (void)x;
    (void)diag;
    return RS_OK;
}

static void cma_close(rs_exposer_h x)
{
    (void)x;
}

static rs_status_t cma_add(rs_exposer_h x, const rs__xregion_t *r,
                           rs_diag_t *diag)
{
    (void)x;
    (void)r;
    (void)diag;
    return RS_OK;
}

/* Readers use process_vm_readv on our pid, so the blob needs nothing but
 * the pid and each region's real address. */
static rs_status_t cma_start(rs_exposer_h x, rs_diag_t *diag)
{
    rs__blob_writer_t *w = &x->blob;
    rs__bw_header(w, RS_BLOB_CMA);
    rs__bw_u64(w, (uint64_t)getpid());
    rs__bw_u32(w, (uint32_t)x->regions_len);
    for (size_t i = 0; i < x->regions_len; i++) {
        rs__bw_u64(w, x->regions[i].addr);
        rs__bw_u64(w, x->regions[i].nbytes);
        rs__bw_u64(w, (uint64_t)(uintptr_t)x->regions[i].ptr);
    }
    if (w->failed)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exposer (cma): blob");
    return RS_OK;
}

const rs__exposer_ops_t rs__exposer_cma = {
    .name = "cma",
    .open = cma_open,
    .close = cma_close,
    .add = cma_add,
    .start = cma_start,
};
