/* The receiver lifecycle: stage (discover a READY version, read every
 * slot's table, plan or reuse the cached plan while the topology
 * fingerprint is unchanged, connect to the publishers the plan reads from,
 * read into staging, verify), then apply (copy the staging into the bound
 * parameters, install) or discard, all under a lease on the version that is
 * renewed until apply or discard (lease.c) and proven unbroken before
 * install. A pull is a stage and an apply within one deadline. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/diag.h"
#include "core/memory.h"
#include "core/pages.h"
#include "core/params.h"
#include "exec/backend.h"
#include "model/capture_check.h"
#include "refit/group.h"
#include "refit/refit_impl.h"
#include "refit/replicas.h"
#include "reshard/plan.h"

#define HOLDER_MAX 128 /* a directory name's limit */

typedef struct rs_rbind {
    void *base;
    uint64_t nbytes;
    void *shadow; /* receiver-owned staging the pull lands in (shadow = 1) */
} rs_rbind_t;

/* The receiver's one staged version: its lease is r->lease, its bytes the
 * staging buffers; `res` gathers the figures from stage to apply. */
struct rs_staged {
    int active;
    int64_t version;
    rs_pull_result_t res;
};

struct rs_receiver {
    rs_receiver_params_t params;
    char *model, *backend, *holder, *directory;
    char *announce_as;   /* the cuts record's name (announce_cuts) */
    int announced;       /* the record was written */
    rs_capture_h cap;
    rs_dir_h dir;
    rs_rbind_t *binds;
    size_t nparams;
    /* the cache: valid while `fingerprint` matches the tables */
    int cached;
    int connected;       /* the cached transport reaches the plan's sessions
                          * (a dry run plans without connecting) */
    uint64_t fingerprint;
    rs_sources_h sources;
    rs_plan_h plan;
    rs_transport_h transport;
    rs_exec_h exec;
    struct rs_staged slot; /* the staged version, when slot.active */
    /* the pull in flight */
    rs_dir_h lease_dir;  /* the renewal thread's connection, opened once */
    rs__lease_t lease;
    double deadline;     /* rs__now_s() time; 0: none */
    const char *stage;   /* for deadline messages; NULL inside the executor */
    rs_diag_t *diag;     /* apply's, for the install-time lease proof */
    /* the directory slot of each table in `sources`, for messages */
    int64_t *table_slot;
    size_t ntable_slot;
    /* the pull's publishers of every slot, and the one read from each */
    rs__replicas_t replicas;
    /* raised by rs_receiver_cancel from any thread: read by the waits of
     * a stage (discovery, connecting, the executor and its transport) */
    rs_cancel_t cancel;
    /* group commit (group.c): NULL without a group; swapped while the
     * staging holds the bytes an uncommitted install replaced */
    rs__group_t *group;
    int swapped;
};

static void *target_of(const rs_rbind_t *b);
static rs_status_t install_staged(void *ctx, rs_exec_h exec);

/* Receivers created by this process, numbering the default holders. */
static _Atomic unsigned long receivers_made;

/* "receiver-<salt>-<host>-<pid>", and ".<n>" from the process's second
 * receiver on: unique per receiver, since the directory refuses a lease
 * under a name another live lease holds. */
static char *default_holder(uint64_t salt)
{
    unsigned long n = ++receivers_made;
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
    int len = snprintf(name, HOLDER_MAX, "receiver-%llu-%s-%ld",
                       (unsigned long long)salt, host[0] ? host : "host",
                       (long)getpid());
    if (n > 1 && len > 0 && len < HOLDER_MAX)
        snprintf(name + len, (size_t)(HOLDER_MAX - len), ".%lu", n);
    return name;
}

static void receiver_defaults(rs_receiver_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->backend = "ucx";
    p->discover_timeout_s = 60;
    p->lease_ttl_s = 60;
    p->shadow = 1;
    p->timeout_s = RS_EXEC_DEFAULT_TIMEOUT_S;
    p->coverage_floor = RS_EXEC_DEFAULT_COVERAGE_FLOOR;
    p->verify_digests = 1;
    p->announce_cuts = 1;
    p->nic_gbps = RS_PLAN_DEFAULT_NIC_GBPS;
    p->descriptor_ns = RS_PLAN_DEFAULT_DESCRIPTOR_NS;
    p->group_rank = -1;
    p->group_timeout_s = 60;
}

