/* The exposer behind rs_exposer_h: the regions every backend shares (checked
 * once in expose.c), the blob it publishes, and the hooks a backend fills
 * (transports/cma/cma_expose.c, transports/ucx/ucx_expose.c). */
#ifndef RS_EXEC_EXPOSE_IMPL_H
#define RS_EXEC_EXPOSE_IMPL_H

#include "core/vec.h"
#include "exec/transports/blob.h"
#include "reshard/expose.h"

typedef struct rs__xregion {
    uint64_t addr;   /* published address */
    void *ptr;       /* where the bytes are in this process */
    uint64_t nbytes;
} rs__xregion_t;

typedef struct rs__exposer_ops {
    const char *name;
    rs_status_t (*open)(rs_exposer_h x, rs_diag_t *diag);
    /* Stops serving and releases everything open and add acquired. */
    void (*close)(rs_exposer_h x);
    /* Called for the region just appended to x->regions (already checked);
     * on failure the region is dropped again. */
    rs_status_t (*add)(rs_exposer_h x, const rs__xregion_t *r,
                       rs_diag_t *diag);
    /* Writes the blob into x->blob and starts serving. */
    rs_status_t (*start)(rs_exposer_h x, rs_diag_t *diag);
} rs__exposer_ops_t;

struct rs_exposer {
    const rs__exposer_ops_t *ops;
    RS_VEC(rs__xregion_t, regions);
    int started;
    rs__blob_writer_t blob;
    void *priv; /* the backend's own state */
};

extern const rs__exposer_ops_t rs__exposer_ucx;
extern const rs__exposer_ops_t rs__exposer_cma;

#endif
