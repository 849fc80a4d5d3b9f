/* The publisher lifecycle: register shards, expose them (once, until the
 * registrations change; staging and allocations are in publisher_arena.c),
 * publish this rank's table for each version, keep a heartbeat going, and wait
 * for the version's release. A directory outage never stops the serving:
 * heartbeats back off and resume, the release wait retries, and each outage is
 * reported once when it begins and once when it ends. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/checked.h"
#include "core/clock.h"
#include "core/diag.h"
#include "core/memory.h"
#include "dir/split.h"
#include "core/params.h"
#include "core/vec.h"
#include "exec/backend.h"
#include "model/sources_impl.h"
#include "refit/publisher_impl.h"
#include "reshard/digest.h"
#include "reshard/dir.h"
#include "reshard/expose.h"

static void publisher_defaults(rs_publisher_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->backend = "ucx";
    p->heartbeat_s = 1.0;
    p->heartbeat_max_s = 4.0;
    p->publish_retry_s = 60.0;
    p->digests = 1;
    p->staging = RS_STAGING_CALLER;
    p->delta_keep = 2;
}

RS__PARAMS_DEFINE(publisher, publisher_defaults, notice_ctx)

const char *rs__publisher_who(rs_publisher_h p, char *buf, size_t cap)
{
    snprintf(buf, cap, "publisher rank %lld replica %lld (%s)",
             (long long)p->params.rank, (long long)p->params.replica,
             p->session != NULL ? p->session : "?");
    return buf;
}

void rs__publisher_notify(rs_publisher_h p, const char *msg)
{
    if (p->params.notice != NULL)
        p->params.notice(p->params.notice_ctx, msg);
    else
        rs_dir_notice(NULL, "%s", msg);
}

/* Notices of the main connection (the release wait). While heartbeats run
 * they report outages, so the same outage is told once. */
static void main_notice(void *ctx, const char *msg)
{
    rs_publisher_h p = ctx;
    char line[RS_DIAG_MSG_MAX + 512], who[RS_PUBLISHER_WHO_MAX];
    if (p->hb_running)
        return;
    snprintf(line, sizeof(line), "%s: %s", rs__publisher_who(p, who,
                                                             sizeof(who)),
             msg);
    rs__publisher_notify(p, line);
}

static rs_status_t open_dir(rs_publisher_h p, int main, rs_diag_t *diag,
                            rs_dir_h *dir_p)
{
    rs_dir_params_t dp;
    rs_dir_params_init(&dp);
    dp.create = 1;        /* publishers may create a file: directory */
    dp.connect_later = 1; /* unreachable now: publishing retries */
    if (main) {
        dp.notice = main_notice;
        dp.notice_ctx = p;
        dp.cancel = &p->cancel; /* rs_publisher_cancel */
    }
    return rs_dir_open_params(p->params.directory, &dp, diag, dir_p);
}

/* "trainer-<rank>", or "trainer-<rank>-r<replica>" for the other replicas
 * of a rank: distinct names, since a name already in the slot replaces. */
static void default_session(const rs_publisher_params_t *params, char *out,
                            size_t cap)
{
    if (params->replica > 0)
        snprintf(out, cap, "trainer-%lld-r%lld", (long long)params->rank,
                 (long long)params->replica);
    else
        snprintf(out, cap, "trainer-%lld", (long long)params->rank);
}

static const char *staging_name(int staging)
{
    static const char *const names[] = {"caller (0)", "in_place (1)",
                                        "arena (2)"};
    return staging >= 0 && staging <= RS_STAGING_ARENA ? names[staging] : "?";
}

/* Cut-aligned publishing cuts the arena: any other staging is refused. */
static rs_status_t check_cut_aligned(const rs_publisher_params_t *params,
                                     rs_diag_t *diag)
{
    if (!params->cut_aligned && params->cuts == NULL &&
        params->cuts_file == NULL)
        return RS_OK;
    if (params->staging == RS_STAGING_ARENA)
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: cut-aligned "
                        "publishing (%s) copies shards into the arena: it "
                        "needs staging arena (2), not staging %s",
                        params->cut_aligned ? "cut_aligned"
                        : params->cuts != NULL ? "cuts" : "cuts_file",
                        staging_name(params->staging));
}

/* Publisher-side quantization fills arena slots: any other staging is
 * refused. */
