/* The backend ops table behind rs_dir_h and the request record every op
 * takes. dir.c parses the URL, validates arguments once and dispatches;
 * backends (file.c, redis.c) only implement storage and atomicity. */
#ifndef RS_DIR_DIR_IMPL_H
#define RS_DIR_DIR_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/dir.h"

/* Limits shared by both backends (checked in dir.c). */
#define RS_DIR_SLOTS_MAX ((int64_t)1 << 20)
#define RS_DIR_TABLE_MAX ((size_t)256 << 20)
/* Lease epochs stay exact in a Lua number (a double) */
#define RS_DIR_EPOCH_MAX ((uint64_t)1 << 53)

/* One request: the inputs an op needs (already validated) and the outputs
 * it fills on success. One record for every op keeps a single signature, so
 * one stub can stand for any op a backend lacks. */
typedef struct rs__dir_request {
    const char *model;
    int64_t version;
    int64_t slot;        /* publish, heartbeat, read */
    const char *publisher; /* publish, heartbeat */
    char geometry[17];   /* publish: the geometry key, 16 hex digits */
    int64_t slots;       /* create */
    const void *table;   /* publish: the encoded entry (rs__dir_entry_encode) */
    size_t len;          /* publish */
    const char *holder;  /* lease, unlease */
    double ttl_s;        /* lease */
    uint64_t epoch;      /* lease: 0 takes a new lease, else renews this
                          * epoch; on success the lease's epoch */
    int force;           /* release: drop live leases (abandon) */

    /* lookup: state 0 when the version does not exist */
    rs_version_info_t info;
    /* slot_status: caller-provided arrays of info.slots entries; age is
     * seconds since the slot's last heartbeat or publish, < 0 if none */
    uint8_t *present;
    double *age;
    /* read: every publisher of the slot, in joining order, each `table`
     * holding the stored entry (header and table, checked by dir.c) */
    rs_dir_entry_t *entries;
    size_t nentries;
    /* list (ascending); release: live leases dropped by force */
    rs_version_info_t *infos;
    size_t count;
    /* put_cuts: holder, table and len are the record, generation its
     * digest; read_cuts: with holder NULL every record of the model (in
     * any order, sorted by dir_cuts.c), else that holder's (none when it
     * has no record), each with its generation; drop_cuts: holder */
    rs_dir_cuts_record_t *cuts;
    size_t ncuts;
    uint64_t generation;
    /* list_cuts: every holder's generation and size, in any order */
    rs_dir_cuts_stamp_t *stamps;
    size_t nstamps;
    /* release: who releases (a name, stored with RELEASED); lookup and
     * lease: who released the version, "" when not released or not
     * recorded */
    const char *by;
    char released_by[RS_DIR_NAME_MAX + 1];
    /* group: the group record of `group` in the version (dir_group.c
     * owns its format). With `table` NULL the op only reads; else it
     * replaces the record by `table` (len bytes) when the stored record is
     * `expect` (NULL: when there is none), atomically, and sets `swapped`.
     * Either way `record` is the record stored after the op (malloc'd,
     * NUL-terminated; NULL when there is none). The version must exist. */
    const char *group;
    const char *expect;
    /* leases: the live leases, in any order (sorted by dir.c) */
    rs_dir_lease_info_t *leases;
    size_t nleases;
    char *record;
    int swapped;
    /* geometry_put, geometry_get (split entries, dir_split.c): the
     * geometry document of (slot, publisher). put: `doc` (doc_len bytes;
     * NULL: only compare) is stored with digest `generation` unless the
     * stored document has that digest already; `swapped` 1 when it was
     * written, -1 when `doc` was NULL and the stored one differs or is
     * missing. get: `record` (malloc'd, NUL-terminated, record_len bytes)
     * the stored document and `generation` the digest stored with it;
     * `record` NULL when there is none. Neither needs the version. */
    const void *doc;
    size_t doc_len;
    size_t record_len;
} rs__dir_request_t;

/* Every request op has this signature; backends declare theirs with it
 * (`rs__dir_op_t rs__file_dir_publish;`). */
typedef rs_status_t rs__dir_op_t(rs_dir_h dir, rs__dir_request_t *req,
                                rs_diag_t *diag);
typedef rs__dir_op_t *rs__dir_op_fn;

typedef struct rs__dir_ops {
    const char *name;
    /* `target` is the URL without its scheme ("DIR", "host:port") */
    rs_status_t (*open)(rs_dir_h dir, const char *target,
                        const rs_dir_params_t *params, rs_diag_t *diag);
    void (*close)(rs_dir_h dir);
    rs__dir_op_fn create;
    rs__dir_op_fn publish;
    rs__dir_op_fn heartbeat;
    rs__dir_op_fn lookup;
    rs__dir_op_fn slot_status;
    rs__dir_op_fn read;   /* every entry of a slot (req->entries) */
    rs__dir_op_fn list;
    rs__dir_op_fn lease;
    rs__dir_op_fn unlease;
    rs__dir_op_fn release;
    rs__dir_op_fn put_cuts;  /* model-wide cuts records (dir_cuts.c) */
    rs__dir_op_fn read_cuts;
    rs__dir_op_fn drop_cuts;
    rs__dir_op_fn list_cuts;
    rs__dir_op_fn group;     /* a group record's compare-and-swap */
    rs__dir_op_fn leases;    /* the live leases of a version */
    rs__dir_op_fn geometry_put; /* split entries' documents (dir_split.c) */
    rs__dir_op_fn geometry_get;
} rs__dir_ops_t;

#define RS_DIR_URL_SHOWN_MAX 512

