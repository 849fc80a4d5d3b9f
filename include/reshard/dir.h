/* The control plane: a directory of model versions. Publishers create a
 * version with a number of expected slots (trainer ranks) and publish
 * shard tables into them, one per publisher (a slot may have several:
 * data-parallel replicas with identical shards); the version becomes READY
 * atomically when the last slot gets its first publisher. Receivers wait
 * for READY, read every slot's tables (checked against the digest stored
 * with each), and hold leases that keep the version from being released. Backends:
 * "file:DIR" (embedded; one machine or a shared filesystem) and
 * "redis://[[user]:password@]host[:port][/][?timeout=S&password_file=F]"
 * (each operation atomic in a Lua script; without a password in the URL or
 * a password_file, the environment variable RESHARD_REDIS_PASSWORD is used
 * when set). No message, notice or error ever holds a password: URLs are
 * shown redacted (rs_dir_redact_url). No table byte passes through the data
 * plane and no byte of data through the directory.
 * Threads: a handle is used by one thread at a time (a hiredis context
 * belongs to one handle); open one per thread.
 * Handles of the same directory on several threads or processes are what
 * the atomic operations are for. A handle's notice callback runs on the
 * thread making the call. */
#ifndef RESHARD_DIR_H
#define RESHARD_DIR_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/cancel.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_dir *rs_dir_h;

typedef enum rs_version_state {
    RS_VERSION_PENDING = 1, /* some expected slots are missing */
    RS_VERSION_READY,       /* every slot present: tables are final */
    RS_VERSION_RELEASED,    /* released: tables may be gone */
} rs_version_state_t;

typedef struct rs_version_info {
    int64_t version;
    rs_version_state_t state;
    int64_t slots;       /* expected */
    int64_t published;   /* present */
} rs_version_info_t;

/* Receives notices about the directory's health (an outage began or
 * ended), one line of text without a newline; never an error a call also
 * returns, never a password. */
typedef void (*rs_dir_notice_cb)(void *ctx, const char *msg);

typedef struct rs_dir_params {
    size_t size; /* the caller's sizeof, set by rs_dir_params_init */
    /* file:DIR: create DIR when it is missing (default 1; publishers). 0:
     * a missing DIR is RS_ERR_INPUT "no such directory" (receivers, so a
     * mistyped path is never created). */
    int create;
    /* 1: a server that cannot be reached at open (refused, reset, timed
     * out) is not an error: the handle connects on its first call, and
     * every call until then fails with a transient error (default 0). An
     * unusable URL, a refused password or a missing file: DIR still fail. */
    int connect_later;
    /* Notices (outages of the directory seen by the bounded waits, and any
     * rs_dir_notice): NULL prints "reshard: <msg>" on stderr. */
    rs_dir_notice_cb notice;
    void *notice_ctx;
    /* Borrowed; NULL (default): none. Raised, rs_dir_wait_ready and
     * rs_dir_wait_released return RS_ERR_CANCELLED within RS_CANCEL_POLL_S
     * (a single look, timeout 0, is never cancelled). */
    const rs_cancel_t *cancel;
} rs_dir_params_t;

/* Fills *params with the defaults; `size` is the caller's sizeof (the
 * macro passes it), so a program built against older headers gets the
 * defaults it knew. The call taking the struct refuses a size below the
 * first version's or above this library's with RS_ERR_INVALID_ARG naming
 * the struct (docs/architecture.md, "Option structs"). */
RS_API void rs_dir_params_init_sized(rs_dir_params_t *params, size_t size);
#define rs_dir_params_init(p) rs_dir_params_init_sized((p), sizeof(*(p)))

/* Opens a directory by URL. RS_ERR_INPUT for a malformed URL or a missing
 * file: DIR when params->create is 0 ("no such directory", naming it);
 * RS_ERR_TRANSPORT when the backend cannot be reached (unless
 * params->connect_later) or refuses the password. params NULL: defaults. */
RS_API rs_status_t rs_dir_open_params(const char *url,
                                      const rs_dir_params_t *params,
                                      rs_diag_t *diag, rs_dir_h *dir_p);
/* rs_dir_open_params with the defaults. */
RS_API rs_status_t rs_dir_open(const char *url, rs_diag_t *diag,
                               rs_dir_h *dir_p);

/* Writes url into out (cap bytes, always terminated) with any password
 * replaced by "***": "redis://:***@host:port". Other URLs are copied. */
