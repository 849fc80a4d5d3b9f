/* The receiver's delta reads (docs/delta.md, "Receivers"): a transport
 * that stands in front of the real one and serves a read of a published
 * shard range from a delta where that pays, patching a copy of the range
 * that the library owns and knows holds an earlier version.
 *
 * The copy ("held" bytes) is kept per read of the plan, in memory no one
 * else writes: after every read it is refreshed from the bytes read, and
 * it counts as holding a version only once the run that read it passed
 * verification (rs__delta_reads_done). A read whose held copy holds the
 * version a chain of listed deltas starts from, and for which the cost
 * model (rs__delta_read_pays) prefers the delta, reads the delta's header,
 * the index entries and the payload covering the range, patches the copy
 * (rs__delta_apply_range checks every byte it uses before it writes) and
 * copies it to the read's destination; any refused delta is read whole
 * instead. The run's verification then checks the full new digest, so a
 * wrong patch never installs.
 *
 * A read landing in memory the receiver owns, keeps from one pull to the
 * next and that nothing but its reads writes (its shadows, handed with
 * rs__delta_reads_in_place) is its own copy: the delta patches the
 * destination itself, a full read needs nothing more, and no memory is
 * allocated or counted against the budget. The same rules hold: the
 * destination holds a version only after its run passed verification. */
#ifndef RS_EXEC_DELTA_READ_H
#define RS_EXEC_DELTA_READ_H

#include <stdint.h>

#include "reshard/plan.h"
#include "reshard/transport.h"

/* One delta a table lists for a shard. */
typedef struct rs__delta_ref {
    int64_t base, version;
    uint64_t addr, bytes, digest;
    uint32_t esize, chunk;
} rs__delta_ref_t;

/* One published shard: its session (the plan's index), full bytes, and
 * its deltas refs[first, first + count) (count 0: none listed); serves 1
 * when its table entry has a `deltas` key (its publisher writes deltas,
 * even when this version lists none). */
typedef struct rs__delta_src {
    uint32_t session;
    uint64_t addr, nbytes;
    size_t first, count;
    int serves;
} rs__delta_src_t;

/* What the reads of a run did. */
typedef struct rs__delta_stats {
    uint64_t delta_runs;   /* reads served from deltas */
    uint64_t delta_bytes;  /* bytes read for them: headers, index, payload */
    uint64_t delta_full;   /* the bytes those reads stand for */
    uint64_t whole_runs;   /* reads read whole */
    uint64_t whole_bytes;
    uint64_t refused;      /* deltas refused, their reads read whole */
    /* The copies (rs__delta_reads_keep): held after the run (pieces,
     * bytes), left out by the budget, and left out because they did not
     * fit the memory available (rs_memory_available) or malloc failed. */
    uint64_t held_runs, held_bytes;
    uint64_t over_budget_runs, over_budget_bytes;
    uint64_t no_memory_runs, no_memory_bytes;
    /* Of delta_runs and delta_full: the reads patched in place. */
    uint64_t in_place_runs, in_place_bytes;
} rs__delta_stats_t;

/* Memory patched in place: [base, base + nbytes). */
typedef struct rs__delta_span {
    void *base;
    uint64_t nbytes;
} rs__delta_span_t;

/* Wraps `inner` (owned from then on, also on error) into a transport that
 * takes deltas; nic_gbps and descriptor_ns price the choice. */
rs_status_t rs__delta_reads_wrap(rs_transport_h inner, double nic_gbps,
                                 double descriptor_ns, rs_diag_t *diag,
                                 rs_transport_h *t_p);

/* 1 when t was made by rs__delta_reads_wrap. */
int rs__delta_reads_is(rs_transport_h t);

/* The next run reads `version` (< 0: no deltas; the held copies are still
 * refreshed) with the published shards and their deltas (copied; srcs
 * sorted by session and addr, every shard the plan may read). Clears the
 * stats. */
rs_status_t rs__delta_reads_set(rs_transport_h t, int64_t version,
                                const rs__delta_src_t *srcs, size_t nsrc,
                                const rs__delta_ref_t *refs, size_t nref,
                                rs_diag_t *diag);

/* After the run: ok (it passed verification) makes every copy it
 * refreshed hold its version; else no copy holds any version. */
void rs__delta_reads_done(rs_transport_h t, int ok);

void rs__delta_reads_stats(rs_transport_h t, rs__delta_stats_t *s);

