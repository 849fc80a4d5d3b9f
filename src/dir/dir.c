/* The version directory's public entry points: URL parsing, the checks
 * every backend shares (names, versions, slots, ttls), and dispatch through
 * the backend's ops table. Waiting lives in dir_wait.c. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/diag.h"
#include "core/params.h"
#include "dir/dir_impl.h"
#include "reshard/digest.h"

static const struct {
    const char *prefix;
    const rs__dir_ops_t *ops;
} schemes[] = {
    {"file:", &rs__dir_file},
    {"redis://", &rs__dir_redis},
};

rs_status_t rs__dir_unsupported(rs_dir_h dir, rs__dir_request_t *req,
                                rs_diag_t *diag)
{
    (void)req;
    return rs__diag_set(diag, RS_ERR_UNSUPPORTED,
                        "directory backend '%s': operation not supported",
                        dir != NULL ? dir->ops->name : "?");
}

const char *rs__dir_state_name(rs_version_state_t state)
{
    switch (state) {
    case RS_VERSION_PENDING: return "PENDING";
    case RS_VERSION_READY: return "READY";
    case RS_VERSION_RELEASED: return "RELEASED";
    }
    return "MISSING";
}

static void dir_defaults(rs_dir_params_t *params)
{
    params->create = 1;
}

RS__PARAMS_DEFINE(dir, dir_defaults, notice_ctx)

/* "scheme://[user[:password]@]rest": everything between the last '@' and
 * the first ':' of the user part is the password. */
void rs_dir_redact_url(const char *url, char *out, size_t cap)
{
    if (out == NULL || cap == 0)
        return;
    if (url == NULL) {
        snprintf(out, cap, "(null)");
        return;
    }
    const char *sep = strstr(url, "://");
    const char *auth = sep != NULL ? sep + 3 : NULL;
    const char *at = auth != NULL ? strrchr(auth, '@') : NULL;
    if (at == NULL) {
        snprintf(out, cap, "%s", url);
        return;
    }
    /* "user:password@" keeps the user; "password@" (no colon) keeps none */
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    size_t keep = (size_t)((colon != NULL ? colon + 1 : auth) - url);
    snprintf(out, cap, "%.*s***%s", (int)keep, url, at);
}

const char *rs_dir_name(rs_dir_h dir)
{
    return dir != NULL ? dir->shown : "(no directory)";
}

int rs_dir_transient(rs_dir_h dir)
{
    return dir != NULL && dir->transient;
}

rs_status_t rs__dir_transient(rs_dir_h dir, rs_status_t st)
{
    if (dir != NULL && st != RS_OK)
        dir->transient = 1;
    return st;
}

void rs_dir_notice(rs_dir_h dir, const char *fmt, ...)
{
    char msg[RS_DIAG_MSG_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (dir != NULL && dir->notice != NULL) {
        dir->notice(dir->notice_ctx, msg);
        return;
    }
    fprintf(stderr, "reshard: %s\n", msg);
    fflush(stderr);
}

rs_status_t rs_dir_open_params(const char *url, const rs_dir_params_t *params,
                               rs_diag_t *diag, rs_dir_h *dir_p)
{
    rs_dir_params_t given;
    if (url == NULL || dir_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "rs_dir_open: NULL url or output");
    if (rs__dir_params_take(params, diag, &given) != RS_OK)
        return RS_ERR_INVALID_ARG;
    params = &given;
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        size_t plen = strlen(schemes[i].prefix);
        if (strncmp(url, schemes[i].prefix, plen) != 0)
            continue;
        rs_dir_h dir = calloc(1, sizeof(*dir));
        if (dir == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of "
                                "memory");
        dir->ops = schemes[i].ops;
        dir->notice = params->notice;
        dir->notice_ctx = params->notice_ctx;
        dir->cancel = params->cancel;
        rs_dir_redact_url(url, dir->shown, sizeof(dir->shown));
        rs_status_t st = dir->ops->open(dir, url + plen, params, diag);
        if (st != RS_OK) {
            free(dir);
            return st;
        }
        *dir_p = dir;
        return RS_OK;
    }
    /* the URL is not echoed: it may hold a password */
    return rs__diag_set(diag, RS_ERR_INPUT, "directory URL: unknown scheme "
                        "(expected file:DIR or "
                        "redis://[:password@]host:port)");
}

