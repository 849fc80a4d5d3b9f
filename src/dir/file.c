/* The file:DIR directory backend: one directory per model and version
 * (DIR/<model>/<version>/) holding meta, slot tables, heartbeats, leases and
 * the READY and RELEASED markers (docs/formats.md, "Directory"). This file
 * opens the root, creates versions, answers lookups and lists; publishing
 * and leases are in file_publish.c and file_lease.c. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/diag.h"
#include "dir/file_impl.h"

/* mkdir -p: every missing component of path. */
static rs_status_t make_dirs(const char *path, rs_diag_t *diag)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return rs__diag_set(diag, RS_ERR_IO, "directory %s: cannot "
                                "create %s: %s", path, buf, strerror(errno));
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return rs__diag_set(diag, RS_ERR_IO, "directory %s: not a directory",
                            path);
    return RS_OK;
}

/* A receiver's root must exist: a mistyped path is never created. */
static rs_status_t check_root(const char *root, rs_diag_t *diag)
{
    struct stat st;
    if (stat(root, &st) != 0 && errno == ENOENT)
        return rs__diag_set(diag, RS_ERR_INPUT, "directory file:%s: no such "
                            "directory (receivers never create it; check "
                            "the path, or start a publisher first)", root);
    if (stat(root, &st) != 0)
        return rs__diag_set(diag, RS_ERR_IO, "directory file:%s: %s", root,
                            strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return rs__diag_set(diag, RS_ERR_INPUT, "directory file:%s: not a "
                            "directory", root);
    return RS_OK;
}

static rs_status_t file_open(rs_dir_h dir, const char *target,
                             const rs_dir_params_t *params, rs_diag_t *diag)
{
    size_t n = strlen(target);
    while (n > 1 && target[n - 1] == '/')
        n--;
    if (n == 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "directory URL 'file:': "
                            "expected file:DIR with a directory path");
    /* room for /<model>/<version>/.tmp-<pid>-<n>-lease-<holder> */
    if (n + 128 + 3 * (size_t)RS_DIR_NAME_MAX >= PATH_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "directory URL 'file:%s': "
                            "path too long", target);
    rs__file_dir_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of "
                            "memory");
    memcpy(f->root, target, n);
    f->root[n] = '\0';
    rs_status_t st = params->create ? make_dirs(f->root, diag)
                                    : check_root(f->root, diag);
    if (st != RS_OK) {
        free(f);
        return st;
    }
    dir->priv = f;
    return RS_OK;
}

static void file_close(rs_dir_h dir)
{
    free(dir->priv);
}

/* meta: {"format": "reshard.dir.v1", "slots": N}. N is bounded like at
 * creation: readers size per-slot arrays and walk every slot by it. */
static rs_status_t parse_meta(const char *path, const char *text, size_t len,
                              rs_diag_t *diag, int64_t *slots_p)
{
    json_error_t err;
    json_t *root = json_loadb(text, len, 0, &err);
    json_t *slots = json_object_get(root, "slots");
    json_t *format = json_object_get(root, "format");
    int ok = json_is_integer(slots) && json_integer_value(slots) >= 1 &&
             json_integer_value(slots) <= RS_DIR_SLOTS_MAX &&
             json_is_string(format) &&
             strcmp(json_string_value(format), RS_FDIR_META_FORMAT) == 0;
    if (ok)
        *slots_p = json_integer_value(slots);
    json_decref(root);
    if (!ok)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s: expected {\"format\": "
                            "\"%s\", \"slots\": N} with N in 1..%lld", path,
                            RS_FDIR_META_FORMAT, (long long)RS_DIR_SLOTS_MAX);
    return RS_OK;
}

static rs_status_t read_slots(const char *vdir, rs_diag_t *diag,
                              int64_t *slots_p)
{
    char path[PATH_MAX], *text = NULL;
    size_t len;
    int absent;
    rs__file_dir_join(vdir, RS_FDIR_META, path);
    rs_status_t st = rs__file_dir_read(path, 4096, diag, &absent, &text, &len);
    if (st != RS_OK)
        return st;
    *slots_p = 0;
    if (!absent)
        st = parse_meta(path, text, len, diag, slots_p);
    free(text);
    return st;
}

/* Marks present[i] for every slot table in vdir (slot < n); counts them. */
static rs_status_t scan_slots(const char *vdir, int64_t n, uint8_t *present,
                              rs_diag_t *diag, int64_t *count_p)
{
    DIR *d = opendir(vdir);
    if (d == NULL && errno == ENOENT) {
        *count_p = 0;
        return RS_OK;
    }
    if (d == NULL)
        return rs__diag_set(diag, RS_ERR_IO, "cannot list %s: %s", vdir,
                            strerror(errno));
    int64_t count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long slot;
        char canon[RS_FDIR_NAME_LEN];
        if (sscanf(e->d_name, "slot-%lld", &slot) != 1 || slot < 0 ||
            slot >= n)
            continue;
        rs__file_dir_slot_name(slot, canon); /* only our own spelling counts */
        if (strcmp(canon, e->d_name) != 0)
            continue;
        count++;
        if (present != NULL)
            present[slot] = 1;
    }
    closedir(d);
    *count_p = count;
    return RS_OK;
}

