/* The exposer behind rs_exposer_h: the regions every backend shares (checked
 * once in expose.c), the memory it allocated (expose_alloc.c), the blob it
 * publishes, and the hooks a backend fills (transports/cma/cma_expose.c,
 * transports/ucx/ucx_expose.c, ucx_xalloc.c). */
#ifndef RS_EXEC_EXPOSE_IMPL_H
#define RS_EXEC_EXPOSE_IMPL_H

#include "core/vec.h"
#include "exec/transports/blob.h"
#include "reshard/expose.h"

typedef struct rs__expose_region {
    uint64_t addr;   /* published address */
    void *ptr;       /* where the bytes are in this process */
    uint64_t nbytes;
    void *alloc;     /* the holding allocation's backend handle, or NULL */
} rs__expose_region_t;

/* Memory the exposer allocated (rs_exposer_alloc), kept across resets. */
typedef struct rs__expose_alloc {
    void *ptr;       /* page-aligned start handed out */
    uint64_t nbytes; /* usable bytes from ptr */
    int one_sided, fallback; /* as in rs_exposer_memory_t */
    void *handle;    /* the backend's (ucx: ucp_mem_h; cma: mapping base) */
    uint64_t mapped; /* cma: bytes mapped at handle */
} rs__expose_alloc_t;

typedef struct rs__exposer_ops {
    const char *name;
    rs_status_t (*open)(rs_exposer_h x, rs_diag_t *diag);
    /* Stops serving and releases everything open and add acquired. */
    void (*close)(rs_exposer_h x);
    /* Called for the region just appended to x->regions (already checked);
     * on failure the region is dropped again. */
    rs_status_t (*add)(rs_exposer_h x, const rs__expose_region_t *r,
                       rs_diag_t *diag);
    /* Writes the blob into x->blob and starts serving. */
    rs_status_t (*start)(rs_exposer_h x, rs_diag_t *diag);
    /* Stops serving and releases what add and start acquired, keeping
     * what open and alloc did; start may follow. */
    void (*reset)(rs_exposer_h x);
    /* Fills every field of *a (zeroed memory of at least nbytes). */
    rs_status_t (*alloc)(rs_exposer_h x, uint64_t nbytes, rs__expose_alloc_t *a,
                         rs_diag_t *diag);
    void (*release)(rs_exposer_h x, rs__expose_alloc_t *a);
} rs__exposer_ops_t;

struct rs_exposer {
    const rs__exposer_ops_t *ops;
    RS_VEC(rs__expose_region_t, regions);
    RS_VEC(rs__expose_alloc_t, allocs);
    int started;
    rs__blob_writer_t blob;
    void *priv; /* the backend's own state */
};

/* The allocation wholly holding [ptr, ptr + nbytes), or NULL; *straddles
 * is set when one holds ptr but not the whole range (expose_alloc.c). */
rs__expose_alloc_t *rs__expose_alloc_find(rs_exposer_h x, const void *ptr,
                              uint64_t nbytes, int *straddles);
/* Releases every allocation (rs_exposer_destroy, before the backend's
 * close). */
void rs__expose_alloc_release_all(rs_exposer_h x);

extern const rs__exposer_ops_t rs__exposer_ucx;
extern const rs__exposer_ops_t rs__exposer_cma;

#endif
