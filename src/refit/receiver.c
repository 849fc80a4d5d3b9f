/* The receiver lifecycle: discover a READY version, read every slot's
 * table, plan (or reuse the cached plan while the topology fingerprint is
 * unchanged), connect to the publishers the plan reads from, pull, verify,
 * install, all under a lease on the version. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/diag.h"
#include "refit/refit_impl.h"
#include "reshard/plan.h"

typedef struct rs_rbind {
    void *base;
    uint64_t nbytes;
    void *shadow; /* receiver-owned copy the pull lands in, when shadowing */
} rs_rbind_t;

struct rs_receiver {
    rs_receiver_params_t params;
    char *model, *backend, *holder, *directory;
    rs_capture_h cap;
    rs_dir_h dir;
    rs_rbind_t *binds;
    size_t nparams;
    /* the cache: valid while `fingerprint` matches the tables */
    int cached;
    uint64_t fingerprint;
    rs_sources_h sources;
    rs_plan_h plan;
    rs_transport_h transport;
    rs_exec_h exec;
    rs_install_cb user_install;
    void *user_install_ctx;
};

static void *target_of(const rs_rbind_t *b);
static rs_status_t install_shadows(void *ctx, rs_exec_h exec);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void rs_receiver_params_init(rs_receiver_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->backend = "ucx";
    p->discover_timeout_s = 60;
    p->lease_ttl_s = 60;
    p->shadow = 1;
    rs_exec_params_init(&p->exec);
}

/* A receiver never creates a file: directory (a mistyped path fails with
 * "no such directory"), and a server unreachable at start is waited for
 * by discovery, within its deadline. */
static rs_status_t open_dir(rs_receiver_h r, rs_diag_t *diag)
{
    rs_dir_params_t dp;
    rs_dir_params_init(&dp);
    dp.create = 0;
    dp.connect_later = 1;
    dp.notice = r->params.notice;
    dp.notice_ctx = r->params.notice_ctx;
    return rs_dir_open_params(r->directory, &dp, diag, &r->dir);
}

rs_status_t rs_receiver_create(const rs_receiver_params_t *params,
                               rs_capture_h capture, rs_diag_t *diag,
                               rs_receiver_h *receiver_p)
{
    if (params == NULL || capture == NULL || receiver_p == NULL ||
        params->directory == NULL || params->model == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: directory, "
                            "model and capture are required");
    rs_receiver_h r = calloc(1, sizeof(*r));
    if (r == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    r->params = *params;
    r->cap = capture;
    r->user_install = params->exec.install;
    r->user_install_ctx = params->exec.install_ctx;
    r->params.exec.install = install_shadows;
    r->params.exec.install_ctx = r;
    r->model = strdup(params->model);
    r->directory = strdup(params->directory);
    r->backend = strdup(params->backend ? params->backend : "ucx");
    if (params->holder != NULL)
        r->holder = strdup(params->holder);
    else if ((r->holder = malloc(48)) != NULL)
        snprintf(r->holder, 48, "receiver-%llu",
                 (unsigned long long)params->salt);
    r->nparams = rs_capture_num_params(capture);
    r->binds = calloc(r->nparams + 1, sizeof(rs_rbind_t));
    rs_status_t st = r->model && r->directory && r->backend && r->holder &&
                     r->binds ? open_dir(r, diag)
                              : rs__diag_set(diag, RS_ERR_NO_MEMORY,
                                             "out of memory");
    if (st != RS_OK) {
        rs_receiver_destroy(r);
        return st;
    }
    *receiver_p = r;
    return RS_OK;
}

static void drop_cache(rs_receiver_h r)
{
    rs_exec_destroy(r->exec);
    rs_transport_destroy(r->transport);
    rs_plan_destroy(r->plan);
    rs_sources_destroy(r->sources);
    r->exec = NULL;
    r->transport = NULL;
    r->plan = NULL;
    r->sources = NULL;
    r->cached = 0;
}

void rs_receiver_destroy(rs_receiver_h r)
{
    if (r == NULL)
        return;
    drop_cache(r);
    rs_dir_close(r->dir);
    for (size_t p = 0; r->binds != NULL && p < r->nparams; p++)
        free(r->binds[p].shadow);
    free(r->binds);
    free(r->model);
    free(r->directory);
    free(r->backend);
    free(r->holder);
    free(r);
}

rs_status_t rs_receiver_bind(rs_receiver_h r, size_t param, void *base,
                             uint64_t nbytes, rs_diag_t *diag)
{
    if (r == NULL || param >= r->nparams)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: no param %zu",
                            param);
    free(r->binds[param].shadow);
    r->binds[param] = (rs_rbind_t){base, nbytes, NULL};
    if (r->params.shadow && nbytes > 0) {
        r->binds[param].shadow = malloc((size_t)nbytes);
        if (r->binds[param].shadow == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "receiver: shadow of "
                                "param %zu", param);
        memcpy(r->binds[param].shadow, base, (size_t)nbytes);
    }
    if (r->exec != NULL)
        return rs_exec_bind(r->exec, param, target_of(&r->binds[param]),
                            nbytes, diag);
    return RS_OK;
}

