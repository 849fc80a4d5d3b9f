/* Internal state of an executor, shared by its steps: prepare (reads,
 * staging, replay and cast programs), coverage, verification, records. */
#ifndef RS_EXEC_EXEC_IMPL_H
#define RS_EXEC_EXEC_IMPL_H

#include <stdatomic.h>

#include "core/clock.h"
#include "core/params.h"
#include "core/vec.h"
#include "exec/transport_impl.h"
#include "reshard/plan.h" /* the plan's capture, rs_plan_capture */
#include "reshard/view.h"
#include "reshard/exec.h"

/* Elements of each replay checked after it ran (replay_check.c). */
#define RS_EXEC_SAMPLES 8

/* One strided local copy (full-pull replay or cast). */
typedef struct rs__exec_copy {
    int ndim;
    int64_t shape[RS_MAX_DIMS];
    int64_t src_stride[RS_MAX_DIMS];
    int64_t dst_stride[RS_MAX_DIMS];
    const unsigned char *src;
    unsigned char *dst;
    rs_dtype_t from, to;
    size_t copy;               /* the capture copy it writes */
    /* replays: sampled elements, as byte offsets into the staged box's
     * staging (`box`) and from dst (replay_check.c) */
    const unsigned char *box;
    unsigned nsamples;
    uint64_t sample_src[RS_EXEC_SAMPLES];
    int64_t sample_dst[RS_EXEC_SAMPLES];
} rs__exec_copy_t;

/* A piece of a published shard landing somewhere local: verification
 * re-reads shards from these in shard order. */
typedef struct rs__piece {
    size_t shard;        /* index into rs_plan_shards */
    uint64_t offset;     /* byte offset inside the shard */
    uint64_t nbytes;
    const unsigned char *at;
    uint32_t wave;       /* pipelined runs: the wave of its read */
    uint8_t late;        /* its read's destination overlaps another write:
                          * verified after every wave */
} rs__piece_t;

/* One wave of a pipelined run, as ends into the executor's wave_reads,
 * replays, casts and verify_at (each wave starts where the one before
 * ended; the first at 0). Its replays and casts read only its own reads'
 * staging, and its shards are complete once its reads are. */
typedef struct rs__wave {
    size_t reads_end, replays_end, casts_end, verify_end;
    size_t quants_end; /* receiver-path quantized boxes (quantize.c) */
} rs__wave_t;

/* Stage work handed to the executor's pool: replays [rep_begin, rep_end),
 * casts [cast_begin, cast_end) and the digests of verify_at[ver_begin,
 * ver_end), as one flat task range. The first failure is kept. */
typedef struct rs__stage_job {
    rs_exec_h x;
    size_t rep_begin, rep_end, cast_begin, cast_end, ver_begin, ver_end;
    size_t quant_begin, quant_end; /* boxes to quantize (a pipelined run's) */
    int skip_ordered;        /* leave copies marked ordered for later */
    atomic_int failed;
    rs_status_t status;
    const char *cause;       /* x->failure for the first failure */
    rs_diag_t diag;
    atomic_uint_fast64_t busy_ns[3]; /* replay, convert, verify */
    atomic_uint_fast64_t verified;
} rs__stage_job_t;

/* Stage timings of a run; negative = the stage did not run. */
enum {
    RS_STAGE_PREPARE, RS_STAGE_DESCRIPTORS, RS_STAGE_WIRE, RS_STAGE_REPLAY,
    RS_STAGE_CONVERT, RS_STAGE_VERIFY, RS_STAGE_INSTALL, RS_STAGE_COUNT_
};

struct rs__pool;

/* Where every staged box goes under the staging budget (staging.c): boxes
 * are numbered staged reads, then receiver-path quantized boxes, then
 * converts, in plan order; each has a round and an offset into the one
 * staging buffer the rounds share. */
typedef struct rs__staging_layout {
    uint64_t *at;
    uint32_t *round;
    size_t nitems, nfp, nquant, ncv;
    rs_staging_need_t need;
    int overlapped; /* rounds alternate between two halves of the buffer */
} rs__staging_layout_t;

/* The layout under `budget` (rs_exec_params_t.staging_budget); with
 * `overlap` (a pipelined run) in two halves when that takes more than one
 * round. Errors: those of rs_exec_staging_need. Free with
 * rs__staging_layout_free. */
rs_status_t rs__staging_layout(rs_plan_h plan, uint64_t budget, int overlap,
                               rs_diag_t *diag, rs__staging_layout_t *l);