static rs_status_t check_quantize(const rs_publisher_params_t *params,
                                  rs_diag_t *diag)
{
    if ((params->num_quantize == 0 && !params->quantize_wanted) ||
        params->staging == RS_STAGING_ARENA)
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: publisher-side "
                        "quantization (%s) fills the arena: it needs staging "
                        "arena (2), not staging %s",
                        params->num_quantize > 0 ? "quantize"
                                                 : "quantize_wanted",
                        staging_name(params->staging));
}

/* The backend must expose memory to other processes (ucx, cma; local and
 * local-mt read only within one): told at create, not at the first
 * publish. */
static rs_status_t check_backend(const rs_publisher_params_t *params,
                                 rs_diag_t *diag)
{
    const char *name = params->backend != NULL ? params->backend : "ucx";
    const rs__backend_t *b = rs__backend_find(name);
    if (b != NULL && b->exposer != NULL)
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: backend '%s' "
                        "%s (publishers use ucx or cma)", name,
                        b != NULL ? "cannot serve other processes"
                                  : "is unknown");
}

rs_status_t rs_publisher_create(const rs_publisher_params_t *params_in,
                                rs_diag_t *diag, rs_publisher_h *pub_p)
{
    rs_publisher_params_t given; /* the caller's fields over the defaults */
    const rs_publisher_params_t *params = NULL;
    if (params_in != NULL) {
        if (rs__publisher_params_take(params_in, diag, &given) != RS_OK)
            return RS_ERR_INVALID_ARG;
        params = &given;
    }
    if (params == NULL || pub_p == NULL || params->directory == NULL ||
        params->model == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: directory "
                            "and model are required");
    if (params->world < 1 || params->rank < 0 || params->rank >= params->world)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: rank %lld "
                            "outside world %lld", (long long)params->rank,
                            (long long)params->world);
    if (params->replica < 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: replica "
                            "%lld is negative", (long long)params->replica);
    if (params->staging < RS_STAGING_CALLER ||
        params->staging > RS_STAGING_ARENA)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: staging "
                            "%d is none of caller (0), in_place (1) and "
                            "arena (2)", params->staging);
    rs_status_t st = check_backend(params, diag);
    if (st == RS_OK)
        st = check_cut_aligned(params, diag);
    if (st == RS_OK)
        st = check_quantize(params, diag);
    if (st == RS_OK && (params->delta_keep < 0 ||
                        params->delta_keep > RS_PUB_DELTA_KEEP_MAX))
        st = rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: delta_keep "
                          "%lld is outside 0 .. %d",
                          (long long)params->delta_keep,
                          RS_PUB_DELTA_KEEP_MAX);
    if (st != RS_OK)
        return st;
    rs_publisher_h p = calloc(1, sizeof(*p));
    if (p == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    p->params = *params;
    p->params.cuts_file = NULL; /* not borrowed: p->cuts_file */
    p->params.quantize = NULL;  /* not borrowed: p->qrules */
    p->params.num_quantize = 0;
    p->cut_mode = params->cut_aligned || params->cuts != NULL ||
                  params->cuts_file != NULL;
    p->model = strdup(params->model);
    p->backend = strdup(params->backend ? params->backend : "ucx");
    if (params->session != NULL)
        p->session = strdup(params->session);
    else if ((p->session = malloc(64)) != NULL)
        default_session(params, p->session, 64);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->version = -1;
    p->arena_version = -1;
    p->released = -1;
    st = p->model && p->backend && p->session
        ? rs__publisher_load_quant_rules(p, params, diag)
        : rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (st == RS_OK)
        st = open_dir(p, 1, diag, &p->dir);
    if (st == RS_OK && params->cuts_file != NULL)
        st = (p->cuts_file = strdup(params->cuts_file)) != NULL
                 ? rs__publisher_load_cuts_file(p, diag)
                 : rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (st != RS_OK) {
        rs_publisher_destroy(p);
        return st;
    }
    *pub_p = p;
    return RS_OK;
}

void rs__publisher_stop_heartbeat(rs_publisher_h p)
{
    if (!p->hb_running)
        return;
    pthread_mutex_lock(&p->lock);
    p->hb_stop = 1;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->hb_thread, NULL);
    p->hb_running = 0;
    p->hb_stop = 0;
}