rs_status_t rs_dir_open(const char *url, rs_diag_t *diag, rs_dir_h *dir_p)
{
    return rs_dir_open_params(url, NULL, diag, dir_p);
}

/* Every dispatch starts with a clean transient flag: it describes the
 * last call only. */
static rs_status_t call(rs_dir_h dir, rs__dir_op_fn op, rs__dir_request_t *req,
                        rs_diag_t *diag)
{
    dir->transient = 0;
    return op(dir, req, diag);
}

void rs_dir_close(rs_dir_h dir)
{
    if (dir == NULL)
        return;
    dir->ops->close(dir);
    free(dir);
}

/* Names become file names and key parts: a conservative alphabet keeps
 * both safe ('/', ':', braces and spaces are refused). */
int rs__dir_name_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

rs_status_t rs__dir_check_name(const char *kind, const char *name,
                               rs_diag_t *diag)
{
    if (name == NULL || name[0] == '\0')
        return rs__diag_set(diag, RS_ERR_INPUT, "%s name is empty", kind);
    size_t n = strnlen(name, RS_DIR_NAME_MAX + 1);
    if (n > RS_DIR_NAME_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s name is longer than %d "
                            "characters", kind, RS_DIR_NAME_MAX);
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s name '%s' is not "
                            "allowed", kind, name);
    for (size_t i = 0; i < n; i++) {
        if (!rs__dir_name_char(name[i]))
            return rs__diag_set(diag, RS_ERR_INPUT, "%s name '%s': "
                                "character %zu is not one of "
                                "[A-Za-z0-9._-]", kind, name, i);
    }
    return RS_OK;
}

