/* Delta or full bytes, per run, by the cost model (docs/cost-model.md,
 * docs/simulator.md#deltas): a delta saves bytes but costs two more
 * reads (the header and the index entries before the payload), which at
 * 100 ns a read and 400 Gb/s weigh as much as 10 kB on the wire; a run
 * smaller than that, or one where most elements changed, reads its full
 * bytes. */
#include "core/delta_estimate.h"

double rs__read_seconds(double bytes, double reads, double nic_gbps,
                        double descriptor_ns)
{
    return bytes * 8 / (nic_gbps * 1e9) + reads * descriptor_ns * 1e-9;
}

int rs__delta_read_pays(uint64_t full_bytes, double delta_bytes,
                        uint64_t delta_reads, double nic_gbps,
                        double descriptor_ns)
{
    const double full = rs__read_seconds((double)full_bytes, 1, nic_gbps,
                                         descriptor_ns);
    const double delta = rs__read_seconds(delta_bytes, (double)delta_reads,
                                          nic_gbps, descriptor_ns);
    return delta < full;
}