/* Before a run: reads landing wholly inside one of the n spans (disjoint;
 * copied) are patched in place. A new `epoch` says the spans' bytes were
 * written by something else since the last call (a rebind, a rollback):
 * no read patched in place holds a version then. */
rs_status_t rs__delta_reads_in_place(rs_transport_h t,
                                     const rs__delta_span_t *spans, size_t n,
                                     uint64_t epoch, rs_diag_t *diag);

/* Before a run, from the executor: its staging (base, nbytes; NULL, 0
 * when it does not keep each staged read in its place from one run to
 * the next, as when the staging budget takes more than one round), so
 * that staged reads landing wholly in it are patched in place as in the
 * spans above: nothing writes a staged read's bytes but that read, and
 * replays, casts and quantization only read them. A new `gen` (staging
 * allocated again) says it holds no version. */
void rs__delta_reads_staging(rs_transport_h t, unsigned char *base,
                             uint64_t nbytes, uint64_t gen);

/* ---- the copies kept (delta_keep.c) ---- */

/* The piece of `rd` from byte `off` on: up to the end of the published
 * shard holding it, or to the next shard's start (srcs sorted by session
 * and addr); *src_p its shard, NULL when no shard holds it. Pieces are
 * cut at every shard's edges, so a read's pieces stay the same from one
 * version to the next. */
rs_read_t rs__delta_piece(const rs__delta_src_t *srcs, size_t nsrc,
                          const rs_read_t *rd, uint64_t off,
                          const rs__delta_src_t **src_p);

/* A piece whose copy is kept. */
typedef struct rs__delta_key {
    uint32_t session;
    uint64_t addr, nbytes;
} rs__delta_key_t;

/* The copies a run keeps: keys sorted by (session, addr, nbytes). */
typedef struct rs__delta_keep {
    rs__delta_key_t *keys;
    size_t n;
    uint64_t bytes;                        /* their bytes, <= the budget */
    uint64_t over_runs, over_bytes;        /* worth keeping, left out */
} rs__delta_keep_t;

/* Which reads of a plan land in place (they need no copy): its exact
 * segments (in the shadows), its staged reads (in a staging of one
 * round): staged full pulls, receiver-path quantization's source boxes
 * and converts. */
#define RS__DELTA_IN_PLACE_EXACT 1u
#define RS__DELTA_IN_PLACE_STAGED 2u

/* Chooses, among the pieces of every read of `plan` whose shard serves
 * deltas, those whose copies the cost model says gain most per byte
 * kept, up to `budget` bytes (docs/delta.md, "The delta budget"); those
 * in `held` (copies holding a verified version) first. in_place: the
 * RS__DELTA_IN_PLACE_* reads that land in place, left out. */
rs_status_t rs__delta_keep_choose(rs_plan_h plan, const rs__delta_src_t *srcs,
                                  size_t nsrc, const rs__delta_ref_t *refs,
                                  const rs__delta_keep_t *held,
                                  uint64_t budget, unsigned in_place,
                                  double nic_gbps,
                                  double descriptor_ns, rs__delta_keep_t *out);
void rs__delta_keep_free(rs__delta_keep_t *k);
/* Orders keys by (session, addr, nbytes), for qsort and bsearch. */
int rs__delta_key_cmp(const void *a, const void *b);
int rs__delta_keep_has(const rs__delta_keep_t *k, uint32_t session,
                       uint64_t addr, uint64_t nbytes);

/* After rs__delta_reads_set: the next runs keep copies only of the pieces
 * rs__delta_keep_choose picks for `plan` within `budget`; copies of the
 * others are freed now. Without a call every piece keeps its copy. Reads
 * patched in place are not copies: the budget does not see them. */
rs_status_t rs__delta_reads_keep(rs_transport_h t, rs_plan_h plan,
                                 uint64_t budget, unsigned in_place,
                                 rs_diag_t *diag);

/* ---- the choice (delta_cost.c) ---- */

/* The bytes and descriptors a delta read of `nbytes` of a shard of
 * shard_bytes takes, for one delta of delta_bytes (esize, chunk): the
 * header, the index entries of the chunks covering the range, and the
 * payload assumed spread evenly over the shard (3 descriptors). */
void rs__delta_estimate(uint64_t nbytes, uint64_t shard_bytes,
                        uint64_t delta_bytes, uint32_t esize, uint32_t chunk,
                        uint64_t *bytes_p, uint64_t *descriptors_p);

/* Whether the delta pays is the cost model's rule shared with the
 * simulator: rs__delta_read_pays (core/delta_estimate.h). */

#endif
