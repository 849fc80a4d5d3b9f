/* The expected size of a delta and the choice between a delta and the full
 * bytes (docs/simulator.md#deltas). Elements are taken to change
 * independently with one probability, so the changes in a chunk of L
 * elements are binomial(L, share); at the measured shares changes are
 * spread this way, not clustered (docs/delta.md: at 2 % almost every chunk
 * has one). The expectation is of the codec's own size rule, so a chunk
 * that mixes list and bitmap encodings across draws is charged each at its
 * probability, where the rule at the expected count would miss the
 * crossover. The relative kinds' bytes at k changes are taken at their
 * expectation given k: k (1 - step1) exceptions, and the skip bytes of
 * gaps between k changes spread evenly at random. */
#include <math.h>

#include "core/delta_estimate.h"
#include "core/delta_impl.h"

/* Expected skip bytes before one of k changes among len elements: a gap
 * of g elements takes ceil(floor(g / 64) / 64) of them, so at least j when
 * g >= 64 (64 (j - 1) + 1); a gap is taken as geometric with the chunk's
 * rate of changes, cut at the chunk's length. */
static double skips_per_change(uint32_t len, uint64_t k)
{
    const double lq = log1p(-(double)k / len);
    double sum = 0;
    for (uint64_t j = 1;; j++) {
        const double g = (double)RS__DS_GAP * (RS__DS_GAP * (j - 1) + 1);
        if (g >= len || k >= len)
            return sum;
        sum += exp(g * lq);
    }
}

/* Payload bytes of a chunk of len elements with k of them changed: the
 * smallest encoding (docs/delta.md, the encoding), the relative kinds at
 * their expectation. */
static double chunk_size(uint32_t len, uint32_t esize, uint64_t k,
                         double step1, double escape)
{
    if (k == 0)
        return 0;
    const uint64_t bitmap_bytes = ((uint64_t)len + 7) / 8;
    double list = (double)k * (2 + esize);
    double bitmap = (double)bitmap_bytes + (double)k * esize;
    double raw = (double)len * esize;
    const double xbytes = (double)k * (1 - step1) * (1 + escape * esize);
    double steps = (double)k * (1 + skips_per_change(len, k)) + xbytes;
    const uint64_t map_bytes = ((uint64_t)len + 3) / 4; /* whole bytes */
    double map = (double)map_bytes + xbytes;
    double best = list < bitmap ? list : bitmap;
    best = best < raw ? best : raw;
    best = best < steps ? best : steps;
    return best < map ? best : map;
}

double rs__delta_chunk_expect(uint32_t len, uint32_t esize, double share,
                              double step1, double escape)
{
    if (len == 0 || !(share > 0))
        return 0;
    if (share >= 1)
        return chunk_size(len, esize, len, step1, escape);
    /* the binomial's mass lies within a dozen standard deviations of its
     * mean, and 20 counts of it where the mean is near 0 (a Poisson tail);
     * summing only there keeps a chunk of 4096 to a few hundred terms */
    const double n = len, mu = n * share;
    const double sd = sqrt(mu * (1 - share));
    const double lo = floor(mu - 12 * sd - 20), hi = ceil(mu + 12 * sd + 20);
    const uint64_t first = lo < 1 ? 1 : (uint64_t)lo;
    const uint64_t last = hi > n ? len : (uint64_t)hi;
    const double lp = log(share), lq = log1p(-share), lnf = lgamma(n + 1);
    double sum = 0;
    for (uint64_t c = first; c <= last; c++) {
        const double k = (double)c;
        const double lpmf =
            lnf - lgamma(k + 1) - lgamma(n - k + 1) + k * lp + (n - k) * lq;
        sum += exp(lpmf) * chunk_size(len, esize, c, step1, escape);
    }
    return sum;
}

void rs__delta_est_init(rs__delta_est_t *e, double share, uint32_t esize,
                        uint32_t chunk)
{
    e->share = share > 0 ? (share < 1 ? share : 1) : 0;
    e->esize = esize;
    e->chunk = chunk > 0 ? chunk : RS__DELTA_CHUNK;
    rs__delta_est_steps(e, RS__DELTA_EST_STEP1, RS__DELTA_EST_ESCAPE);
}

static double clamp01(double x)
{
    return x > 0 ? (x < 1 ? x : 1) : 0;
}

void rs__delta_est_steps(rs__delta_est_t *e, double step1, double escape)
{
    e->step1 = clamp01(step1);
    e->escape = clamp01(escape);
    e->chunk_bytes = rs__delta_chunk_expect(e->chunk, e->esize, e->share,
                                            e->step1, e->escape);
    for (unsigned i = 0; i < RS__DELTA_EST_TAILS; i++) {
        e->tail_len[i] = 0;
        e->tail_bytes[i] = 0;
    }
}

/* The expected payload of a last chunk shorter than the others, kept by
 * its length: every run that reaches the end of a shard of that size asks
 * again. */
static double tail_expect(rs__delta_est_t *e, uint32_t len)
{
    const unsigned slot = (len * 2654435761u) % RS__DELTA_EST_TAILS;
    if (e->tail_len[slot] != len) {
        e->tail_len[slot] = len;
        e->tail_bytes[slot] = rs__delta_chunk_expect(len, e->esize, e->share,
                                                     e->step1, e->escape);
    }
    return e->tail_bytes[slot];
}

double rs__delta_est_range(rs__delta_est_t *e, uint64_t n, uint64_t a,
                           uint64_t b)
{
    if (a >= b || b > n)
        return 0;
    const uint64_t first = a / e->chunk, last = (b - 1) / e->chunk;
    const uint64_t count = last - first + 1;
    const uint64_t tail = n % e->chunk; /* the last chunk's length, if short */
    const int short_last = tail != 0 && last == n / e->chunk;
    double payload = (double)(count - (uint64_t)short_last) * e->chunk_bytes;
    if (short_last)
        payload += tail_expect(e, (uint32_t)tail);
    return RS__DELTA_HEADER + (double)RS__DELTA_ENTRY * (double)(count + 1) +
           payload;
}