void rs_publisher_destroy(rs_publisher_h p)
{
    if (p == NULL)
        return;
    rs__publisher_stop_heartbeat(p);
    rs_exposer_destroy(p->exposer); /* with every allocation and the arena */
    for (size_t i = 0; i < p->shards_len; i++)
        free(p->shards[i].tensor);
    free(p->shards);
    rs__strmap_free(&p->by_name);
    free(p->published);
    free(p->pieces);
    free(p->next_pieces);
    free(p->told);
    rs__publisher_forget_records(p);
    free(p->records);
    rs__publisher_free_quant(p);
    rs__publisher_free_deltas(p);
    rs_cuts_destroy(p->cut_union);
    rs_cuts_destroy(p->file_cuts);
    free(p->cuts_file);
    rs_dir_close(p->dir);
    rs_dir_close(p->hb_dir);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p->table);
    free(p->model);
    free(p->backend);
    free(p->session);
    free(p);
}

/* The box as a receiver's sources will check it (inside the full shape,
 * dim by dim, without overflow): a table holding a box they refuse could
 * not be pulled by anyone. */
static rs_status_t check_box(rs_publisher_h p, const char *tensor,
                             rs_dtype_t dtype, int ndim,
                             const int64_t *full_shape, const int64_t *offset,
                             const int64_t *shape, void *ptr, rs_diag_t *diag)
{
    rs_shard_desc_t d = {tensor, dtype, rs_dtype_size(dtype), ndim,
                         full_shape, p->session, 0, (uint64_t)(uintptr_t)ptr,
                         offset, shape, NULL};
    rs_diag_t why = {RS_OK, ""};
    int64_t numel;
    if (ndim > 0 && (full_shape == NULL || offset == NULL || shape == NULL))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: tensor "
                            "'%s': NULL shape or offset", tensor);
    if (rs__sources_check_shard(&d, &why, &numel) != RS_OK)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: %s",
                            why.msg);
    return RS_OK;
}