/* The executor's parameters: the receiver's settings, and its own install
 * step (lease proof, then staging -> bound parameters, then the user's). */
static void exec_params(rs_receiver_h r, rs_exec_params_t *ep)
{
    const rs_receiver_params_t *p = &r->params;
    rs_exec_params_init(ep);
    ep->timeout_s = p->timeout_s;
    ep->verify_digests = p->verify_digests;
    ep->verify_partial = p->verify_partial;
    ep->require_full_coverage = p->require_full_coverage;
    ep->coverage_floor = p->coverage_floor;
    ep->max_gbps = p->max_gbps;
    ep->progress = p->progress;
    ep->progress_ctx = p->progress_ctx;
    ep->progress_chunk_bytes = p->progress_chunk_bytes;
    ep->install = install_staged;
    ep->install_ctx = r;
    ep->cancel = &r->cancel;
}

RS__PARAMS_DEFINE(receiver, receiver_defaults, notice_ctx)

/* How long the end of a pull keeps trying to drop its lease through a
 * directory outage (each try also waits up to the client's timeout). */
#define UNLEASE_RETRY_S 15.0

/* A receiver never creates a file: directory (a mistyped path fails with
 * "no such directory"), and a server unreachable at start is waited for
 * by discovery, within its deadline. */
static rs_status_t open_dir(rs_receiver_h r, const rs_cancel_t *cancel,
                            rs_diag_t *diag, rs_dir_h *dir_p)
{
    rs_dir_params_t dp;
    rs_dir_params_init(&dp);
    dp.create = 0;
    dp.connect_later = 1;
    dp.notice = r->params.notice;
    dp.notice_ctx = r->params.notice_ctx;
    dp.cancel = cancel;
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
    /* A write the capture could not tie to a source is a byte the plan
     * would never fill: installing without it is a silent wrong weight. */
    rs_status_t refused = rs__capture_check_attributed(capture, diag);
    if (refused != RS_OK)
        return refused;
    /* Told at create, not at the first pull's connect. */
    if (params->backend != NULL && rs__backend_find(params->backend) == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: backend "
                            "'%s' is unknown (ucx, cma, local, local-mt)",
                            params->backend);
    rs_receiver_h r = calloc(1, sizeof(*r));
    if (r == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    r->params = *params;
    r->cap = capture;
    r->model = strdup(params->model);
    r->directory = strdup(params->directory);
    r->backend = strdup(params->backend ? params->backend : "ucx");
    r->holder = params->holder != NULL ? strdup(params->holder)
                                       : default_holder(params->salt);
    r->announce_as = params->announce_as != NULL ? strdup(params->announce_as)
                                                 : r->holder != NULL
                                                 ? strdup(r->holder) : NULL;
    r->params.announce_as = NULL; /* not borrowed: r->announce_as */
    r->nparams = rs_capture_num_params(capture);
    r->binds = calloc(r->nparams + 1, sizeof(rs_rbind_t));
    rs_status_t st = r->model && r->directory && r->backend && r->holder &&
                     r->announce_as && r->binds
                         ? open_dir(r, &r->cancel, diag, &r->dir)
                              : rs__diag_set(diag, RS_ERR_NO_MEMORY,
                                             "out of memory");
    if (st == RS_OK)
        st = rs__group_create(params, r->holder, diag, &r->group);
    r->params.group = NULL; /* not borrowed: r->group */
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
    r->connected = 0;
}

void rs_receiver_destroy(rs_receiver_h r)
{
    if (r == NULL)
        return;
    rs_receiver_discard(r, &r->slot);
    drop_cache(r);
    rs_dir_close(r->dir);
    rs_dir_close(r->lease_dir);
    for (size_t p = 0; r->binds != NULL && p < r->nparams; p++)
        rs__pages_free(r->binds[p].shadow, (size_t)r->binds[p].nbytes);
    free(r->binds);
    free(r->model);
    free(r->directory);
    free(r->backend);
    free(r->holder);
    free(r->announce_as);
    free(r->table_slot);
    rs__replicas_reset(&r->replicas);
    rs__group_destroy(r->group);
    free(r);
}

/* Only host memory is bound (bind refuses the rest), so the executor is
 * always handed RS_MEM_HOST. */
static rs_status_t bind_mem_check(rs_receiver_h r, size_t param,
                                  rs_mem_type_t mem, rs_diag_t *diag)
{
    rs_param_info_t info;
    char who[RS_DIAG_MSG_MAX];
    rs_capture_param(r->cap, param, &info);
    snprintf(who, sizeof(who), "receiver: param '%s'", info.name);
    return rs__mem_check(mem, who, diag);
}

rs_status_t rs_receiver_bind(rs_receiver_h r, size_t param, void *base,
                             uint64_t nbytes, rs_mem_type_t mem,
                             rs_diag_t *diag)
{
    if (r == NULL || param >= r->nparams)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: no param %zu",
                            param);
    if (r->slot.active) /* its staging holds the staged bytes */
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: param %zu "
                            "cannot be bound while version %lld is staged "
                            "(apply or discard it first)", param,
                            (long long)r->slot.version);
    rs_status_t st = bind_mem_check(r, param, mem, diag);
    if (st != RS_OK)
        return st; /* before the shadow copy reads base */
    rs__pages_free(r->binds[param].shadow, (size_t)r->binds[param].nbytes);
    r->binds[param] = (rs_rbind_t){base, nbytes, NULL};
    if (r->params.shadow && nbytes > 0) {
        /* whole pages (huge ones when large): reads land page-aligned */
        r->binds[param].shadow = rs__pages_alloc((size_t)nbytes);
        if (r->binds[param].shadow == NULL) {
            /* unbound: a pull must not fall back to the bound storage */
            r->binds[param] = (rs_rbind_t){NULL, 0, NULL};
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "receiver: staging "
                                "of param %zu", param);
        }
        memcpy(r->binds[param].shadow, base, (size_t)nbytes);
    }
    if (r->exec != NULL)
        return rs_exec_bind(r->exec, param, target_of(&r->binds[param]),
                            nbytes, RS_MEM_HOST, diag);
    return RS_OK;
}

