/* `reshard simulate`'s state, shared by its three files: simulate.c (options,
 * loading, planning every rank, progress), simulate_report.c (the human
 * summary) and simulate_json.c (the reshard.simulate.v1 report). */
#ifndef RESHARD_TOOLS_SIMULATE_H
#define RESHARD_TOOLS_SIMULATE_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "reshard_layout/layout.h"
#include "reshard_layout/model.h"

#define RS_SIM_SCHEMA "reshard.simulate.v1"
#define RS_SIM_DEFAULT_DEVICE_GIB 80.0

enum { RS_SIM_PROGRESS_AUTO = 0, RS_SIM_PROGRESS_ON, RS_SIM_PROGRESS_OFF };

typedef struct sim_args {
    const char *model, *train, *infer, *emit;
    double nic_gbps;        /* wire bound, and the planner's cost model */
    double descriptor_ns;   /* --descriptor-ns, the cost model's */
    double device_gib;      /* --device-memory */
    uint64_t max_segments;
    uint64_t staging_budget; /* --staging-budget; 0: the library's default */
    int json;
    int progress;           /* RS_SIM_PROGRESS_* */
    int cut_aligned;        /* --cut-aligned */
    int no_publisher_quant; /* --no-publisher-quant */
    double changed;         /* --changed-fraction F; < 0 when not given */
    double changed_fp8;     /* --changed-fraction-fp8; < 0: from F */
    int delta;              /* --delta / --no-delta; < 0 when neither */
} sim_args_t;

/* What one plan of a rank moves, for the FP8 comparison: with
 * publisher-side FP8 copies in the trainer tables, and without. */
typedef struct sim_path {
    uint64_t bytes;         /* on the wire */
    uint64_t staging_bytes; /* full pulls, converts, receiver-path boxes */
    uint64_t staging_peak;  /* what the executor holds of them under the
                             * staging budget */
    double est_seconds;
    uint64_t publisher, receiver; /* quantized copies per path */
    int complete;
} sim_path_t;

/* One inference rank: what it holds and what its plan moves. */
typedef struct receiver {
    int64_t rank;
    uint64_t bytes;         /* on the wire (rs_plan_stats_t.bytes_planned) */
    uint64_t needed;        /* the copies' bytes (needed_bytes) */
    uint64_t descriptors, sources, padding, uncovered, unbounded;
    uint64_t param_bytes;   /* the capture's parameters */
    uint64_t staging_bytes; /* every staged box at once (full pulls,
                             * converts, receiver-path boxes) */
    uint64_t staging_peak;  /* what the executor holds under the staging
                             * budget: its largest round, in whole pages */
    uint64_t staging_rounds;
    double plan_seconds, est_seconds;
    int coverage_ok;
    /* FP8 targets (the vllm layout of an FP8 quantization_config). */
    uint64_t fp8_bytes;     /* FP8 parameters */
    uint64_t scale_bytes;   /* their float32 weight_scale_inv */
    sim_path_t with_pub;    /* the plan above (the tables' FP8 copies) */
    sim_path_t receiver_only; /* bf16 tables only: every block quantized
                               * by the receiver (unset with
                               * --no-publisher-quant: the plan above is) */
    /* With deltas (--changed-fraction): every run of the plan above read
     * as a delta or in full, whichever the cost model finds faster. */
    double delta_wire;      /* bytes on the wire, deltas and full runs */
    double delta_bytes;     /* of those, the delta reads' */
    uint64_t runs, delta_runs; /* the plan's runs, those taking a delta */
    uint64_t delta_descriptors; /* reads with deltas */
} receiver_t;

typedef struct sim {
    rs_model_h model;
    rs_layout_t train, infer;
    rs_sources_h sources;
    rs_sources_h sources_bf16; /* FP8 target: tables without FP8 copies */
    int fp8;               /* FP8 target; 2 when the tables carry copies */
    char fp8_spec[64];     /* "fp8_block:128x128:f8e4m3" */
    uint64_t *served_bf16; /* bytes per trainer session, sources_bf16 */
    rs_cuts_h cuts;        /* --cut-aligned: what the tables are split at */
    rs_transport_h transport;
    receiver_t *recv;
    size_t nsess;
    char **names;          /* per trainer session (plan session order) */
    uint64_t *served;      /* bytes per trainer session */
    uint64_t *fan_out;     /* receivers per trainer session */
    uint64_t redundant;    /* destination bytes read more than once */
    uint64_t extra_wire;   /* bytes pulled beyond those installed (full pulls) */
    uint64_t device_bytes; /* --device-memory in bytes */
    uint64_t staging_budget; /* --staging-budget (0: default) */
    struct sim_delta *delta; /* --changed-fraction: the estimators */
    double plan_seconds;
    int coverage_ok;
    char first_problem[512];
} sim_t;