/* Common checks of (dir, model, version); fills the request's key. */
static rs_status_t start(rs_dir_h dir, const char *model, int64_t version,
                         rs_diag_t *diag, rs__dir_request_t *req)
{
    if (dir == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL directory");
    dir->transient = 0;
    rs_status_t st = rs__dir_check_name("model", model, diag);
    if (st != RS_OK)
        return st;
    if (version < 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "model '%s': version %lld "
                            "is negative", model, (long long)version);
    memset(req, 0, sizeof(*req));
    req->model = model;
    req->version = version;
    return RS_OK;
}

/* The checks of every call on one slot: start's and a non-negative slot;
 * fills the request's slot. */
static rs_status_t slot_request(rs_dir_h dir, const char *model,
                                int64_t version, int64_t slot,
                                rs_diag_t *diag, rs__dir_request_t *req)
{
    rs_status_t st = start(dir, model, version, diag, req);
    if (st != RS_OK)
        return st;
    if (slot < 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s': slot "
                            "%lld is negative", (long long)version, model,
                            (long long)slot);
    req->slot = slot;
    return RS_OK;
}

/* slot_request's checks and a valid publisher name; fills the publisher. */
static rs_status_t publisher_request(rs_dir_h dir, const char *model,
                                     int64_t version, int64_t slot,
                                     const char *publisher, rs_diag_t *diag,
                                     rs__dir_request_t *req)
{
    rs_status_t st = slot_request(dir, model, version, slot, diag, req);
    if (st == RS_OK)
        st = rs__dir_check_name("publisher", publisher, diag);
    if (st != RS_OK)
        return st;
    req->publisher = publisher;
    return RS_OK;
}

rs_status_t rs_dir_create_version(rs_dir_h dir, const char *model,
                                  int64_t version, int64_t slots,
                                  rs_diag_t *diag)
{
    rs__dir_request_t req;
    rs_status_t st = start(dir, model, version, diag, &req);
    if (st != RS_OK)
        return st;
    if (slots < 1 || slots > RS_DIR_SLOTS_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s': %lld "
                            "slots (expected 1 to %lld)", (long long)version,
                            model, (long long)slots,
                            (long long)RS_DIR_SLOTS_MAX);
    req.slots = slots;
    return call(dir, dir->ops->create, &req, diag);
}

rs_status_t rs_dir_publish_as(rs_dir_h dir, const char *model,
                              int64_t version, int64_t slot,
                              const char *publisher, uint64_t geometry,
                              const void *table, size_t len, rs_diag_t *diag)
{
    rs__dir_request_t req;
    rs_status_t st = publisher_request(dir, model, version, slot, publisher,
                                       diag, &req);
    if (st != RS_OK)
        return st;
    if (table == NULL && len > 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dir_publish: NULL "
                            "table of %zu bytes", len);
    if (len > RS_DIR_TABLE_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s': slot "
                            "%lld table is %zu bytes, more than the %zu-byte "
                            "limit", (long long)version, model,
                            (long long)slot, len, RS_DIR_TABLE_MAX);
    char *entry = NULL;
    st = rs__dir_entry_encode(geometry, table, len, diag, &entry);
    if (st != RS_OK)
        return st;
    rs__dir_geometry_hex(geometry, req.geometry);
    req.table = entry;
    req.len = RS_DIR_ENTRY_HEADER + len;
    st = call(dir, dir->ops->publish, &req, diag);
    free(entry);
    return st;
}

#define DEFAULT_PUBLISHER "default"

rs_status_t rs_dir_publish(rs_dir_h dir, const char *model, int64_t version,
                           int64_t slot, const void *table, size_t len,
                           rs_diag_t *diag)
{
    uint64_t geometry = rs_digest(table != NULL ? table : "", len);
    return rs_dir_publish_as(dir, model, version, slot, DEFAULT_PUBLISHER,
                             geometry, table, len, diag);
}

rs_status_t rs_dir_heartbeat_as(rs_dir_h dir, const char *model,
                                int64_t version, int64_t slot,
                                const char *publisher, rs_diag_t *diag)
{
    rs__dir_request_t req;
    rs_status_t st = publisher_request(dir, model, version, slot, publisher,
                                       diag, &req);
    if (st != RS_OK)
        return st;
    return call(dir, dir->ops->heartbeat, &req, diag);
}

rs_status_t rs_dir_heartbeat(rs_dir_h dir, const char *model, int64_t version,
                             int64_t slot, rs_diag_t *diag)
{
    return rs_dir_heartbeat_as(dir, model, version, slot, DEFAULT_PUBLISHER,
                               diag);
}

rs_status_t rs_dir_info(rs_dir_h dir, const char *model, int64_t version,
                        rs_diag_t *diag, rs_version_info_t *info_p)
{
    rs__dir_request_t req;
    rs_status_t st = start(dir, model, version, diag, &req);
    if (st != RS_OK)
        return st;
    if (info_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dir_info: NULL "
                            "output");
    st = call(dir, dir->ops->lookup, &req, diag);
    if (st != RS_OK)
        return st;
    if (req.info.state == 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "model '%s' has no version "
                            "%lld", model, (long long)version);
    *info_p = req.info;
    return RS_OK;
}

void rs_dir_entries_free(rs_dir_entry_t *entries, size_t count)
{
    for (size_t i = 0; entries != NULL && i < count; i++)
        free(entries[i].table);
    free(entries);
}

/* Every entry's digest is checked before any table leaves this file; a
 * split entry leaves it spliced with its geometry document. */
static rs_status_t decode_all(rs_dir_h dir, rs__dir_request_t *req,
                              rs_diag_t *diag)
{
    if (req->nentries == 0)
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s': "
                            "slot %lld has no publisher",
                            (long long)req->version, req->model,
                            (long long)req->slot);
    return rs__dir_decode_entries(dir, req, NULL, diag);
}

rs_status_t rs_dir_read_slot(rs_dir_h dir, const char *model,
                             int64_t version, int64_t slot, rs_diag_t *diag,
                             rs_dir_entry_t **entries_p, size_t *count_p)
{
    rs__dir_request_t req;
    rs_status_t st = slot_request(dir, model, version, slot, diag, &req);
    if (st != RS_OK)
        return st;
    if (entries_p == NULL || count_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dir_read_slot: "
                            "NULL output");
    st = call(dir, dir->ops->read, &req, diag);
    if (st == RS_OK)
        st = decode_all(dir, &req, diag);
    if (st != RS_OK) {
        rs_dir_entries_free(req.entries, req.nentries);
        return st;
    }
    *entries_p = req.entries;
    *count_p = req.nentries;
    return RS_OK;
}

