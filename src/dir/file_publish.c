/* Publishing in the file:DIR backend. Each publisher of a slot has an
 * entry file `slot-<i>@<publisher>` (digest line and table), written to a
 * temporary file first; under the version lock the slot record (file_slot.c)
 * is checked for the geometry key, the entry is renamed into place
 * (replacing the publisher's own older entry), the record gains the
 * publisher, and the publisher that gives the last slot its first entry
 * creates READY. Also heartbeats (one file per publisher); reads are in
 * file_read.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/diag.h"
#include "dir/file_impl.h"

rs_status_t rs__file_dir_check_range(const rs__dir_request_t *req,
                                 const rs_version_info_t *info,
                                 rs_diag_t *diag)
{
    if (req->slot >= info->slots)
        return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s' has "
                            "%lld slots: slot %lld is out of range",
                            (long long)req->version, req->model,
                            (long long)info->slots, (long long)req->slot);
    return RS_OK;
}

static rs_status_t refuse_released(const rs__dir_request_t *req, rs_diag_t *diag)
{
    return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s' is "
                        "released: slot %lld cannot be published",
                        (long long)req->version, req->model,
                        (long long)req->slot);
}

static int is_released(const char *vdir)
{
    char path[PATH_MAX];
    rs__file_dir_join(vdir, RS_FDIR_RELEASED, path);
    return rs__file_dir_exists(path);
}

/* "p1", "p2" of a record, for messages. */
static void list_names(const rs__file_dir_slot_t *rec, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < rec->n && used + 1 < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s'%s'",
                                 i ? ", " : "", rec->names[i]);
}

/* A publisher may join (or rejoin) the slot its record describes. */
static rs_status_t check_join(const rs__file_dir_slot_t *rec,
                              const rs__dir_request_t *req, rs_diag_t *diag)
{
    char names[512];
    if (!rec->present)
        return RS_OK;
    list_names(rec, names, sizeof(names));
    if (strcmp(rec->geometry, req->geometry) != 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s': slot "
                            "%lld: conflicting geometry from publisher '%s' "
                            "(key %s; the slot's key is %s, published by "
                            "%s): the publishers of a slot must hold "
                            "identical shards (tensor names, dtypes, full "
                            "shapes, offsets, shapes)",
                            (long long)req->version, req->model,
                            (long long)req->slot, req->publisher,
                            req->geometry, rec->geometry, names);
    if (rs__file_dir_slot_find(rec, req->publisher) < 0 &&
        rec->n >= RS_DIR_PUBLISHERS_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s': slot "
                            "%lld already has %d publishers: '%s' cannot "
                            "join", (long long)req->version, req->model,
                            (long long)req->slot, RS_DIR_PUBLISHERS_MAX,
                            req->publisher);
    return RS_OK;
}

/* Adds the publisher to the record (a new slot takes the key). */
static rs_status_t join_record(const char *vdir, rs__file_dir_slot_t *rec,
                               const rs__dir_request_t *req, rs_diag_t *diag)
{
    if (rec->present && rs__file_dir_slot_find(rec, req->publisher) >= 0)
        return RS_OK;
    if (!rec->present) {
        memcpy(rec->geometry, req->geometry, sizeof(rec->geometry));
        rec->n = 0;
    }
    snprintf(rec->names[rec->n++], sizeof(rec->names[0]), "%s",
             req->publisher);
    return rs__file_dir_slot_write(vdir, req->slot, rec, diag);
}

/* Any publisher that sees every table creates READY; O_EXCL makes the
 * creation happen once, and the lock orders it after the last link. */
static rs_status_t mark_ready(const char *vdir, int64_t slots,
                              rs_diag_t *diag)
{
    int64_t count;
    char path[PATH_MAX];
    rs_status_t st = rs__file_dir_scan_slots(vdir, slots, NULL, diag, &count);
    if (st != RS_OK || count < slots)
        return st;
    rs__file_dir_join(vdir, RS_FDIR_READY, path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST)
        return RS_OK;
    if (fd < 0)
        return rs__diag_set(diag, RS_ERR_IO, "cannot create %s: %s", path,
                            strerror(errno));
    fsync(fd);
    close(fd);
    rs__file_dir_sync_dir(vdir);
    return RS_OK;
}

/* Under the lock: check the slot's key, move the written entry into
 * place (the publisher's own older entry goes), record the publisher and
 * the publish as a heartbeat, and mark READY when the set is complete. */
