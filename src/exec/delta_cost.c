/* The receiver's choice between a delta and the full bytes for one read
 * (docs/delta.md, "When a receiver takes a delta"): the cost model's time
 * (docs/cost-model.md) of each, with the receiver's NIC rate and
 * descriptor cost. A delta read is three reads per delta of the chain
 * (header, index entries, payload), so a range whose delta is small
 * against it takes the delta, and a small range (a few descriptors' worth
 * of bytes) or a shard that changed much is read whole. */
#include "core/delta.h"
#include "exec/delta_read.h"

double rs__read_cost_s(uint64_t bytes, uint64_t descriptors, double nic_gbps,
                       double descriptor_ns)
{
    return (double)bytes * 8.0 / (nic_gbps * 1e9) +
           (double)descriptors * descriptor_ns * 1e-9;
}

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

int rs__delta_pays(uint64_t nbytes, uint64_t delta_bytes,
                   uint64_t delta_descriptors, double nic_gbps,
                   double descriptor_ns)
{
    return rs__read_cost_s(delta_bytes, delta_descriptors, nic_gbps,
                           descriptor_ns) <
           rs__read_cost_s(nbytes, 1, nic_gbps, descriptor_ns);
}
