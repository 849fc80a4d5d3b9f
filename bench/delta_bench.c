/* The delta codec against memcpy, measured in the same run. The publisher
 * in arena staging copies each version into an arena that still holds the
 * previous one; with deltas on, that copy is rs__delta_encode, which also
 * writes the delta. For element sizes 1, 2 and 4 bytes and 0 %, 0.1 %, 2 %,
 * 30 % and 100 % of the elements changed (seeded, spread at random; each
 * changed as an optimizer step on fp32 masters changes a bf16 weight or an
 * FP8 code, as measured at lr 1e-6 (docs/delta.md): 89 % by +-1 as an
 * integer of its bytes, 11 % by a step of 2 to 127, 0.1 % to a value far
 * away; or, with "random", each to a random other value), each
 * round restores the old bytes, times a memcpy of the new ones over them,
 * restores again and times the encoding copy; the ratio encode / memcpy is
 * the median over the rounds (min and max beside it), in wall time and in
 * the thread's CPU time (which leaves out the time the thread waited for
 * a core: on a shared machine the wall ratio moves with the load, the CPU
 * one much less, since both copies still pay their own memory stalls). It
 * also prints the
 * delta's size against the full bytes and the receiver's patch (the whole
 * delta applied to the old bytes, checks included) against a memcpy of the
 * full bytes. The new bytes and the patched ones are compared with the
 * source, so a wrong figure cannot come from a wrong copy.
 *
 *   delta_bench [MiB] [rounds] [steps|random]
 *       bytes of the shard, default 128 MiB; rounds, default 7; how the
 *       changed elements change, default steps */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/delta.h"

#define BENCH_NAME "delta_bench"
#include "bench_util.h"

static uint64_t rng = 1;

static uint64_t rnd(uint64_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % n;
}