rs_status_t rs_dir_read(rs_dir_h dir, const char *model, int64_t version,
                        int64_t slot, rs_diag_t *diag, void **table_p,
                        size_t *len_p)
{
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    if (table_p == NULL || len_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dir_read: NULL "
                            "output");
    rs_status_t st = rs_dir_read_slot(dir, model, version, slot, diag, &e,
                                      &n);
    if (st != RS_OK)
        return st;
    *table_p = e[0].table;
    *len_p = e[0].len;
    e[0].table = NULL;
    rs_dir_entries_free(e, n);
    return RS_OK;
}

rs_status_t rs_dir_list(rs_dir_h dir, const char *model, rs_diag_t *diag,
                        rs_version_info_t **infos_p, size_t *count_p)
{
    rs__dir_request_t req;
    rs_status_t st = start(dir, model, 0, diag, &req);
    if (st != RS_OK)
        return st;
    if (infos_p == NULL || count_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dir_list: NULL "
                            "output");
    st = call(dir, dir->ops->list, &req, diag);
    if (st != RS_OK)
        return st;
    *infos_p = req.infos;
    *count_p = req.count;
    return RS_OK;
}

/* Checks of every lease call; fills the request. */
static rs_status_t lease_request(rs_dir_h dir, const char *model,
                                 int64_t version, const char *holder,
                                 double ttl_s, rs_diag_t *diag,
                                 rs__dir_request_t *req)
{
    rs_status_t st = start(dir, model, version, diag, req);
    if (st == RS_OK)
        st = rs__dir_check_name("lease holder", holder, diag);
    if (st != RS_OK)
        return st;
    if (!isfinite(ttl_s) || ttl_s <= 0 || ttl_s > 1e9)
        return rs__diag_set(diag, RS_ERR_INPUT, "lease '%s' on version %lld "
                            "of '%s': ttl %g s (expected more than 0, at most "
                            "1e9)", holder, (long long)version, model, ttl_s);
    req->holder = holder;
    req->ttl_s = ttl_s;
    return RS_OK;
}

rs_status_t rs_dir_lease_take(rs_dir_h dir, const char *model,
                              int64_t version, const char *holder,
                              double ttl_s, rs_diag_t *diag,
                              uint64_t *epoch_p)
{
    rs__dir_request_t req;
    rs_status_t st = lease_request(dir, model, version, holder, ttl_s, diag,
                                   &req);
    if (st == RS_OK)
        st = call(dir, dir->ops->lease, &req, diag);
    if (st == RS_OK && epoch_p != NULL)
        *epoch_p = req.epoch;
    return st;
}

rs_status_t rs_dir_lease_renew(rs_dir_h dir, const char *model,
                               int64_t version, const char *holder,
                               uint64_t epoch, double ttl_s, rs_diag_t *diag)
{
    rs__dir_request_t req;
    rs_status_t st = lease_request(dir, model, version, holder, ttl_s, diag,
                                   &req);
    if (st != RS_OK)
        return st;
    if (epoch == 0 || epoch > RS_DIR_EPOCH_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "lease '%s' on version %lld "
                            "of '%s': epoch %llu (expected 1 to 2^53)",
                            holder, (long long)version, model,
                            (unsigned long long)epoch);
    req.epoch = epoch;
    return call(dir, dir->ops->lease, &req, diag);
}

rs_status_t rs_dir_lease(rs_dir_h dir, const char *model, int64_t version,
                         const char *holder, double ttl_s, rs_diag_t *diag)
{
    return rs_dir_lease_take(dir, model, version, holder, ttl_s, diag, NULL);
}

rs_status_t rs_dir_unlease(rs_dir_h dir, const char *model, int64_t version,
                           const char *holder, rs_diag_t *diag)
{
    rs__dir_request_t req;
    rs_status_t st = start(dir, model, version, diag, &req);
    if (st == RS_OK)
        st = rs__dir_check_name("lease holder", holder, diag);
    if (st != RS_OK)
        return st;
    req.holder = holder;
    return call(dir, dir->ops->unlease, &req, diag);
}

void rs__dir_default_by(char out[RS_DIR_NAME_MAX + 1])
{
    char host[64] = "";
    if (gethostname(host, sizeof(host) - 1) != 0)
        host[0] = '\0';
    for (char *c = host; *c != '\0'; c++)
        *c = rs__dir_name_char(*c) ? *c : '-';
    snprintf(out, RS_DIR_NAME_MAX + 1, "%s-%ld", host[0] ? host : "host",
             (long)getpid());
}