/* A run with these parameters is pipelined (not serial, phased or with a
 * progress callback) when its plan allows (waves.c). */
int rs__exec_pipelined(const rs_exec_params_t *p);
RS__PARAMS_DECLARE(exec);
void rs__staging_layout_free(rs__staging_layout_t *l);

typedef struct rs__bind {
    unsigned char *base;
    uint64_t nbytes;
} rs__bind_t;

struct rs_exec {
    rs_plan_h plan;
    rs_capture_h cap;
    rs_transport_h t;
    rs_exec_params_t params;
    rs__bind_t *binds;
    size_t nparams;
    int prepared;

    rs_read_t *reads;
    size_t nreads;
    rs_read_t *chunk;            /* progress mode: one chunk of reads */
    size_t *group_at;            /* progress mode: per-session cursors */
    size_t phase_end[3];         /* exact, full-pull, convert read ranges */
    unsigned char **fp_staging;  /* per full pull, inside `staging` */
    unsigned char **cv_staging;  /* per convert, inside `staging` */
    unsigned char *staging;      /* every staging buffer: whole pages */
    size_t staging_len;
    uint64_t staging_gen;        /* its allocation's number (prepare.c) */
    rs__staging_layout_t layout; /* the boxes' rounds and offsets */
    int bounded;                 /* more than one round: the run reads,
                                  * replays and verifies round by round
                                  * (rounds.c); waves are the rounds */
    struct rs_xquants *quants;   /* receiver-path quantized copies
                                  * (quantize.c), or NULL */
    RS_VEC(rs__exec_copy_t, replays);
    RS_VEC(rs__exec_copy_t, casts);
    /* per replay / cast: 1 when its destination overlaps another write of
     * the plan, so it runs alone, in loader order, after the others */
    unsigned char *replay_ordered, *cast_ordered;
    /* pipelined runs (nwaves > 0): the reads in wave order, grouped by
     * session inside each wave; per wave read, 1 when its destination
     * overlaps another write */
    rs_read_t *wave_reads;
    unsigned char *wave_late;
    rs__wave_t *waves;
    size_t nwaves;
    size_t *verify_at;           /* fully read piece groups, by wave; those
                                  * past the last wave's end run last */
    size_t nverify;
    struct rs__pool *pool;       /* stage threads, made by the first run
                                  * that uses them */
    rs__stage_job_t job;
    RS_VEC(rs__piece_t, pieces);  /* sorted by (shard, offset) */
    RS_VEC(size_t, partial);     /* shards with a digest, only partly read */
    rs__tap_t *taps;             /* fused digests (fused.c), sorted by dst */
    size_t ntaps;
    size_t *group_tap;           /* per piece group's first piece: its tap,
                                  * or SIZE_MAX */
    atomic_uint_fast64_t shards_fused; /* last run: digests the wire fed */
    const char **digests;        /* per plan shard, from rs_exec_set_digests */
    unsigned char *verify_buf;   /* for verify_partial */
    uint64_t verify_buf_len;
    uint64_t plan_bytes;

    int have_coverage;
    rs_coverage_t cov;
    unsigned char *param_state;  /* 0 missing, 1 partial, 2 full */

    double stage[RS_STAGE_COUNT_];
    double run_s;                /* wall time of the last run's wire to
                                  * verify stages; < 0: did not get there */
    uint64_t run_waves;          /* waves of the last run; 0: serial */
    uint64_t run_threads;        /* threads that ran its local stages */
    double deadline;             /* of the run in flight (rs__now_s); 0: none */
    int staged;                  /* the last run passed every check and
                                  * has not been installed yet */
    const char *failure;         /* short cause of the last failed run */
    char failure_msg[256];
    rs_exec_stats_t stats;
};

rs_status_t rs__exec_prepare(rs_exec_h x, rs_diag_t *diag);
void rs__exec_release(rs_exec_h x);
rs_status_t rs__exec_compute_coverage(rs_exec_h x, rs_diag_t *diag);
/* Before the wire stage: every shard the run will verify has a
 * well-formed digest (RS_ERR_VERIFY names a shard without one). */
rs_status_t rs__exec_check_digests(rs_exec_h x, rs_diag_t *diag);
rs_status_t rs__exec_verify(rs_exec_h x, rs_diag_t *diag);
/* Waits for the posted reads, for at most the per-wait timeout and what is
 * left of the run's deadline; a wait the deadline cut short is
 * RS_ERR_TIMEOUT naming `stage`. */
