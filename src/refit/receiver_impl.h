/* The receiver's internal state and the functions its files share:
 * receiver.c (create, bind, announce, destroy), receiver_plan.c (the plan
 * cache and connecting), receiver_deadline.c (a pull's deadline and lease),
 * receiver_stage.c (stage, apply, pull), and dry_run.c. */
#ifndef RS_REFIT_RECEIVER_IMPL_H
#define RS_REFIT_RECEIVER_IMPL_H

#include <stdint.h>

#include "refit/group.h"
#include "refit/refit_impl.h"
#include "refit/replicas.h"
#include "reshard/cancel.h"
#include "reshard/refit.h"

/* One bound parameter. */
typedef struct rs__receiver_bind {
    void *base;
    uint64_t nbytes;
    void *shadow; /* receiver-owned staging the pull lands in (shadow = 1) */
} rs__receiver_bind_t;

/* What the receiver knows of one slot's table in its cached sources
 * (receiver_tables.c): a split entry whose per-version values it placed,
 * so that a later version naming the same geometry document with its
 * values at the same offsets only needs its values placed again. */
typedef struct rs__table_memo {
    char publisher[RS_DIR_NAME_MAX + 1];
    int reusable;       /* 0: read and parse this slot every pull */
    uint64_t doc;       /* the geometry document's digest */
    uint64_t offsets;   /* rsd64 of the insertions' offsets */
    size_t ninserts;
    size_t step;        /* the publisher_step insertion, or SIZE_MAX */
    size_t *shard_of;   /* per insertion: its shard in the position log,
                         * or RS__MEMO_DELTAS for a shard's deltas */
    size_t dfirst;      /* delta = 1: the slot's first shard in r->dshard
                         * (its delta insertions are those shards, in
                         * order) */
} rs__table_memo_t;

/* A memo insertion that is a shard's `deltas` array. */
#define RS__MEMO_DELTAS (SIZE_MAX - 1)

/* The receiver's one staged version: its lease is r->lease, its bytes the
 * staging buffers; `res` gathers the figures from stage to apply. */
struct rs_staged {
    int active;
    int64_t version;
    rs_pull_result_t res;
};

struct rs__rx_delta_shard; /* receiver_deltas.c */
struct rs__delta_ref;      /* exec/delta_read.h */

struct rs_receiver {
    rs_receiver_params_t params;
    char *model, *backend, *holder, *directory;
    char *announce_as;   /* the cuts record's name (announce_cuts) */
    int announced;       /* the record was written */
    rs_capture_h cap;
    rs_dir_h dir;
    rs__receiver_bind_t *binds;
    size_t nparams;
    /* the cache: valid while `fingerprint` matches the tables */
    int cached;
    int connected;       /* the cached transport reaches the plan's sessions
                          * (a dry run plans without connecting) */
    uint64_t fingerprint;
    rs_sources_h sources;
    rs_plan_h plan;
    rs_transport_h transport;
    rs_exec_h exec;
    struct rs_staged slot; /* the staged version, when slot.active */
    /* the pull in flight */
    rs_dir_h lease_dir;  /* the renewal thread's connection, opened once */
    rs__lease_t lease;
    double deadline;     /* rs__now_s() time; 0: none */
    const char *stage;   /* for deadline messages; NULL inside the executor */
    rs_diag_t *diag;     /* apply's, for the install-time lease proof */
    /* per slot, what `sources` holds of its table (memo_for: those
     * sources; the memo is void for any other) */
    rs__table_memo_t *memo;
    int64_t nmemo;
    rs_sources_h memo_for;
    /* the directory slot of each table in `sources`, for messages */
    int64_t *table_slot;
    size_t ntable_slot;
    /* the pull's publishers of every slot, and the one read from each */
    rs__replicas_t replicas;
    /* raised by rs_receiver_cancel from any thread: read by the waits of
     * a stage (discovery, connecting, the executor and its transport) */
    rs_cancel_t cancel;
    /* group commit (group.c): NULL without a group; swapped while the
     * staging holds the bytes an uncommitted install replaced */
    rs__group_t *group;
    int swapped;
    /* deltas (receiver_deltas.c): the shards the parsed tables list
     * deltas for, and those deltas */
    struct rs__rx_delta_shard *dshard;
    size_t dshard_len, dshard_cap;
    struct rs__delta_ref *dref;
    size_t dref_len, dref_cap;
    /* Raised whenever something other than the pull's reads writes the
     * shadows (a bind, a group rollback): the delta reads patched in place
     * there then hold no version (exec/delta_read.h). */
    uint64_t shadow_epoch;
    /* Whether the cached plan's staging takes one round (its staged
     * reads then land in place) and holds any staged read, once asked
     * (receiver_deltas.c); set with the plan, cleared with it
     * (rs__receiver_drop_cache). */
    int staging_asked, staging_one_round, staging_any;
};

