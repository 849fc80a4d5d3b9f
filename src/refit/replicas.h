/* The publishers a receiver may read each slot of a version from
 * (replicas.c): read once per pull, ordered by name, one chosen per slot
 * (spread by the receiver's salt), the next one chosen when a read from
 * the chosen one failed, and the slot read again from the directory before
 * it is declared exhausted. */
#ifndef RS_REFIT_REPLICAS_H
#define RS_REFIT_REPLICAS_H

#include <stddef.h>
#include <stdint.h>

#include "dir/split.h"
#include "reshard/dir.h"

#define RS_REPLICA_CAUSE_MAX 320 /* of each failure, in the final message */

/* Whether reading from one publisher failed in this pull, and why. */
typedef struct rs__replica_try {
    int failed;
    char why[RS_REPLICA_CAUSE_MAX];
} rs__replica_try_t;

typedef struct rs__replica_slot {
    rs_dir_entry_t *entries; /* the slot's publishers, ordered by name
                              * (then those that joined mid-pull): whole
                              * tables, or a split entry's per-version
                              * values (splits[i]) */
    rs__dir_split_t *splits;
    size_t count;
    size_t chosen;           /* the entry the next transfer reads from */
    rs__replica_try_t *tries; /* per entry */
} rs__replica_slot_t;

/* A publisher whose reads failed in an earlier pull, identified with the
 * exact table it failed with: it is chosen last while it publishes that
 * same table (a restarted publisher publishes a new one). */
typedef struct rs__suspect {
    int64_t slot;
    char publisher[RS_DIR_NAME_MAX + 1];
    uint64_t table_digest;
} rs__suspect_t;

#define RS_REPLICAS_SUSPECTS_MAX 64

typedef struct rs__replicas {
    /* kept across pulls (a ring, oldest replaced first) */
    rs__suspect_t suspects[RS_REPLICAS_SUSPECTS_MAX];
    size_t nsuspects, next_suspect;
    /* this pull's */
    int loaded;
    int64_t version, nslots;
    uint64_t salt;
    double stale_s;
    rs__replica_slot_t *slots;
    uint64_t bytes;                  /* entry bytes read in this pull */
    uint32_t failovers;              /* publishers replaced in this pull */
    char record[RS_DIAG_MSG_MAX];    /* "<agent>, slot <S> -> <agent>; ..." */
    uint32_t rereads;                /* slots read again before exhaustion */
    /* the directory the set was loaded from (borrowed for the pull), read
     * again before a slot is declared exhausted */
    rs_dir_h dir;
    const char *model;
} rs__replicas_t;

/* Reads every slot's publishers of READY version v (once per pull: a
 * loaded set of the same version is kept), orders each slot's by
 * publisher name (so the choice does not depend on which one published
 * first) and chooses one per slot:
 * starting at entry (salt + slot) mod count, the first whose heartbeat is
 * younger than stale_s (<= 0: any) and that is no suspect, else the first
 * live one, else the first. Entries are read as rs__dir_read_parts reads
 * them (a split entry without its geometry document). Errors are those of
 * rs_dir_read_slot (RS_ERR_VERIFY for a corrupted table). O(tables). */
rs_status_t rs__replicas_load(rs__replicas_t *set, rs_dir_h dir,
                              const char *model, const rs_version_info_t *v,
                              uint64_t salt, double stale_s, rs_diag_t *diag);

/* The entry chosen for `slot` (loaded set, slot < nslots). */
const rs_dir_entry_t *rs__replicas_chosen(const rs__replicas_t *set,
                                          int64_t slot);
/* What the chosen entry of `slot` is: a whole table or a split entry. */
const rs__dir_split_t *rs__replicas_chosen_split(const rs__replicas_t *set,
                                                 int64_t slot);

/* After a transfer failed with st (RS_ERR_TRANSPORT or RS_ERR_TIMEOUT) and
 * diag naming the failed peers as "<agent>, slot <S>": marks every chosen
 * publisher the message names as failed and chooses an untried one for its
 * slot, reading the slot from the directory again when none is left (a
 * replica that published after the set was loaded). Returns 1 when each
 * such slot has one (retry the transfer); 0 otherwise, diag then naming
 * every publisher tried for the exhausted slot and its cause (unchanged
 * when that slot has one publisher, or when the message names no chosen
 * publisher).
 * `stalled`: the reads named made no progress for the stall bound
 * (rs_receiver_params_t.stall_s). A stalled publisher counts as failed
 * only when its slot has another publisher to read; otherwise it stays
 * chosen, *keep_waiting_p is set, and 1 is returned (retry the transfer
 * without the stall bound: it then waits as long as timeout_s). */
int rs__replicas_failover(rs__replicas_t *set, rs_status_t st, int stalled,
                          rs_diag_t *diag, int *keep_waiting_p);

/* The chosen publisher of `slot` published another geometry document
 * since the set was loaded (a rank restarted at new addresses under the
 * same name): its entry is replaced by the one the directory holds now.
 * 1 when it was; 0 when the directory still lists the same document (the
 * new entry is not in place yet) or does not answer. */
int rs__replicas_renew_chosen(rs__replicas_t *set, int64_t slot);

/* Whether any slot has a publisher besides its chosen one that this pull
 * has not found failing (as the directory listed them at load). */
int rs__replicas_backed(const rs__replicas_t *set);

/* Every publisher that failed in this pull with its slot, status-free
 * cause and nothing else: calls fn once per failure, in slot order. */
typedef void (*rs__replica_failure_fn)(void *ctx, const char *publisher,
                                       int64_t slot, const char *why);
void rs__replicas_failures(const rs__replicas_t *set,
                           rs__replica_failure_fn fn, void *ctx);

/* Frees this pull's entries (the suspects stay); the set may be loaded
 * again. A zeroed set is empty; reset is all it needs at the end. */
void rs__replicas_reset(rs__replicas_t *set);

#endif
