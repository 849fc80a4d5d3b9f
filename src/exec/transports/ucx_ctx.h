/* A UCP context and one worker, set up the same way for both sides of the
 * ucx transport. UCX chooses its transports from its own environment
 * (UCX_TLS, UCX_NET_DEVICES, ...), read here at every setup. */
#ifndef RS_EXEC_TRANSPORTS_UCX_CTX_H
#define RS_EXEC_TRANSPORTS_UCX_CTX_H

#include <ucp/api/ucp.h>
#include "reshard/status.h"

typedef struct rs__ucx {
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd; /* the worker's event fd, or -1 without wakeup support */
} rs__ucx_t;

/* RMA, plus wakeup when `wakeup` is set (then efd is filled when UCX offers
 * it). `who` prefixes messages ("ucx transport", "exposer (ucx)"). */
rs_status_t rs__ucx_open(rs__ucx_t *u, int wakeup, ucs_thread_mode_t mode,
                         const char *who, rs_diag_t *diag);
void rs__ucx_close(rs__ucx_t *u);

#endif
