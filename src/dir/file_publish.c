/* Publishing in the file:DIR backend: a slot's table is written to a
 * temporary file and linked to its final name, so of racing publishers of
 * one slot exactly one wins and the others compare bytes (identical replay
 * or conflict). Under the version lock, the publisher that completes the
 * set creates READY. Also heartbeats, reads and per-slot status. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/diag.h"
#include "dir/file_impl.h"

static rs_status_t check_range(const rs_dir_req_t *req,
                               const rs_version_info_t *info, rs_diag_t *diag)
{
    if (req->slot >= info->slots)
        return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s' has "
                            "%lld slots: slot %lld is out of range",
                            (long long)req->version, req->model,
                            (long long)info->slots, (long long)req->slot);
    return RS_OK;
}

static rs_status_t refuse_released(const rs_dir_req_t *req, rs_diag_t *diag)
{
    return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s' is "
                        "released: slot %lld cannot be published",
                        (long long)req->version, req->model,
                        (long long)req->slot);
}

static int is_released(const char *vdir)
{
    char path[PATH_MAX];
    rs__fdir_join(vdir, RS_FDIR_RELEASED, path);
    return rs__fdir_exists(path);
}

/* A slot already holds a table: the same bytes are a replay. */
static rs_status_t compare_replay(const char *path, const rs_dir_req_t *req,
                                  rs_diag_t *diag)
{
    char *old = NULL;
    size_t len = 0;
    int absent;
    rs_status_t st = rs__fdir_read(path, RS_DIR_TABLE_MAX, diag, &absent,
                                   &old, &len);
    if (st != RS_OK)
        return st;
    size_t k = 0;
    while (!absent && k < len && k < req->len &&
           old[k] == ((const char *)req->table)[k])
        k++;
    free(old);
    if (!absent && k == len && len == req->len)
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s': "
                        "conflicting replay for slot %lld (published table "
                        "has %zu bytes, this one %zu; first difference at "
                        "byte %zu)", (long long)req->version, req->model,
                        (long long)req->slot, len, req->len, k);
}

/* Any publisher that sees every table creates READY; O_EXCL makes the
 * creation happen once, and the lock orders it after the last link. */
static rs_status_t mark_ready(const char *vdir, int64_t slots,
                              rs_diag_t *diag)
{
    int64_t count;
    char path[PATH_MAX];
    rs_status_t st = rs__fdir_scan_slots(vdir, slots, NULL, diag, &count);
    if (st != RS_OK || count < slots)
        return st;
    rs__fdir_join(vdir, RS_FDIR_READY, path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST)
        return RS_OK;
    if (fd < 0)
        return rs__diag_set(diag, RS_ERR_IO, "cannot create %s: %s", path,
                            strerror(errno));
    fsync(fd);
    close(fd);
    rs__fdir_sync_dir(vdir);
    return RS_OK;
}

/* Under the lock: link the written table into place (or compare), record
 * the publish as a heartbeat, and mark READY when the set is complete. */
static rs_status_t place(const char *vdir, const char *tmp,
                         const rs_dir_req_t *req, int64_t slots,
                         rs_diag_t *diag)
{
    char name[64], final[PATH_MAX];
    rs__fdir_slot_name(req->slot, name);
    rs__fdir_join(vdir, name, final);
    if (is_released(vdir))
        return refuse_released(req, diag);
    rs_status_t st = RS_OK;
    if (link(tmp, final) == 0)
        rs__fdir_sync_dir(vdir);
    else if (errno == EEXIST)
        st = compare_replay(final, req, diag);
    else
        st = rs__diag_set(diag, RS_ERR_IO, "cannot create %s: %s", final,
                          strerror(errno));
    if (st == RS_OK) {
        rs__fdir_hb_name(req->slot, name);
        st = rs__fdir_write_time(vdir, name, rs__fdir_now(), diag);
    }
    if (st == RS_OK)
        st = mark_ready(vdir, slots, diag);
    return st;
}

