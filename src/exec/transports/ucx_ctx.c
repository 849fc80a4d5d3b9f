/* UCP context and worker setup shared by the ucx transport and the ucx
 * exposer. */
#include <string.h>

#include "core/diag.h"
#include "exec/transports/ucx_ctx.h"

static rs_status_t init_context(rs__ucx_t *u, int wakeup, const char *who,
                                rs_diag_t *diag)
{
    ucp_config_t *config;
    ucs_status_t us = ucp_config_read(NULL, NULL, &config);
    if (us != UCS_OK)
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "%s: reading the UCX configuration: %s", who,
                            ucs_status_string(us));
    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | (wakeup ? UCP_FEATURE_WAKEUP : 0);
    us = ucp_init(&params, config, &u->ctx);
    ucp_config_release(config);
    if (us != UCS_OK)
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "%s: ucp_init: %s (check UCX_TLS and "
                            "UCX_NET_DEVICES)", who, ucs_status_string(us));
    return RS_OK;
}

rs_status_t rs__ucx_open(rs__ucx_t *u, int wakeup, ucs_thread_mode_t mode,
                         const char *who, rs_diag_t *diag)
{
    memset(u, 0, sizeof(*u));
    u->efd = -1;
    rs_status_t st = init_context(u, wakeup, who, diag);
    if (st != RS_OK)
        return st;
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = mode;
    ucs_status_t us = ucp_worker_create(u->ctx, &wp, &u->worker);
    if (us != UCS_OK) {
        ucp_cleanup(u->ctx);
        u->ctx = NULL;
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "%s: ucp_worker_create: %s", who,
                            ucs_status_string(us));
    }
    if (wakeup && ucp_worker_get_efd(u->worker, &u->efd) != UCS_OK)
        u->efd = -1; /* progress by polling instead */
    return RS_OK;
}

void rs__ucx_close(rs__ucx_t *u)
{
    if (u->worker != NULL)
        ucp_worker_destroy(u->worker);
    if (u->ctx != NULL)
        ucp_cleanup(u->ctx);
    memset(u, 0, sizeof(*u));
    u->efd = -1;
}
