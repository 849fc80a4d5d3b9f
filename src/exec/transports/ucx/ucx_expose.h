/* The ucx exposer's state, shared by its two files: ucx_expose.c (regions,
 * blob, progress thread, reset) and ucx_xalloc.c (allocations and the
 * probe of how readers on this machine reach them). */
#ifndef RS_EXEC_TRANSPORTS_UCX_EXPOSE_H
#define RS_EXEC_TRANSPORTS_UCX_EXPOSE_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/vec.h"
#include "exec/expose_impl.h"
#include "exec/transports/ucx/ucx_ctx.h"

typedef struct ucx_exposer {
    rs__ucx_t u;      /* the worker is NULL after a reset until start */
    /* Parallel to x->regions: the region's own mapping, or NULL when it
     * lies in an allocation (served under that allocation's mapping). */
    RS_VEC(ucp_mem_h, mems);
    pthread_t thread;
    int running;
    atomic_int stop;
    int shm_offered;  /* -1 until asked: a sysv or posix domain is open */
} ucx_exposer_t;

/* The alloc and release hooks (ucx_xalloc.c). */
rs_status_t rs__ucx_expose_alloc(rs_exposer_h x, uint64_t nbytes, rs__expose_alloc_t *a,
                         rs_diag_t *diag);
void rs__ucx_expose_release(rs_exposer_h x, rs__expose_alloc_t *a);

#endif