rs_status_t rs_publisher_register(rs_publisher_h p, const char *tensor,
                                  rs_dtype_t dtype, int ndim,
                                  const int64_t *full_shape,
                                  const int64_t *offset, const int64_t *shape,
                                  void *ptr, rs_mem_type_t mem,
                                  rs_diag_t *diag)
{
    rs__publish_shard_t s;
    int64_t numel, nbytes;
    char who[RS_DIAG_MSG_MAX];
    memset(&s, 0, sizeof(s));
    if (p == NULL || tensor == NULL || ndim < 0 || ndim > RS_MAX_DIMS ||
        rs_dtype_size(dtype) == 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: bad shard "
                            "of '%s'", tensor ? tensor : "?");
    /* before anything reads ptr (the digest at publish, the exposer) */
    snprintf(who, sizeof(who), "publisher: tensor '%s'", tensor);
    rs_status_t st = rs__mem_check(mem, who, diag);
    if (st != RS_OK)
        return st;
    if ((st = check_box(p, tensor, dtype, ndim, full_shape, offset, shape,
                        ptr, diag)) != RS_OK)
        return st;
    if (!rs__numel(shape, ndim, &numel) ||
        !rs__mul_i64(numel, (int64_t)rs_dtype_size(dtype), &nbytes))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: tensor "
                            "'%s': shard shape overflows", tensor);
    if (p->params.staging == RS_STAGING_IN_PLACE &&
        (st = rs__publisher_check_in_place(p, tensor, ptr, (uint64_t)nbytes,
                                           diag)) != RS_OK)
        return st;
    s.tensor = strdup(tensor);
    s.dtype = dtype;
    s.ndim = ndim;
    memcpy(s.full_shape, full_shape, (size_t)ndim * sizeof(int64_t));
    memcpy(s.offset, offset, (size_t)ndim * sizeof(int64_t));
    memcpy(s.shape, shape, (size_t)ndim * sizeof(int64_t));
    s.ptr = ptr;
    s.nbytes = (uint64_t)nbytes;
    if (s.tensor == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    st = rs__publisher_check_overlap(p, &s, diag);
    if (st == RS_OK && !RS_VEC_PUSH(p, shards, s))
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    else if (st == RS_OK && !rs__publisher_index_add(p, p->shards_len - 1)) {
        p->shards_len--;
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    if (st != RS_OK) {
        free(s.tensor);
        return st;
    }
    p->dirty = 1;
    return RS_OK;
}

/* (Re)exposes the served memory on the publisher's one exposer: a reset
 * drops the old regions (and ends receivers' endpoints), allocations stay.
 * A failure leaves nothing exposed until a later publish succeeds. */
static rs_status_t expose(rs_publisher_h p, rs_diag_t *diag)
{
    rs_status_t st = rs__publisher_exposer(p, diag);
    if (st != RS_OK)
        return st;
    rs_exposer_reset(p->exposer);
    p->exposed = 0;
    st = rs__publisher_add_regions(p, diag);
    if (st == RS_OK)
        st = rs_exposer_start(p->exposer, diag);
    if (st != RS_OK) {
        rs_exposer_reset(p->exposer);
        return st;
    }
    p->exposed = 1;
    p->dirty = 0;
    return RS_OK;
}

/* The wait before the next heartbeat after one that began at `started`
 * and returned st: the period while the directory answers, doubling up to
 * heartbeat_max_s while it does not; the outage's start and end are
 * reported, its length counted from the start of the first heartbeat that
 * failed (a server that hangs holds that one for the client's timeout). */
static double heartbeat_next(rs_publisher_h p, int64_t v, rs_status_t st,
                             const rs_diag_t *d, double wait, double started,
                             double *down_since)
{
    char line[RS_DIAG_MSG_MAX + 512], who[RS_PUBLISHER_WHO_MAX];
    double period = p->params.heartbeat_s;
    double cap = fmax(period, p->params.heartbeat_max_s);
    rs__publisher_who(p, who, sizeof(who));
    if (st == RS_OK) {
        if (*down_since >= 0) {
            snprintf(line, sizeof(line), "%s: directory %s reachable again "
                     "after %.1f s; heartbeats of version %lld resumed", who,
                     rs_dir_name(p->hb_dir), rs__now_s() - *down_since,
                     (long long)v);
            rs__publisher_notify(p, line);
        }
        *down_since = -1;
        return period;
    }
    if (*down_since >= 0)
        return fmin(wait * 2, cap);
    *down_since = started;
    snprintf(line, sizeof(line), "%s: heartbeat of version %lld failed: %s; "
             "still serving, retrying every %g s up to %g s", who,
             (long long)v, d->msg[0] ? d->msg : rs_status_str(st), period,
             cap);
    rs__publisher_notify(p, line);
    return fmin(period * 2, cap);
}

static rs_status_t create_and_publish(rs_publisher_h p, rs_dir_h dir,
                                      int64_t version, const char *table,
                                      size_t len, uint64_t geometry,
                                      rs_diag_t *diag);

/* Publishes the table kept from version v's publish again on `dir`, and
 * tells `line` once it is there. The kept table is what v served: its
 * digests are those of v's bytes, whatever the buffers hold now. */
static rs_status_t republish_kept(rs_publisher_h p, rs_dir_h dir, int64_t v,
                                  const char *line, rs_diag_t *d)
{
    pthread_mutex_lock(&p->lock);
    char *table = p->version == v && p->table != NULL
                      ? malloc(p->table_len + 1) : NULL;
    size_t len = p->table_len;
    uint64_t geometry = p->table_geometry;
    if (table != NULL)
        memcpy(table, p->table, len);
    pthread_mutex_unlock(&p->lock);
    if (table == NULL)
        return rs__diag_set(d, RS_ERR_NO_MEMORY, "publisher: no table of "
                            "version %lld to publish again", (long long)v);
    rs_status_t st = create_and_publish(p, dir, v, table, len, geometry, d);
    free(table);
    if (st == RS_OK)
        rs__publisher_notify(p, line);
    return st;
}

/* A heartbeat found this slot's table gone (the directory lost its data):
 * the same bytes are still served, so the table is published again. */
static rs_status_t republish_lost(rs_publisher_h p, int64_t v, rs_diag_t *d)
{
    char line[RS_DIAG_MSG_MAX + 512], who[RS_PUBLISHER_WHO_MAX];
    snprintf(line, sizeof(line), "%s: version %lld lost its table in "
             "directory %s (%s); publishing it again",
             rs__publisher_who(p, who, sizeof(who)), (long long)v,
             rs_dir_name(p->hb_dir), d->msg);
    return republish_kept(p, p->hb_dir, v, line, d);
}

static void *heartbeat_main(void *arg)
{
    rs_publisher_h p = arg;
    double wait = p->params.heartbeat_s, down_since = -1;
    pthread_mutex_lock(&p->lock);
    while (!p->hb_stop) {
        struct timespec until = rs__wall_after(wait);
        pthread_cond_timedwait(&p->wake, &p->lock, &until);
        if (p->hb_stop)
            break;
        int64_t v = p->version;
        pthread_mutex_unlock(&p->lock);
        rs_diag_t d;
        rs_diag_clear(&d);
        double started = rs__now_s();
        rs_status_t st = rs_dir_heartbeat_as(p->hb_dir, p->model, v,
                                             p->params.rank, p->session, &d);
        if (st == RS_ERR_INCOMPLETE ||
            (st == RS_ERR_INPUT && !rs_dir_transient(p->hb_dir)))
            st = republish_lost(p, v, &d);
        wait = heartbeat_next(p, v, st, &d, wait, started, &down_since);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Heartbeats run on their own directory connection (hiredis contexts are
 * not shared across threads). */
static rs_status_t start_heartbeat(rs_publisher_h p, rs_diag_t *diag)
{
    if (p->params.heartbeat_s <= 0 || p->hb_running)
        return RS_OK;
    if (p->hb_dir == NULL) {
        rs_status_t st = open_dir(p, 0, diag, &p->hb_dir);
        if (st != RS_OK)
            return st;
    }
    if (pthread_create(&p->hb_thread, NULL, heartbeat_main, p) != 0)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "publisher: cannot start "
                            "the heartbeat thread");
    p->hb_running = 1;
    return RS_OK;
}

static void nap(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* On `dir`: the main connection, or the heartbeat thread's own. The
 * table goes as a split entry (dir/split.h): its geometry document once
 * per geometry, its digests and step every version. */
static rs_status_t create_and_publish(rs_publisher_h p, rs_dir_h dir,
                                      int64_t version, const char *table,
                                      size_t len, uint64_t geometry,
                                      rs_diag_t *diag)
{
    char *doc = NULL, *ins = NULL;
    size_t doc_len = 0, ins_len = 0;
    int written = 0;
    rs_status_t st = rs_dir_create_version(dir, p->model, version,
                                           p->params.world, diag);
    if (st == RS_OK)
        st = rs__publisher_split(table, len, &doc, &doc_len, &ins, &ins_len,
                                 diag);
    /* the geometry document is written only when it changed */
    if (st == RS_OK)
        st = rs__dir_publish_split(dir, p->model, version, p->params.rank,
                                   p->session, geometry, doc, doc_len, ins,
                                   ins_len, diag, &written);
    free(doc);
    free(ins);
    return st;
}

/* Creates the version and publishes the table, riding out a directory
 * outage for up to publish_retry_s (both steps are idempotent, so a step
 * whose reply was lost is simply done again). */
static rs_status_t publish_table(rs_publisher_h p, int64_t version,
                                 const char *table, size_t len,
                                 uint64_t geometry, rs_diag_t *diag)
{
    char line[RS_DIAG_MSG_MAX + 512], who[RS_PUBLISHER_WHO_MAX];
    double deadline = rs__now_s() + p->params.publish_retry_s, delay = 0.05;
    double down_since = -1;
    rs__publisher_who(p, who, sizeof(who));
    for (;;) {
        double started = rs__now_s();
        rs_status_t st = create_and_publish(p, p->dir, version, table, len,
                                            geometry, diag);
        double now = rs__now_s();
        if (st == RS_OK && down_since >= 0) {
            snprintf(line, sizeof(line), "%s: directory %s reachable again "
                     "after %.1f s; version %lld published", who,
                     rs_dir_name(p->dir), now - down_since,
                     (long long)version);
            rs__publisher_notify(p, line);
        }
        if (st == RS_OK || !rs_dir_transient(p->dir) || now >= deadline)
            return st;
        if (down_since < 0) {
            down_since = started; /* the outage began before this try */
            snprintf(line, sizeof(line), "%s: publishing version %lld: "
                     "directory unreachable: %s; retrying for up to %.1f s",
                     who, (long long)version, diag != NULL ? diag->msg : "",
                     deadline - now);
            rs__publisher_notify(p, line);
        }
        nap(fmin(delay, deadline - now));
        delay = fmin(delay * 2, 1.0);
    }
}

/* The table's entries: the pieces, or the non-empty shards, and two per
 * quantized piece (its values and its scales). */
static size_t served_count(rs_publisher_h p)
{
    size_t n = 2 * p->qpieces_len;
    if (p->cut_mode)
        return n + p->pieces_len;
    for (size_t i = 0; i < p->shards_len; i++)
        n += p->shards[i].nbytes > 0;
    return n;
}

rs_status_t rs_publisher_publish(rs_publisher_h p, int64_t version,
                                 rs_diag_t *diag)
{
    char *table = NULL;
    size_t len = 0;
    rs_status_t st = RS_OK;
    if (p == NULL || version < 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: bad version");
    /* listed first, so that a version in the directory is always listed;
     * dropped again when it does not get there */
    int fresh = p->published_len == 0 ||
                p->published[p->published_len - 1] != version;
    if (fresh && !RS_VEC_PUSH(p, published, version))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    st = rs__publisher_stage(p, version, diag);
    if (st == RS_OK && (!p->exposed || p->dirty))
        st = expose(p, diag);
    if (st == RS_OK)
        st = rs__publisher_table(p, version, &table, &len, diag);
    uint64_t geometry = rs__publisher_geometry(p);
    if (st == RS_OK)
        st = publish_table(p, version, table, len, geometry, diag);
    if (st != RS_OK) {
        if (fresh)
            p->published_len--;
        free(table);
        return st;
    }
    rs_dir_heartbeat_as(p->dir, p->model, version, p->params.rank,
                        p->session, NULL);
    pthread_mutex_lock(&p->lock);
    p->version = version;
    free(p->table);
    p->table = table; /* kept for publishing it again */
    p->table_len = len;
    p->table_geometry = geometry;
    p->num_served = served_count(p);
    pthread_mutex_unlock(&p->lock);
    return start_heartbeat(p, diag);
}

size_t rs_publisher_num_served(rs_publisher_h p)
{
    return p != NULL ? p->num_served : 0;
}

static int published_before(rs_publisher_h p, int64_t version)
{
    for (size_t i = p->published_len; i > 0; i--)
        if (p->published[i - 1] == version)
            return 1;
    return 0;
}

/* Why `version`, missing from the directory, cannot be published again,
 * or "" when it can: only the version published last, still served as it
 * was then (no registration changed since, and in arena staging the arena
 * still holds it). The buffers under any other version would serve bytes
 * that never were that version. */
static const char *why_not_again(rs_publisher_h p, int64_t version)
{
    if (version != p->version)
        return "it now serves a later version";
    if (p->dirty || !p->exposed)
        return "its registrations changed since it was published";
    if (p->params.staging == RS_STAGING_ARENA && p->arena_version != version)
        return "the copy-in arena no longer holds it";
    return "";
}

/* RS_OK when `version`, missing from the directory (a server restarted
 * without its data, or a version nobody published), may be published
 * again; else the refusal, naming the version. */
static rs_status_t may_publish_again(rs_publisher_h p, int64_t version,
                                     rs_diag_t *diag)
{
    if (!published_before(p, version))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: version "
                            "%lld was never published by %s (rank %lld); it "
                            "is not in directory %s: there is no release to "
                            "wait for", (long long)version, p->session,
                            (long long)p->params.rank, rs_dir_name(p->dir));
    const char *why = why_not_again(p, version);
    if (why[0] != '\0')
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: version "
                            "%lld of %s vanished from directory %s and "
                            "cannot be published again: %s (version %lld)",
                            (long long)version, p->session,
                            rs_dir_name(p->dir), why, (long long)p->version);
    return RS_OK;
}

rs_status_t rs_publisher_wait_released(rs_publisher_h p, int64_t version,
                                       double timeout_s, rs_diag_t *diag)
{
    char line[RS_DIAG_MSG_MAX + 256];
    if (p == NULL || !isfinite(timeout_s) || timeout_s < 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: bad "
                            "release wait");
    double deadline = rs__now_s() + timeout_s;
    for (;;) {
        double left = fmax(0, deadline - rs__now_s());
        rs_status_t st = rs_dir_wait_released(p->dir, p->model, version, left,
                                              diag);
        if (st == RS_OK)
            p->released = version; /* an arena holding it may be refilled */
        /* the arguments were good for the publish: RS_ERR_INPUT means the
         * version does not exist (another rank may have created it again
         * since, without this rank's table) */
        if (st != RS_ERR_INPUT)
            return st;
        rs_status_t again = may_publish_again(p, version, diag);
        if (again != RS_OK || rs__now_s() >= deadline)
            return again != RS_OK ? again : st;
        snprintf(line, sizeof(line), "publisher rank %lld: version %lld "
                 "vanished from directory %s (restarted without its data?); "
                 "publishing it again", (long long)p->params.rank,
                 (long long)version, rs_dir_name(p->dir));
        st = republish_kept(p, p->dir, version, line, diag);
        if (st != RS_OK)
            return st;
    }
}

/* The flag lives in the publisher and its main directory handle reads it:
 * only that handle's waits (the release wait) are cancelled. */
void rs_publisher_cancel(rs_publisher_h p)
{
    if (p != NULL)
        rs_cancel_raise(&p->cancel);
}

void rs_publisher_cancel_clear(rs_publisher_h p)
{
    if (p != NULL)
        rs_cancel_clear(&p->cancel);
}