static void *alloc_touched(size_t n)
{
    unsigned char *p = malloc(n);
    if (p == NULL) {
        fprintf(stderr, "delta_bench: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    memset(p, 0x11, n);
    return p;
}

/* The calling thread's CPU time, in seconds. */
static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct shard {
    unsigned char *old, *neu, *arena, *out;
    size_t bytes, bound;
    uint64_t n;
    uint32_t es;
} shard_t;

/* x + d as a little-endian integer of es bytes, wrapping. */
static void add_le(unsigned char *x, uint32_t es, int64_t d)
{
    const uint64_t u = (uint64_t)d;
    unsigned carry = 0;
    for (uint32_t i = 0; i < es; i++) {
        const unsigned sum = x[i] + ((unsigned)(u >> (8 * i)) & 0xff) + carry;
        x[i] = (unsigned char)sum;
        carry = sum >> 8;
    }
}

/* Element el changed as an optimizer step changes one (per 1000: 887 by
 * +-1, 112 by 2 .. 127 either way, 1 far away). */
static void step_change(unsigned char *el, uint32_t es)
{
    const uint64_t r = rnd(1000);
    const int64_t sign = rnd(2) ? 1 : -1;
    if (r < 887)
        add_le(el, es, sign);
    else if (r < 999)
        add_le(el, es, sign * (int64_t)(2 + rnd(126)));
    else
        el[es - 1] ^= 0x80;
}

static void fill(shard_t *s, double fraction, int random)
{
    for (size_t i = 0; i < s->bytes; i++)
        s->old[i] = (unsigned char)rnd(256);
    memcpy(s->neu, s->old, s->bytes);
    const uint64_t every = fraction > 0 ? (uint64_t)(1.0 / fraction) : 0;
    for (uint64_t i = 0; every > 0 && i < s->n; i++) {
        if (every != 1 && rnd(every) != 0)
            continue;
        if (random)
            s->neu[i * s->es + rnd(s->es)] ^= (unsigned char)(1 + rnd(255));
        else
            step_change(s->neu + i * s->es, s->es);
    }
}

static void one(shard_t *s, double fraction, int rounds, int random)
{
    fill(s, fraction, random);
    double ratio[64], cratio[64], aratio[64], mc[64];
    size_t len = 0;
    rs_diag_t diag = {0};
    for (int r = 0; r < rounds; r++) {
        memcpy(s->arena, s->old, s->bytes);
        double c0 = cpu_seconds(), t0 = rs_clock_seconds();
        memcpy(s->arena, s->neu, s->bytes);
        const double t_mc = rs_clock_seconds() - t0, c_mc = cpu_seconds() - c0;
        memcpy(s->arena, s->old, s->bytes);
        c0 = cpu_seconds();
        t0 = rs_clock_seconds();
        check(rs__delta_encode(s->arena, s->neu, s->n, s->es, RS__DELTA_CHUNK,
                               1, 2, s->out, &diag, &len),
              &diag, "encode");
        const double t_enc = rs_clock_seconds() - t0;
        const double c_enc = cpu_seconds() - c0;
        if (memcmp(s->arena, s->neu, s->bytes) != 0) {
            fprintf(stderr, "delta_bench: the encoding copy is wrong\n");
            exit(1);
        }
        memcpy(s->arena, s->old, s->bytes);
        int64_t v = 0;
        t0 = rs_clock_seconds();
        check(rs__delta_apply(s->arena, s->bytes, 1, s->out, len, &diag, &v),
              &diag, "apply");
        const double t_apply = rs_clock_seconds() - t0;
        if (memcmp(s->arena, s->neu, s->bytes) != 0) {
            fprintf(stderr, "delta_bench: the patch is wrong\n");
            exit(1);
        }
        ratio[r] = t_enc / t_mc;
        cratio[r] = c_enc / c_mc;
        aratio[r] = t_apply / t_mc;
        mc[r] = (double)s->bytes / t_mc / 1e9;
    }
    qsort(ratio, (size_t)rounds, sizeof(double), cmp_double);
    qsort(cratio, (size_t)rounds, sizeof(double), cmp_double);
    qsort(aratio, (size_t)rounds, sizeof(double), cmp_double);
    qsort(mc, (size_t)rounds, sizeof(double), cmp_double);
    printf("  E=%u changed %6.2f%%  delta/full %.4f  memcpy %5.1f GB/s  "
           "encode/memcpy %.2f (%.2f..%.2f), cpu %.2f (%.2f..%.2f)  "
           "apply/memcpy %.2f\n",
           s->es, fraction * 100, (double)len / (double)s->bytes,
           mc[rounds / 2], ratio[rounds / 2], ratio[0], ratio[rounds - 1],
           cratio[rounds / 2], cratio[0], cratio[rounds - 1],
           aratio[rounds / 2]);
}

int main(int argc, char **argv)
{
    const size_t mib = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 128;
    int rounds = argc > 2 ? atoi(argv[2]) : 7;
    const int random = argc > 3 && strcmp(argv[3], "random") == 0;
    if (mib == 0 || rounds < 1 || rounds > 64 ||
        (argc > 3 && !random && strcmp(argv[3], "steps") != 0)) {
        fprintf(stderr, "usage: delta_bench [MiB] [rounds 1..64] "
                "[steps|random]\n");
        return 2;
    }
    static const double fractions[] = {0, 0.001, 0.02, 0.3, 1.0};
    static const uint32_t sizes[] = {2, 1, 4};
    printf("delta_bench: %zu MiB shards, chunks of %u elements, median of "
           "%d rounds (min..max), %s changes\n", mib, RS__DELTA_CHUNK, rounds,
           random ? "random" : "optimizer-like");
    for (size_t e = 0; e < 3; e++) {
        shard_t s = {0};
        s.es = sizes[e];
        s.bytes = mib << 20;
        s.n = s.bytes / s.es;
        s.bound = rs__delta_bound(s.n, s.es, RS__DELTA_CHUNK);
        s.old = alloc_touched(s.bytes);
        s.neu = alloc_touched(s.bytes);
        s.arena = alloc_touched(s.bytes);
        s.out = alloc_touched(s.bound); /* a publisher keeps its buffer */
        for (size_t f = 0; f < 5; f++)
            one(&s, fractions[f], rounds, random);
        free(s.old);
        free(s.neu);
        free(s.arena);
        free(s.out);
    }
    return 0;
}