/* The install's copy (receiver_install.c): every shadow into its bound
 * storage, on the executor's threads; returns the bytes copied. Cannot
 * fail. Only after the lease is confirmed. */
uint64_t rs__receiver_install_copy(rs_receiver_h r, rs_exec_h exec);

/* Where the executor writes a parameter: its shadow, or the bound storage. */
static inline void *rs__receiver_bind_target(const rs__receiver_bind_t *b)
{
    return b->shadow != NULL ? b->shadow : b->base;
}

/* ---- receiver.c ---- */

/* Opens the receiver's directory without creating anything (a mistyped
 * path fails with "no such directory"; a server unreachable at start is
 * waited for by discovery, within its deadline). */
rs_status_t rs__receiver_open_dir(rs_receiver_h r, const rs_cancel_t *cancel,
                                  rs_diag_t *diag, rs_dir_h *dir_p);

/* announce_cuts: writes the cuts record once, before the first discovery;
 * a failure is a notice (the pull goes on without it, the next one tries
 * again). */
void rs__receiver_announce_once(rs_receiver_h r);

/* ---- receiver_tables.c: the tables and what is kept of them ---- */

/* What a tables step read and parsed. */
typedef struct rs__tables_figures {
    uint32_t reused, parsed; /* slots whose parsed table was reused / parsed */
    uint64_t bytes;          /* read from the directory */
} rs__tables_figures_t;

/* The chosen publisher's table of every slot of a READY version, merged
 * (the slots' publishers are read from the directory once per pull).
 * When every slot's chosen entry names the geometry the cached sources
 * were parsed from (split entries, same publisher, same document, values
 * at the same offsets), only the version's values are read: they are
 * placed into the cached sources, which come back as *sources_p
 * (== r->sources); else every table is read whole and parsed into new
 * sources. */
rs_status_t rs__receiver_read_tables(rs_receiver_h r,
                                     const rs_version_info_t *v,
                                     rs_diag_t *diag, rs_sources_h *sources_p,
                                     rs__tables_figures_t *fig);

/* The topology fingerprint of `sources`: the cached one for the cached
 * sources renewed in place (their geometry did not change), else computed
 * (rs__topology_fingerprint). */
uint64_t rs__receiver_fingerprint(rs_receiver_h r, rs_sources_h sources);

/* Destroys sources a tables step returned, unless they are the cache's. */
void rs__receiver_sources_drop(rs_receiver_h r, rs_sources_h sources);

/* Drops the memo of the cached sources (they are going). */
void rs__receiver_forget_tables(rs_receiver_h r);

/* ---- receiver_deltas.c: the deltas the tables list ---- */

/* Forgets the listed deltas (a new parse of the tables starts). */
void rs__receiver_deltas_clear(rs_receiver_h r);
void rs__receiver_deltas_free(rs_receiver_h r);
/* Notes the deltas a parsed table lists (delta = 1 only): every shard with
 * a `deltas` key, in the table's order (a malformed entry gives its shard
 * none). Only RS_ERR_NO_MEMORY is an error. */
rs_status_t rs__receiver_deltas_scan(rs_receiver_h r, const char *table,
                                     size_t len, rs_diag_t *diag);
/* A reused table's new `deltas` insertion (text, len) for r->dshard[k]
 * (after rs__receiver_deltas_renew_start, which forgets the old ones). */
void rs__receiver_deltas_renew_start(rs_receiver_h r);
rs_status_t rs__receiver_deltas_renew(rs_receiver_h r, size_t k,
                                      const char *text, size_t len);
/* 1 when the receiver reads the deltas its tables list: delta on and
 * digests verified. */
int rs__receiver_takes_deltas(rs_receiver_h r);
/* 1 when the cached plan has somewhere to patch a delta: the shadows,
 * copies within a budget above 0, or staged reads in a staging of one
 * round (so a receiver with shadow = 0 and no budget still patches its
 * cast, coalesced and quantized reads in place). Its transport takes
 * delta reads only then. */
