/* The executor: turns a plan into reads on a transport, replays full pulls,
 * casts converts, checks coverage and digests, and only then calls the
 * caller's install callback. Prepare once, run many times: descriptors,
 * staging buffers and resolved addresses are built on the first run and
 * reused while the plan and the bindings are unchanged.
 *
 * Threads: an executor is used by one thread at a time, and so is the
 * transport it runs on (two executors on one transport must not run at
 * once). The install and progress callbacks run on the thread calling
 * rs_exec_run. A pipelined run (rs_exec_params_t.serial) runs replays,
 * casts and digests on threads of the executor's own, one per worker of
 * the transport (local-mt's threads; one for the others), started by the
 * first run that needs them and joined by rs_exec_destroy; every call
 * returns with them idle. The plan is only read, so executors on several threads may
 * share one plan, each with its own transport and bindings
 * (tests/unit/plan/test_plan_threads.c).
 * Cost: create, bind, set_run_timeout and stats are O(1); preparing (the
 * first run, rs_exec_prepare) is O(plan records); coverage is
 * O(R log R) in the destination runs R of the plan; a run is linear in its
 * reads plus the bytes it moves, casts and digests; the records are linear
 * in the plan. */
#ifndef RESHARD_EXEC_H
#define RESHARD_EXEC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "reshard/cancel.h"
#include "reshard/memory.h"
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
/* The staging budget (rs_exec_params_t.staging_budget) when none is given:
 * 1 GiB, raised to the largest single staged box when that is bigger. */
#define RS_EXEC_DEFAULT_STAGING_BUDGET ((uint64_t)1 << 30)
/* A staging budget that bounds nothing: every staged box at once. */
#define RS_STAGING_UNBOUNDED UINT64_MAX

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
    /* Without progress and phased, a run is pipelined: its reads are
     * posted in waves of about wave_bytes (default 0: a sixteenth of the
     * plan's bytes, at least 4 MiB and at most 256 MiB), each wave the
     * reads of whole full pulls, converts or direct segments, and while
     * one wave is on the wire the replays, casts and digests of the wave
     * before run on the executor's threads. serial = 1 runs the stages one
     * after another instead (the baseline the pipelined run is measured
     * against); so does a plan of fewer than two waves. */
    int serial;
    uint64_t wave_bytes;
    /* Borrowed; NULL (default): none. Raised, a run stops at its next
     * stage and its transport waits return (rs_transport_params_t.cancel
     * is the transport's own): RS_ERR_CANCELLED naming the stage, before
     * install. */
    const rs_cancel_t *cancel;
    /* The most bytes of staging (staged reads and full pulls, converts,
     * receiver-path quantized boxes; each counted in whole pages) held at
     * once. A plan whose staging exceeds it runs in rounds: the staged
     * boxes are packed in plan order into rounds of at most this many
     * bytes, which share one buffer; each round is read, quantized,
     * replayed, cast and its shards verified before the next is read
     * (docs/executor.md, "Staging budget"). 0 (default):
     * RS_EXEC_DEFAULT_STAGING_BUDGET, or the largest single box when that
     * is bigger. RS_STAGING_UNBOUNDED: one round (every box at once). Any
     * other value is a hard bound: a single box larger than it is refused
     * at prepare (RS_ERR_INVALID_ARG naming the copy and both sizes). */
    uint64_t staging_budget;
} rs_exec_params_t;

/* Fills *params with the defaults; `size` is the caller's sizeof (the
 * macro passes it), so a program built against older headers gets the
 * defaults it knew. The call taking the struct refuses a size below the
 * first version's or above this library's with RS_ERR_INVALID_ARG naming
 * the struct (docs/architecture.md, "Option structs"). */
RS_API void rs_exec_params_init_sized(rs_exec_params_t *params, size_t size);
#define rs_exec_params_init(p) rs_exec_params_init_sized((p), sizeof(*(p)))

/* The executor borrows the plan, its capture and the transport; they must
 * outlive it. The transport's sessions are the plan's session indices and
 * must be connected before the first run. */
RS_API rs_status_t rs_exec_create(rs_plan_h plan, rs_transport_h transport,
                                  const rs_exec_params_t *params,
                                  rs_diag_t *diag, rs_exec_h *exec_p);