/* A rank's memory: its parameters and its plan's staging, which live side
 * by side while it refits. */
uint64_t rs_sim_memory(const receiver_t *r);
/* The same on the receiver-only plan of an FP8 target. */
uint64_t rs_sim_memory_bf16(const receiver_t *r);
int rs_sim_fits(const sim_t *s, const receiver_t *r);
/* How many ranks do not fit in s->device_bytes. */
int64_t rs_sim_num_unfit(const sim_t *s);

/* Cross-rank figures both reports print. */
typedef struct sim_totals {
    double imbalance, wire_bound, mean_served, est_max;
    uint64_t max_served, max_in, serving, padding, unbounded, needed;
} sim_totals_t;
sim_totals_t rs_sim_totals(const sim_args_t *a, const sim_t *s);

/* An FP8 target's comparison: per path, the busiest NIC at line rate,
 * the slowest plan, the largest rank's wire bytes and memory. */
typedef struct sim_fp8_path {
    double wire_bound, est_max;
    uint64_t max_in, max_served, max_memory, bytes, publisher, receiver;
    int complete;
} sim_fp8_path_t;

typedef struct sim_fp8_totals {
    uint64_t fp8_bytes, scale_bytes, fp8_max, scale_max;
    sim_fp8_path_t pub, bf16; /* bf16: receiver-side only */
} sim_fp8_totals_t;
sim_fp8_totals_t rs_sim_fp8_totals(const sim_args_t *a, const sim_t *s);
void rs_sim_print_fp8(const sim_args_t *a, const sim_t *s);
void rs_sim_print_fp8_json(const sim_args_t *a, const sim_t *s);
void rs_sim_print_fp8_receiver(const sim_t *s, const receiver_t *x);

/* ---- deltas (simulate_delta.c) ---------------------------------------- */

/* The changed shares the delta estimate takes: bf16 (and every dtype but
 * FP8), FP8 codes, FP8 scales (docs/simulator.md#deltas). */
typedef struct sim_shares {
    double bf16, codes, scales;
    /* of the changed elements of each (bf16, codes, scales): the share
     * that moved by one as an integer of its bytes, and of the others the
     * share whose step needs more than a signed byte (the estimate's
     * assumption for the codec's relative kinds) */
    double step1[3], escape[3];
} sim_shares_t;
sim_shares_t rs_sim_delta_shares(const sim_args_t *a);
/* Sets up the estimators (s->delta) when deltas are on; RS_CLI_*. */
int rs_sim_delta_init(const sim_args_t *a, sim_t *s);
/* Estimates a rank's plan with deltas into r and s->delta's per-session
 * bytes; nothing when deltas are off. */
void rs_sim_delta_rank(const sim_args_t *a, sim_t *s, rs_plan_h plan,
                       receiver_t *r);
void rs_sim_delta_free(sim_t *s);

typedef struct sim_delta_totals {
    double wire_bound;          /* the busiest NIC's bytes with deltas */
    double max_in, max_served;  /* its bytes: a receiver's, a trainer's */
    double delta_bytes, wire;   /* all ranks: read as deltas, in all */
    uint64_t full_bytes;        /* all ranks: the plans' bytes without */
    uint64_t runs, delta_runs;
} sim_delta_totals_t;
/* 0 when deltas are off. */
int rs_sim_delta_totals(const sim_args_t *a, const sim_t *s,
                        sim_delta_totals_t *t);
void rs_sim_print_delta(const sim_args_t *a, const sim_t *s);
void rs_sim_print_delta_json(const sim_args_t *a, const sim_t *s);

/* The reports, on stdout; the note on stderr names the ranks that do not
 * fit (nothing when all do). */
void rs_sim_print_summary(const sim_args_t *a, const sim_t *s);
void rs_sim_print_json(const sim_args_t *a, const sim_t *s);
void rs_sim_note_unfit(const sim_t *s);

#endif