rs_exec_h rs_receiver_exec(rs_receiver_h r) { return r->exec; }

/* Where the executor writes a parameter: its shadow, or the bound storage. */
static void *target_of(const rs_rbind_t *b)
{
    return b->shadow != NULL ? b->shadow : b->base;
}

/* The executor's install stage, run by apply (rs_exec_install): once the
 * lease is proven unbroken (every byte was read while the version could
 * not be released, hence not refilled), the staging is copied into the
 * bound parameters, then the caller's own install runs. */
static rs_status_t install_now(rs_receiver_h r, rs_exec_h exec)
{
    double patience = r->deadline > 0 ? r->deadline - rs__now_s()
                                      : r->params.lease_ttl_s;
    rs_status_t st = rs__lease_confirm(&r->lease, r->dir, patience, r->diag);
    if (st != RS_OK)
        return st;
    for (size_t p = 0; p < r->nparams; p++) {
        const rs_rbind_t *b = &r->binds[p];
        if (b->shadow != NULL && r->group != NULL) /* keep the old bytes */
            rs__group_swap(b->base, b->shadow, (size_t)b->nbytes);
        else if (b->shadow != NULL)
            memcpy(b->base, b->shadow, (size_t)b->nbytes);
        r->swapped = r->group != NULL;
        if (b->shadow != NULL)
            r->slot.res.bytes_installed += b->nbytes;
    }
    if (r->params.install != NULL)
        return r->params.install(r->params.install_ctx, exec);
    return RS_OK;
}

/* The group commit's view of the install (group.h): after a swap the
 * staging holds the replaced bytes until the group decides. */
typedef struct group_install {
    rs_receiver_h r;
    rs_exec_h exec;
} group_install_t;

static rs_status_t group_install(void *ctx, rs_diag_t *diag)
{
    group_install_t *gi = ctx;
    (void)diag; /* install_now reports through r->diag, the same one */
    return install_now(gi->r, gi->exec);
}

