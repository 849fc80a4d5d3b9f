/* Leases and release in the file:DIR backend. A lease is a file
 * lease-<holder> holding its expiry (seconds since the epoch) and its epoch;
 * the file `epoch` holds the last epoch handed out. Takes, renewals and
 * release run under the version lock; release is refused while any lease has
 * not expired (unless forced: abandon), then creates RELEASED and removes
 * tables, heartbeats and
 * leases. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/diag.h"
#include "dir/file_impl.h"

#define LEASE_PREFIX "lease-"
#define EPOCH_FILE "epoch"

static void lease_name(const char *holder, char out[PATH_MAX])
{
    snprintf(out, PATH_MAX, LEASE_PREFIX "%s", holder);
}

static int released(const char *vdir)
{
    char path[PATH_MAX];
    rs__file_dir_join(vdir, RS_FDIR_RELEASED, path);
    return rs__file_dir_exists(path);
}

void rs__file_dir_released_by(const char *vdir, char out[RS_DIR_NAME_MAX + 1])
{
    char path[PATH_MAX];
    char *text = NULL;
    size_t len = 0;
    int absent = 1;
    out[0] = '\0';
    rs__file_dir_join(vdir, RS_FDIR_RELEASED, path);
    if (rs__file_dir_read(path, RS_DIR_NAME_MAX + 2, NULL, &absent, &text,
                      &len) != RS_OK || absent)
        return;
    size_t n = 0; /* the name, as written by release: only its alphabet */
    while (n < len && n < RS_DIR_NAME_MAX && rs__dir_name_char(text[n]))
        n++;
    memcpy(out, text, n);
    out[n] = '\0';
    free(text);
}

/* A lease file: "<expiry> <epoch>\n" ("<expiry>\n", epoch 0, as older
 * versions wrote it). *absent_p as rs__file_dir_read. */
static rs_status_t read_lease(const char *path, rs_diag_t *diag,
                              int *absent_p, double *expiry_p,
                              uint64_t *epoch_p)
{
    char *text = NULL, *end;
    size_t len;
    rs_status_t st = rs__file_dir_read(path, 64, diag, absent_p, &text, &len);
    if (st != RS_OK || *absent_p)
        return st;
    uint64_t epoch = 0;
    double expiry = strtod(text, &end);
    int ok = end != text;
    if (ok && *end == ' ') {
        char *num = end + 1;
        epoch = strtoull(num, &end, 10);
        ok = end != num && num[0] >= '0' && num[0] <= '9';
    }
    ok = ok && (*end == '\n' || *end == '\0');
    free(text);
    if (!ok)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s: expected '<expiry in "
                            "seconds> <epoch>'", path);
    *expiry_p = expiry;
    *epoch_p = epoch;
    return RS_OK;
}

/* The next epoch of this version, recorded before any lease carries it. */
static rs_status_t next_epoch(const char *vdir, rs_diag_t *diag,
                              uint64_t *epoch_p)
{
    char path[PATH_MAX], text[32];
    char *old = NULL;
    size_t len;
    int absent;
    uint64_t last = 0;
    rs__file_dir_join(vdir, EPOCH_FILE, path);
    rs_status_t st = rs__file_dir_read(path, 32, diag, &absent, &old, &len);
    if (st != RS_OK)
        return st;
    if (!absent) {
        char *end;
        last = strtoull(old, &end, 10);
        int ok = end != old && (*end == '\n' || *end == '\0');
        free(old);
        if (!ok || last >= RS_DIR_EPOCH_MAX)
            return rs__diag_set(diag, RS_ERR_INPUT, "%s: expected the last "
                                "lease epoch (an integer below 2^53)", path);
    }
    int n = snprintf(text, sizeof(text), "%" PRIu64 "\n", last + 1);
    st = rs__file_dir_replace(vdir, EPOCH_FILE, text, (size_t)n, diag);
    if (st == RS_OK)
        *epoch_p = last + 1;
    return st;
}

/* A renewal (req->epoch set) goes ahead only while lease req->epoch is
 * live. A take goes ahead only while no live lease has the holder's name:
 * two receivers under one name would end each other's epochs. */
