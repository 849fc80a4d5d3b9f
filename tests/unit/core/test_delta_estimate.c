/* The expected size of a delta (core/delta_estimate.h) against the codec
 * itself: seeded shards with each element changed at a share p are encoded
 * by rs__delta_encode, and the estimate of the whole shard and of
 * sub-ranges (header, index entries, payload of the chunks covering them,
 * as rs__delta_index_span and rs__delta_payload_span give them) must come
 * within a few percent of the real bytes (exactly with nothing changed),
 * the changed elements moving by +-1 as integers at a known share, the
 * others by larger steps (the relative kinds' assumption); the binomial expectation of one chunk is checked
 * against a sum over every count of the distribution built element by
 * element; and the choice between delta and full bytes follows the cost
 * model at its edges. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/delta_estimate.h"
#include "core/delta_impl.h"

static uint64_t rng = 5;

static double unit(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* The step shares the shards below are made with: of the changed
 * elements STEP1 move by +-1, and of the others ESCAPE by a step no signed
 * byte holds. */
#define STEP1 0.85
#define ESCAPE 0.2

/* Expected skip bytes of one change among k in a chunk of len: gaps taken
 * as geometric at rate k / len; a gap of g >= 64 (64 (j - 1) + 1) takes
 * a j-th. */
static double skips(uint32_t len, uint32_t k)
{
    double sum = 0;
    for (uint32_t j = 1; k < len; j++) {
        const double g = 64.0 * (64.0 * (j - 1) + 1);
        if (g >= len)
            break;
        sum += pow(1 - (double)k / len, g);
    }
    return sum;
}

/* The codec's size rule, written out again: the smallest kind, steps and
 * step map at their expectation for the shares STEP1 and ESCAPE. */
static double size_rule(uint32_t len, uint32_t es, uint32_t k)
{
    if (k == 0)
        return 0;
    const uint32_t bits_bytes = (len + 7) / 8;
    const double x = k * (1 - STEP1) * (1 + ESCAPE * es);
    double best = (double)k * (2 + es);
    double bitmap = (double)bits_bytes + (double)k * es;
    double steps = k * (1 + skips(len, k)) + x;
    double map = (double)((len + 3) / 4) + x;
    best = bitmap < best ? bitmap : best;
    best = steps < best ? steps : best;
    best = map < best ? map : best;
    return (double)len * es < best ? (double)len * es : best;
}

/* E[size] summed over every k from 0 to len, the binomial distribution
 * built element by element (each one changing or not), not from a formula
 * for its terms. */
static double expect_by_convolution(uint32_t len, uint32_t es, double p)
{
    double *dist = calloc((size_t)len + 1, sizeof(double));
    assert_non_null(dist);
    dist[0] = 1;
    for (uint32_t i = 1; i <= len; i++) {
        for (uint32_t k = i; k > 0; k--)
            dist[k] = dist[k] * (1 - p) + dist[k - 1] * p;
        dist[0] *= 1 - p;
    }
    double sum = 0;
    for (uint32_t k = 0; k <= len; k++)
        sum += dist[k] * size_rule(len, es, k);
    free(dist);
    return sum;
}

static void test_chunk_expectation(void **state)
{
    (void)state;
    static const double shares[] = {0.0005, 0.002, 0.0213, 0.05, 0.13, 0.3};
    static const uint32_t lens[] = {8, 64, 1000, 4096};
    static const uint32_t sizes[] = {1, 2, 4};
    for (size_t i = 0; i < sizeof(shares) / sizeof(shares[0]); i++)
        for (size_t j = 0; j < 4; j++)
            for (size_t e = 0; e < 3; e++) {
                const double p = shares[i];
                double want = expect_by_convolution(lens[j], sizes[e], p);
                double got = rs__delta_chunk_expect(lens[j], sizes[e], p,
                                                    STEP1, ESCAPE);
                if (!(fabs(got - want) <= 1e-9 * want + 1e-12))
                    fail_msg("chunk of %u, E=%u, share %g: %.12g, want %.12g",
                             lens[j], sizes[e], shares[i], got, want);
            }
    assert_true(rs__delta_chunk_expect(4096, 2, 0, STEP1, ESCAPE) == 0);
    /* every element changed to a value far from the old: raw */
    assert_true(rs__delta_chunk_expect(4096, 2, 1, 0, 1) == 4096.0 * 2);
    assert_true(rs__delta_chunk_expect(4096, 1, 1, 0, 1) == 4096.0);
    /* every element one step away: a step map, 2 bits an element */
    assert_true(rs__delta_chunk_expect(4096, 2, 1, 1, 0) == 1024.0);
}

/* x + d (|d| < 256) as a little-endian integer of es bytes, wrapping. */
static void add_le(unsigned char *x, uint32_t es, int d)
{
    const uint64_t u = (uint64_t)(int64_t)d;
    unsigned carry = 0;
    for (uint32_t i = 0; i < es; i++) {
        const unsigned sum = x[i] + ((unsigned)(u >> (8 * i)) & 0xff) + carry;
        x[i] = (unsigned char)sum;
        carry = sum >> 8;
    }
}

/* A shard of n elements of es bytes, each changed with probability p: by
 * +-1 (a share STEP1), else by a step of 2 .. 127 or, a share ESCAPE of
 * those, by flipping the top bit (a step no signed byte holds). */
