/* What a delta is expected to cost a receiver before it exists
 * (docs/simulator.md#deltas): the bytes of the header, index entries and
 * chunk payloads that cover a run, when each element changed with a given
 * probability, and the rule that decides whether a run is read as a delta
 * or in full. The simulator estimates with them; a receiver choosing for
 * real applies the same rule to the delta's actual spans. */
#ifndef RS_CORE_DELTA_ESTIMATE_H
#define RS_CORE_DELTA_ESTIMATE_H

#include <stdint.h>

/* Reads a receiver posts for one run taken as a delta: the header, its
 * index entries, its chunks' payload (docs/delta.md, reading a
 * sub-range). */
#define RS__DELTA_RANGE_READS 3u

/* Shorter last chunks remembered per estimator (one per shard size seen
 * recently). */
#define RS__DELTA_EST_TAILS 16u

/* What the relative kinds (steps, step map) are estimated from: the share
 * of changed elements whose step (new - old as an integer of the
 * element's bytes) is +1 or -1, and the share of the others whose step
 * does not fit a signed byte (an escaped exception, 1 + E bytes; the rest
 * take 1). Defaults: bf16 at lr 1e-6 as measured (docs/delta.md, "Steps of
 * the changed elements"). */
#define RS__DELTA_EST_STEP1 0.887
#define RS__DELTA_EST_ESCAPE 0.012

/* The expected delta of shards of one element size at one changed share. */
typedef struct rs__delta_est {
    double share;       /* probability that an element changed, 0 .. 1 */
    double step1;       /* of the changed: share at +1 or -1 */
    double escape;      /* of the others: share escaped */
    uint32_t esize;     /* 1, 2 or 4 */
    uint32_t chunk;     /* elements per chunk */
    double chunk_bytes; /* expected payload of a whole chunk */
    uint32_t tail_len[RS__DELTA_EST_TAILS];
    double tail_bytes[RS__DELTA_EST_TAILS];
} rs__delta_est_t;

/* Expected payload bytes of one chunk of len elements of esize bytes whose
 * elements each changed with probability share, independently: the
 * binomial expectation of the codec's size rule (the smallest of same,
 * list, bitmap, raw, steps and step map; docs/delta.md, the encoding),
 * with the relative kinds' bytes at k changes taken at their expectation
 * for the given step1 and escape shares (rs__delta_est_t). */
double rs__delta_chunk_expect(uint32_t len, uint32_t esize, double share,
                              double step1, double escape);

/* Sets e up for shards of esize bytes (1, 2 or 4) at the given share
 * (clamped to 0 .. 1) and chunk (0: RS__DELTA_CHUNK), with the default
 * step shares (RS__DELTA_EST_STEP1, RS__DELTA_EST_ESCAPE). */
void rs__delta_est_init(rs__delta_est_t *e, double share, uint32_t esize,
                        uint32_t chunk);

/* Sets e's step shares (each clamped to 0 .. 1). */
void rs__delta_est_steps(rs__delta_est_t *e, double step1, double escape);

/* Expected bytes a receiver reads to patch elements [a, b) (a < b <= n) of
 * a shard of n elements by a delta: the header, the index entries of the
 * chunks covering [a, b) and the one after them, and those chunks'
 * expected payloads. */
double rs__delta_est_range(rs__delta_est_t *e, uint64_t n, uint64_t a,
                           uint64_t b);

/* The cost model's time (docs/cost-model.md) of reading bytes in `reads`
 * one-sided reads. */
double rs__read_seconds(double bytes, double reads, double nic_gbps,
                        double descriptor_ns);

/* 1 when a run of full_bytes read in one descriptor is cheaper read as
 * deltas of delta_bytes in delta_reads reads (RS__DELTA_RANGE_READS per
 * delta: one, or each of a chain), by the cost model; a tie reads the full
 * bytes (they need no patching). */
int rs__delta_read_pays(uint64_t full_bytes, double delta_bytes,
                        uint64_t delta_reads, double nic_gbps,
                        double descriptor_ns);

#endif
