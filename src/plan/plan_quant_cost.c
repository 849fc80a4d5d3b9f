/* The estimated time of each path of a quantized copy, by which the planner
 * chooses between them (docs/quantized-refit.md, "When each is chosen"):
 * the cost model's formula (bytes over the NIC plus a price per descriptor,
 * docs/cost-model.md) applied to the shards a path reads, each read either
 * by its exact runs or as one coalesced span, whichever is cheaper (the
 * staged variant the cost model would consider), plus, for the receiver
 * path, a fixed cost per quantized box. The plan itself is
 * then built and costed as ever; this only picks what its derived copies
 * read. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "plan/plan_quant.h"
#include "model/sources_impl.h"

/* What a receiver box costs beyond its bytes on the wire: a staging
 * buffer, a quantize task and the replay of its two derived copies. The
 * quantization itself is left out as the cost model leaves out local
 * replays: a pipelined run quantizes wave i's boxes on the executor's
 * threads while wave i + 1 is on the wire (docs/executor.md). An estimate,
 * as the descriptor's 100 ns is: ten descriptors' worth, so that small
 * copies a publisher serves, whose two reads cost more than their bytes,
 * are still read quantized rather than quantized on every receiver. */
#define RECEIVER_BOX_SECONDS 1e-6

/* 1 when shard b holds the same box as shard a (a replica). */
static int same_box(const rs__source_shard_t *a, const rs__source_shard_t *b,
                    int n)
{
    return memcmp(a->offset, b->offset, (size_t)n * sizeof(int64_t)) == 0 &&
           memcmp(a->shape, b->shape, (size_t)n * sizeof(int64_t)) == 0;
}

/* The box [lo, hi) read from one row-major shard: its bytes, its runs
 * (the dims the box spans whole from the innermost out form one run) and
 * the span from its first byte to its last. 0 when they do not meet. */
static int shard_part(const rs__source_tensor_t *t, const rs__source_shard_t *sh,
                      const int64_t *lo, const int64_t *hi, double *bytes,
                      double *runs, double *span)
{
    int64_t a[RS_MAX_DIMS] = {0}, n[RS_MAX_DIMS] = {0};
    double elems = 1, nruns = 1, first = 0, last = 0, stride = 1;
    int whole = 1;
    for (int d = 0; d < t->ndim; d++) {
        int64_t s = sh->offset[d], e = s + sh->shape[d];
        a[d] = lo[d] > s ? lo[d] : s;
        int64_t b = hi[d] < e ? hi[d] : e;
        if (b <= a[d])
            return 0;
        n[d] = b - a[d];
        elems *= (double)n[d];
    }
    for (int d = t->ndim - 1; d >= 0; d--) {
        /* inner dims spanned whole, and the first one not, make a run;
         * every index of the dims outside it starts another */
        if (!whole)
            nruns *= (double)n[d];
        else if (n[d] != sh->shape[d])
            whole = 0;
        first += (double)(a[d] - sh->offset[d]) * stride;
        last += (double)(a[d] + n[d] - 1 - sh->offset[d]) * stride;
        stride *= (double)sh->shape[d];
    }
    *bytes = elems * (double)t->elsize;
    *runs = nruns;
    *span = (last - first + 1) * (double)t->elsize;
    return 1;
}

/* The cheaper of reading one shard's part by its runs or as one span;
 * 0 when they do not meet. */
static double part_seconds(const rs__source_tensor_t *t,
                           const rs__source_shard_t *sh, const int64_t *lo,
                           const int64_t *hi, double s_per_byte,
                           double s_per_desc)
{
    double bytes, runs, span;
    if (sh->numel == 0 || !shard_part(t, sh, lo, hi, &bytes, &runs, &span))
        return 0;
    double exact = bytes * s_per_byte + runs * s_per_desc;
    double coalesced = span * s_per_byte + s_per_desc;
    return exact < coalesced ? exact : coalesced;
}

/* The time to read [lo, hi) of tensor t: from one shard when one holds it
 * all (the first that does; `holder` when it is known to be that one,
 * else SIZE_MAX), else from every shard it meets, each by its runs or as
 * one span, a replica (a shard with the box of one met before) counted
 * once. INFINITY when t is not published. */