static void make(unsigned char *old, unsigned char *neu, uint64_t n,
                 uint32_t es, double p)
{
    for (uint64_t i = 0; i < n * es; i++)
        old[i] = (unsigned char)(unit() * 256);
    memcpy(neu, old, n * es);
    for (uint64_t i = 0; i < n; i++) {
        if (unit() >= p)
            continue;
        const int sign = unit() < 0.5 ? 1 : -1;
        if (unit() < STEP1)
            add_le(neu + i * es, es, sign);
        else if (unit() < ESCAPE)
            neu[i * es + es - 1] ^= 0x80;
        else
            add_le(neu + i * es, es, sign * (2 + (int)(unit() * 126)));
    }
}

/* The real bytes a receiver reads for [a, b) of the delta d. */
static double real_range(const unsigned char *d, uint64_t a, uint64_t b)
{
    rs__delta_hdr_t h;
    uint64_t first, count, ioff, ilen, poff, plen;
    rs_diag_t diag = {0};
    assert_int_equal(rs__delta_parse_header(d, RS__DELTA_HEADER, &diag, &h),
                     RS_OK);
    assert_int_equal(rs__delta_index_span(&h, a, b, &diag, &first, &count,
                                          &ioff, &ilen), RS_OK);
    assert_int_equal(rs__delta_payload_span(&h, d + ioff, count, &diag, &poff,
                                            &plen), RS_OK);
    return (double)(RS__DELTA_HEADER + ilen + plen);
}

static void within(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol * want))
        fail_msg("estimate %.0f against %.0f real bytes (tolerance %.0f %%)",
                 got, want, tol * 100);
}

static void test_against_the_codec(void **state)
{
    (void)state;
    static const double shares[] = {0, 0.002, 0.0213, 0.13, 0.462, 1};
    static const uint32_t sizes[] = {1, 2, 4};
    const uint64_t n = 96 * 4096 + 1000; /* a short last chunk */
    for (size_t e = 0; e < 3; e++) {
        const uint32_t es = sizes[e];
        unsigned char *old = malloc(n * es), *neu = malloc(n * es);
        unsigned char *d = malloc(rs__delta_bound(n, es, RS__DELTA_CHUNK));
        assert_non_null(old);
        assert_non_null(neu);
        assert_non_null(d);
        for (size_t s = 0; s < sizeof(shares) / sizeof(shares[0]); s++) {
            make(old, neu, n, es, shares[s]);
            size_t len;
            rs_diag_t diag = {0};
            assert_int_equal(rs__delta_encode(old, neu, n, es, RS__DELTA_CHUNK,
                                              1, 2, d, &diag, &len), RS_OK);
            rs__delta_est_t est;
            rs__delta_est_init(&est, shares[s], es, 0);
            rs__delta_est_steps(&est, STEP1, ESCAPE);
            /* the whole shard, and runs: many chunks, one chunk's middle,
             * the tail */
            const uint64_t runs[][2] = {{0, n}, {5000, 70 * 4096 + 17},
                                        {8200, 8300}, {n - 3000, n}};
            /* nothing or everything changed: exact; else within the
             * draw's spread (a chunk's payload varies more than many
             * chunks') */
            const int exact = shares[s] == 0;
            within(rs__delta_est_range(&est, n, 0, n), (double)len,
                   exact ? 0 : 0.06);
            for (size_t r = 0; r < 4; r++) {
                const double real = real_range(d, runs[r][0], runs[r][1]);
                const double tol = exact ? 0
                                   : runs[r][1] - runs[r][0] > 100000 ? 0.06
                                                                      : 0.35;
                within(rs__delta_est_range(&est, n, runs[r][0], runs[r][1]),
                       real, tol);
            }
        }
        free(old);
        free(neu);
        free(d);
    }
}

static void test_choice(void **state)
{
    (void)state;
    /* at 400 Gb/s and 100 ns a read, two more reads weigh 10,000 bytes */
    assert_false(rs__delta_read_pays(9000, 0, 3, 400, 100));
    assert_true(rs__delta_read_pays(11000, 0, 3, 400, 100));
    assert_false(rs__delta_read_pays(1 << 20, (1 << 20) - 9000, 3, 400,
                                     100));
    assert_true(rs__delta_read_pays(1 << 20, (1 << 20) - 11000, 3, 400,
                                    100));
    /* a chain of two deltas: five more reads, 25,000 bytes */
    assert_false(rs__delta_read_pays(24000, 0, 6, 400, 100));
    assert_true(rs__delta_read_pays(26000, 0, 6, 400, 100));
    /* a delta as large as the bytes never pays */
    assert_false(rs__delta_read_pays(1 << 30, (double)(1 << 30), 3, 400,
                                     0.001));
    /* every element changed, none by a step: the estimate is above the
     * full bytes */
    rs__delta_est_t est;
    rs__delta_est_init(&est, 1, 2, 0);
    rs__delta_est_steps(&est, 0, 1);
    const double d = rs__delta_est_range(&est, 1 << 20, 0, 1 << 20);
    assert_true(d > (double)(2u << 20));
    assert_false(rs__delta_read_pays(2u << 20, d, 3, 400, 100));
    assert_true(fabs(rs__read_seconds(50e9 / 8 * 8, 10, 400, 100) -
                     (1 + 1e-6)) < 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunk_expectation),
        cmocka_unit_test(test_against_the_codec),
        cmocka_unit_test(test_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