RS_API void rs_exec_destroy(rs_exec_h exec);

/* Binds a capture parameter (by index) to its storage, memory of type
 * `mem` borrowed until rebound: `nbytes` must be at least the parameter's
 * size. Rebinding invalidates the prepared state. Errors:
 * RS_ERR_UNSUPPORTED for any mem but RS_MEM_HOST (naming the type and the
 * param; base is not read), RS_ERR_INVALID_ARG for a mem outside
 * rs_mem_type_t, no such param or too few bytes; the previous binding
 * stays then. */
RS_API rs_status_t rs_exec_bind(rs_exec_h exec, size_t param, void *base,
                                uint64_t nbytes, rs_mem_type_t mem,
                                rs_diag_t *diag);

/* Builds the prepared state now (descriptors, staging, replay and cast
 * programs, verification pieces) instead of in the first run, touching no
 * transport: the sessions need not be connected yet. Rebuilt only after a
 * rebind. Errors: RS_ERR_INVALID_ARG (a parameter the plan writes is not
 * bound), RS_ERR_INPUT (a segment leaving its buffer), RS_ERR_UNSUPPORTED (a
 * cast it cannot do), RS_ERR_NO_MEMORY. O(plan records) plus the staging it
 * allocates. */
RS_API rs_status_t rs_exec_prepare(rs_exec_h exec, rs_diag_t *diag);

/* What the prepared state reads per run: bytes and descriptors (reads), 0
 * and 0 before it was prepared. O(1). */
RS_API void rs_exec_prepared(rs_exec_h exec, uint64_t *bytes_p,
                             uint64_t *descriptors_p);

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
 * moves. On any error the install callback is not called.
 * rs_exec_run = rs_exec_run_staged, a deadline check, rs_exec_install. */
RS_API rs_status_t rs_exec_run(rs_exec_h exec, rs_diag_t *diag);

/* rs_exec_run without its install stage: every byte moved and every check
 * passed (same errors), the install callback not called. The run's
 * deadline (run_timeout_s) ends with it. */
RS_API rs_status_t rs_exec_run_staged(rs_exec_h exec, rs_diag_t *diag);

/* The install stage of the last rs_exec_run_staged, which must have
 * succeeded with no run since (else RS_ERR_INVALID_ARG): calls the install
 * callback (none: RS_OK, the stage absent from the record), timed as the
 * `install` stage, with no deadline. A failing callback's status is
 * returned and recorded (failure "install"). Once per staged run. */
RS_API rs_status_t rs_exec_install(rs_exec_h exec, rs_diag_t *diag);

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

/* The stage record of the last run (reshard.stage.v2): rs_exec_stages with
 * plan_s = plan_seconds (< 0 leaves the planning stage out), as
 * rs_exec_write_stages writes it, and, when the executor's transport reads
 * deltas (a receiver's, docs/delta.md), the `delta` object: what the run
 * read through deltas and whole (docs/formats.md). */
RS_API rs_status_t rs_exec_write_stage_json(rs_exec_h exec, double plan_seconds,
                                            FILE *out, rs_diag_t *diag);
/* rs_exec_write_stage_json with flags (RS_RECORD_COMPACT). */
RS_API rs_status_t rs_exec_write_stage_record(rs_exec_h exec,
                                              double plan_seconds,
                                              unsigned flags, FILE *out,
                                              rs_diag_t *diag);

/* Takes the digests to verify against from `sources` (the tables of the
 * version about to be pulled with this prepared plan): shards are matched by
 * session, address and tensor; the first published match wins and a plan
 * shard with none gets no digest. The strings are borrowed from `sources`
 * (keep it alive) until the next call or destroy. RS_ERR_INVALID_ARG for
 * NULL arguments, RS_ERR_NO_MEMORY. Cost: O(S log P + P) for S published
 * and P plan shards (one hash and one binary search per published shard). */
RS_API rs_status_t rs_exec_set_digests(rs_exec_h exec, rs_sources_h sources,
                                       rs_diag_t *diag);

/* The figures of the last run, one source for the stage record and for
 * callers that read them without parsing JSON. Seconds < 0: the stage did
 * not run (it is absent from the record, never zero). */