rs_status_t rs__exec_wait(rs_exec_h x, const char *stage, rs_diag_t *diag);
/* RS_ERR_CANCELLED (failure "cancelled") when the run's cancel flag is
 * raised, RS_ERR_TIMEOUT (failure "deadline") when its deadline passed,
 * before `stage` starts. */
rs_status_t rs__exec_check_deadline(rs_exec_h x, const char *stage,
                                    rs_diag_t *diag);
/* The failure a failed transport post or wait records: "cancelled" for
 * RS_ERR_CANCELLED, else "transport". */
const char *rs__exec_wire_cause(rs_status_t st);

/* Groups reads[begin, end) by session, keeping their order inside each
 * session; 0 when out of memory (the reads are unchanged then). */
int rs__exec_group_reads(rs_read_t *reads, size_t begin, size_t end,
                         size_t nsessions);

/* Prepare steps (prepare.c runs them in this order after the programs):
 * the pipelined run's waves (none when the run is serial: the `serial`,
 * `phased` or `progress` parameters, or fewer than two waves), the
 * overlap marks, the verification pieces and their schedule by wave. */
rs_status_t rs__exec_prepare_waves(rs_exec_h x, rs_diag_t *diag);
rs_status_t rs__exec_mark_overlaps(rs_exec_h x, rs_diag_t *diag);
rs_status_t rs__exec_prepare_pieces(rs_exec_h x, rs_diag_t *diag);
rs_status_t rs__exec_schedule_verify(rs_exec_h x, rs_diag_t *diag);
void rs__exec_release_waves(rs_exec_h x);

/* Piece groups (one shard each, pieces sorted by offset): the end of the
 * group starting at piece i, and the bytes of its shard it covers. */
size_t rs__piece_group_end(const rs__piece_t *p, size_t n, size_t i);
uint64_t rs__pieces_covered(const rs__piece_t *p, size_t i, size_t end);
/* Digests the fully covered shard of the piece group at piece i and
 * compares (RS_ERR_VERIFY on a mismatch; does not count it). Reads only:
 * groups may be checked at once on several threads. */
rs_status_t rs__exec_verify_group(rs_exec_h x, size_t i, rs_diag_t *diag);

/* Fused digests (fused.c): a tap for every shard one read brings whole,
 * when the transport fuses; armed (digests reset and lent to the
 * transport) for a run and disarmed after it; the digest the wire fed the
 * group at piece i, or 0 when it has none or was not fed whole. */
rs_status_t rs__exec_prepare_taps(rs_exec_h x, rs_diag_t *diag);
void rs__exec_release_taps(rs_exec_h x);
void rs__exec_taps_arm(rs_exec_h x, int on);
int rs__exec_fused_digest(rs_exec_h x, size_t i, uint64_t *digest_p);

/* Runs copies[0, n) into their destinations (replays or casts, `kind`
 * RS_STAGE_REPLAY or RS_STAGE_CONVERT): the unordered ones as one batch on
 * the executor's pool when it has one, then the ordered ones in order. */
rs_status_t rs__exec_run_copies(rs_exec_h x, int kind, rs_diag_t *diag);
/* Only the copies of `kind` marked ordered, in loader order. */
rs_status_t rs__exec_run_ordered(rs_exec_h x, int kind, rs_diag_t *diag);
/* One copy; RS_OK or the cast's error. */
rs_status_t rs__exec_copy(const rs__exec_copy_t *c);

/* The stage pool (one thread per transport worker), made on first use. */
rs_status_t rs__exec_pool(rs_exec_h x, rs_diag_t *diag);
/* Starts the job in x->job (its ranges set) on the pool; joins it. */
void rs__exec_job_start(rs_exec_h x);
rs_status_t rs__exec_job_join(rs_exec_h x, rs_diag_t *diag);

/* Prepare steps shared with the quantized copies' (prepare.c): reads of
 * `segs` into base (refusing any leaving `limit` bytes), and the replay of
 * copy ci from a staged read's staging. */
rs_status_t rs__exec_add_reads(rs_exec_h x, const rs_segment_t *segs,
                               size_t n, unsigned char *base, uint64_t limit,
                               const char *what, rs_diag_t *diag);
rs_status_t rs__exec_replay_program(rs_exec_h x, const rs_staged_read_t *fp,
                                    unsigned char *staging, size_t ci,
                                    rs_diag_t *diag);

