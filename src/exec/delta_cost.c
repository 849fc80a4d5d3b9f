/* What a receiver's delta read of a range costs (docs/delta.md, "When a
 * receiver takes a delta"), for the cost model's choice between it and the
 * full bytes (rs__delta_read_pays, shared with the simulator), with the
 * receiver's NIC rate and descriptor cost. A delta read is three reads
 * per delta of the chain (header, index entries, payload), so a range
 * whose delta is small against it takes the delta, and a small range (a
 * few descriptors' worth of bytes) or a shard that changed much is read
 * whole. */
#include "core/delta.h"
#include "exec/delta_read.h"

void rs__delta_estimate(uint64_t nbytes, uint64_t shard_bytes,
                        uint64_t delta_bytes, uint32_t esize, uint32_t chunk,
                        uint64_t *bytes_p, uint64_t *descriptors_p)
{
    uint64_t n = esize > 0 ? shard_bytes / esize : 0;
    uint64_t nchunks = chunk > 0 ? rs__delta_nchunks(n, chunk) : 0;
    uint64_t fixed = RS__DELTA_HEADER + RS__DELTA_ENTRY * (nchunks + 1);
    uint64_t payload = delta_bytes > fixed ? delta_bytes - fixed : 0;
    uint64_t span_chunks = chunk > 0 && esize > 0
                               ? nbytes / esize / chunk + 2 : 2;
    /* the payload share of the range, in long double: payload * nbytes
     * may pass 2^64 */
    long double share = shard_bytes > 0
                            ? (long double)payload * (long double)nbytes /
                                  (long double)shard_bytes
                            : (long double)payload;
    *bytes_p = RS__DELTA_HEADER + RS__DELTA_ENTRY * (span_chunks + 1) +
               (uint64_t)share;
    *descriptors_p = 3;
}
