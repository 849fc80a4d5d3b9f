/* The receiver lifecycle: discover a READY version, read every slot's
 * table, plan (or reuse the cached plan while the topology fingerprint is
 * unchanged), connect to the publishers the plan reads from, pull, verify,
 * install, all under a lease on the version that is renewed throughout
 * (lease.c) and proven unbroken before install, and within one deadline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/diag.h"
#include "core/params.h"
#include "refit/refit_impl.h"
#include "reshard/plan.h"

#define HOLDER_MAX 128 /* a directory name's limit */

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
    /* the pull in flight */
    rs_dir_h lease_dir;  /* the renewal thread's connection, opened once */
    rs__lease_t lease;
    double deadline;     /* now_s() time; 0: none */
    const char *stage;   /* for deadline messages; NULL inside the executor */
    rs_diag_t *diag;     /* the pull's, for the install-time lease proof */
    /* the directory slot of each table in `sources`, for messages */
    int64_t *table_slot;
    size_t ntable_slot;
};

static void *target_of(const rs_rbind_t *b);
static rs_status_t install_shadows(void *ctx, rs_exec_h exec);

/* The one monotonic clock (core/clock.h), under the name this file uses. */
static double now_s(void) { return rs__now_s(); }

/* "receiver-<salt>-<host>-<pid>": unique per process, since a lease taken
 * under a shared name by another receiver would end this one's epoch. */
static char *default_holder(uint64_t salt)
{
    char host[64] = "";
    char *name = malloc(HOLDER_MAX);
    if (name == NULL)
        return NULL;
    if (gethostname(host, sizeof(host) - 1) != 0)
        host[0] = '\0';
    for (char *c = host; *c != '\0'; c++) {
        int ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
                 (*c >= '0' && *c <= '9') || *c == '.' || *c == '_';
        *c = ok ? *c : '-';
    }
    snprintf(name, HOLDER_MAX, "receiver-%llu-%s-%ld",
             (unsigned long long)salt, host[0] ? host : "host", (long)getpid());
    return name;
}

static void receiver_defaults(rs_receiver_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->backend = "ucx";
    p->discover_timeout_s = 60;
    p->lease_ttl_s = 60;
    p->shadow = 1;
    rs_exec_params_init(&p->exec);
    p->exec.verify_digests = 1;
}

RS__PARAMS_DEFINE(receiver, receiver_defaults, notice_ctx)

/* How long the end of a pull keeps trying to drop its lease through a
 * directory outage (each try also waits up to the client's timeout). */
#define UNLEASE_RETRY_S 15.0

/* A receiver never creates a file: directory (a mistyped path fails with
 * "no such directory"), and a server unreachable at start is waited for
 * by discovery, within its deadline. */
static rs_status_t open_dir(rs_receiver_h r, rs_diag_t *diag,
                            rs_dir_h *dir_p)
{
    rs_dir_params_t dp;
    rs_dir_params_init(&dp);
    dp.create = 0;
    dp.connect_later = 1;
    dp.notice = r->params.notice;
    dp.notice_ctx = r->params.notice_ctx;
    return rs_dir_open_params(r->directory, &dp, diag, dir_p);
}