RS_API void rs_dir_redact_url(const char *url, char *out, size_t cap);

/* The URL this handle was opened with, redacted. */
RS_API const char *rs_dir_name(rs_dir_h dir);

/* 1 when the last failed call on this handle failed for a reason that may
 * pass by itself (server unreachable, connection refused, reset or lost, no
 * reply within the timeout, a file: lock held too long); 0 for permanent
 * failures (bad input, a refused password, no such directory, a reply that
 * makes no sense) and after a call that succeeded. */
RS_API int rs_dir_transient(rs_dir_h dir);

/* Sends one notice (printf format) through the handle's notice callback;
 * dir NULL (or no callback): "reshard: <msg>" on stderr. */
RS_API void rs_dir_notice(rs_dir_h dir, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
RS_API void rs_dir_close(rs_dir_h dir);

/* Creates version `version` of `model` expecting `slots` tables. Creating
 * an existing version with the same slot count succeeds (idempotent); with
 * another count it is RS_ERR_INPUT. */
RS_API rs_status_t rs_dir_create_version(rs_dir_h dir, const char *model,
                                         int64_t version, int64_t slots,
                                         rs_diag_t *diag);

/* Publishers, tables and replicas. A slot may be served by several
 * publishers (data-parallel replicas of a trainer rank, holding identical
 * shards). Each publisher of a slot has a name (its session, the same
 * alphabet as model names) and publishes its own table together with a
 * *geometry key*: a 64-bit key the publisher computes over everything its
 * table says except names, addresses, transport keys and digests (tensor
 * names, dtypes, full shapes, shard offsets and shapes). The first
 * publisher of a slot fixes the slot's key; every later one must bring the
 * same key. A version is READY once every slot has at least one publisher.
 *
 * The directory stores beside every table an rsd64 digest of its bytes
 * (computed here when publishing) and checks it when a table is read,
 * before the caller parses it: a table changed in the directory is refused
 * with RS_ERR_VERIFY, naming model, version, slot and publisher. */

/* Longest model, holder or publisher name. */
#define RS_DIR_NAME_MAX 128
/* Most publishers one slot accepts. */
#define RS_DIR_PUBLISHERS_MAX 64

/* Adds `publisher` to slot `slot` with its table (bytes, usually JSON) and
 * geometry key (the version must exist: rs_dir_create_version). A publisher
 * already in the slot replaces its own entry (a restarted rank serving the
 * same shards at new addresses; publishing the same bytes again is a
 * no-op replay). A geometry key other than the slot's is RS_ERR_INPUT
 * ("slot S: conflicting geometry from publisher 'P'", naming the key, the
 * slot's key and its publishers), as is a publisher beyond
 * RS_DIR_PUBLISHERS_MAX or a bad name. The call that gives the last slot
 * its first publisher makes the version READY in the same atomic step.
 * Publishing to a RELEASED version is RS_ERR_INPUT. O(table bytes). */
RS_API rs_status_t rs_dir_publish_as(rs_dir_h dir, const char *model,
                                     int64_t version, int64_t slot,
                                     const char *publisher, uint64_t geometry,
                                     const void *table, size_t len,
                                     rs_diag_t *diag);

/* The single-publisher form: publishes as publisher "default" with the
 * table's own digest as its geometry key, so a byte-identical replay
 * succeeds and a different table for the slot is RS_ERR_INPUT
 * ("conflicting geometry"). */
RS_API rs_status_t rs_dir_publish(rs_dir_h dir, const char *model,
                                  int64_t version, int64_t slot,
                                  const void *table, size_t len,
                                  rs_diag_t *diag);

/* Refreshes publisher `publisher`'s heartbeat in slot `slot`. A READY
 * version whose slots' heartbeats are all older than stale_s is reported
 * stale by rs_dir_wait_ready (a slot is as fresh as its freshest
 * publisher). A heartbeat of a released version succeeds and writes
 * nothing; of a publisher without a table in the slot (never published,
 * or lost by the directory) it is RS_ERR_INCOMPLETE, and of a version that
 * does not exist RS_ERR_INPUT: a publisher then publishes its table
 * again. */
RS_API rs_status_t rs_dir_heartbeat_as(rs_dir_h dir, const char *model,
                                       int64_t version, int64_t slot,
                                       const char *publisher,
                                       rs_diag_t *diag);
/* rs_dir_heartbeat_as for publisher "default". */
RS_API rs_status_t rs_dir_heartbeat(rs_dir_h dir, const char *model,
                                    int64_t version, int64_t slot,
                                    rs_diag_t *diag);

/* One publisher of a slot, as rs_dir_read_slot returns it. */
typedef struct rs_dir_entry {
    char publisher[RS_DIR_NAME_MAX + 1];
    uint64_t geometry;  /* the slot's geometry key */
    char *table;        /* the table's bytes, NUL-terminated (not counted) */
    size_t len;
    double age_s;       /* since its last heartbeat or publish; < 0: none */
} rs_dir_entry_t;

RS_API rs_status_t rs_dir_info(rs_dir_h dir, const char *model,
                               int64_t version, rs_diag_t *diag,
                               rs_version_info_t *info_p);

/* Waits until `version` is READY (version < 0: the newest READY version)
 * and no slot's heartbeat is older than stale_s (<= 0: no check). With
 * version < 0 and stale_s > 0, READY versions with a stale slot are skipped
 * in favour of the newest READY version whose publishers are all alive.
 * RS_ERR_TIMEOUT after timeout_s with a message saying which slots are
 * missing or stale. Transient directory errors (rs_dir_transient) are
 * retried until timeout_s, with a notice when the outage begins and one
 * when it ends; RS_ERR_TIMEOUT then names the outage. Permanent errors
 * return at once. RS_ERR_CANCELLED when the handle's cancel flag
 * (rs_dir_params_t.cancel) is raised, within RS_CANCEL_POLL_S. */
RS_API rs_status_t rs_dir_wait_ready(rs_dir_h dir, const char *model,
                                     int64_t version, double timeout_s,
                                     double stale_s, rs_diag_t *diag,
                                     rs_version_info_t *info_p);

/* Every publisher of slot `slot` of a READY version, in the order they
 * joined the slot (at least one). Each table's digest is checked before it
 * is returned: a table whose bytes no longer match is RS_ERR_VERIFY ("table
 * of publisher 'P' of slot S of version V of 'M' is corrupted"), and so is
 * an entry whose digest record is unreadable. RS_ERR_INCOMPLETE when the
 * version is not READY (or a table vanished: released meanwhile). The
 * caller frees the array with rs_dir_entries_free. O(slot's table bytes). */
RS_API rs_status_t rs_dir_read_slot(rs_dir_h dir, const char *model,
                                    int64_t version, int64_t slot,
                                    rs_diag_t *diag,
                                    rs_dir_entry_t **entries_p,
                                    size_t *count_p);
/* Frees what rs_dir_read_slot returned; accepts NULL. */
RS_API void rs_dir_entries_free(rs_dir_entry_t *entries, size_t count);

/* The table of slot `slot`'s first publisher (rs_dir_read_slot's first
 * entry), with the same checks; the caller frees *table_p. */
RS_API rs_status_t rs_dir_read(rs_dir_h dir, const char *model,
                               int64_t version, int64_t slot, rs_diag_t *diag,
                               void **table_p, size_t *len_p);

/* Versions of a model, ascending; the caller frees *infos_p. */
RS_API rs_status_t rs_dir_list(rs_dir_h dir, const char *model,
                               rs_diag_t *diag, rs_version_info_t **infos_p,
                               size_t *count_p);

/* Leases. A lease (holder, expiry) keeps a version from being released
 * while its holder may still read the version's memory. Every take starts a
 * new lease *epoch*: a number the directory hands out once per version
 * (1, 2, ...), so a lease taken again, after it lapsed or was dropped, never
 * has the epoch of the one before. Renewing by epoch is the proof of
 * continuity: it succeeds only while that very lease is live, so a holder
 * whose every renewal succeeded held the version without a gap, and the
 * version cannot have been released in between. */

/* Takes a fresh lease named `holder` on a version that is not RELEASED, for
 * ttl_s seconds, and sets *epoch_p to its epoch. A holder name is unique
 * among the version's live leases: while the name's lease is live the take
 * is RS_ERR_INPUT ("lease holder name 'H' is taken: another receiver holds
 * a live lease under it ..."), changing nothing; a lapsed or dropped
 * lease of the name is replaced. RS_ERR_INCOMPLETE when the version is
 * released (naming who released it), RS_ERR_INPUT when it was never
 * created or an argument is bad. */
RS_API rs_status_t rs_dir_lease_take(rs_dir_h dir, const char *model,
                                     int64_t version, const char *holder,
                                     double ttl_s, rs_diag_t *diag,
                                     uint64_t *epoch_p);

/* Renews lease `epoch` of `holder` for ttl_s seconds from now, in one
 * atomic step with the check that the lease is still continuous: held by
 * `holder`, of that epoch, not expired, on a version that is not RELEASED.
 * Otherwise RS_ERR_INCOMPLETE, changing nothing, with a message saying
 * which: "lapsed T s ago", "was taken again (now epoch N)", "is not held",
 * "is released". Other errors (RS_ERR_TRANSPORT, RS_ERR_IO, RS_ERR_TIMEOUT)
 * say nothing about the lease: it may still be live. */
RS_API rs_status_t rs_dir_lease_renew(rs_dir_h dir, const char *model,
                                      int64_t version, const char *holder,
                                      uint64_t epoch, double ttl_s,
                                      rs_diag_t *diag);

/* rs_dir_lease_take without the epoch. */
RS_API rs_status_t rs_dir_lease(rs_dir_h dir, const char *model,
                                int64_t version, const char *holder,
                                double ttl_s, rs_diag_t *diag);
RS_API rs_status_t rs_dir_unlease(rs_dir_h dir, const char *model,
                                  int64_t version, const char *holder,
                                  rs_diag_t *diag);

/* Releases a version: refused (RS_ERR_INCOMPLETE, naming a live holder)
 * while any lease is live; afterwards the state is RELEASED. Releasing a
 * released version succeeds; one never created is RS_ERR_INPUT. */
RS_API rs_status_t rs_dir_release(rs_dir_h dir, const char *model,
                                  int64_t version, rs_diag_t *diag);

/* Abandons a version: RELEASED whatever its leases (they are dropped), for
 * versions whose publishers or receivers died. Returns as rs_dir_release
 * otherwise; *dropped_p (may be NULL) is the number of live leases
 * dropped. */
RS_API rs_status_t rs_dir_abandon(rs_dir_h dir, const char *model,
                                  int64_t version, rs_diag_t *diag,
                                  size_t *dropped_p);

/* Waits until the version is RELEASED (publishers use it to know when
 * their memory may be unregistered). RS_ERR_TIMEOUT after timeout_s.
 * Transient directory errors are retried, and a cancel flag stops the
 * wait, as in rs_dir_wait_ready. */
RS_API rs_status_t rs_dir_wait_released(rs_dir_h dir, const char *model,
                                        int64_t version, double timeout_s,
                                        rs_diag_t *diag);

/* Cut announcements (docs/cut-aligned.md): a receiver
 * announces the cut points its capture needs (a reshard.cuts.v1 document,
 * docs/formats.md) as one record per (model, holder), and publishers in
 * cut-aligned staging bring their copy of the model's records up to date
 * before staging a version. One record per holder, each written whole:
 * receivers never read-modify-write a shared record, so concurrent
 * announcements cannot lose each other. Records belong to the model, not to a version: they
 * survive versions and releases until dropped (rs_dir_drop_cuts). The
 * directory stores the bytes without parsing them; the publisher parses
 * (and reports a record it cannot use).
 *
 * Generations. Beside each record the directory keeps its *generation*:
 * the rsd64 digest of the record's bytes, stored with the record in the
 * same atomic step (docs/formats.md), so it changes exactly when the bytes
 * change, and writing the same bytes again writes nothing. A reader lists
 * holders with their generations and sizes without reading any record
 * (rs_dir_list_cuts) and reads only the records whose generation it has
 * not seen (rs_dir_read_cuts_of). A record stored around this API
 * without a generation gets one derived from what the backend knows of it
 * (file: its inode, size and modification time; redis: a SHA-1 of its
 * bytes taken on the server), which changes when it is replaced. */

/* Largest cuts record (16 MiB): DeepSeek-V3's ~47,000 tensors with a few
 * cuts each take about 3 MB. */
#define RS_DIR_CUTS_MAX ((size_t)16 << 20)

/* One holder's record, as rs_dir_read_cuts returns it. */
typedef struct rs_dir_cuts_record {
    char holder[RS_DIR_NAME_MAX + 1];
    /* the record's bytes, NUL-terminated (not counted); NULL when the
     * stored record is larger than RS_DIR_CUTS_MAX (written around this
     * API): `len` is then its size and the caller reports it */
    char *json;
    size_t len;
    /* the generation of these bytes, read in the same step as them */
    uint64_t generation;
} rs_dir_cuts_record_t;

/* One holder's record as rs_dir_list_cuts lists it: no bytes. */
typedef struct rs_dir_cuts_stamp {
    char holder[RS_DIR_NAME_MAX + 1];
    uint64_t generation;
    size_t len; /* the record's size in bytes (above the cap too) */
} rs_dir_cuts_stamp_t;

/* Writes (or replaces) `holder`'s cuts record for `model`: len bytes (at
 * most RS_DIR_CUTS_MAX), atomically with its generation (a reader sees the
 * old record or the new one, never a mix). Writing the bytes the record
 * already holds changes nothing (its generation stays, no file or key is
 * written). Errors: RS_ERR_INPUT for a bad model or holder
 * name or a record above the cap ("cuts record of holder 'H' for 'M' is N
 * bytes, more than the 16777216-byte limit"), RS_ERR_INVALID_ARG for NULL
 * bytes with len > 0; the directory's errors (RS_ERR_IO, RS_ERR_TRANSPORT,
 * transient ones flagged by rs_dir_transient). O(len). */
RS_API rs_status_t rs_dir_put_cuts(rs_dir_h dir, const char *model,
                                   const char *holder, const void *json,
                                   size_t len, rs_diag_t *diag);

/* Every cuts record of `model`, in holder name order (strcmp); none is not
 * an error (*count_p = 0). The caller frees the array with
 * rs_dir_cuts_free. Errors: RS_ERR_INPUT for a bad model name,
 * RS_ERR_VERIFY for a record whose bytes do not match the generation
 * stored with it (changed behind the API's back: "cuts record of holder
 * 'H' for 'M' is corrupted"), the directory's errors. O(records'
 * bytes). */
RS_API rs_status_t rs_dir_read_cuts(rs_dir_h dir, const char *model,
                                    rs_diag_t *diag,
                                    rs_dir_cuts_record_t **records_p,
                                    size_t *count_p);

/* Every holder of a cuts record of `model` with its record's generation
 * and size, in holder name order, reading no record: O(holders) small
 * reads (file:), one script returning O(holders) short strings (redis).
 * None is not an error (*count_p = 0). The caller frees *stamps_p with
 * free(). Errors: RS_ERR_INPUT for a bad model name, the directory's
 * errors. */
RS_API rs_status_t rs_dir_list_cuts(rs_dir_h dir, const char *model,
                                    rs_diag_t *diag,
                                    rs_dir_cuts_stamp_t **stamps_p,
                                    size_t *count_p);

/* The cuts records of the `n` named holders (in holder name order; a
 * holder without a record, dropped since a listing, is left out), each
 * with the generation of the bytes returned, as rs_dir_read_cuts returns
 * them. Errors as rs_dir_read_cuts, and RS_ERR_INPUT for a bad holder
 * name, RS_ERR_INVALID_ARG for NULL holders with n > 0. O(the named
 * records' bytes). */
RS_API rs_status_t rs_dir_read_cuts_of(rs_dir_h dir, const char *model,
                                       const char *const *holders, size_t n,
                                       rs_diag_t *diag,
                                       rs_dir_cuts_record_t **records_p,
                                       size_t *count_p);
/* Frees what rs_dir_read_cuts or rs_dir_read_cuts_of returned; accepts
 * NULL. */
RS_API void rs_dir_cuts_free(rs_dir_cuts_record_t *records, size_t count);

/* Removes `holder`'s cuts record of `model` (a receiver gone for good);
 * removing a record that does not exist succeeds. Errors as
 * rs_dir_put_cuts. */
RS_API rs_status_t rs_dir_drop_cuts(rs_dir_h dir, const char *model,
                                    const char *holder, rs_diag_t *diag);

/* Releasing under a name. rs_dir_release_as and rs_dir_abandon_as record
 * `by` (a name of the holder alphabet: receivers pass their lease holder)
 * with RELEASED, and every later refusal because the version is released
 * names it ("version 2 of 'M' was released by 'receiver-1-...'").
 * rs_dir_release and rs_dir_abandon record "<host>-<pid>" of the caller. */
RS_API rs_status_t rs_dir_release_as(rs_dir_h dir, const char *model,
                                     int64_t version, const char *by,
                                     rs_diag_t *diag);
RS_API rs_status_t rs_dir_abandon_as(rs_dir_h dir, const char *model,
                                     int64_t version, const char *by,
                                     rs_diag_t *diag, size_t *dropped_p);

/* Live leases of a version: holder, epoch and seconds left, in holder
 * name order; none is not an error. A released version has none. The
 * caller frees *leases_p with free(). RS_ERR_INPUT for a version never
 * created. */
typedef struct rs_dir_lease_info {
    char holder[RS_DIR_NAME_MAX + 1];
    uint64_t epoch;
    double left_s;
} rs_dir_lease_info_t;
RS_API rs_status_t rs_dir_leases(rs_dir_h dir, const char *model,
                                 int64_t version, rs_diag_t *diag,
                                 rs_dir_lease_info_t **leases_p,
                                 size_t *count_p);

/* Group commit (docs/refit.md, "Group commit"; the record in
 * docs/formats.md). The ranks of one engine replica (a group: a name and
 * a size) apply a version together or not at all. The directory keeps
 * one record per (model, version, group): the group's size, the outcome
 * of every finished *attempt* (committed or aborted) and, for the attempt
 * in progress, each rank's state. An attempt is decided once, atomically:
 * COMMITTED in the step where its last rank reports APPLIED, ABORTED in
 * the step where a rank reports FAILED or any rank aborts it (a wait that
 * ran out); the next rank to report STAGED starts a new attempt. Every
 * rank follows the recorded decision, so no two ranks of an attempt can
 * see different outcomes. Group names use the holder alphabet. */

/* Largest group and the longest note kept with a decision. */
#define RS_DIR_GROUP_MAX 1024
#define RS_DIR_GROUP_NOTE_MAX 400

/* A rank's state in the open attempt. */
#define RS_GROUP_NONE '-'
#define RS_GROUP_STAGED 'S'   /* staged the version, ready to install */
#define RS_GROUP_APPLIED 'P'  /* installed it, keeps the bytes it replaced */
#define RS_GROUP_FAILED 'F'   /* could not install: the attempt aborts */
/* An attempt's decision. */
#define RS_GROUP_OPEN 0
#define RS_GROUP_COMMITTED 'C'
#define RS_GROUP_ABORTED 'A'

typedef struct rs_dir_group_info {
    int64_t size;     /* ranks; 0: no record yet */
    int64_t attempt;  /* the attempt this answer is about */
    int64_t attempts; /* attempts decided so far */
    int decision;     /* of `attempt`: RS_GROUP_OPEN, _COMMITTED, _ABORTED */
    /* the ranks' states in `attempt` while it is open, or as they were
     * when this call decided it ("" for an attempt decided earlier) */
    char ranks[RS_DIR_GROUP_MAX + 1];
    /* why the latest decision was taken ("" when none was) */
    char note[RS_DIR_GROUP_NOTE_MAX + 1];
} rs_dir_group_info_t;

/* Reports rank `rank`'s state `mark` (RS_GROUP_STAGED, _APPLIED or
 * _FAILED) in attempt `attempt` of group `group` (`size` ranks) for
 * `version`; attempt 0 joins the open attempt (STAGED only). A state never
 * goes back (STAGED after APPLIED changes nothing); FAILED aborts the
 * attempt with `note` (may be NULL); the last APPLIED commits it. An
 * attempt decided already changes nothing: *info_p says its decision.
 * Errors: RS_ERR_INPUT for a bad name, a size other than the record's
 * ("group 'G' of version V of 'M' has N ranks, not K"), a rank outside
 * [0, size), an attempt not started, a version never created; the
 * directory's errors. O(size). */
RS_API rs_status_t rs_dir_group_mark(rs_dir_h dir, const char *model,
                                     int64_t version, const char *group,
                                     int64_t size, int64_t rank,
                                     int64_t attempt, int mark,
                                     const char *note, rs_diag_t *diag,
                                     rs_dir_group_info_t *info_p);

/* Aborts attempt `attempt` (when still open) with `note`; *info_p says
 * the attempt's decision, which is COMMITTED when the last rank applied
 * before this call. Errors as rs_dir_group_mark. */
RS_API rs_status_t rs_dir_group_abort(rs_dir_h dir, const char *model,
                                      int64_t version, const char *group,
                                      int64_t attempt, const char *note,
                                      rs_diag_t *diag,
                                      rs_dir_group_info_t *info_p);

/* Reads attempt `attempt` (0: the open one) of the group's record;
 * size 0 when there is none. */
RS_API rs_status_t rs_dir_group_info(rs_dir_h dir, const char *model,
                                     int64_t version, const char *group,
                                     int64_t attempt, rs_diag_t *diag,
                                     rs_dir_group_info_t *info_p);

#ifdef __cplusplus
}
#endif
#endif