rs_exec_h rs_receiver_exec(rs_receiver_h r) { return r->exec; }

/* Where the executor writes a parameter: its shadow, or the bound storage. */
static void *target_of(const rs_rbind_t *b)
{
    return b->shadow != NULL ? b->shadow : b->base;
}

/* Called by the executor after every check passed: the shadows become the
 * bound parameters, then the caller's own install runs. */
static rs_status_t install_shadows(void *ctx, rs_exec_h exec)
{
    rs_receiver_h r = ctx;
    for (size_t p = 0; p < r->nparams; p++) {
        const rs_rbind_t *b = &r->binds[p];
        if (b->shadow != NULL)
            memcpy(b->base, b->shadow, (size_t)b->nbytes);
    }
    if (r->user_install != NULL)
        return r->user_install(r->user_install_ctx, exec);
    return RS_OK;
}

/* Every slot's table of a READY version, merged. */
static rs_status_t read_tables(rs_receiver_h r, const rs_version_info_t *v,
                               rs_diag_t *diag, rs_sources_h *sources_p)
{
    rs_sources_h s;
    rs_status_t st = rs_sources_create(&s);
    for (int64_t slot = 0; st == RS_OK && slot < v->slots; slot++) {
        void *table = NULL;
        size_t len = 0;
        char origin[96];
        snprintf(origin, sizeof(origin), "%s version %lld slot %lld", r->model,
                 (long long)v->version, (long long)slot);
        st = rs_dir_read(r->dir, r->model, v->version, slot, diag, &table, &len);
        if (st == RS_OK)
            st = rs_sources_load_string(s, table, len, origin, diag);
        free(table);
    }
    if (st != RS_OK) {
        rs_sources_destroy(s);
        return st;
    }
    *sources_p = s;
    return RS_OK;
}

/* The transport blob a session's table carries, decoded. */
static rs_status_t blob_of(rs_sources_h s, const char *session, void **blob_p,
                           size_t *len_p, rs_diag_t *diag)
{
    for (size_t i = 0; i < rs_sources_num_tables(s); i++) {
        rs_table_info_t t;
        rs_sources_table(s, i, &t);
        if (strcmp(t.agent_name, session) != 0)
            continue;
        if (t.agent_meta_b64 == NULL)
            break;
        if (rs_base64_decode(t.agent_meta_b64, blob_p, len_p) != RS_OK)
            return rs__diag_set(diag, RS_ERR_INPUT, "session '%s': "
                                "agent_meta_b64 is not base64", session);
        return RS_OK;
    }
    return rs__diag_set(diag, RS_ERR_INPUT, "session '%s' published no "
                        "transport blob (agent_meta_b64)", session);
}

/* Connects every session the plan reads from, retrying each a few times
 * under one deadline; names every session that never connected. */
static rs_status_t connect_all(rs_receiver_h r, rs_diag_t *diag)
{
    char failed[512] = "";
    size_t nfailed = 0;
    double deadline = now_s() + r->params.discover_timeout_s;
    for (uint32_t k = 0; k < rs_plan_num_sessions(r->plan); k++) {
        if (rs_plan_session_bytes(r->plan, k) == 0)
            continue;
        const char *name = rs_plan_session_name(r->plan, k);
        rs_status_t st = RS_ERR_TRANSPORT;
        for (int attempt = 0; attempt < 3 && st != RS_OK && now_s() < deadline;
             attempt++) {
            void *blob = NULL;
            size_t len = 0;
            st = blob_of(r->sources, name, &blob, &len, diag);
            if (st == RS_OK) {
                rs_peer_t peer = {name, 0, NULL, 0, blob, len};
                st = rs_transport_connect(r->transport, k, &peer, diag);
            }
            free(blob);
            if (st == RS_ERR_INPUT)
                break; /* a malformed table does not get better */
        }
        if (st != RS_OK) {
            size_t used = strlen(failed);
            snprintf(failed + used, sizeof(failed) - used, "%s%s",
                     nfailed ? ", " : "", name);
            nfailed++;
        }
    }
    if (nfailed > 0)
        return rs__diag_set(diag, RS_ERR_TRANSPORT, "could not connect to "
                            "%zu publisher(s): %s", nfailed, failed);
    return RS_OK;
}

