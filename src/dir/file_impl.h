/* Shared pieces of the file:DIR directory backend: the layout of a version
 * directory (DIR/<model>/<version>/...), atomic file writes, whole-file
 * reads, the per-version lock and the wall clock all publishers share. */
#ifndef RS_DIR_FILE_IMPL_H
#define RS_DIR_FILE_IMPL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "dir/dir_impl.h"

#define RS_FDIR_META "meta"
#define RS_FDIR_READY "READY"
#define RS_FDIR_RELEASED "RELEASED"
#define RS_FDIR_LOCK "lock"
#define RS_FDIR_META_FORMAT "reshard.dir.v1"

typedef struct rs__file_dir {
    char root[PATH_MAX];
} rs__file_dir_t;

/* A version's directory and, when name != NULL, a file inside it. */
rs_status_t rs__file_dir_path(rs_dir_h dir, const rs__dir_request_t *req,
                          const char *name, rs_diag_t *diag,
                          char out[PATH_MAX]);

/* dir/name into out. Names are bounded (RS_DIR_NAME_MAX) and the root's
 * length is checked at open, so every join fits. */
void rs__file_dir_join(const char *dir, const char *name, char out[PATH_MAX]);

/* Seconds since the epoch (CLOCK_REALTIME): every process on the machine,
 * and every machine on a time-synchronised shared filesystem, agrees. */
double rs__file_dir_now(void);

/* 1 if the path exists, 0 if not. */
int rs__file_dir_exists(const char *path);

/* Writes data to a new temporary file in dir (fsynced); its path goes to
 * tmp. The caller renames or links it into place and unlinks it. */
rs_status_t rs__file_dir_write_tmp(const char *dir, const char *name,
                               const void *data, size_t len, rs_diag_t *diag,
                               char tmp[PATH_MAX]);

/* Replaces dir/name atomically with data (temporary file, fsync, rename). */
rs_status_t rs__file_dir_replace(const char *dir, const char *name,
                             const void *data, size_t len, rs_diag_t *diag);

/* Flushes a directory's entries (after a rename, link or create). */
void rs__file_dir_sync_dir(const char *dir);

/* Reads a whole file (NUL terminated, not counted). *absent_p = 1 and
 * RS_OK, data untouched, when the file does not exist. */
rs_status_t rs__file_dir_read(const char *path, size_t limit, rs_diag_t *diag,
                          int *absent_p, char **data_p, size_t *len_p);

/* Reads a file holding one decimal time; *absent_p as rs__file_dir_read. */
rs_status_t rs__file_dir_read_time(const char *path, rs_diag_t *diag,
                               int *absent_p, double *t_p);

/* Writes a file holding one decimal time, atomically. */
rs_status_t rs__file_dir_write_time(const char *dir, const char *name, double t,
                                rs_diag_t *diag);

/* Takes the version's exclusive lock (flock on its lock file); release it
 * with rs__file_dir_unlock. RS_ERR_TIMEOUT when another process holds it for
 * more than 30 s (stopped while holding it). Only publishing a table,
 * leases, group records and the release take it, each for a few file
 * operations; heartbeats, the one periodic write, never do. */
rs_status_t rs__file_dir_lock(const char *vdir, rs_diag_t *diag, int *fd_p);
void rs__file_dir_unlock(int fd);

/* The version's slot count (0 when it was never created) and state as its
 * markers say; published counts slot tables (0 once released). */
rs_status_t rs__file_dir_lookup(rs_dir_h dir, const rs__dir_request_t *req,
                            rs_diag_t *diag, rs_version_info_t *info_p);

/* Like lookup, but a version that was never created is RS_ERR_INPUT. */
rs_status_t rs__file_dir_existing(rs_dir_h dir, const rs__dir_request_t *req,
                              rs_diag_t *diag, rs_version_info_t *info_p);

/* Like existing, but a READY version's tables are not counted (READY is
 * made after the last table, and tables go only after RELEASED, so they
 * are all there): O(1) instead of a listing, for the per-slot reads of a
 * pull, which would otherwise list the version once per slot. */