static rs_status_t check_lease(const char *vdir, const char *name,
                               const rs__dir_request_t *req, rs_diag_t *diag)
{
    char path[PATH_MAX];
    int absent;
    double expiry = 0, now;
    uint64_t epoch = 0;
    rs__file_dir_join(vdir, name, path);
    rs_status_t st = read_lease(path, diag, &absent, &expiry, &epoch);
    if (st != RS_OK || (req->epoch == 0 && absent))
        return st;
    now = rs__file_dir_now();
    if (req->epoch == 0)
        return expiry <= now ? RS_OK : rs__diag_set(diag, RS_ERR_INPUT,
            "version %lld of '%s': lease holder name '%s' is taken: another "
            "receiver holds a live lease under it (epoch %" PRIu64 ", %.2f s "
            "left); every receiver needs its own holder name",
            (long long)req->version, req->model, req->holder, epoch,
            expiry - now);
    if (absent)
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s': "
                            "lease '%s' (epoch %" PRIu64 ") is not held "
                            "(dropped or never taken)", (long long)req->version,
                            req->model, req->holder, req->epoch);
    if (epoch != req->epoch)
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s': "
                            "lease '%s' (epoch %" PRIu64 ") was taken again "
                            "(now epoch %" PRIu64 ")", (long long)req->version,
                            req->model, req->holder, req->epoch, epoch);
    if (expiry <= now)
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s': "
                            "lease '%s' (epoch %" PRIu64 ") lapsed %.2f s ago",
                            (long long)req->version, req->model, req->holder,
                            req->epoch, now - expiry);
    return RS_OK;
}

static rs_status_t do_lease(const char *vdir, rs__dir_request_t *req,
                            rs_diag_t *diag)
{
    char name[PATH_MAX], text[64], by[RS_DIR_NAME_MAX + 32];
    uint64_t epoch = req->epoch;
    if (released(vdir)) {
        rs__file_dir_released_by(vdir, req->released_by);
        rs__dir_by_text(req, by, sizeof(by));
    }
    if (released(vdir) && req->epoch == 0)
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s' "
                            "was released%s: no lease can be taken",
                            (long long)req->version, req->model, by);
    if (released(vdir))
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s' "
                            "was released%s: lease '%s' (epoch %" PRIu64 ") "
                            "ended with it", (long long)req->version,
                            req->model, by, req->holder, req->epoch);
    lease_name(req->holder, name);
    rs_status_t st = check_lease(vdir, name, req, diag);
    if (st == RS_OK && req->epoch == 0)
        st = next_epoch(vdir, diag, &epoch);
    if (st != RS_OK)
        return st;
    int n = snprintf(text, sizeof(text), "%.6f %" PRIu64 "\n",
                     rs__file_dir_now() + req->ttl_s, epoch);
    st = rs__file_dir_replace(vdir, name, text, (size_t)n, diag);
    if (st == RS_OK)
        req->epoch = epoch;
    return st;
}

static rs_status_t do_unlease(const char *vdir, rs__dir_request_t *req,
                              rs_diag_t *diag)
{
    char name[PATH_MAX], path[PATH_MAX * 2];
    lease_name(req->holder, name);
    rs__file_dir_join(vdir, name, path);
    if (unlink(path) != 0 && errno != ENOENT)
        return rs__diag_set(diag, RS_ERR_IO, "cannot remove %s: %s", path,
                            strerror(errno));
    return RS_OK;
}

rs_status_t rs__file_dir_lease(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    return rs__file_dir_locked(dir, req, 1, diag, do_lease);
}

rs_status_t rs__file_dir_unlease(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    return rs__file_dir_locked(dir, req, 1, diag, do_unlease);
}

/* Calls `each` for every live lease of vdir (expiry after now) with its
 * holder (the file name past the prefix), epoch and seconds left; stops at
 * the first status `each` or a read returns. */
typedef rs_status_t (*lease_cb)(void *ctx, const char *holder,
                                uint64_t epoch, double left_s,
                                rs_diag_t *diag);

static rs_status_t each_live_lease(const char *vdir, rs_diag_t *diag,
                                   lease_cb each, void *ctx)
{
    DIR *d = opendir(vdir);
    if (d == NULL)
        return rs__diag_set(diag, RS_ERR_IO, "cannot list %s: %s", vdir,
                            strerror(errno));
    double now = rs__file_dir_now();
    rs_status_t st = RS_OK;
    struct dirent *e;
    while (st == RS_OK && (e = readdir(d)) != NULL) {
        char path[PATH_MAX];
        int absent;
        double expiry = 0;
        uint64_t epoch = 0;
        if (strncmp(e->d_name, LEASE_PREFIX, strlen(LEASE_PREFIX)) != 0)
            continue;
        rs__file_dir_join(vdir, e->d_name, path);
        st = read_lease(path, diag, &absent, &expiry, &epoch);
        if (st == RS_OK && !absent && expiry > now)
            st = each(ctx, e->d_name + strlen(LEASE_PREFIX), epoch,
                      expiry - now, diag);
    }
    closedir(d);
    return st;
}

