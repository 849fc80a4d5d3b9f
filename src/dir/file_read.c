/* Reading the file:DIR backend: every publisher's entry of a slot (as the
 * slot record lists them, with each publisher's heartbeat age) and the
 * per-slot status the bounded waits poll (a slot is present once it has a
 * record, and as fresh as its freshest publisher). Readers take no lock:
 * a record names only entries already in place, and an entry that
 * vanished meanwhile was released. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/file_impl.h"

static rs_status_t not_ready(const rs__dir_request_t *req,
                             const rs_version_info_t *info, rs_diag_t *diag)
{
    return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s' is "
                        "%s (%lld of %lld slots published): tables are read "
                        "only from READY versions", (long long)req->version,
                        req->model, rs__dir_state_name(info->state),
                        (long long)info->published, (long long)info->slots);
}

static rs_status_t vanished(const rs__dir_request_t *req, const char *publisher,
                            rs_diag_t *diag)
{
    return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s': slot "
                        "%lld's table of publisher '%s' vanished while it was "
                        "read (released, or removed from the directory)",
                        (long long)req->version, req->model,
                        (long long)req->slot, publisher);
}

/* Seconds since publisher `name`'s last heartbeat in the slot, < 0: none. */
static rs_status_t age_of(const char *vdir, int64_t slot, const char *name,
                          double now, rs_diag_t *diag, double *age_p)
{
    char file[RS_FDIR_NAME_LEN], path[PATH_MAX];
    int absent;
    double t = 0;
    rs__file_dir_hb_name(slot, name, file);
    rs__file_dir_join(vdir, file, path);
    rs_status_t st = rs__file_dir_read_time(path, diag, &absent, &t);
    if (st == RS_OK)
        *age_p = absent ? -1.0 : (now > t ? now - t : 0.0);
    return st;
}

/* Entry i of the record into e (its stored bytes, checked by dir.c). */
static rs_status_t read_entry(const char *vdir, const rs__dir_request_t *req,
                              const char *publisher, double now,
                              rs_diag_t *diag, rs_dir_entry_t *e)
{
    char file[RS_FDIR_NAME_LEN], path[PATH_MAX];
    int absent;
    snprintf(e->publisher, sizeof(e->publisher), "%s", publisher);
    rs__file_dir_entry_name(req->slot, publisher, file);
    rs__file_dir_join(vdir, file, path);
    rs_status_t st = rs__file_dir_read(path, RS_DIR_TABLE_MAX + RS_DIR_ENTRY_HEADER,
                                   diag, &absent, &e->table, &e->len);
    if (st == RS_OK && absent)
        return vanished(req, publisher, diag);
    if (st == RS_OK)
        st = age_of(vdir, req->slot, publisher, now, diag, &e->age_s);
    return st;
}

static rs_status_t read_entries(const char *vdir, rs__dir_request_t *req,
                                rs_diag_t *diag)
{
    rs__file_dir_slot_t rec;
    rs_status_t st = rs__file_dir_slot_read(vdir, req->slot, diag, &rec);
    if (st == RS_OK && !rec.present)
        return vanished(req, "(any)", diag);
    if (st != RS_OK)
        return st;
    req->entries = calloc(rec.n, sizeof(*req->entries));
    if (req->entries == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of "
                            "memory");
    double now = rs__file_dir_now();
    for (size_t i = 0; st == RS_OK && i < rec.n; i++) {
        st = read_entry(vdir, req, rec.names[i], now, diag, &req->entries[i]);
        req->nentries = i + 1; /* freed by the caller, also on error */
    }
    return st;
}

rs_status_t rs__file_dir_read_slot(rs_dir_h dir, rs__dir_request_t *req,
                               rs_diag_t *diag)
{
    rs_version_info_t info;
    char vdir[PATH_MAX];
    /* a READY version holds every slot: no directory scan per slot read */
    rs_status_t st = rs__file_dir_existing_ready(dir, req, diag, &info);
    if (st == RS_OK && info.state != RS_VERSION_READY)
        st = not_ready(req, &info, diag);
    if (st == RS_OK)
        st = rs__file_dir_check_range(req, &info, diag);
    if (st == RS_OK)
        st = rs__file_dir_path(dir, req, NULL, diag, vdir);
    if (st == RS_OK)
        st = read_entries(vdir, req, diag);
    return st;
}

/* A slot is as fresh as its freshest publisher. */
static rs_status_t slot_age(const char *vdir, int64_t slot, double now,
                            rs_diag_t *diag, double *age_p)
{
    rs__file_dir_slot_t rec;
    double best = -1.0;
    rs_status_t st = rs__file_dir_slot_read(vdir, slot, diag, &rec);
    for (size_t k = 0; st == RS_OK && k < rec.n; k++) {
        double age = -1.0;
        st = age_of(vdir, slot, rec.names[k], now, diag, &age);
        if (age >= 0 && (best < 0 || age < best))
            best = age;
    }
    *age_p = best;
    return st;
}

rs_status_t rs__file_dir_slot_status(rs_dir_h dir, rs__dir_request_t *req,
                                 rs_diag_t *diag)
{
    char vdir[PATH_MAX];
    int64_t n = req->info.slots, count;
    rs_status_t st = rs__file_dir_path(dir, req, NULL, diag, vdir);
    if (st == RS_OK)
        st = rs__file_dir_scan_slots(vdir, n, req->present, diag, &count);
    double now = rs__file_dir_now();
    for (int64_t i = 0; st == RS_OK && i < n; i++) {
        req->age[i] = -1.0;
        if (req->present[i])
            st = slot_age(vdir, i, now, diag, &req->age[i]);
    }
    return st;
}