const char *rs__dir_by_text(const rs__dir_request_t *req, char *out, size_t cap)
{
    if (req->released_by[0] == '\0')
        snprintf(out, cap, "%s", "");
    else
        snprintf(out, cap, " by '%s'", req->released_by);
    return out;
}

/* Release and abandon under a name: `by` NULL is the caller's process. */
static rs_status_t release_by(rs_dir_h dir, const char *model,
                              int64_t version, const char *by, int force,
                              rs_diag_t *diag, size_t *dropped_p)
{
    rs__dir_request_t req;
    char own[RS_DIR_NAME_MAX + 1];
    rs_status_t st = start(dir, model, version, diag, &req);
    if (st == RS_OK && by != NULL)
        st = rs__dir_check_name("releaser", by, diag);
    if (st != RS_OK)
        return st;
    if (by == NULL)
        rs__dir_default_by(own);
    req.by = by != NULL ? by : own;
    req.force = force;
    st = call(dir, dir->ops->release, &req, diag);
    if (st == RS_OK && dropped_p != NULL)
        *dropped_p = req.count;
    return st;
}

rs_status_t rs_dir_release(rs_dir_h dir, const char *model, int64_t version,
                           rs_diag_t *diag)
{
    return release_by(dir, model, version, NULL, 0, diag, NULL);
}

rs_status_t rs_dir_release_as(rs_dir_h dir, const char *model,
                              int64_t version, const char *by,
                              rs_diag_t *diag)
{
    if (by == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dir_release_as: "
                            "NULL name");
    return release_by(dir, model, version, by, 0, diag, NULL);
}

rs_status_t rs_dir_abandon(rs_dir_h dir, const char *model, int64_t version,
                           rs_diag_t *diag, size_t *dropped_p)
{
    return release_by(dir, model, version, NULL, 1, diag, dropped_p);
}

rs_status_t rs_dir_abandon_as(rs_dir_h dir, const char *model,
                              int64_t version, const char *by,
                              rs_diag_t *diag, size_t *dropped_p)
{
    if (by == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dir_abandon_as: "
                            "NULL name");
    return release_by(dir, model, version, by, 1, diag, dropped_p);
}

rs_status_t rs_dir_leases(rs_dir_h dir, const char *model, int64_t version,
                          rs_diag_t *diag, rs_dir_lease_info_t **leases_p,
                          size_t *count_p)
{
    return rs__dir_listing(dir, model, version, 0, diag, (void **)leases_p,
                           count_p);
}

/* Every item of a listing starts with its holder's name. */
int rs__dir_by_holder(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

rs_status_t rs__dir_listing(rs_dir_h dir, const char *model, int64_t version,
                            int stamps, rs_diag_t *diag, void **items_p,
                            size_t *count_p)
{
    rs__dir_request_t req;
    memset(&req, 0, sizeof(req));
    rs_status_t st = start(dir, model, version, diag, &req);
    if (st == RS_OK && (items_p == NULL || count_p == NULL))
        st = rs__diag_set(diag, RS_ERR_INVALID_ARG, "%s: NULL output",
                          stamps ? "rs_dir_list_cuts" : "rs_dir_leases");
    if (st == RS_OK)
        st = call(dir, stamps ? dir->ops->list_cuts : dir->ops->leases, &req,
                  diag);
    if (st != RS_OK) {
        free(req.leases);
        free(req.stamps);
        return st;
    }
    void *items = stamps ? (void *)req.stamps : (void *)req.leases;
    size_t n = stamps ? req.nstamps : req.nleases;
    size_t size = stamps ? sizeof(*req.stamps) : sizeof(*req.leases);
    if (n > 1)
        qsort(items, n, size, rs__dir_by_holder);
    *items_p = items;
    *count_p = n;
    return RS_OK;
}

rs_status_t rs__dir_call(rs_dir_h dir, rs__dir_op_fn op, rs__dir_request_t *req,
                         rs_diag_t *diag)
{
    return call(dir, op, req, diag);
}

/* For dir_wait.c: the same checks as the public calls. */
rs_status_t rs__dir_start(rs_dir_h dir, const char *model, int64_t version,
                          rs_diag_t *diag, rs__dir_request_t *req)
{
    return start(dir, model, version, diag, req);
}
