/* Executor building blocks against memcpy, measured in the same run: each
 * section times an operation and a memcpy of the same output bytes (best of
 * several repetitions) and prints GB/s and the ratio. Sections so far: dtype
 * casts and the rsd64 digest; transport and strided replay sections plug in
 * as further section_* functions called from main.
 *
 *   exec_bench [MiB]    (output bytes per operation, default 256) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reshard/convert.h"
#include "reshard/digest.h"

#define REPEATS 5

typedef struct bench_cfg {
    size_t bytes; /* output bytes per operation */
} bench_cfg_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Allocates and touches every page, so no timing includes page faults. */
static void *bench_alloc(size_t bytes, int fill)
{
    void *p = malloc(bytes);
    if (p == NULL) {
        fprintf(stderr, "exec_bench: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    memset(p, fill, bytes);
    return p;
}

typedef void (*bench_fn)(void *ctx);

typedef struct memcpy_ctx {
    void *dst;
    const void *src;
    size_t bytes;
} memcpy_ctx_t;

static void run_memcpy(void *ctx)
{
    memcpy_ctx_t *c = ctx;
    memcpy(c->dst, c->src, c->bytes);
}

static double time_once(bench_fn fn, void *ctx)
{
    double t0 = now_s();
    fn(ctx);
    return now_s() - t0;
}

/* Best of REPEATS for an operation and for a memcpy of `base_bytes`,
 * alternating the two so both see the same machine conditions. */
static void best_vs_memcpy(bench_fn fn, void *ctx, size_t base_bytes,
                           double *t_p, double *base_p)
{
    memcpy_ctx_t c = {bench_alloc(base_bytes, 1), bench_alloc(base_bytes, 2),
                      base_bytes};
    double t = 1e30, base = 1e30;
    for (int r = 0; r < REPEATS; r++) {
        double b = time_once(run_memcpy, &c), x = time_once(fn, ctx);
        base = b < base ? b : base;
        t = x < t ? x : t;
    }
    free(c.dst);
    free((void *)c.src);
    *t_p = t;
    *base_p = base;
}

static void report(const char *what, size_t bytes, double t, double base)
{
    printf("  %-28s %8.2f GB/s   memcpy %8.2f GB/s   ratio %.2f\n", what,
           (double)bytes / t * 1e-9, (double)bytes / base * 1e-9, base / t);
}

typedef struct cast_ctx {
    rs_dtype_t to, from;
    void *dst;
    const void *src;
    size_t n;
} cast_ctx_t;

static void run_cast(void *ctx)
{
    cast_ctx_t *c = ctx;
    if (rs_convert(c->to, c->dst, c->from, c->src, c->n) != RS_OK) {
        fprintf(stderr, "exec_bench: rs_convert failed\n");
        exit(1);
    }
}

/* One cast over `out_bytes` of output, against memcpy of those bytes; a
 * narrowing cast reads more than it writes, so it is also compared with a
 * memcpy of its input bytes. */
static void bench_cast(rs_dtype_t from, rs_dtype_t to, size_t out_bytes)
{
    const size_t n = out_bytes / rs_dtype_size(to);
    const size_t in_bytes = n * rs_dtype_size(from);
    out_bytes = n * rs_dtype_size(to);
    /* 0x3f bytes: finite, normal values in every source format. */
    cast_ctx_t c = {to, from, bench_alloc(out_bytes, 0),
                    bench_alloc(in_bytes, 0x3f), n};
    double t, base;
    char what[64];
    snprintf(what, sizeof(what), "cast %s -> %s", rs_dtype_name(from),
             rs_dtype_name(to));
    best_vs_memcpy(run_cast, &c, out_bytes, &t, &base);
    report(what, out_bytes, t, base);
    if (in_bytes > out_bytes) {
        best_vs_memcpy(run_cast, &c, in_bytes, &t, &base);
        printf("  %-28s %8.2f GB/s   memcpy %8.2f GB/s   ratio %.2f"
               "   (input bytes)\n", "", (double)in_bytes / t * 1e-9,
               (double)in_bytes / base * 1e-9, base / t);
    }
    free(c.dst);
    free((void *)c.src);
}

static void section_cast(const bench_cfg_t *cfg)
{
    printf("dtype casts (%zu MiB of output; ratio = cast GB/s over memcpy "
           "GB/s of the same bytes)\n", cfg->bytes >> 20);
    bench_cast(RS_DTYPE_BF16, RS_DTYPE_F32, cfg->bytes);
    bench_cast(RS_DTYPE_F32, RS_DTYPE_BF16, cfg->bytes);
    bench_cast(RS_DTYPE_F16, RS_DTYPE_F32, cfg->bytes);
    bench_cast(RS_DTYPE_F32, RS_DTYPE_F16, cfg->bytes);
    bench_cast(RS_DTYPE_F32, RS_DTYPE_F8E4M3, cfg->bytes);
    bench_cast(RS_DTYPE_BF16, RS_DTYPE_F8E5M2, cfg->bytes);
}

typedef struct digest_ctx {
    const void *src;
    size_t bytes;
    uint64_t sink;
} digest_ctx_t;

static void run_digest(void *ctx)
{
    digest_ctx_t *c = ctx;
    c->sink ^= rs_digest(c->src, c->bytes);
}

static void section_digest(const bench_cfg_t *cfg)
{
    printf("rsd64 digest (%zu MiB; ratio = digest GB/s over memcpy GB/s)\n",
           cfg->bytes >> 20);
    unsigned char *buf = bench_alloc(cfg->bytes, 0);
    for (size_t i = 0; i < cfg->bytes; i++)
        buf[i] = (unsigned char)(i * 131 + (i >> 12));
    digest_ctx_t c = {buf, cfg->bytes, 0};
    double t, base;
    best_vs_memcpy(run_digest, &c, cfg->bytes, &t, &base);
    report("rs_digest", cfg->bytes, t, base);
    printf("  (digest %016llx)\n", (unsigned long long)c.sink);
    free(buf);
}

int main(int argc, char **argv)
{
    bench_cfg_t cfg = {(size_t)256 << 20};
    if (argc > 1) {
        long mib = strtol(argv[1], NULL, 10);
        if (mib <= 0) {
            fprintf(stderr, "usage: exec_bench [MiB]\n");
            return 2;
        }
        cfg.bytes = (size_t)mib << 20;
    }
    section_cast(&cfg);
    section_digest(&cfg);
    return 0;
}