rs_status_t rs_receiver_create(const rs_receiver_params_t *params_in,
                               rs_capture_h capture, rs_diag_t *diag,
                               rs_receiver_h *receiver_p)
{
    rs_receiver_params_t given; /* the caller's fields over the defaults */
    const rs_receiver_params_t *params = NULL;
    if (params_in != NULL) {
        if (rs__receiver_params_take(params_in, diag, &given) != RS_OK)
            return RS_ERR_INVALID_ARG;
        params = &given;
    }
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
    r->holder = params->holder != NULL ? strdup(params->holder)
                                       : default_holder(params->salt);
    r->nparams = rs_capture_num_params(capture);
    r->binds = calloc(r->nparams + 1, sizeof(rs_rbind_t));
    rs_status_t st = r->model && r->directory && r->backend && r->holder &&
                     r->binds ? open_dir(r, diag, &r->dir)
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
    rs_dir_close(r->lease_dir);
    for (size_t p = 0; r->binds != NULL && p < r->nparams; p++)
        free(r->binds[p].shadow);
    free(r->binds);
    free(r->model);
    free(r->directory);
    free(r->backend);
    free(r->holder);
    free(r->table_slot);
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

/* Called by the executor after every check passed: once the lease is
 * proven unbroken (every byte was read while the version could not be
 * released, hence not refilled), the shadows become the bound parameters,
 * then the caller's own install runs. */
static rs_status_t install_shadows(void *ctx, rs_exec_h exec)
{
    rs_receiver_h r = ctx;
    double patience = r->deadline > 0 ? r->deadline - now_s()
                                      : r->params.lease_ttl_s;
    rs_status_t st = rs__lease_confirm(&r->lease, r->dir, patience, r->diag);
    if (st != RS_OK)
        return st;
    for (size_t p = 0; p < r->nparams; p++) {
        const rs_rbind_t *b = &r->binds[p];
        if (b->shadow != NULL)
            memcpy(b->base, b->shadow, (size_t)b->nbytes);
    }
    if (r->user_install != NULL)
        return r->user_install(r->user_install_ctx, exec);
    return RS_OK;
}

/* Records that the tables of `s` from index r->ntable_slot on came from
 * `slot`. */
static rs_status_t note_slot(rs_receiver_h r, rs_sources_h s, int64_t slot,
                             rs_diag_t *diag)
{
    size_t n = rs_sources_num_tables(s);
    int64_t *v = realloc(r->table_slot, (n + 1) * sizeof(*v));
    if (v == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    for (size_t i = r->ntable_slot; i < n; i++)
        v[i] = slot;
    r->table_slot = v;
    r->ntable_slot = n;
    return RS_OK;
}

/* The directory slot a session's table came from, or -1. */
static int64_t slot_of(rs_receiver_h r, const char *session)
{
    for (size_t i = 0; i < rs_sources_num_tables(r->sources) &&
                       i < r->ntable_slot; i++) {
        rs_table_info_t t;
        rs_sources_table(r->sources, i, &t);
        if (strcmp(t.agent_name, session) == 0)
            return r->table_slot[i];
    }
    return -1;
}

/* Every slot's table of a READY version, merged. */
static rs_status_t read_tables(rs_receiver_h r, const rs_version_info_t *v,
                               rs_diag_t *diag, rs_sources_h *sources_p)
{
    rs_sources_h s;
    rs_status_t st = rs_sources_create(&s);
    r->ntable_slot = 0;
    for (int64_t slot = 0; st == RS_OK && slot < v->slots; slot++) {
        void *table = NULL;
        size_t len = 0;
        char origin[96];
        snprintf(origin, sizeof(origin), "%s version %lld slot %lld", r->model,
                 (long long)v->version, (long long)slot);
        st = rs_dir_read(r->dir, r->model, v->version, slot, diag, &table, &len);
        if (st == RS_OK)
            st = rs_sources_load_string(s, table, len, origin, diag);
        if (st == RS_OK)
            st = note_slot(r, s, slot, diag);
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
 * under one deadline; names every session that never connected and the
 * first one's cause. Peers are named "<agent>, slot <S>" in transport
 * messages. */
static rs_status_t connect_all(rs_receiver_h r, rs_diag_t *diag)
{
    char failed[512] = "", cause[RS_DIAG_MSG_MAX] = "";
    size_t nfailed = 0;
    double deadline = now_s() + r->params.discover_timeout_s;
    if (r->deadline > 0 && r->deadline < deadline)
        deadline = r->deadline;
    for (uint32_t k = 0; k < rs_plan_num_sessions(r->plan); k++) {
        if (rs_plan_session_bytes(r->plan, k) == 0)
            continue;
        const char *name = rs_plan_session_name(r->plan, k);
        char peer_name[160];
        snprintf(peer_name, sizeof(peer_name), "%.120s, slot %lld", name,
                 (long long)slot_of(r, name));
        rs_status_t st = RS_ERR_TRANSPORT;
        for (int attempt = 0; attempt < 3 && st != RS_OK && now_s() < deadline;
             attempt++) {
            void *blob = NULL;
            size_t len = 0;
            st = blob_of(r->sources, name, &blob, &len, diag);
            if (st == RS_OK) {
                rs_peer_t peer = {peer_name, 0, NULL, 0, blob, len};
                st = rs_transport_connect(r->transport, k, &peer, diag);
            }
            free(blob);
            if (st == RS_ERR_INPUT)
                break; /* a malformed table does not get better */
        }
        if (st != RS_OK) {
            size_t used = strlen(failed);
            snprintf(failed + used, sizeof(failed) - used, "%s%s",
                     nfailed ? "; " : "", peer_name);
            if (nfailed++ == 0 && diag != NULL)
                snprintf(cause, sizeof(cause), "%s", diag->msg);
        }
    }
    if (nfailed > 0)
        return rs__diag_set(diag, RS_ERR_TRANSPORT, "could not connect to "
                            "%zu publisher(s) (%.400s); the first: %.500s",
                            nfailed, failed, cause);
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
    r->stage = "connect";
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

/* What is left of the pull's deadline, capped at `cap` (<= 0: no cap). */
static double budget(const rs_receiver_h r, double cap)
{
    if (r->deadline <= 0)
        return cap;
    double left = r->deadline - now_s();
    left = left > 1e-3 ? left : 1e-3;
    return cap > 0 && cap < left ? cap : left;
}

static int past_deadline(const rs_receiver_h r)
{
    return r->deadline > 0 && now_s() >= r->deadline;
}

/* A stage that failed once the deadline had passed failed because of it:
 * RS_ERR_TIMEOUT naming the stage (the executor names its own). */
static rs_status_t deadline_status(rs_receiver_h r, int64_t version,
                                   rs_status_t st, rs_diag_t *diag)
{
    if (st == RS_OK || !past_deadline(r) ||
        (r->stage == NULL && st != RS_ERR_TIMEOUT))
        return st;
    char subject[192];
    if (version >= 0)
        snprintf(subject, sizeof(subject), "version %lld of '%s'",
                 (long long)version, r->model);
    else
        snprintf(subject, sizeof(subject), "the newest READY version of "
                 "'%s'", r->model);
    if (r->stage == NULL)
        return rs__diag_prefix(diag, "pull of %s (timeout %g s): ", subject,
                               r->params.pull_timeout_s);
    char cause[RS_DIAG_MSG_MAX];
    snprintf(cause, sizeof(cause), "%s", diag != NULL && diag->msg[0]
                                             ? diag->msg : rs_status_str(st));
    return rs__diag_set(diag, RS_ERR_TIMEOUT, "pull of %s (timeout %g s): "
                        "deadline passed in the %s stage: %s", subject,
                        r->params.pull_timeout_s, r->stage, cause);
}

/* Moves on to `stage`, unless the deadline passed already. */
static rs_status_t enter(rs_receiver_h r, const char *stage, int64_t version,
                         rs_diag_t *diag)
{
    if (past_deadline(r))
        return deadline_status(r, version, rs__diag_set(diag, RS_ERR_TIMEOUT,
                               "the %s stage did not start", stage), diag);
    r->stage = stage;
    return RS_OK;
}

static rs_status_t start_lease(rs_receiver_h r, int64_t version,
                               rs_diag_t *diag)
{
    rs_status_t st = RS_OK;
    if (r->lease_dir == NULL)
        st = open_dir(r, diag, &r->lease_dir);
    if (st == RS_OK)
        st = rs__lease_start(&r->lease, r->dir, r->lease_dir, r->model,
                             version, r->holder, r->params.lease_ttl_s,
                             r->params.lease_renew_s, diag);
    return st;
}

/* Plans (or reuses the plan), connects and runs the executor. */
static rs_status_t transfer(rs_receiver_h r, const rs_version_info_t *v,
                            double t0, rs_pull_result_t *res, rs_diag_t *diag)
{
    rs_sources_h sources = NULL;
    rs_status_t st = read_tables(r, v, diag, &sources);
    res->discover_s = now_s() - t0;
    if (st == RS_OK && (st = enter(r, "plan", v->version, diag)) != RS_OK)
        rs_sources_destroy(sources);
    if (st == RS_OK)
        st = prepare(r, sources, res, diag);
    if (st == RS_OK)
        st = enter(r, "wire", v->version, diag);
    if (st == RS_OK) {
        double cap = r->params.exec.run_timeout_s;
        rs_exec_set_run_timeout(r->exec, r->deadline > 0 ? budget(r, cap)
                                                         : cap);
        r->stage = NULL; /* the executor names its stages itself */
        st = rs_exec_run(r->exec, diag);
        if (st == RS_ERR_TRANSPORT || st == RS_ERR_TIMEOUT)
            rs__diag_prefix(diag, "reading from the publishers: ");
    }
    return deadline_status(r, v->version, st, diag);
}

/* Drops the pull's lease, riding out a short directory outage: a lease
 * left behind would make this receiver's own release_after refuse, and
 * block every other rank's release until its ttl ran out. */
static void unlease_now(rs_receiver_h r, int64_t version)
{
    double wait = 0.05, until = now_s() + UNLEASE_RETRY_S;
    while (rs_dir_unlease(r->dir, r->model, version, r->holder, NULL) !=
               RS_OK &&
           rs_dir_transient(r->dir) && now_s() + wait < until) {
        struct timespec ts = {(time_t)wait,
                              (long)((wait - (double)(time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
        wait = wait * 2 < 1 ? wait * 2 : 1;
    }
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
    rs_pull_result_t res;
    memset(&res, 0, sizeof(res));
    double t0 = now_s();
    r->deadline = r->params.pull_timeout_s > 0 ? t0 + r->params.pull_timeout_s
                                               : 0;
    r->stage = "discover";
    r->diag = diag;
    rs_status_t st = rs_dir_wait_ready(r->dir, r->model, version,
                                       budget(r, r->params.discover_timeout_s),
                                       r->params.stale_s, diag, &v);
    if (st == RS_OK)
        st = start_lease(r, v.version, diag);
    if (st != RS_OK) {
        r->diag = NULL;
        return deadline_status(r, version, st, diag);
    }
    res.version = v.version;
    st = transfer(r, &v, t0, &res, diag);
    if (r->exec != NULL)
        rs_exec_stats(r->exec, &res.exec);
    if (st == RS_ERR_TRANSPORT || st == RS_ERR_TIMEOUT)
        drop_cache(r); /* a peer failed: reconnect from scratch next time */
    rs__lease_stop(&r->lease);
    res.lease_epoch = r->lease.epoch;
    res.lease_renewals = r->lease.renewals;
    res.lease_renew_errors = r->lease.errors;
    unlease_now(r, v.version);
    r->diag = NULL;
    if (st == RS_OK && r->params.release_after)
        release_now(r, v.version, &res);
    if (st == RS_OK && result_p != NULL)
        *result_p = res;
    return st;
}