struct rs_dir {
    const rs__dir_ops_t *ops;
    void *priv;      /* the backend's own state */
    int transient;   /* the last failure may pass (rs_dir_transient) */
    rs_dir_notice_cb notice;
    void *notice_ctx;
    const rs_cancel_t *cancel; /* stops the bounded waits (dir_wait.c) */
    char shown[RS_DIR_URL_SHOWN_MAX]; /* the URL, redacted, for messages */
    /* cuts records (with bytes) this handle returned, and their bytes */
    uint64_t cuts_read, cuts_read_bytes;
};

/* How many cuts records (and bytes of them) rs_dir_read_cuts and
 * rs_dir_read_cuts_of returned on this handle since it was opened: what
 * tests assert a publisher reads. */
void rs__dir_cuts_reads(rs_dir_h dir, uint64_t *records_p,
                        uint64_t *bytes_p);

/* For backends returning a record whose generation is a stored digest:
 * RS_ERR_VERIFY naming holder and model when the bytes do not match it. */
rs_status_t rs__dir_cuts_check(const rs__dir_request_t *req,
                               const rs_dir_cuts_record_t *rec,
                               rs_diag_t *diag);

/* Backends call this with the status of a failure that may pass (server
 * unreachable, connection lost, timeout); returns st. */
rs_status_t rs__dir_transient(rs_dir_h dir, rs_status_t st);

/* Shared stub for operations a backend does not support. */
rs_status_t rs__dir_unsupported(rs_dir_h dir, rs__dir_request_t *req,
                                rs_diag_t *diag);

/* The checks every public call makes of (dir, model, version), filling the
 * request's key; for dir_wait.c. */
rs_status_t rs__dir_start(rs_dir_h dir, const char *model, int64_t version,
                          rs_diag_t *diag, rs__dir_request_t *req);

/* Runs one backend op with the transient flag reset first; for
 * dir_wait.c. */
/* The listings: rs_dir_leases (`stamps` clear: the version's live leases
 * into *items_p) and rs_dir_list_cuts (set: the model's cuts stamps,
 * version 0). Checks the arguments as the public call does, runs the
 * backend's op and hands out what it listed, sorted by holder. */
rs_status_t rs__dir_listing(rs_dir_h dir, const char *model, int64_t version,
                            int stamps, rs_diag_t *diag, void **items_p,
                            size_t *count_p);
/* qsort's order of leases, cuts records and stamps: by holder name (the
 * first member of each). */
int rs__dir_by_holder(const void *a, const void *b);
rs_status_t rs__dir_call(rs_dir_h dir, rs__dir_op_fn op, rs__dir_request_t *req,
                         rs_diag_t *diag);

/* A stored entry: "rsd64:<16 hex> <16 hex geometry>\n" followed by the
 * table's bytes (entry.c). The caller frees *out_p. */
#define RS_DIR_ENTRY_HEADER 40
rs_status_t rs__dir_entry_encode(uint64_t geometry, const void *table,
                                 size_t len, rs_diag_t *diag, char **out_p);

/* Checks entry e (as a backend returned it) against its digest and leaves
 * only the table in it, with e->geometry set. RS_ERR_VERIFY naming the
 * publisher, slot, version and model when the bytes do not match. */
rs_status_t rs__dir_entry_decode(const rs__dir_request_t *req, rs_dir_entry_t *e,
                                 rs_diag_t *diag);

/* A split entry (dir_split.c): "rsd64:<16 hex> <16 hex geometry> split\n"
 * (the digest of the bytes after the line), then "rsd64:<16 hex> <n>\n"
 * (the geometry document's digest and size), then the insertion lines. An
 * earlier reader finds no newline at byte 39 and refuses the entry before
 * parsing anything. */
#define RS_DIR_SPLIT_HEADER 46
/* 1 when the stored entry e is a split one (by its first line). */
int rs__dir_entry_is_split(const rs_dir_entry_t *e);
/* Checks a split entry's digest and leaves only its insertion lines in e
 * (e->geometry set), the document it names in *split. RS_ERR_VERIFY naming
 * the publisher, slot, version and model as rs__dir_entry_decode. */
struct rs__dir_split;
rs_status_t rs__dir_split_decode(const rs__dir_request_t *req,
                                 rs_dir_entry_t *e,
                                 struct rs__dir_split *split,
                                 rs_diag_t *diag);

/* Decodes every entry of a read (req->entries): v1 entries whole, split
 * ones into their parts into splits[i], or, with splits NULL, spliced with
 * their geometry documents into whole tables (dir_split.c). */
rs_status_t rs__dir_decode_entries(rs_dir_h dir, rs__dir_request_t *req,
                                   struct rs__dir_split *splits,
                                   rs_diag_t *diag);

/* A geometry key as the backends store it: 16 lowercase hex digits. */
void rs__dir_geometry_hex(uint64_t geometry, char out[17]);

/* 1 for the characters of model, holder and publisher names
 * ([A-Za-z0-9._-]). */
int rs__dir_name_char(char c);

/* Name of a state as written in files, keys and messages. */
const char *rs__dir_state_name(rs_version_state_t state);

/* Checks a model, holder or publisher name: RS_ERR_INPUT naming `kind`
 * and what is wrong. */
rs_status_t rs__dir_check_name(const char *kind, const char *name,
                               rs_diag_t *diag);

/* Who a call without a name acts as: "<host>-<pid>" in the name
 * alphabet. */
void rs__dir_default_by(char out[RS_DIR_NAME_MAX + 1]);

/* " by 'NAME'" when req->released_by is set, else "" (into out). */
const char *rs__dir_by_text(const rs__dir_request_t *req, char *out, size_t cap);

/* Registered backends. */
extern const rs__dir_ops_t rs__dir_file;
extern const rs__dir_ops_t rs__dir_redis;

#endif