rs_status_t rs__file_dir_scan_slots(const char *vdir, int64_t n, uint8_t *present,
                                rs_diag_t *diag, int64_t *count_p)
{
    return scan_slots(vdir, n, present, diag, count_p);
}

/* The order of the looks matters. READY is created only after the last
 * table and tables are removed only after RELEASED, so: READY is looked at
 * before the tables are counted (a READY seen earlier implies a full
 * count), and RELEASED after (absent then, no table was removed yet). No
 * reader sees READY with a table missing. */
static rs_status_t lookup(rs_dir_h dir, const rs__dir_request_t *req,
                          int count_ready, rs_diag_t *diag,
                          rs_version_info_t *info_p)
{
    char vdir[PATH_MAX], marker[PATH_MAX];
    rs_version_info_t info = {.version = req->version};
    rs_status_t st = rs__file_dir_path(dir, req, NULL, diag, vdir);
    if (st == RS_OK)
        st = read_slots(vdir, diag, &info.slots);
    if (st != RS_OK || info.slots == 0) {
        if (st == RS_OK)
            *info_p = info; /* never created: state 0 */
        return st;
    }
    rs__file_dir_join(vdir, RS_FDIR_READY, marker);
    int ready = rs__file_dir_exists(marker);
    info.published = info.slots; /* READY: every table is there */
    if (!ready || count_ready)
        st = scan_slots(vdir, info.slots, NULL, diag, &info.published);
    if (st != RS_OK)
        return st;
    rs__file_dir_join(vdir, RS_FDIR_RELEASED, marker);
    info.state = ready ? RS_VERSION_READY : RS_VERSION_PENDING;
    if (rs__file_dir_exists(marker)) {
        info.state = RS_VERSION_RELEASED;
        info.published = 0;
    }
    *info_p = info;
    return RS_OK;
}

rs_status_t rs__file_dir_lookup(rs_dir_h dir, const rs__dir_request_t *req,
                            rs_diag_t *diag, rs_version_info_t *info_p)
{
    return lookup(dir, req, 1, diag, info_p);
}

static rs_status_t existing(rs_dir_h dir, const rs__dir_request_t *req,
                            int count_ready, rs_diag_t *diag,
                            rs_version_info_t *info_p)
{
    rs_version_info_t info;
    rs_status_t st = lookup(dir, req, count_ready, diag, &info);
    if (st != RS_OK)
        return st;
    if (info.state == 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s' was "
                            "never created", (long long)req->version,
                            req->model);
    *info_p = info;
    return RS_OK;
}

rs_status_t rs__file_dir_existing(rs_dir_h dir, const rs__dir_request_t *req,
                              rs_diag_t *diag, rs_version_info_t *info_p)
{
    return existing(dir, req, 1, diag, info_p);
}

rs_status_t rs__file_dir_existing_ready(rs_dir_h dir, const rs__dir_request_t *req,
                                    rs_diag_t *diag, rs_version_info_t *info_p)
{
    return existing(dir, req, 0, diag, info_p);
}

rs_status_t rs__file_dir_locked(rs_dir_h dir, rs__dir_request_t *req, int count_ready,
                            rs_diag_t *diag, rs__file_dir_locked_fn fn)
{
    rs_version_info_t info;
    char vdir[PATH_MAX];
    int lock = -1;
    rs_status_t st = existing(dir, req, count_ready, diag, &info);
    if (st == RS_OK)
        st = rs__file_dir_path(dir, req, NULL, diag, vdir);
    if (st == RS_OK)
        st = rs__file_dir_lock(vdir, diag, &lock);
    if (st == RS_OK)
        st = fn(vdir, req, diag);
    rs__file_dir_unlock(lock);
    return st;
}

static rs_status_t file_lookup(rs_dir_h dir, rs__dir_request_t *req,
                               rs_diag_t *diag)
{
    char vdir[PATH_MAX];
    rs_status_t st = rs__file_dir_lookup(dir, req, diag, &req->info);
    if (st == RS_OK && req->info.state == RS_VERSION_RELEASED &&
        rs__file_dir_path(dir, req, NULL, NULL, vdir) == RS_OK)
        rs__file_dir_released_by(vdir, req->released_by);
    return st;
}

static rs_status_t check_same_slots(const rs__dir_request_t *req, const char *vdir,
                                    rs_diag_t *diag)
{
    int64_t slots;
    rs_status_t st = read_slots(vdir, diag, &slots);
    if (st == RS_OK && slots != req->slots)
        st = rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s' exists "
                          "with %lld slots, not %lld", (long long)req->version,
                          req->model, (long long)slots, (long long)req->slots);
    return st;
}