rs_status_t rs__fdir_publish(rs_dir_h dir, rs_dir_req_t *req, rs_diag_t *diag)
{
    rs_version_info_t info;
    char vdir[PATH_MAX], tmp[PATH_MAX], name[64];
    int lock = -1;
    rs_status_t st = rs__fdir_existing(dir, req, diag, &info);
    if (st == RS_OK)
        st = check_range(req, &info, diag);
    if (st == RS_OK && info.state == RS_VERSION_RELEASED)
        st = refuse_released(req, diag);
    if (st == RS_OK)
        st = rs__fdir_path(dir, req, NULL, diag, vdir);
    if (st != RS_OK)
        return st;
    rs__fdir_slot_name(req->slot, name);
    /* the bytes are written and synced before the lock is taken */
    st = rs__fdir_write_tmp(vdir, name, req->table, req->len, diag, tmp);
    if (st != RS_OK)
        return st;
    st = rs__fdir_lock(vdir, diag, &lock);
    if (st == RS_OK)
        st = place(vdir, tmp, req, info.slots, diag);
    rs__fdir_unlock(lock);
    unlink(tmp);
    return st;
}

/* Under the lock: a slot without a table (never published, or removed)
 * has nothing to keep alive. */
static rs_status_t beat(const char *vdir, const rs_dir_req_t *req,
                        rs_diag_t *diag)
{
    char name[64], table[PATH_MAX];
    rs__fdir_slot_name(req->slot, name);
    rs__fdir_join(vdir, name, table);
    if (!rs__fdir_exists(table))
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s': "
                            "slot %lld has no table (never published, or "
                            "lost)", (long long)req->version, req->model,
                            (long long)req->slot);
    rs__fdir_hb_name(req->slot, name);
    return rs__fdir_write_time(vdir, name, rs__fdir_now(), diag);
}

rs_status_t rs__fdir_heartbeat(rs_dir_h dir, rs_dir_req_t *req,
                               rs_diag_t *diag)
{
    rs_version_info_t info;
    char vdir[PATH_MAX];
    int lock = -1;
    rs_status_t st = rs__fdir_existing(dir, req, diag, &info);
    if (st == RS_OK)
        st = check_range(req, &info, diag);
    if (st == RS_OK)
        st = rs__fdir_path(dir, req, NULL, diag, vdir);
    if (st == RS_OK)
        st = rs__fdir_lock(vdir, diag, &lock);
    /* a heartbeat racing the release is harmless and writes nothing */
    if (st == RS_OK && !is_released(vdir))
        st = beat(vdir, req, diag);
    rs__fdir_unlock(lock);
    return st;
}

static rs_status_t not_ready(const rs_dir_req_t *req,
                             const rs_version_info_t *info, rs_diag_t *diag)
{
    return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s' is "
                        "%s (%lld of %lld slots published): tables are read "
                        "only from READY versions", (long long)req->version,
                        req->model, rs__dir_state_name(info->state),
                        (long long)info->published, (long long)info->slots);
}

rs_status_t rs__fdir_read_slot(rs_dir_h dir, rs_dir_req_t *req,
                               rs_diag_t *diag)
{
    rs_version_info_t info;
    char path[PATH_MAX], name[64];
    rs_status_t st = rs__fdir_existing_ready(dir, req, diag, &info);
    if (st == RS_OK && info.state != RS_VERSION_READY)
        st = not_ready(req, &info, diag);
    if (st == RS_OK)
        st = check_range(req, &info, diag);
    rs__fdir_slot_name(req->slot, name);
    if (st == RS_OK)
        st = rs__fdir_path(dir, req, name, diag, path);
    if (st != RS_OK)
        return st;
    int absent;
    char *data = NULL;
    size_t len = 0;
    st = rs__fdir_read(path, RS_DIR_TABLE_MAX, diag, &absent, &data, &len);
    if (st == RS_OK && absent) /* released (or deleted) since the lookup */
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s': "
                            "slot %lld's table vanished while it was read "
                            "(released, or removed from the directory)",
                            (long long)req->version, req->model,
                            (long long)req->slot);
    if (st != RS_OK)
        return st;
    req->data = data;
    req->data_len = len;
    return RS_OK;
}

rs_status_t rs__fdir_slot_status(rs_dir_h dir, rs_dir_req_t *req,
                                 rs_diag_t *diag)
{
    char vdir[PATH_MAX], path[PATH_MAX], name[64];
    int64_t n = req->info.slots, count;
    rs_status_t st = rs__fdir_path(dir, req, NULL, diag, vdir);
    if (st == RS_OK)
        st = rs__fdir_scan_slots(vdir, n, req->present, diag, &count);
    double now = rs__fdir_now();
    for (int64_t i = 0; st == RS_OK && i < n; i++) {
        int absent;
        double t = 0;
        rs__fdir_hb_name(i, name);
        rs__fdir_join(vdir, name, path);
        st = rs__fdir_read_time(path, diag, &absent, &t);
        req->age[i] = absent ? -1.0 : (now > t ? now - t : 0.0);
    }
    return st;
}
