/* The control plane: a directory of model versions. Publishers create a
 * version with a number of expected slots (trainer ranks) and publish one
 * shard table per slot; the version becomes READY atomically when the last
 * expected slot arrives. Receivers wait for READY, read every slot's table,
 * and hold leases that keep the version from being released. Backends:
 * "file:DIR" (embedded; one machine or a shared filesystem) and
 * "redis://[:password@]host:port" (each operation atomic in a Lua script).
 * No table byte passes through the data plane and no byte of data through
 * the directory. */
#ifndef RESHARD_DIR_H
#define RESHARD_DIR_H

#include <stddef.h>
#include <stdint.h>
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

/* Opens a directory by URL. RS_ERR_INPUT for a malformed URL,
 * RS_ERR_TRANSPORT when the backend cannot be reached. */
RS_API rs_status_t rs_dir_open(const char *url, rs_diag_t *diag,
                               rs_dir_h *dir_p);
RS_API void rs_dir_close(rs_dir_h dir);

/* Creates version `version` of `model` expecting `slots` tables. Creating
 * an existing version with the same slot count succeeds (idempotent); with
 * another count it is RS_ERR_INPUT. */
RS_API rs_status_t rs_dir_create_version(rs_dir_h dir, const char *model,
                                         int64_t version, int64_t slots,
                                         rs_diag_t *diag);

/* Publishes slot `slot`'s table (bytes, usually JSON). A byte-identical
 * replay succeeds; a different table for a published slot is RS_ERR_INPUT
 * ("conflicting replay"). The call that adds the last expected slot makes
 * the version READY in the same atomic step. */
RS_API rs_status_t rs_dir_publish(rs_dir_h dir, const char *model,
                                  int64_t version, int64_t slot,
                                  const void *table, size_t len,
                                  rs_diag_t *diag);

/* Refreshes a slot's heartbeat. A READY version whose slots' heartbeats
 * are all older than stale_s is reported stale by rs_dir_wait_ready. */
RS_API rs_status_t rs_dir_heartbeat(rs_dir_h dir, const char *model,
                                    int64_t version, int64_t slot,
                                    rs_diag_t *diag);

RS_API rs_status_t rs_dir_info(rs_dir_h dir, const char *model,
                               int64_t version, rs_diag_t *diag,
                               rs_version_info_t *info_p);

/* Waits until `version` is READY (version < 0: the newest READY version)
 * and no slot's heartbeat is older than stale_s (<= 0: no check).
 * RS_ERR_TIMEOUT after timeout_s with a message saying which slots are
 * missing or stale. */
RS_API rs_status_t rs_dir_wait_ready(rs_dir_h dir, const char *model,
                                     int64_t version, double timeout_s,
                                     double stale_s, rs_diag_t *diag,
                                     rs_version_info_t *info_p);

/* Reads slot `slot`'s table of a READY version; the caller frees *table_p.
 * RS_ERR_INCOMPLETE when the version is not READY. */
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
 * ttl_s seconds, and sets *epoch_p to its epoch. A live lease of the same
 * holder is replaced (its epoch ends). RS_ERR_INCOMPLETE when the version
 * is released, RS_ERR_INPUT when it was never created or an argument is
 * bad. */
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
 * while any lease is live; afterwards the state is RELEASED. */
RS_API rs_status_t rs_dir_release(rs_dir_h dir, const char *model,
                                  int64_t version, rs_diag_t *diag);

/* Waits until the version is RELEASED (publishers use it to know when
 * their memory may be unregistered). RS_ERR_TIMEOUT after timeout_s. */
RS_API rs_status_t rs_dir_wait_released(rs_dir_h dir, const char *model,
                                        int64_t version, double timeout_s,
                                        rs_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
