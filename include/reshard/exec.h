/* The executor: turns a plan into reads on a transport, replays full pulls,
 * casts converts, checks coverage and digests, and only then calls the
 * caller's install callback. Prepare once, run many times: descriptors,
 * staging buffers and resolved addresses are built on the first run and
 * reused while the plan and the bindings are unchanged. */
#ifndef RESHARD_EXEC_H
#define RESHARD_EXEC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "reshard/plan.h"
#include "reshard/status.h"
#include "reshard/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_exec *rs_exec_h;

/* Called after every byte moved and every check passed. A non-RS_OK return
 * fails the run with that status. */
typedef rs_status_t (*rs_install_cb)(void *ctx, rs_exec_h exec);

/* Where the wire stage stands, reported between chunks of reads. */
typedef struct rs_progress {
    uint64_t bytes_done;
    uint64_t bytes_total;
    double elapsed_s;            /* since the wire stage started */
    size_t sessions_outstanding; /* sessions with reads still to come */
} rs_progress_t;

typedef void (*rs_progress_cb)(void *ctx, const rs_progress_t *progress);

#define RS_EXEC_DEFAULT_COVERAGE_FLOOR 0.995
#define RS_EXEC_DEFAULT_TIMEOUT_S 60.0

typedef struct rs_exec_params {
    size_t size; /* the caller's sizeof, set by rs_exec_params_init */
    int phased;                /* one transport batch per kind (debugging) */
    double timeout_s;          /* per transport wait; <= 0 waits forever */
    /* > 0: one deadline for the whole run (wire, replay, casts, verify),
     * counted from the start of rs_exec_run; each transport wait gets at
     * most what is left of it. A run past it is RS_ERR_TIMEOUT naming the
     * stage, before install. Default 0: no overall bound. */
    double run_timeout_s;
    int require_full_coverage; /* fail (RS_ERR_INCOMPLETE) below the floor */
    double coverage_floor;     /* fraction of parameter bytes, default 0.995 */
    int verify_digests;        /* re-digest fully reassembled shards; off
                                * by default. Strict: a shard to verify
                                * published without a digest fails the run
                                * before any byte moves */
    int verify_partial;        /* also pull partly read shards to check them */
    double max_gbps;           /* > 0: fail runs that imply a faster wire */
    rs_install_cb install;
    void *install_ctx;
    /* When set, the wire stage posts its reads in chunks of about
     * progress_chunk_bytes (default 64 MiB), each taking a share of every
     * session still outstanding (so all sessions stay in flight), and calls
     * progress after each chunk. */
    rs_progress_cb progress;
    void *progress_ctx;
    uint64_t progress_chunk_bytes;
} rs_exec_params_t;

/* Fills *params with the defaults; `size` is the caller's sizeof (the
 * macro passes it), so a program built against older headers gets the
 * defaults it knew. The call taking the struct refuses a size below the
 * first version's or above this library's with RS_ERR_INVALID_ARG naming
 * the struct (docs/design.md, "Option structs"). */
RS_API void rs_exec_params_init_sized(rs_exec_params_t *params, size_t size);
#define rs_exec_params_init(p) rs_exec_params_init_sized((p), sizeof(*(p)))

/* The executor borrows the plan, its capture and the transport; they must
 * outlive it. The transport's sessions are the plan's session indices and
 * must be connected before the first run. */
RS_API rs_status_t rs_exec_create(rs_plan_h plan, rs_transport_h transport,
                                  const rs_exec_params_t *params,
                                  rs_diag_t *diag, rs_exec_h *exec_p);
RS_API void rs_exec_destroy(rs_exec_h exec);

/* Binds a capture parameter (by index) to its storage: `nbytes` must be at
 * least the parameter's size. Rebinding invalidates the prepared state. */
RS_API rs_status_t rs_exec_bind(rs_exec_h exec, size_t param, void *base,
                                uint64_t nbytes, rs_diag_t *diag);

/* Sets run_timeout_s for the following runs (the prepared state stays). */
RS_API void rs_exec_set_run_timeout(rs_exec_h exec, double timeout_s);

/* One refit. Errors: RS_ERR_INCOMPLETE (the plan refused a source published
 * with another shape or dtype than the capture assumes, a model mismatch
 * whose message names the first such tensor and both shapes; uncovered
 * copies; or coverage below the floor when required), RS_ERR_UNSUPPORTED
 * (other fallback sources, or a cast it cannot do), RS_ERR_INVALID_ARG (an
 * unbound parameter), RS_ERR_TRANSPORT / RS_ERR_TIMEOUT (a read that failed
 * or did not complete, naming the session, or the run's deadline),
 * RS_ERR_VERIFY (a digest mismatch, a shard to verify without a digest, or
 * an implausible throughput). The plan's refusals are found before any byte
 * moves. On any error the install callback is not called. */
RS_API rs_status_t rs_exec_run(rs_exec_h exec, rs_diag_t *diag);

/* Coverage of the parameters by the plan, computed before any byte moves. */
typedef struct rs_coverage {
    size_t params_total;
    size_t params_full;      /* every byte written */
    size_t params_partial;   /* some bytes written */
    size_t params_missing;   /* never written */
    uint64_t bytes_total;
    uint64_t bytes_covered;
    uint64_t bytes_multi;    /* written by more than one copy */
    double fraction;         /* bytes_covered / bytes_total (1 when empty) */
} rs_coverage_t;

RS_API rs_status_t rs_exec_coverage(rs_exec_h exec, rs_diag_t *diag,
                                    rs_coverage_t *coverage_p);

/* The coverage record (JSON, see docs/formats.md). */
RS_API rs_status_t rs_exec_write_coverage_json(rs_exec_h exec, FILE *out,
                                               rs_diag_t *diag);

/* The stage record of the last run (reshard.stage.v2). plan_seconds < 0
 * leaves the planning stage out. */
RS_API rs_status_t rs_exec_write_stage_json(rs_exec_h exec, double plan_seconds,
                                            FILE *out, rs_diag_t *diag);

/* Takes the digests to verify against from `sources` (the tables of the
 * version about to be pulled with this prepared plan): shards are matched by
 * session, address and tensor. The strings are borrowed until the next call
 * or destroy. */
RS_API rs_status_t rs_exec_set_digests(rs_exec_h exec, rs_sources_h sources,
                                       rs_diag_t *diag);

/* Counters of the last run. */
typedef struct rs_exec_stats {
    uint64_t runs;
    uint64_t prepares;        /* times the prepared state was (re)built */
    uint64_t bytes;           /* read in the last run */
    uint64_t descriptors;
    uint64_t shards_verified; /* digests checked in the last run */
    double wire_seconds;
} rs_exec_stats_t;

RS_API void rs_exec_stats(rs_exec_h exec, rs_exec_stats_t *stats_p);

#ifdef __cplusplus
}
#endif
#endif
