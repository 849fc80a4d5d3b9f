/* The `cma` exposer, the publishing half of cma: readers use
 * process_vm_readv on this process, so there is nothing to register and the
 * blob is just the pid and where each region really lives. Allocations are
 * anonymous pages (transparent huge pages asked for where large). */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
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

static rs_status_t cma_add(rs_exposer_h x, const rs__expose_region_t *r,
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
    rs__blob_write_header(w, RS_BLOB_CMA);
    rs__blob_write_u64(w, (uint64_t)getpid());
    rs__blob_write_u32(w, (uint32_t)x->regions_len);
    for (size_t i = 0; i < x->regions_len; i++) {
        rs__blob_write_u64(w, x->regions[i].addr);
        rs__blob_write_u64(w, x->regions[i].nbytes);
        rs__blob_write_u64(w, (uint64_t)(uintptr_t)x->regions[i].ptr);
    }
    if (w->failed)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exposer (cma): blob");
    return RS_OK;
}

static void cma_reset(rs_exposer_h x)
{
    (void)x; /* readers need no state of ours */
}

#define HUGE_BYTES (2u << 20)

/* Anonymous pages are zero and page-aligned; a reader reads them with
 * process_vm_readv like any other memory, so they are one-sided. */
static rs_status_t cma_alloc(rs_exposer_h x, uint64_t nbytes, rs__expose_alloc_t *a,
                             rs_diag_t *diag)
{
    (void)x;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t len = (nbytes + page - 1) / page * page;
    void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exposer (cma): cannot "
                            "map %" PRIu64 " bytes: %s", nbytes,
                            strerror(errno));
#ifdef MADV_HUGEPAGE
    if (len >= HUGE_BYTES)
        (void)madvise(p, (size_t)len, MADV_HUGEPAGE); /* a hint only */
#endif
    a->ptr = p;
    a->nbytes = len;
    a->one_sided = 1;
    a->fallback = 0;
    a->handle = p;
    a->mapped = len;
    return RS_OK;
}

static void cma_release(rs_exposer_h x, rs__expose_alloc_t *a)
{
    (void)x;
    munmap(a->handle, (size_t)a->mapped);
}

const rs__exposer_ops_t rs__exposer_cma = {
    .name = "cma",
    .open = cma_open,
    .close = cma_close,
    .add = cma_add,
    .start = cma_start,
    .reset = cma_reset,
    .alloc = cma_alloc,
    .release = cma_release,
};
