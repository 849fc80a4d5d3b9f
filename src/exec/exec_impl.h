/* Internal state of an executor, shared by its steps: prepare (reads,
 * staging, replay and cast programs), coverage, verification, records. */
#ifndef RS_EXEC_EXEC_IMPL_H
#define RS_EXEC_EXEC_IMPL_H

#include "core/clock.h"
#include "core/vec.h"
#include "reshard/plan.h" /* the plan's capture, rs_plan_capture */
#include "reshard/view.h"
#include "reshard/exec.h"

/* One strided local copy (full-pull replay or cast). */
typedef struct rs_xcopy {
    int ndim;
    int64_t shape[RS_MAX_DIMS];
    int64_t src_stride[RS_MAX_DIMS];
    int64_t dst_stride[RS_MAX_DIMS];
    const unsigned char *src;
    unsigned char *dst;
    rs_dtype_t from, to;
} rs_xcopy_t;

/* A piece of a published shard landing somewhere local: verification
 * re-reads shards from these in shard order. */
typedef struct rs_piece {
    size_t shard;        /* index into rs_plan_shards */
    uint64_t offset;     /* byte offset inside the shard */
    uint64_t nbytes;
    const unsigned char *at;
} rs_piece_t;

/* Stage timings of a run; negative = the stage did not run. */
enum {
    RS_STAGE_PREPARE, RS_STAGE_DESCRIPTORS, RS_STAGE_WIRE, RS_STAGE_REPLAY,
    RS_STAGE_CONVERT, RS_STAGE_VERIFY, RS_STAGE_INSTALL, RS_STAGE_COUNT_
};

typedef struct rs_bind {
    unsigned char *base;
    uint64_t nbytes;
} rs_bind_t;

struct rs_exec {
    rs_plan_h plan;
    rs_capture_h cap;
    rs_transport_h t;
    rs_exec_params_t params;
    rs_bind_t *binds;
    size_t nparams;
    int prepared;

    rs_read_t *reads;
    size_t nreads;
    rs_read_t *chunk;            /* progress mode: one chunk of reads */
    size_t *group_at;            /* progress mode: per-session cursors */
    size_t phase_end[3];         /* exact, full-pull, convert read ranges */
    unsigned char **fp_staging;  /* per full pull */
    unsigned char **cv_staging;  /* per convert */
    RS_VEC(rs_xcopy_t, replays);
    RS_VEC(rs_xcopy_t, casts);
    RS_VEC(rs_piece_t, pieces);  /* sorted by (shard, offset) */
    RS_VEC(size_t, partial);     /* shards with a digest, only partly read */
    const char **digests;        /* per plan shard, from rs_exec_set_digests */
    unsigned char *verify_buf;   /* for verify_partial */
    uint64_t verify_buf_len;
    uint64_t plan_bytes;

    int have_coverage;
    rs_coverage_t cov;
    unsigned char *param_state;  /* 0 missing, 1 partial, 2 full */

    double stage[RS_STAGE_COUNT_];
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

#endif