/* Builds plan, transport and executor for a new topology. */
static rs_status_t rebuild(rs_receiver_h r, rs_sources_h sources,
                           uint64_t fingerprint, rs_diag_t *diag)
{
    rs_plan_params_t pp;
    rs_transport_params_t tp;
    drop_cache(r);
    r->sources = sources;
    rs_plan_params_init(&pp);
    pp.replica_salt = r->params.salt;
    if (r->params.max_segments_per_copy > 0)
        pp.max_segments_per_copy = r->params.max_segments_per_copy;
    rs_transport_params_init(&tp);
    tp.backend = r->backend;
    rs_status_t st = rs_plan_build(r->cap, sources, &pp, diag, &r->plan);
    if (st == RS_OK)
        st = rs_transport_create(&tp, diag, &r->transport);
    if (st == RS_OK)
        st = connect_all(r, diag);
    if (st == RS_OK)
        st = rs_exec_create(r->plan, r->transport, &r->params.exec, diag,
                            &r->exec);
    for (size_t p = 0; st == RS_OK && p < r->nparams; p++) {
        if (r->binds[p].base != NULL)
            st = rs_exec_bind(r->exec, p, target_of(&r->binds[p]),
                              r->binds[p].nbytes, diag);
    }
    if (st != RS_OK) {
        drop_cache(r);
        return st;
    }
    r->fingerprint = fingerprint;
    r->cached = 1;
    return RS_OK;
}

/* Plans for this version's tables, or keeps the cached plan (taking the
 * new digests) when the topology is the same. Owns `sources` either way. */
static rs_status_t prepare(rs_receiver_h r, rs_sources_h sources,
                           rs_pull_result_t *res, rs_diag_t *diag)
{
    uint64_t fp = rs__topology_fingerprint(sources);
    double t0 = now_s();
    if (r->cached && fp == r->fingerprint) {
        rs_status_t st = rs_exec_set_digests(r->exec, sources, diag);
        rs_sources_destroy(r->sources);
        r->sources = sources;
        return st;
    }
    res->replanned = 1;
    rs_status_t st = rebuild(r, sources, fp, diag);
    res->plan_s = now_s() - t0;
    return st;
}

/* release_after: a refused release (another receiver's live lease) or a
 * failed one is kept in the result, not dropped. */
static void release_now(rs_receiver_h r, int64_t version,
                        rs_pull_result_t *res)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    res->release_status = rs_dir_release(r->dir, r->model, version, &d);
    snprintf(res->release_msg, sizeof(res->release_msg), "%s",
             res->release_status == RS_OK ? "" : d.msg);
}

rs_status_t rs_receiver_pull(rs_receiver_h r, int64_t version, rs_diag_t *diag,
                             rs_pull_result_t *result_p)
{
    rs_version_info_t v;
    rs_sources_h sources = NULL;
    rs_pull_result_t res;
    memset(&res, 0, sizeof(res));
    double t0 = now_s();
    rs_status_t st = rs_dir_wait_ready(r->dir, r->model, version,
                                       r->params.discover_timeout_s,
                                       r->params.stale_s, diag, &v);
    if (st == RS_OK)
        st = rs_dir_lease(r->dir, r->model, v.version, r->holder,
                          r->params.lease_ttl_s, diag);
    if (st != RS_OK)
        return st;
    res.version = v.version;
    st = read_tables(r, &v, diag, &sources);
    res.discover_s = now_s() - t0;
    if (st == RS_OK)
        st = prepare(r, sources, &res, diag);
    if (st == RS_OK)
        st = rs_exec_run(r->exec, diag);
    if (r->exec != NULL)
        rs_exec_stats(r->exec, &res.exec);
    if (st == RS_ERR_TRANSPORT || st == RS_ERR_TIMEOUT)
        drop_cache(r); /* a peer failed: reconnect from scratch next time */
    rs_dir_unlease(r->dir, r->model, v.version, r->holder, NULL);
    if (st == RS_OK && r->params.release_after)
        release_now(r, v.version, &res);
    if (st == RS_OK && result_p != NULL)
        *result_p = res;
    return st;
}