static rs_status_t place(const char *vdir, const char *tmp,
                         const rs__dir_request_t *req, int64_t slots,
                         rs_diag_t *diag)
{
    char name[RS_FDIR_NAME_LEN], final[PATH_MAX];
    rs__file_dir_slot_t rec;
    if (is_released(vdir))
        return refuse_released(req, diag);
    rs_status_t st = rs__file_dir_slot_read(vdir, req->slot, diag, &rec);
    if (st == RS_OK)
        st = check_join(&rec, req, diag);
    if (st != RS_OK)
        return st;
    rs__file_dir_entry_name(req->slot, req->publisher, name);
    rs__file_dir_join(vdir, name, final);
    if (rename(tmp, final) != 0)
        return rs__diag_set(diag, RS_ERR_IO, "cannot rename into %s: %s",
                            final, strerror(errno));
    rs__file_dir_sync_dir(vdir);
    st = join_record(vdir, &rec, req, diag);
    if (st == RS_OK) {
        rs__file_dir_hb_name(req->slot, req->publisher, name);
        st = rs__file_dir_write_time(vdir, name, rs__file_dir_now(), diag);
    }
    if (st == RS_OK)
        st = mark_ready(vdir, slots, diag);
    return st;
}

rs_status_t rs__file_dir_publish(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    rs_version_info_t info;
    char vdir[PATH_MAX], tmp[PATH_MAX], name[RS_FDIR_NAME_LEN];
    int lock = -1;
    rs_status_t st = rs__file_dir_existing(dir, req, diag, &info);
    if (st == RS_OK)
        st = rs__file_dir_check_range(req, &info, diag);
    if (st == RS_OK && info.state == RS_VERSION_RELEASED)
        st = refuse_released(req, diag);
    if (st == RS_OK)
        st = rs__file_dir_path(dir, req, NULL, diag, vdir);
    if (st != RS_OK)
        return st;
    rs__file_dir_entry_name(req->slot, req->publisher, name);
    /* the bytes are written and synced before the lock is taken */
    st = rs__file_dir_write_tmp(vdir, name, req->table, req->len, diag, tmp);
    if (st != RS_OK)
        return st;
    st = rs__file_dir_lock(vdir, diag, &lock);
    if (st == RS_OK)
        st = place(vdir, tmp, req, info.slots, diag);
    rs__file_dir_unlock(lock);
    unlink(tmp);
    return st;
}

/* A publisher without an entry in the slot (never published, or removed)
 * has nothing to keep alive. The slot record is replaced whole (rename),
 * so it reads consistently without the lock. */
static rs_status_t beat(const char *vdir, const rs__dir_request_t *req,
                        rs_diag_t *diag)
{
    char name[RS_FDIR_NAME_LEN];
    rs__file_dir_slot_t rec;
    rs_status_t st = rs__file_dir_slot_read(vdir, req->slot, diag, &rec);
    if (st != RS_OK)
        return st;
    if (!rec.present || rs__file_dir_slot_find(&rec, req->publisher) < 0)
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s': "
                            "slot %lld has no table of publisher '%s' (never "
                            "published, or lost)", (long long)req->version,
                            req->model, (long long)req->slot,
                            req->publisher);
    rs__file_dir_hb_name(req->slot, req->publisher, name);
    return rs__file_dir_write_time(vdir, name, rs__file_dir_now(), diag);
}

static void unbeat(const char *vdir, const rs__dir_request_t *req)
{
    char name[RS_FDIR_NAME_LEN], path[PATH_MAX];
    rs__file_dir_hb_name(req->slot, req->publisher, name);
    rs__file_dir_join(vdir, name, path);
    unlink(path);
}

rs_status_t rs__file_dir_heartbeat(rs_dir_h dir, rs__dir_request_t *req,
                               rs_diag_t *diag)
{
    rs_version_info_t info;
    char vdir[PATH_MAX];
    rs_status_t st = rs__file_dir_existing(dir, req, diag, &info);
    if (st == RS_OK)
        st = rs__file_dir_check_range(req, &info, diag);
    if (st == RS_OK)
        st = rs__file_dir_path(dir, req, NULL, diag, vdir);
    /* No version lock: a beat replaces the publisher's own file whole, and
     * every publisher beats every second or so, so a publisher stopped in
     * a beat (SIGSTOP, a debugger) would otherwise hold the lock that
     * other publishers, leases and the release need, for as long as it is
     * stopped. A heartbeat racing the release writes nothing that stays:
     * the release creates RELEASED before it removes heartbeats, so a beat
     * written before RELEASED existed is removed by it, and one that finds
     * RELEASED after writing takes itself back. */
    if (st == RS_OK && !is_released(vdir)) {
        st = beat(vdir, req, diag);
        if (st == RS_OK && is_released(vdir))
            unbeat(vdir, req);
    }
    return st;
}