static void group_undo(void *ctx)
{
    rs_receiver_h r = ((group_install_t *)ctx)->r;
    for (size_t p = 0; r->swapped && p < r->nparams; p++)
        if (r->binds[p].shadow != NULL)
            memcpy(r->binds[p].base, r->binds[p].shadow,
                   (size_t)r->binds[p].nbytes);
    r->swapped = 0;
}

static void group_keep(void *ctx)
{
    rs_receiver_h r = ((group_install_t *)ctx)->r;
    for (size_t p = 0; r->swapped && p < r->nparams; p++)
        if (r->binds[p].shadow != NULL)
            memcpy(r->binds[p].shadow, r->binds[p].base,
                   (size_t)r->binds[p].nbytes);
    r->swapped = 0;
}

static rs_status_t install_staged(void *ctx, rs_exec_h exec)
{
    rs_receiver_h r = ctx;
    if (r->group == NULL)
        return install_now(r, exec);
    group_install_t gi = {r, exec};
    rs__group_io_t io = {&gi, group_install, group_undo, group_keep};
    return rs__group_apply(r->group, r->dir, r->model, r->slot.version, &io,
                           r->diag);
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

/* The directory slot a session's table came from, or -1. O(1). */
static int64_t slot_of(rs_receiver_h r, const char *session)
{
    long i = rs_sources_find_table(r->sources, session);
    return i >= 0 && (size_t)i < r->ntable_slot ? r->table_slot[i] : -1;
}

/* The chosen publisher's table of every slot of a READY version, merged
 * (the slots' publishers are read from the directory once per pull). */
static rs_status_t read_tables(rs_receiver_h r, const rs_version_info_t *v,
                               rs_diag_t *diag, rs_sources_h *sources_p)
{
    rs_sources_h s = NULL;
    rs_status_t st = rs__replicas_load(&r->replicas, r->dir, r->model, v,
                                       r->params.salt, r->params.stale_s,
                                       diag);
    if (st == RS_OK)
        st = rs_sources_create(&s);
    r->ntable_slot = 0;
    for (int64_t slot = 0; st == RS_OK && slot < v->slots; slot++) {
        const rs_dir_entry_t *e = rs__replicas_chosen(&r->replicas, slot);
        char origin[RS_DIR_NAME_MAX * 2 + 96];
        snprintf(origin, sizeof(origin), "%s version %lld slot %lld "
                 "publisher %s", r->model, (long long)v->version,
                 (long long)slot, e->publisher);
        st = rs_sources_load_string(s, e->table, e->len, origin, diag);
        if (st == RS_OK)
            st = note_slot(r, s, slot, diag);
    }
    if (st != RS_OK) {
        rs_sources_destroy(s);
        return st;
    }
    *sources_p = s;
    return RS_OK;
}

/* The transport blob a session's table carries, decoded. O(1) lookup. */
static rs_status_t blob_of(rs_sources_h s, const char *session, void **blob_p,
                           size_t *len_p, rs_diag_t *diag)
{
    long i = rs_sources_find_table(s, session);
    rs_table_info_t t = {0};
    if (i >= 0)
        rs_sources_table(s, (size_t)i, &t);
    if (t.agent_meta_b64 == NULL)
        return rs__diag_set(diag, RS_ERR_INPUT, "session '%s' published no "
                            "transport blob (agent_meta_b64)", session);
    if (rs__base64_decode(t.agent_meta_b64, blob_p, len_p) != RS_OK)
        return rs__diag_set(diag, RS_ERR_INPUT, "session '%s': "
                            "agent_meta_b64 is not base64", session);
    return RS_OK;
}

/* Connects every session the plan reads from, retrying each a few times
 * under one deadline; names every session that never connected and the
 * first one's cause. Peers are named "<agent>, slot <S>" in transport
 * messages. */
static rs_status_t connect_all(rs_receiver_h r, rs_diag_t *diag)
{
    char failed[512] = "", cause[RS_DIAG_MSG_MAX] = "";
    size_t nfailed = 0;
    double deadline = rs__now_s() + r->params.discover_timeout_s;
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
        for (int attempt = 0;
             attempt < 3 && st != RS_OK && rs__now_s() < deadline;
             attempt++) {
            if (rs_cancel_raised(&r->cancel))
                return rs__diag_set(diag, RS_ERR_CANCELLED, "cancelled "
                                    "while connecting to %s", peer_name);
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

/* Builds plan, transport and executor for a new topology; connects the
 * plan's sessions when `connect`. */
static rs_status_t rebuild(rs_receiver_h r, rs_sources_h sources,
                           uint64_t fingerprint, int connect,
                           rs_pull_result_t *res, rs_diag_t *diag)
{
    rs_plan_params_t pp;
    rs_transport_params_t tp;
    rs_exec_params_t ep;
    drop_cache(r);
    r->sources = sources;
    rs_plan_params_init(&pp);
    pp.replica_salt = r->params.salt;
    if (r->params.max_segments_per_copy > 0)
        pp.max_segments_per_copy = r->params.max_segments_per_copy;
    pp.nic_gbps = r->params.nic_gbps;
    pp.descriptor_ns = r->params.descriptor_ns;
    rs_transport_params_init(&tp);
    tp.backend = r->backend;
    tp.cancel = &r->cancel;
    rs_status_t st = rs_plan_build(r->cap, sources, &pp, diag, &r->plan);
    if (st == RS_OK)
        st = rs_transport_create(&tp, diag, &r->transport);
    r->stage = "connect";
    double t0 = rs__now_s();
    if (st == RS_OK && connect)
        st = connect_all(r, diag);
    res->connect_s = rs__now_s() - t0;
    exec_params(r, &ep);
    if (st == RS_OK)
        st = rs_exec_create(r->plan, r->transport, &ep, diag, &r->exec);
    for (size_t p = 0; st == RS_OK && p < r->nparams; p++) {
        if (r->binds[p].base != NULL)
            st = rs_exec_bind(r->exec, p, target_of(&r->binds[p]),
                              r->binds[p].nbytes, RS_MEM_HOST, diag);
    }
    if (st != RS_OK) {
        drop_cache(r);
        return st;
    }
    r->fingerprint = fingerprint;
    r->cached = 1;
    r->connected = connect;
    return RS_OK;
}

rs_status_t rs__receiver_prepare(rs_receiver_h r, rs_sources_h sources,
                                 uint64_t fp, int connect,
                                 rs_pull_result_t *res, rs_diag_t *diag)
{
    double t0 = rs__now_s();
    if (r->cached && fp == r->fingerprint) {
        rs_status_t st = rs_exec_set_digests(r->exec, sources, diag);
        rs_sources_destroy(r->sources);
        r->sources = sources;
        if (st == RS_OK && connect && !r->connected) {
            r->stage = "connect"; /* planned by a dry run: connect now */
            st = connect_all(r, diag);
            r->connected = st == RS_OK;
        }
        return st;
    }
    res->replanned = 1;
    rs_status_t st = rebuild(r, sources, fp, connect, res, diag);
    res->plan_s = rs__now_s() - t0;
    return st;
}

/* What is left of the pull's deadline, capped at `cap` (<= 0: no cap). */
static double budget(const rs_receiver_h r, double cap)
{
    if (r->deadline <= 0)
        return cap;
    double left = r->deadline - rs__now_s();
    left = left > 1e-3 ? left : 1e-3;
    return cap > 0 && cap < left ? cap : left;
}

static int past_deadline(const rs_receiver_h r)
{
    return r->deadline > 0 && rs__now_s() >= r->deadline;
}

/* A stage that failed once the deadline had passed failed because of it:
 * RS_ERR_TIMEOUT naming the stage (the executor names its own). */
static rs_status_t deadline_status(rs_receiver_h r, int64_t version,
                                   rs_status_t st, rs_diag_t *diag)
{
    if (st == RS_OK || st == RS_ERR_CANCELLED || !past_deadline(r) ||
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
        st = open_dir(r, NULL, diag, &r->lease_dir); /* renewals: no wait */
    if (st == RS_OK)
        st = rs__lease_start(&r->lease, r->dir, r->lease_dir, r->model,
                             version, r->holder, r->params.lease_ttl_s,
                             r->params.lease_renew_s, diag);
    return st;
}

/* The transfer: reads the tables, plans (or reuses the plan), connects and
 * runs the executor into the staging, stopping before install. */
static rs_status_t transfer(rs_receiver_h r, const rs_version_info_t *v,
                            double t0, rs_pull_result_t *res, rs_diag_t *diag)
{
    rs_sources_h sources = NULL;
    double tt = rs__now_s();
    rs_status_t st = read_tables(r, v, diag, &sources);
    res->tables_s = rs__now_s() - tt;
    res->discover_s = rs__now_s() - t0;
    if (st == RS_OK && (st = enter(r, "plan", v->version, diag)) != RS_OK)
        rs_sources_destroy(sources);
    if (st == RS_OK)
        st = rs__receiver_prepare(r, sources, rs__topology_fingerprint(sources),
                                  1, res, diag);
    if (st == RS_OK)
        st = enter(r, "wire", v->version, diag);
    if (st == RS_OK) {
        rs_exec_set_run_timeout(r->exec, r->deadline > 0 ? budget(r, 0) : 0);
        r->stage = NULL; /* the executor names its stages itself */
        st = rs_exec_run_staged(r->exec, diag);
        if (st == RS_ERR_TRANSPORT || st == RS_ERR_TIMEOUT)
            rs__diag_prefix(diag, "reading from the publishers: ");
        else if (st == RS_ERR_CANCELLED)
            rs__diag_prefix(diag, "stage of version %lld of '%s': ",
                            (long long)v->version, r->model);
    }
    return deadline_status(r, v->version, st, diag);
}

/* transfer, again from other publishers of the slots whose chosen
 * publisher failed, while there are any and the deadline allows. */
static rs_status_t transfer_replicas(rs_receiver_h r,
                                     const rs_version_info_t *v, double t0,
                                     rs_pull_result_t *res, rs_diag_t *diag)
{
    rs_diag_t own; /* failures name their peers, also for a NULL diag */
    if (diag == NULL) {
        rs_diag_clear(&own);
        diag = &own;
    }
    rs__replicas_reset(&r->replicas);
    rs_status_t st = transfer(r, v, t0, res, diag);
    while ((st == RS_ERR_TRANSPORT || st == RS_ERR_TIMEOUT) &&
           !past_deadline(r) && rs__replicas_failover(&r->replicas, st, diag)) {
        drop_cache(r); /* a peer failed: connect the new choice afresh */
        st = transfer(r, v, t0, res, diag);
    }
    res->failovers = r->replicas.failovers;
    snprintf(res->failover_msg, sizeof(res->failover_msg), "%s",
             r->replicas.record);
    rs__replicas_reset(&r->replicas);
    return st;
}

/* Drops the pull's lease, riding out a short directory outage: a lease
 * left behind would make this receiver's own release_after refuse, and
 * block every other rank's release until its ttl ran out. Never longer
 * than the ttl: by then the lease has ended by itself. */
static void unlease_now(rs_receiver_h r, int64_t version)
{
    double retry = r->params.lease_ttl_s > 0 &&
                           r->params.lease_ttl_s < UNLEASE_RETRY_S
                       ? r->params.lease_ttl_s : UNLEASE_RETRY_S;
    double wait = 0.05, until = rs__now_s() + retry;
    while (rs_dir_unlease(r->dir, r->model, version, r->holder, NULL) !=
               RS_OK &&
           rs_dir_transient(r->dir) && rs__now_s() + wait < until) {
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
    res->release_status = rs_dir_release_as(r->dir, r->model, version,
                                            r->holder, &d);
    snprintf(res->release_msg, sizeof(res->release_msg), "%s",
             res->release_status == RS_OK ? "" : d.msg);
}

rs_status_t rs_receiver_announce_cuts(rs_receiver_h r, rs_diag_t *diag)
{
    if (r == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: NULL");
    rs_status_t st = rs__announce_cuts(r->dir, r->model, r->announce_as,
                                       r->cap, diag);
    if (st == RS_OK)
        r->announced = 1;
    return st;
}

/* announce_cuts: once, before the first discovery; a failure is a notice
 * (the pull goes on without it, the next one tries again). */
static void announce_once(rs_receiver_h r)
{
    rs_diag_t d;
    char line[RS_DIAG_MSG_MAX + 128];
    if (!r->params.announce_cuts || r->announced)
        return;
    rs_diag_clear(&d);
    if (rs_receiver_announce_cuts(r, &d) == RS_OK)
        return;
    snprintf(line, sizeof(line), "receiver %s: %s; cut-aligned publishers "
             "will not cut for it until an announcement succeeds", r->holder,
             d.msg);
    if (r->params.notice != NULL)
        r->params.notice(r->params.notice_ctx, line);
    else
        rs_dir_notice(NULL, "%s", line);
}

rs_status_t rs__receiver_discover(rs_receiver_h r, int64_t version,
                                  rs_diag_t *diag, rs_version_info_t *v_p)
{
    if (rs_cancel_raised(&r->cancel)) { /* raised before the call */
        if (version >= 0)
            return rs__diag_set(diag, RS_ERR_CANCELLED, "cancelled before "
                                "waiting for version %lld of '%s' (receiver "
                                "%s; rs_receiver_cancel_clear lets it run "
                                "again)", (long long)version, r->model,
                                r->holder);
        return rs__diag_set(diag, RS_ERR_CANCELLED, "cancelled before "
                            "waiting for the newest READY version of '%s' "
                            "(receiver %s; rs_receiver_cancel_clear lets it "
                            "run again)", r->model, r->holder);
    }
    announce_once(r);
    r->deadline = r->params.pull_timeout_s > 0
                      ? rs__now_s() + r->params.pull_timeout_s : 0;
    r->stage = "discover";
    rs_status_t st = rs_dir_wait_ready(r->dir, r->model, version,
                                       budget(r, r->params.discover_timeout_s),
                                       r->params.stale_s, diag, v_p);
    return deadline_status(r, version, st, diag);
}

rs_status_t rs__receiver_tables(rs_receiver_h r, const rs_version_info_t *v,
                                rs_diag_t *diag, rs_sources_h *sources_p)
{
    r->stage = "tables";
    return deadline_status(r, v->version, read_tables(r, v, diag, sources_p),
                           diag);
}

rs_plan_h rs_receiver_plan(rs_receiver_h r)
{
    return r != NULL && r->cached ? r->plan : NULL;
}

/* Stops the renewals, keeps their figures, drops the lease. */
static void end_lease(rs_receiver_h r, int64_t version, rs_pull_result_t *res)
{
    rs__lease_stop(&r->lease);
    res->lease_epoch = r->lease.epoch;
    res->lease_renewals = r->lease.renewals;
    res->lease_renew_errors = r->lease.errors;
    unlease_now(r, version);
}

static uint32_t sessions_read(rs_plan_h plan)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < rs_plan_num_sessions(plan); k++)
        n += rs_plan_session_bytes(plan, k) > 0;
    return n;
}

/* Discover, lease, transfer: into r->slot on success; on error nothing is
 * staged and the lease is dropped. */
static rs_status_t stage_version(rs_receiver_h r, int64_t version,
                                 rs_diag_t *diag)
{
    rs_version_info_t v;
    rs_pull_result_t *res = &r->slot.res;
    memset(res, 0, sizeof(*res));
    double t0 = rs__now_s();
    rs_status_t st = rs__receiver_discover(r, version, diag, &v);
    if (st == RS_OK && (st = start_lease(r, v.version, diag)) != RS_OK)
        st = deadline_status(r, version, st, diag);
    if (st != RS_OK)
        return st; /* discovery named the deadline itself */
    res->version = v.version;
    st = transfer_replicas(r, &v, t0, res, diag);
    if (st != RS_OK) {
        /* a peer failed, or reads were cut short: reconnect from scratch
         * next time */
        if (st == RS_ERR_TRANSPORT || st == RS_ERR_TIMEOUT ||
            st == RS_ERR_CANCELLED)
            drop_cache(r);
        end_lease(r, v.version, res);
        return st;
    }
    res->lease_epoch = r->lease.epoch;
    res->sessions = sessions_read(r->plan);
    res->stage_s = rs__now_s() - t0;
    r->slot.version = v.version;
    r->slot.active = 1;
    return RS_OK;
}

/* The staged version's install under the deadline in r->deadline (0: none),
 * then the end of its lease, consuming the slot either way. */
static rs_status_t apply_slot(rs_receiver_h r, rs_diag_t *diag,
                              rs_pull_result_t *result_p)
{
    rs_pull_result_t *res = &r->slot.res;
    double t0 = rs__now_s();
    res->bytes_installed = 0;
    r->diag = diag;
    rs_status_t st = rs_exec_install(r->exec, diag);
    r->diag = NULL;
    rs_exec_stats(r->exec, &res->exec);
    rs_exec_stages(r->exec, &res->stages);
    end_lease(r, r->slot.version, res);
    r->slot.active = 0;
    if (st == RS_OK && r->params.release_after)
        release_now(r, r->slot.version, res);
    res->apply_s = rs__now_s() - t0;
    if (st == RS_OK && result_p != NULL)
        *result_p = *res;
    return st;
}

rs_status_t rs__receiver_refuse_if_staged(rs_receiver_h r, const char *what,
                                         rs_diag_t *diag)
{
    if (r == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: NULL");
    if (!r->slot.active)
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: cannot %s: "
                        "version %lld of '%s' is staged (apply or discard it "
                        "first)", what, (long long)r->slot.version, r->model);
}

rs_status_t rs_receiver_stage(rs_receiver_h r, int64_t version,
                              rs_diag_t *diag, rs_staged_h *staged_p)
{
    rs_status_t st = rs__receiver_refuse_if_staged(r, "stage another version",
                                                   diag);
    if (st != RS_OK)
        return st;
    if (staged_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: NULL "
                            "staged_p");
    if (!r->params.shadow)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: staging "
                            "needs shadow = 1 (with shadow = 0 the bytes "
                            "would land in the bound parameters: use "
                            "rs_receiver_pull)");
    if ((st = stage_version(r, version, diag)) != RS_OK)
        return st;
    *staged_p = &r->slot;
    return RS_OK;
}

rs_status_t rs_receiver_apply(rs_receiver_h r, rs_staged_h staged,
                              rs_diag_t *diag, rs_pull_result_t *result_p)
{
    if (r == NULL || staged == NULL || staged != &r->slot || !staged->active)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: nothing to "
                            "apply: the handle is not this receiver's staged "
                            "version (it was applied or discarded already, "
                            "or its stage failed)");
    r->deadline = 0; /* the deadline bounds the stage, not the safe point */
    return apply_slot(r, diag, result_p);
}

void rs_receiver_discard(rs_receiver_h r, rs_staged_h staged)
{
    if (r == NULL || staged == NULL || staged != &r->slot || !staged->active)
        return;
    end_lease(r, staged->version, &staged->res);
    staged->active = 0;
}

int64_t rs_staged_version(rs_staged_h staged)
{
    return staged != NULL && staged->active ? staged->version : -1;
}

rs_status_t rs_receiver_pull(rs_receiver_h r, int64_t version, rs_diag_t *diag,
                             rs_pull_result_t *result_p)
{
    rs_status_t st = rs__receiver_refuse_if_staged(r, "pull", diag);
    if (st == RS_OK)
        st = stage_version(r, version, diag);
    if (st != RS_OK)
        return st;
    if (rs_cancel_raised(&r->cancel)) { /* staged, but not to be installed */
        int64_t staged = r->slot.version;
        rs_receiver_discard(r, &r->slot);
        return rs__diag_set(diag, RS_ERR_CANCELLED, "pull of version %lld "
                            "of '%s' cancelled before the install stage",
                            (long long)staged, r->model);
    }
    if (past_deadline(r)) { /* as the executor's own check before install */
        r->stage = NULL;
        st = deadline_status(r, version, rs__diag_set(diag, RS_ERR_TIMEOUT,
                             "deadline passed before the install stage"),
                             diag);
        rs_receiver_discard(r, &r->slot);
        return st;
    }
    return apply_slot(r, diag, result_p);
}

void rs_receiver_cancel(rs_receiver_h r)
{
    if (r != NULL)
        rs_cancel_raise(&r->cancel);
}

void rs_receiver_cancel_clear(rs_receiver_h r)
{
    if (r != NULL)
        rs_cancel_clear(&r->cancel);
}
