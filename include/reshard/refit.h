/* Refit lifecycles over a directory and a transport. A publisher (one per
 * trainer rank) registers the shards it owns, exposes them for one-sided
 * reads and publishes its table for each version; a receiver (one per
 * inference rank) discovers a READY version, plans its capture against every
 * table of that version, pulls, verifies and installs. Plans, connections
 * and prepared descriptors are cached while the topology (every publisher's
 * identity, shard geometry, addresses and keys) stays the same, and rebuilt
 * automatically when it changes.
 *
 * Threads: a publisher or a receiver is used by one thread at a time. Each
 * runs one thread of its own on a second directory connection: the
 * publisher's heartbeat, and, during a pull, the receiver's lease
 * renewal. */
#ifndef RESHARD_REFIT_H
#define RESHARD_REFIT_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/capture.h"
#include "reshard/dir.h"
#include "reshard/exec.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_publisher *rs_publisher_h;
typedef struct rs_receiver *rs_receiver_h;

typedef struct rs_publisher_params {
    size_t size; /* the caller's sizeof, set by rs_publisher_params_init */
    const char *directory;  /* "file:DIR" or "redis://host:port" */
    const char *model;
    int64_t rank, world;    /* this trainer's slot and the slot count */
    const char *backend;    /* exposer backend: "ucx" (default) or "cma" */
    const char *session;    /* agent name; default "trainer-<rank>" */
    int digests;            /* publish an rsd64 digest per shard */
    double heartbeat_s;     /* heartbeat period; default 1 s, <= 0 none */
    /* Directory outages while serving: a failed heartbeat is retried with
     * capped exponential backoff (heartbeat_s doubling up to
     * heartbeat_max_s, default 4 s) while the exposed memory keeps being
     * served; one notice when the outage begins, one when it ends. NULL
     * notice: stderr. */
    double heartbeat_max_s;
    /* Publishing while the directory is unreachable (also at create: the
     * server is connected on first use) is retried this long (default
     * 60 s) before rs_publisher_publish fails. */
    double publish_retry_s;
    rs_dir_notice_cb notice;
    void *notice_ctx;
} rs_publisher_params_t;

/* Fills *params with the defaults; `size` is the caller's sizeof (the
 * macro passes it), so a program built against older headers gets the
 * defaults it knew. The call taking the struct refuses a size below the
 * first version's or above this library's with RS_ERR_INVALID_ARG naming
 * the struct (docs/design.md, "Option structs"). */
RS_API void rs_publisher_params_init_sized(rs_publisher_params_t *params,
                                           size_t size);
#define rs_publisher_params_init(p) \
    rs_publisher_params_init_sized((p), sizeof(*(p)))
RS_API rs_status_t rs_publisher_create(const rs_publisher_params_t *params,
                                       rs_diag_t *diag,
                                       rs_publisher_h *publisher_p);
/* Stops heartbeats, unexposes every region, closes the directory. */
RS_API void rs_publisher_destroy(rs_publisher_h publisher);

/* Registers one shard: `ptr` holds the row-major box (offset, shape) of the
 * full tensor. Registration after the first publish is allowed; the next
 * publish re-exposes (new addresses mean a new topology for receivers). */
RS_API rs_status_t rs_publisher_register(rs_publisher_h publisher,
                                         const char *tensor, rs_dtype_t dtype,
                                         int ndim, const int64_t *full_shape,
                                         const int64_t *offset,
                                         const int64_t *shape, void *ptr,
                                         rs_diag_t *diag);

/* Publishes this rank's table for `version` (creating the version with
 * `world` slots if needed): the shards' bytes must be final. */
RS_API rs_status_t rs_publisher_publish(rs_publisher_h publisher,
                                        int64_t version, rs_diag_t *diag);

/* Waits until `version` is released by the directory (every receiver's
 * lease ended and someone released it). A directory outage does not end
 * the wait: it is retried until timeout_s (RS_ERR_TIMEOUT then names it).
 * A version that vanished from the directory (a server restarted without
 * its data) is published again, with a notice, and the wait goes on. */
RS_API rs_status_t rs_publisher_wait_released(rs_publisher_h publisher,
                                              int64_t version,
                                              double timeout_s,
                                              rs_diag_t *diag);