/* The executor's own checks of a plan at prepare (guard.c), independent
 * of the planner; each refusal is RS_ERR_INPUT naming the copy and plan
 * entry. rs__exec_guard_on = 0 turns them off (benchmarks only). Replay of
 * copy ci from staged read fp: every element it reads lies in fp's box, dim
 * by dim (*box: the copy's box, for the samples). Destination of copy ci:
 * first to last byte inside its param. A cast: its row-major source fits
 * its convert staging. Writes (after every program): exact
 * segments inside the declared copies' bytes, no byte written twice but
 * where two declared copies overlap. */
extern int rs__exec_guard_on;
struct rs__box;
rs_status_t rs__exec_guard_replay(rs_exec_h x, const rs_staged_read_t *fp,
                                  size_t ci, struct rs__box *box,
                                  rs_diag_t *diag);
rs_status_t rs__exec_guard_dest(const rs_copy_desc_t *c, size_t ci,
                                uint64_t param_bytes, rs_diag_t *diag);
rs_status_t rs__exec_guard_cast(const rs_exec_h x, const rs_convert_t *cv,
                                const rs__exec_copy_t *xc, rs_diag_t *diag);
rs_status_t rs__exec_guard_writes(rs_exec_h x, rs_diag_t *diag);

/* Replays checked on sampled elements (replay_check.c): the samples of a
 * replay from its copy's box; one replay run and checked (RS_ERR_VERIFY
 * naming the copy when a sampled element differs from its staged one). */
void rs__exec_replay_samples(rs__exec_copy_t *xc, const rs_staged_read_t *fp,
                             const unsigned char *staging,
                             const struct rs__box *box);
rs_status_t rs__exec_replay(rs_exec_h x, const rs__exec_copy_t *xc,
                            rs_diag_t *diag);

/* Receiver-path quantized copies (quantize.c). Reads a plan's records
 * need; their staging, reads (right after the full pulls') and the two
 * replays of each; marking those replays ordered (after the overlap
 * marks), so that they run after rs__exec_quantize; the records prepared
 * and the reads of record i (the waves cut after them); the serial stage
 * itself (RS_ERR_INPUT naming the tensor and block for a non-finite block,
 * failure "quantize"); its time added to the convert stage. */
size_t rs__exec_quant_reads(rs_plan_h plan);
/* A record the executor quantizes (receiver path, planned), and the bytes
 * of its staging in whole pages (source box, FP8 box, scales). */
int rs__exec_quant_wanted(const rs_quantized_t *r);
rs_status_t rs__exec_quant_box_bytes(rs_capture_h cap, const rs_quantized_t *r,
                                     uint64_t *bytes_p, rs_diag_t *diag);
rs_status_t rs__exec_prepare_quant(rs_exec_h x, rs_diag_t *diag);
void rs__exec_quant_order(rs_exec_h x);
size_t rs__exec_quant_count(const rs_exec_h x);
size_t rs__exec_quant_nreads(const rs_exec_h x, size_t i);
rs_status_t rs__exec_quantize(rs_exec_h x, rs_diag_t *diag);
/* One box of it: a pipelined run's task (failure cause left to the job). */
rs_status_t rs__exec_quantize_one(rs_exec_h x, size_t i, rs_diag_t *diag);
void rs__exec_quant_time(rs_exec_h x);
void rs__exec_release_quant(rs_exec_h x);

/* A plan whose staging takes more than one round (rounds.c): its waves
 * are the rounds, the direct reads in the first; the shards whose staged
 * pieces lie in two rounds are re-read whole for verification (added to
 * `partial`); the round of a piece group (-1: not verified in a round,
 * nwaves: after the last); and the run, round after round. */
rs_status_t rs__exec_prepare_rounds(rs_exec_h x, rs_diag_t *diag);
rs_status_t rs__exec_rounds_spanning(rs_exec_h x, rs_diag_t *diag);
long rs__exec_group_round(const rs_exec_h x, size_t i, size_t end);
rs_status_t rs__exec_run_rounds(rs_exec_h x, rs_diag_t *diag);
/* Copies [begin, end) of `kind`, as rs__exec_run_copies runs them all. */
rs_status_t rs__exec_run_copy_range(rs_exec_h x, int kind, size_t begin,
                                    size_t end, int use_pool, rs_diag_t *diag);

/* Posts wave (or round) w of wave_reads and waits for it, timed into the
 * wire stage (pipeline.c). */
rs_status_t rs__exec_wire_wave(rs_exec_h x, size_t w, rs_diag_t *diag);

/* The wire, replay, cast and verify stages overlapped by waves. */
rs_status_t rs__exec_run_pipelined(rs_exec_h x, rs_diag_t *diag);

#endif