typedef struct rs_exec_stages {
    double plan_s;          /* planning, measured by the caller: the record
                             * has it when >= 0; rs_exec_stages sets -1 */
    double prepare_s;       /* building descriptors, staging, programs */
    double descriptors_s;   /* the descriptor part of prepare_s */
    double wire_s;          /* posting every read and waiting for them */
    double replay_s;        /* full-pull staging -> destinations */
    double convert_s;       /* casts */
    double verify_s;        /* digest verification */
    double install_s;       /* the install callback */
    uint64_t bytes;         /* bytes the plan reads (on the wire) */
    uint64_t descriptors;   /* read descriptors posted */
    uint64_t full_pulls, converts, fallback; /* of the plan */
    uint64_t shards_verified;
    int ok;                 /* the last run (and its install) succeeded */
    const char *failure;    /* !ok: the short cause (docs/formats.md),
                             * a string with static storage; else NULL */
    /* A serial run's stages run one after another, each figure its wall
     * time. In a pipelined run (waves > 0) they overlap: wire_s is the
     * time spent posting and waiting, summed over waves; replay_s,
     * convert_s and verify_s are busy times summed over the threads that
     * ran them (so with several threads a figure may exceed run_s). */
    double run_s;           /* wall time from the wire stage's start to the
                             * end of verification; < 0: not reached */
    uint64_t waves;         /* waves of a pipelined run; 0: serial */
    uint64_t threads;       /* threads that ran replays, casts and digests
                             * (1: the calling thread alone) */
    /* Staging of the prepared plan: the bytes held (the rounds' shared
     * buffer, plus the buffer shards are re-read into for verification),
     * what every staged box at once would take, and the rounds (1: the
     * plan's staging fits its budget). 0, 0, 0 before it was prepared. */
    uint64_t staging_bytes;
    uint64_t staging_unbounded;
    uint64_t staging_rounds;
} rs_exec_stages_t;

/* Fills *stages_p from the last run (all stages < 0 before the first).
 * Cost: O(plan's full pulls + converts). */
RS_API void rs_exec_stages(rs_exec_h exec, rs_exec_stages_t *stages_p);

/* Record writers' flags: one line, no spaces (the default is indented). */
#define RS_RECORD_COMPACT 1u

/* Writes `stages` as the stage record (reshard.stage.v2, docs/formats.md),
 * followed by a newline unless RS_RECORD_COMPACT. RS_ERR_IO when `out`
 * fails. */
RS_API rs_status_t rs_exec_write_stages(const rs_exec_stages_t *stages,
                                        unsigned flags, FILE *out,
                                        rs_diag_t *diag);

/* rs_exec_write_coverage_json with flags (RS_RECORD_COMPACT). */
RS_API rs_status_t rs_exec_write_coverage_record(rs_exec_h exec,
                                                 unsigned flags, FILE *out,
                                                 rs_diag_t *diag);

/* What a plan's staging takes under the staging budget, for a run with
 * `params` (NULL: the defaults; their staging_budget, and whether the run
 * is pipelined: see rs_exec_params_t), found from the plan alone without
 * allocating: `bytes` is what the run holds at once (its largest round;
 * a pipelined run in rounds alternates between two halves of the budget,
 * so it holds twice its largest round), `unbounded` every staged box at
 * once, `rounds` how many, `budget` the budget applied (the default
 * resolved) and `largest` the largest single box. All counted in whole
 * pages, as the executor lays them out; the buffer shards are re-read
 * into for verification is not included (it depends on the published
 * shards). */
typedef struct rs_staging_need {
    uint64_t bytes;
    uint64_t unbounded;
    uint64_t rounds;
    uint64_t budget;
    uint64_t largest;
} rs_staging_need_t;

/* Errors: RS_ERR_INVALID_ARG (NULL arguments, params of a size this library
 * does not know; a box larger than an explicit budget, naming the copy and
 * both sizes), RS_ERR_INPUT (a quantized copy
 * whose quantization no longer resolves), RS_ERR_NO_MEMORY. Cost: O(plan's
 * staged reads, quantized copies and converts). */
RS_API rs_status_t rs_exec_staging_need(rs_plan_h plan,
                                        const rs_exec_params_t *params,
                                        rs_diag_t *diag,
                                        rs_staging_need_t *need_p);

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