static double read_seconds(const rs__source_tensor_t *t, int ndim,
                           const int64_t *lo, const int64_t *hi,
                           size_t holder, double s_per_byte,
                           double s_per_desc)
{
    double total = 0;
    if (t == NULL || t->ndim != ndim)
        return INFINITY; /* not published, or not as the copy sees it */
    if (holder != SIZE_MAX)
        return part_seconds(t, &t->shards[holder], lo, hi, s_per_byte,
                            s_per_desc);
    for (size_t i = 0; i < t->shards_len; i++)
        if (rs__quant_shard_holds(&t->shards[i], ndim, lo, hi))
            return part_seconds(t, &t->shards[i], lo, hi, s_per_byte,
                                s_per_desc);
    size_t met[64], nmet = 0;
    for (size_t i = 0; i < t->shards_len; i++) {
        const rs__source_shard_t *sh = &t->shards[i];
        double part = part_seconds(t, sh, lo, hi, s_per_byte, s_per_desc);
        int replica = 0;
        if (part == 0)
            continue;
        for (size_t j = 0; !replica && j < nmet; j++)
            replica = same_box(&t->shards[met[j]], sh, ndim);
        if (replica)
            continue;
        if (nmet < sizeof(met) / sizeof(met[0]))
            met[nmet++] = i; /* past 64 parts, replicas may count twice */
        total += part;
    }
    return total;
}

/* An upper bound of the publisher path's time when one shard of the FP8
 * tensor and one of the scales hold all the copy needs (their holders
 * known): each part read as one span of at most its shard's bytes.
 * INFINITY otherwise. */
static double holders_bound(const rs__quant_tensors_t *t, double s_per_byte,
                            double s_per_desc)
{
    if (t->q == NULL || t->s == NULL || t->q_holder == SIZE_MAX ||
        t->s_holder == SIZE_MAX)
        return INFINITY;
    double bytes = (double)t->q->shards[t->q_holder].numel * (double)t->q->elsize +
                   (double)t->s->shards[t->s_holder].numel * (double)t->s->elsize;
    return bytes * s_per_byte + 2 * s_per_desc;
}

void rs__quant_path_costs(rs__quant_tensors_t *t,
                          const rs_plan_params_t *params,
                          const rs__planned_quant_t *pq, const int64_t *vlo,
                          const int64_t *vhi, double *pub_p, double *recv_p)
{
    double s_per_byte = 8.0 / (params->nic_gbps * 1e9);
    double s_per_desc = params->descriptor_ns * 1e-9;
    /* set for every dim below (not cleared: a string store per copy) */
    int64_t ghi[RS_MAX_DIMS], bhi[RS_MAX_DIMS];
    double box = 1;
    for (int d = 0; d < pq->ndim; d++) {
        ghi[d] = pq->bl.glo[d] + pq->bl.gn[d];
        bhi[d] = pq->bl.lo[d] + pq->bl.box[d];
        box *= (double)pq->bl.box[d];
    }
    /* the receiver path's least time: its box's bytes in one read and
     * the box's own cost; when the publisher path is below it, the
     * source's shards need not be looked at */
    double esize = pq->src_dtype == RS_DTYPE_F32 ? 4.0 : 2.0;
    double quant = RECEIVER_BOX_SECONDS;
    double floor = box * esize * s_per_byte + s_per_desc + quant;
    /* read from one shard of each (their holders known), the publisher
     * path costs at most both shards' bytes in one read each: at or
     * below the floor, that decides it without the parts' runs */
    *pub_p = holders_bound(t, s_per_byte, s_per_desc);
    if (!(*pub_p <= floor))
        *pub_p = read_seconds(t->q, pq->ndim, vlo, vhi, t->q_holder,
                              s_per_byte, s_per_desc) +
                 read_seconds(t->s, pq->ndim, pq->bl.glo, ghi, t->s_holder,
                              s_per_byte, s_per_desc);
    if (pq->src_dtype == RS_DTYPE_INVALID || *pub_p <= floor) {
        *recv_p = pq->src_dtype == RS_DTYPE_INVALID ? INFINITY : floor;
        return;
    }
    *recv_p = read_seconds(rs__quant_source(t), pq->ndim, pq->bl.lo, bhi,
                           SIZE_MAX, s_per_byte, s_per_desc) + quant;
}
