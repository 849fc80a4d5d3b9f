/* UCP context and worker setup shared by the ucx transport and the ucx
 * exposer, and the log handler behind their quiet sections. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucs/debug/log_def.h>

#include "core/clock.h"
#include "core/diag.h"
#include "exec/transports/ucx/ucx_ctx.h"

static rs_status_t init_context(rs__ucx_t *u, int wakeup, int shared,
                                const char *who, rs_diag_t *diag)
{
    ucp_config_t *config;
    ucs_status_t us = ucp_config_read(NULL, NULL, &config);
    if (us != UCS_OK)
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "%s: reading the UCX configuration: %s", who,
                            ucs_status_string(us));
    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES |
                        UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_RMA | (wakeup ? UCP_FEATURE_WAKEUP : 0);
    /* Shared: memory is mapped on the context from one thread while
     * another progresses a worker of it (an exposer allocating while it
     * serves), so UCX locks the context's own state. */
    params.mt_workers_shared = shared ? 1 : 0;
    us = ucp_init(&params, config, &u->ctx);
    ucp_config_release(config);
    if (us != UCS_OK)
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "%s: ucp_init: %s (check UCX_TLS and "
                            "UCX_NET_DEVICES)", who, ucs_status_string(us));
    return RS_OK;
}

/* ---- quiet sections ------------------------------------------------- */

static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;
static atomic_int quiet_depth;
static pthread_mutex_t quiet_lock = PTHREAD_MUTEX_INITIALIZER;
/* The latest errors kept, by sequence number (under quiet_lock). */
#define QUIET_KEPT 8
static unsigned long quiet_seq; /* errors kept so far */
static char quiet_msgs[QUIET_KEPT][256];

/* UCX calls its handlers newest first; this one stops errors and warnings
 * inside quiet sections and lets everything else through. */
static ucs_log_func_rc_t quiet_log(const char *file, unsigned line,
                                   const char *function, ucs_log_level_t level,
                                   const ucs_log_component_config_t *comp,
                                   const char *fmt, va_list ap)
{
    (void)file;
    (void)line;
    (void)function;
    (void)comp;
    if (level == UCS_LOG_LEVEL_FATAL || level > UCS_LOG_LEVEL_WARN ||
        atomic_load(&quiet_depth) == 0)
        return UCS_LOG_FUNC_RC_CONTINUE;
    if (level == UCS_LOG_LEVEL_ERROR) {
        char msg[sizeof(quiet_msgs[0])];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        const char *m = msg + strspn(msg, " ");
        pthread_mutex_lock(&quiet_lock);
        snprintf(quiet_msgs[quiet_seq % QUIET_KEPT], sizeof(quiet_msgs[0]),
                 "%s", m);
        quiet_seq++;
        pthread_mutex_unlock(&quiet_lock);
    }
    return UCS_LOG_FUNC_RC_STOP;
}

static void quiet_install(void)
{
    /* Whoever sets UCX_LOG_LEVEL wants to read UCX's own lines. */
    if (getenv("UCX_LOG_LEVEL") == NULL)
        ucs_log_push_handler(quiet_log);
}

unsigned long rs__ucx_quiet_begin(void)
{
    pthread_once(&quiet_once, quiet_install); /* done already by open */
    atomic_fetch_add(&quiet_depth, 1);
    pthread_mutex_lock(&quiet_lock);
    unsigned long mark = quiet_seq;
    pthread_mutex_unlock(&quiet_lock);
    return mark;
}

void rs__ucx_quiet_end(void)
{
    atomic_fetch_sub(&quiet_depth, 1);
}

int rs__ucx_quiet_cause(unsigned long mark, char *buf, size_t len)
{
    pthread_mutex_lock(&quiet_lock);
    int kept = quiet_seq != mark;
    /* The first error since the mark, or the oldest one still kept. */
    unsigned long first = quiet_seq - mark > QUIET_KEPT
        ? quiet_seq - QUIET_KEPT : mark;
    if (kept && len > 0)
        snprintf(buf, len, "%s", quiet_msgs[first % QUIET_KEPT]);
    pthread_mutex_unlock(&quiet_lock);
    return kept;
}

/* ---- context and worker ---------------------------------------------- */

rs_status_t rs__ucx_worker_open(rs__ucx_t *u, int wakeup,
                                ucs_thread_mode_t mode, const char *who,
                                rs_diag_t *diag)
{
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = mode;
    ucs_status_t us = ucp_worker_create(u->ctx, &wp, &u->worker);
    if (us != UCS_OK) {
        u->worker = NULL;
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "%s: ucp_worker_create: %s", who,
                            ucs_status_string(us));
    }
    u->efd = -1;
    if (wakeup && ucp_worker_get_efd(u->worker, &u->efd) != UCS_OK)
        u->efd = -1; /* progress by polling instead */
    return RS_OK;
}

/* How long a closing worker is progressed: until its flush completes and
 * then QUIESCE_IDLE_S pass without an event, at most QUIESCE_MAX_S. */
#define QUIESCE_IDLE_S 0.02
#define QUIESCE_MAX_S 1.0

void rs__ucx_worker_quiesce(rs__ucx_t *u)
{
    if (u->worker == NULL)
        return;
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    void *req = ucp_worker_flush_nbx(u->worker, &p);
    double start = rs__now_s(), now = start;
    while (UCS_PTR_IS_PTR(req) &&
           ucp_request_check_status(req) == UCS_INPROGRESS &&
           now - start < QUIESCE_MAX_S) {
        ucp_worker_progress(u->worker);
        now = rs__now_s();
    }
    if (UCS_PTR_IS_PTR(req))
        ucp_request_free(req); /* done, or given up on: no callback */
    double last = now;
    while (now - last < QUIESCE_IDLE_S && now - start < QUIESCE_MAX_S) {
        if (ucp_worker_progress(u->worker) != 0)
            last = rs__now_s();
        now = rs__now_s();
    }
}

void rs__ucx_worker_close(rs__ucx_t *u)
{
    if (u->worker != NULL)
        ucp_worker_destroy(u->worker);
    u->worker = NULL;
    u->efd = -1;
}

rs_status_t rs__ucx_open(rs__ucx_t *u, int wakeup, int shared,
                         ucs_thread_mode_t mode, const char *who,
                         rs_diag_t *diag)
{
    memset(u, 0, sizeof(*u));
    u->efd = -1;
    /* Before the first worker exists, so no UCX thread of ours can be
     * logging while the handler goes in. */
    pthread_once(&quiet_once, quiet_install);
    rs_status_t st = init_context(u, wakeup, shared, who, diag);
    if (st != RS_OK)
        return st;
    st = rs__ucx_worker_open(u, wakeup, mode, who, diag);
    if (st != RS_OK) {
        ucp_cleanup(u->ctx);
        u->ctx = NULL;
    }
    return st;
}

void rs__ucx_close(rs__ucx_t *u)
{
    rs__ucx_worker_close(u);
    if (u->ctx != NULL)
        ucp_cleanup(u->ctx);
    memset(u, 0, sizeof(*u));
    u->efd = -1;
}