typedef struct rs_receiver_params {
    size_t size; /* the caller's sizeof, set by rs_receiver_params_init */
    const char *directory;
    const char *model;
    const char *backend;    /* transport: "ucx" (default) or "cma" */
    uint64_t salt;          /* replica choice (this rank's index) */
    /* Lease holder name; default "receiver-<salt>-<host>-<pid>". Names
     * must be unique: a take under the same name ends the other holder's
     * lease epoch, and its pull then refuses to install. */
    const char *holder;
    double discover_timeout_s; /* waiting for READY; default 60 */
    double stale_s;         /* publishers silent longer are stale; 0 = off.
                             * Stale versions are skipped by version -1 */
    /* The lease a pull holds on its version (see rs_receiver_pull): its
     * ttl (default 60 s) and how often a thread renews it while the pull
     * runs (<= 0, the default: ttl / 3). A period at or above the ttl lets
     * the lease lapse between renewals, and such a pull refuses to install
     * whenever the lapse is seen. */
    double lease_ttl_s;
    double lease_renew_s;
    /* > 0: one deadline for the whole pull (discover, lease, tables, plan,
     * connect, wire, replay, casts, verify), in seconds from the call. Every
     * wait inside gets at most what is left; a pull past it fails with
     * RS_ERR_TIMEOUT naming the stage it was in, before install. Default 0:
     * no overall bound (each wait keeps its own timeout). */
    double pull_timeout_s;
    int release_after;      /* release the version after installing */
    int64_t max_segments_per_copy; /* 0 = planner default */
    /* 1 (default): pull into receiver-owned shadow buffers and copy them
     * into the bound storage only after every check passed, so a failed
     * pull never touches the bound parameters. 0: read straight into the
     * bound storage (half the memory; a failed pull may leave it partly
     * written, though install is still not called). */
    int shadow;
    /* timeouts, verification (on by default here: exec.verify_digests = 1),
     * install callback */
    rs_exec_params_t exec;
    /* Notices of directory outages during discovery (retried until
     * discover_timeout_s); NULL: stderr. */
    rs_dir_notice_cb notice;
    void *notice_ctx;
} rs_receiver_params_t;

/* Fills *params with the defaults; `size` is the caller's sizeof (the
 * macro passes it), so a program built against older headers gets the
 * defaults it knew. The call taking the struct refuses a size below the
 * first version's or above this library's with RS_ERR_INVALID_ARG naming
 * the struct (docs/design.md, "Option structs"). */
RS_API void rs_receiver_params_init_sized(rs_receiver_params_t *params,
                                          size_t size);
#define rs_receiver_params_init(p) \
    rs_receiver_params_init_sized((p), sizeof(*(p)))

/* The receiver borrows the capture (it must outlive the receiver). */
RS_API rs_status_t rs_receiver_create(const rs_receiver_params_t *params,
                                      rs_capture_h capture, rs_diag_t *diag,
                                      rs_receiver_h *receiver_p);
RS_API void rs_receiver_destroy(rs_receiver_h receiver);

/* Binds a capture parameter to its live storage. */
RS_API rs_status_t rs_receiver_bind(rs_receiver_h receiver, size_t param,
                                    void *base, uint64_t nbytes,
                                    rs_diag_t *diag);

typedef struct rs_pull_result {
    int64_t version;
    int replanned;          /* 1 when the plan was (re)built for this pull */
    double discover_s, plan_s, connect_s;
    rs_exec_stats_t exec;
    uint64_t lease_epoch;        /* the epoch of the pull's lease */
    uint64_t lease_renewals;     /* renewals by the renewal thread */
    uint64_t lease_renew_errors; /* renewals that could not reach the
                                  * directory (retried) */
    /* release_after: RS_OK when the version was released, else why not
     * (RS_ERR_INCOMPLETE: another receiver's live lease, named in
     * release_msg). The pull itself succeeded either way. */
    rs_status_t release_status;
    char release_msg[RS_DIAG_MSG_MAX];
} rs_pull_result_t;

/* Discovers `version` (< 0: the newest READY one), plans (or reuses the
 * cached plan when the topology is unchanged), connects, pulls, verifies and
 * installs, holding a lease for the duration. On any error the install
 * callback is not called (and, with shadow = 1, the bound storage is
 * untouched).
 *
 * The lease is taken with a fresh epoch right after discovery and renewed
 * by a thread every lease_renew_s until the pull ends, also while the wire
 * is stalled. Before install the receiver proves the lease was held without
 * a gap: no renewal found it over, and a last renewal, atomic with the
 * check that the same epoch is still live, succeeds. A live lease makes
 * release impossible, so the version was not released and the publishers
 * did not refill their buffers while any byte was read. Otherwise
 * RS_ERR_VERIFY ("refusing to install: lease ... was not held throughout
 * the pull", with the cause): never a mix of two versions. A renewal that
 * only failed to reach the directory is retried; it breaks nothing unless
 * the lease lapsed meanwhile, which the next renewal reports.
 *
 * Errors: those of the directory (discovery), planning, connecting and
 * rs_exec_run (a read that failed or timed out is RS_ERR_TRANSPORT /
 * RS_ERR_TIMEOUT, its message naming the publisher as "<agent>, slot <S>"
 * and the cause); RS_ERR_TIMEOUT when pull_timeout_s passed ("deadline passed
 * in the <stage> stage"); RS_ERR_VERIFY for a lease not held throughout. */
RS_API rs_status_t rs_receiver_pull(rs_receiver_h receiver, int64_t version,
                                    rs_diag_t *diag,
                                    rs_pull_result_t *result_p);

/* The executor of the last pull (for its stage and coverage records), or
 * NULL before the first. */
RS_API rs_exec_h rs_receiver_exec(rs_receiver_h receiver);

#ifdef __cplusplus
}
#endif
#endif