rs_status_t rs__file_dir_existing_ready(rs_dir_h dir, const rs__dir_request_t *req,
                                    rs_diag_t *diag, rs_version_info_t *info_p);

/* Runs fn on an existing version's directory under its lock (the version
 * looked up as rs__file_dir_existing, or with count_ready 0 as
 * rs__file_dir_existing_ready). */
typedef rs_status_t (*rs__file_dir_locked_fn)(const char *vdir, rs__dir_request_t *req,
                                          rs_diag_t *diag);
rs_status_t rs__file_dir_locked(rs_dir_h dir, rs__dir_request_t *req, int count_ready,
                            rs_diag_t *diag, rs__file_dir_locked_fn fn);

/* Marks present[i] (when not NULL) for every slot table in vdir with
 * slot < n and counts them; a missing vdir has none. */
rs_status_t rs__file_dir_scan_slots(const char *vdir, int64_t n, uint8_t *present,
                                rs_diag_t *diag, int64_t *count_p);

/* File names inside a version directory: slot i's record, publisher P's
 * entry (digest line and table) in slot i, and P's heartbeat there. */
#define RS_FDIR_NAME_LEN (RS_DIR_NAME_MAX + 48)
void rs__file_dir_slot_name(int64_t slot, char out[RS_FDIR_NAME_LEN]);
void rs__file_dir_entry_name(int64_t slot, const char *publisher,
                         char out[RS_FDIR_NAME_LEN]);
void rs__file_dir_hb_name(int64_t slot, const char *publisher,
                      char out[RS_FDIR_NAME_LEN]);

/* A slot record: the slot's geometry key and its publishers in joining
 * order; written (under the version lock) after the entry it names. */
typedef struct rs__file_dir_slot {
    int present;
    char geometry[17];
    size_t n;
    char names[RS_DIR_PUBLISHERS_MAX][RS_DIR_NAME_MAX + 1];
} rs__file_dir_slot_t;

/* Reads slot `slot`'s record into rec (rec->present = 0 when absent).
 * RS_ERR_INPUT naming the file when it is not a record. */
rs_status_t rs__file_dir_slot_read(const char *vdir, int64_t slot,
                               rs_diag_t *diag, rs__file_dir_slot_t *rec);
/* Replaces slot `slot`'s record with rec, atomically. */
rs_status_t rs__file_dir_slot_write(const char *vdir, int64_t slot,
                                const rs__file_dir_slot_t *rec, rs_diag_t *diag);
/* The index of `publisher` in rec, or -1. */
int rs__file_dir_slot_find(const rs__file_dir_slot_t *rec, const char *publisher);

/* RS_ERR_INPUT when req->slot is not below the version's slot count. */
rs_status_t rs__file_dir_check_range(const rs__dir_request_t *req,
                                 const rs_version_info_t *info,
                                 rs_diag_t *diag);

/* Ops in file_publish.c, file_read.c and file_lease.c. */
rs__dir_op_t rs__file_dir_publish;
rs__dir_op_t rs__file_dir_heartbeat;
rs__dir_op_t rs__file_dir_read_slot;
rs__dir_op_t rs__file_dir_slot_status;
rs__dir_op_t rs__file_dir_lease;
rs__dir_op_t rs__file_dir_unlease;
rs__dir_op_t rs__file_dir_release;
rs__dir_op_t rs__file_dir_leases;
/* Group records (file_group.c): DIR/<model>/<version>/group-<name>. */
rs__dir_op_t rs__file_dir_group;
/* Who released the version (the RELEASED marker's name); "" when it is
 * not released or no name was recorded. */
void rs__file_dir_released_by(const char *vdir, char out[RS_DIR_NAME_MAX + 1]);
/* Cuts records (file_cuts.c): DIR/<model>/cuts/<holder>. */
/* Geometry documents of split entries (file_geometry.c). */
rs__dir_op_t rs__file_dir_geometry_put;
rs__dir_op_t rs__file_dir_geometry_get;
rs__dir_op_t rs__file_dir_put_cuts;
rs__dir_op_t rs__file_dir_read_cuts;
rs__dir_op_t rs__file_dir_list_cuts;
rs__dir_op_t rs__file_dir_drop_cuts;

#endif