/* meta is linked into place: of two racing creators exactly one writes it,
 * the other compares slot counts. */
static rs_status_t file_create(rs_dir_h dir, rs__dir_request_t *req,
                               rs_diag_t *diag)
{
    char vdir[PATH_MAX], tmp[PATH_MAX], meta[PATH_MAX], text[128];
    rs_status_t st = rs__file_dir_path(dir, req, NULL, diag, vdir);
    if (st == RS_OK)
        st = make_dirs(vdir, diag);
    if (st != RS_OK)
        return st;
    rs__file_dir_join(vdir, RS_FDIR_META, meta);
    if (rs__file_dir_exists(meta))
        return check_same_slots(req, vdir, diag);
    int n = snprintf(text, sizeof(text), "{\"format\": \"%s\", \"slots\": "
                     "%lld}\n", RS_FDIR_META_FORMAT, (long long)req->slots);
    st = rs__file_dir_write_tmp(vdir, RS_FDIR_META, text, (size_t)n, diag, tmp);
    if (st != RS_OK)
        return st;
    int rc = link(tmp, meta), err = errno;
    unlink(tmp);
    if (rc != 0 && err == EEXIST)
        return check_same_slots(req, vdir, diag);
    if (rc != 0)
        return rs__diag_set(diag, RS_ERR_IO, "cannot create %s: %s", meta,
                            strerror(err));
    rs__file_dir_sync_dir(vdir);
    return RS_OK;
}

/* Version directory names: decimal, no sign, no leading zero. */
static int parse_version(const char *name, int64_t *v_p)
{
    if (name[0] < '0' || name[0] > '9' || (name[0] == '0' && name[1] != '\0'))
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(name, &end, 10);
    if (*end != '\0' || errno != 0)
        return 0;
    *v_p = v;
    return 1;
}

static int cmp_info(const void *a, const void *b)
{
    int64_t x = ((const rs_version_info_t *)a)->version;
    int64_t y = ((const rs_version_info_t *)b)->version;
    return (x > y) - (x < y);
}

static rs_status_t list_add(rs_dir_h dir, rs__dir_request_t *req, int64_t v,
                            size_t *cap, rs_diag_t *diag)
{
    rs__dir_request_t one = *req;
    rs_version_info_t info;
    one.version = v;
    rs_status_t st = rs__file_dir_lookup(dir, &one, diag, &info);
    if (st != RS_OK || info.state == 0) /* 0: still being created */
        return st;
    if (req->count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        void *p = realloc(req->infos, ncap * sizeof(*req->infos));
        if (p == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of "
                                "memory");
        req->infos = p;
        *cap = ncap;
    }
    req->infos[req->count++] = info;
    return RS_OK;
}

static rs_status_t file_list(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    const rs__file_dir_t *f = dir->priv;
    char mdir[PATH_MAX];
    rs__file_dir_join(f->root, req->model, mdir);
    req->infos = NULL;
    req->count = 0;
    DIR *d = opendir(mdir);
    if (d == NULL)
        return errno == ENOENT ? RS_OK
                               : rs__diag_set(diag, RS_ERR_IO, "cannot list "
                                              "%s: %s", mdir, strerror(errno));
    size_t cap = 0;
    rs_status_t st = RS_OK;
    struct dirent *e;
    while (st == RS_OK && (e = readdir(d)) != NULL) {
        int64_t v;
        if (parse_version(e->d_name, &v))
            st = list_add(dir, req, v, &cap, diag);
    }
    closedir(d);
    if (st != RS_OK) {
        free(req->infos);
        req->infos = NULL;
        return st;
    }
    if (req->count > 1)
        qsort(req->infos, req->count, sizeof(*req->infos), cmp_info);
    return RS_OK;
}

const rs__dir_ops_t rs__dir_file = {
    .name = "file",
    .open = file_open,
    .close = file_close,
    .create = file_create,
    .publish = rs__file_dir_publish,
    .heartbeat = rs__file_dir_heartbeat,
    .lookup = file_lookup,
    .slot_status = rs__file_dir_slot_status,
    .read = rs__file_dir_read_slot,
    .list = file_list,
    .lease = rs__file_dir_lease,
    .unlease = rs__file_dir_unlease,
    .release = rs__file_dir_release,
    .put_cuts = rs__file_dir_put_cuts,
    .read_cuts = rs__file_dir_read_cuts,
    .drop_cuts = rs__file_dir_drop_cuts,
    .list_cuts = rs__file_dir_list_cuts,
    .group = rs__file_dir_group,
    .leases = rs__file_dir_leases,
    .geometry_put = rs__file_dir_geometry_put,
    .geometry_get = rs__file_dir_geometry_get,
};