typedef struct first_lease {
    char *holder; /* PATH_MAX */
    double left_s;
    size_t count;
} first_lease_t;

static rs_status_t count_lease(void *ctx, const char *holder, uint64_t epoch,
                               double left_s, rs_diag_t *diag)
{
    first_lease_t *f = ctx;
    (void)epoch;
    (void)diag;
    if (f->count++ == 0) {
        snprintf(f->holder, PATH_MAX, "%s", holder);
        f->left_s = left_s;
    }
    return RS_OK;
}

/* The first live lease (expiry after now) and how many there are. */
static rs_status_t live_leases(const char *vdir, rs_diag_t *diag,
                               char holder[PATH_MAX], double *expiry_p,
                               size_t *count_p)
{
    first_lease_t f = {holder, 0, 0};
    rs_status_t st = each_live_lease(vdir, diag, count_lease, &f);
    if (f.count > 0)
        *expiry_p = f.left_s;
    *count_p = f.count;
    return st;
}

/* Tables, heartbeats and leases go once RELEASED exists. */
static void remove_contents(const char *vdir)
{
    DIR *d = opendir(vdir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strncmp(n, "slot-", 5) != 0 && strncmp(n, "hb-", 3) != 0 &&
            strncmp(n, LEASE_PREFIX, strlen(LEASE_PREFIX)) != 0)
            continue;
        char path[PATH_MAX];
        rs__file_dir_join(vdir, n, path);
        unlink(path);
    }
    closedir(d);
}

static rs_status_t do_release(const char *vdir, rs__dir_request_t *req,
                              rs_diag_t *diag)
{
    char holder[PATH_MAX];
    double left = 0;
    size_t live = 0;
    if (released(vdir))
        return RS_OK;
    rs_status_t st = live_leases(vdir, diag, holder, &left, &live);
    if (st != RS_OK)
        return st;
    if (live > 0 && !req->force)
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s' "
                            "cannot be released: leased by '%s' for %.2f s "
                            "more (%zu live lease%s)", (long long)req->version,
                            req->model, holder, left, live,
                            live == 1 ? "" : "s");
    st = rs__file_dir_replace(vdir, RS_FDIR_RELEASED, req->by ? req->by : "",
                          req->by ? strlen(req->by) : 0, diag);
    if (st == RS_OK)
        remove_contents(vdir);
    if (st == RS_OK)
        req->count = live; /* dropped by force (abandon) */
    return st;
}

rs_status_t rs__file_dir_release(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    return rs__file_dir_locked(dir, req, 1, diag, do_release);
}

typedef struct lease_list {
    rs__dir_request_t *req;
    size_t cap;
} lease_list_t;

static rs_status_t list_lease(void *ctx, const char *holder, uint64_t epoch,
                              double left_s, rs_diag_t *diag)
{
    lease_list_t *list = ctx;
    rs__dir_request_t *req = list->req;
    if (strlen(holder) > RS_DIR_NAME_MAX)
        return RS_OK; /* not a name a receiver could have taken */
    if (req->nleases == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 8;
        rs_dir_lease_info_t *v = realloc(req->leases, cap * sizeof(*v));
        if (v == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
        req->leases = v;
        list->cap = cap;
    }
    rs_dir_lease_info_t *l = &req->leases[req->nleases++];
    snprintf(l->holder, sizeof(l->holder), "%s", holder);
    l->epoch = epoch;
    l->left_s = left_s;
    return RS_OK;
}

/* Every live lease: holder, epoch, seconds left. */
static rs_status_t do_leases(const char *vdir, rs__dir_request_t *req,
                             rs_diag_t *diag)
{
    lease_list_t list = {req, 0};
    return each_live_lease(vdir, diag, list_lease, &list);
}

rs_status_t rs__file_dir_leases(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    return rs__file_dir_locked(dir, req, 1, diag, do_leases);
}