int rs__receiver_patches_deltas(rs_receiver_h r);
/* Before a run of `version`: the listed deltas to the transport's delta
 * reads, in the plan's sessions (a no-op without them). */
rs_status_t rs__receiver_deltas_arm(rs_receiver_h r, int64_t version,
                                    rs_diag_t *diag);
/* After it: its figures into res; ok (verified) makes the copies it read
 * hold the version, else none holds any. */
void rs__receiver_deltas_done(rs_receiver_h r, int ok, rs_pull_result_t *res);

/* ---- receiver_plan.c: the plan cache and connecting ---- */

/* Keeps the cached plan (taking the digests of `sources`) when `fp` is the
 * cached topology's, else builds plan, transport and executor; with
 * `connect` the plan's sessions are connected too (also those of a plan a
 * dry run built). Owns `sources` either way. Sets res->replanned and
 * res->plan_s when it planned. */
rs_status_t rs__receiver_prepare(rs_receiver_h r, rs_sources_h sources,
                                 uint64_t fp, int connect,
                                 rs_pull_result_t *res, rs_diag_t *diag);

/* Drops plan, transport, executor and tables: the next pull plans and
 * connects afresh. */
void rs__receiver_drop_cache(rs_receiver_h r);

/* The sessions the plan reads bytes from. O(sessions). */
uint32_t rs__receiver_sessions_read(rs_plan_h plan);

/* ---- receiver_deadline.c: a pull's deadline and its lease ---- */

/* What is left of the pull's deadline, capped at `cap` (<= 0: no cap). */
double rs__receiver_budget(const rs_receiver_h r, double cap);
int rs__receiver_past_deadline(const rs_receiver_h r);

/* A stage that failed once the deadline had passed failed because of it:
 * RS_ERR_TIMEOUT naming the stage (the executor names its own). Returns
 * `st` otherwise. */
rs_status_t rs__receiver_deadline_status(rs_receiver_h r, int64_t version,
                                         rs_status_t st, rs_diag_t *diag);

/* Moves on to `stage`, unless the deadline passed already. */
rs_status_t rs__receiver_enter(rs_receiver_h r, const char *stage,
                               int64_t version, rs_diag_t *diag);

/* Takes the lease on `version` and starts its renewals (on a directory
 * connection of their own, opened once). */
rs_status_t rs__receiver_start_lease(rs_receiver_h r, int64_t version,
                                     rs_diag_t *diag);

/* After a failed transfer (RS_ERR_TRANSPORT, RS_ERR_TIMEOUT or
 * RS_ERR_VERIFY): when the directory says the pull's lease is over (the
 * version released or abandoned under it), RS_ERR_VERIFY naming the lost
 * lease first and what the reads saw after; `st` otherwise. */
rs_status_t rs__receiver_lease_cause(rs_receiver_h r, int64_t version,
                                     rs_status_t st, rs_diag_t *diag);

/* Stops the renewals, keeps their figures in `res`, drops the lease. */
void rs__receiver_end_lease(rs_receiver_h r, int64_t version,
                            rs_pull_result_t *res);

/* release_after: a refused release (another receiver's live lease) or a
 * failed one is kept in the result, not dropped. */
void rs__receiver_release(rs_receiver_h r, int64_t version,
                          rs_pull_result_t *res);

/* ---- receiver_stage.c: stage, apply, pull ---- */

/* The executor's parameters: the receiver's settings, and its own install
 * step (lease proof, then staging -> bound parameters, then the user's). */
void rs__receiver_exec_params(rs_receiver_h r, rs_exec_params_t *ep);

/* The steps of a pull that a dry run (dry_run.c) shares. */

/* Starts the pull's deadline (pull_timeout_s) and waits for `version`
 * (< 0: the newest READY one) to be READY. */
rs_status_t rs__receiver_discover(rs_receiver_h r, int64_t version,
                                  rs_diag_t *diag, rs_version_info_t *v_p);
/* Reads and merges every slot's table of `v`. */
rs_status_t rs__receiver_tables(rs_receiver_h r, const rs_version_info_t *v,
                                rs_diag_t *diag, rs_sources_h *sources_p,
                                rs__tables_figures_t *fig);
/* RS_ERR_INVALID_ARG ("cannot <what>", naming the staged version) while a
 * version is staged: its executor holds the staged run. */
rs_status_t rs__receiver_refuse_if_staged(rs_receiver_h r, const char *what,
                                          rs_diag_t *diag);

#endif
