/* Executor building blocks against memcpy, measured in the same run: each
 * section times an operation and a memcpy of the same output bytes (best of
 * several repetitions; the median of several such rounds) and prints GB/s
 * and the ratio with its range over the rounds. Sections: dtype casts,
 * the rsd64 digest and the copy with the digest fused, transports (local
 * and local-mt against memcpy loops) and
 * strided replay (rs_convert_strided as the executor's full-pull replay and
 * casts run it: transposes of 1 to 8 byte elements, batched transposes, a
 * narrow, transposes with a cast) and FP8 quantization (rs_quant_box over a
 * weight, against memcpy of its input bytes, at every kernel level). RESHARD_SIMD picks the kernels' level;
 * EXEC_BENCH_PAGES=1 allocates every buffer as the executor allocates its
 * staging and the receiver its shadows (huge pages where offered).
 *
 *   exec_bench [MiB] [SECTION...]   (output bytes per operation, default
 *                                    256; sections: cast digest transport
 *                                    replay tcast quant, default all but
 *                                    tcast, which replay includes) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/convert.h"
#include "core/digest_copy.h"
#include "core/pages.h"
#include "core/simd.h"
#include "reshard/digest.h"
#include "reshard/quant.h"
#include "reshard/transport.h"

#define BENCH_NAME "exec_bench"
#include "bench_util.h"

#define REPEATS 5

typedef struct bench_cfg {
    size_t bytes; /* output bytes per operation */
} bench_cfg_t;

/* Buffers come from malloc, or with EXEC_BENCH_PAGES=1 from the pages
 * the executor gives its staging and the receiver its shadows (aligned,
 * huge pages where the kernel offers them), for operations and memcpy
 * alike. Their sizes are kept for bench_free. */
#define MAX_BUFS 16
static struct { void *p; size_t n; } g_bufs[MAX_BUFS];

static int use_pages(void)
{
    const char *v = getenv("EXEC_BENCH_PAGES");
    return v != NULL && strcmp(v, "1") == 0;
}

/* Allocates and touches every page, so no timing includes page faults. */
static void *bench_alloc(size_t bytes, int fill)
{
    void *p = use_pages() ? rs__pages_alloc(bytes) : malloc(bytes);
    int k = 0;
    while (k < MAX_BUFS && g_bufs[k].p != NULL)
        k++;
    if (p == NULL || k == MAX_BUFS) {
        fprintf(stderr, "exec_bench: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    g_bufs[k].p = p;
    g_bufs[k].n = bytes;
    memset(p, fill, bytes);
    return p;
}

static void bench_free(const void *p)
{
    for (int k = 0; k < MAX_BUFS; k++) {
        if (g_bufs[k].p != p)
            continue;
        if (use_pages())
            rs__pages_free(g_bufs[k].p, g_bufs[k].n);
        else
            free(g_bufs[k].p);
        g_bufs[k].p = NULL;
        return;
    }
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
    double t0 = rs_clock_seconds();
    fn(ctx);
    return rs_clock_seconds() - t0;
}

/* Every figure is the median of ROUNDS rounds (EXEC_BENCH_ROUNDS), each
 * the best of REPEATS runs of the operation and of a memcpy of
 * `base_bytes`, alternated so both see the same machine conditions; the
 * ratio (memcpy time over operation time) is taken per round, and its
 * median and range are printed. */
#define ROUNDS_DEFAULT 5
#define ROUNDS_MAX 64

static int rounds(void)
{
    const char *v = getenv("EXEC_BENCH_ROUNDS");
    long n = v != NULL ? strtol(v, NULL, 10) : ROUNDS_DEFAULT;
    return n < 1 ? 1 : n > ROUNDS_MAX ? ROUNDS_MAX : (int)n;
}

typedef struct figure {
    double t, base;        /* medians over the rounds, seconds */
    double ratio, lo, hi;  /* median, least and most of the rounds' ratios */
} figure_t;

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef double (*timer_fn)(bench_fn fn, void *ctx);

/* ROUNDS rounds of the best of `repeats` alternated pairs of fn and base_fn. */
static figure_t measure_pair(bench_fn fn, void *ctx, bench_fn base_fn,
                             void *base_ctx, int repeats, timer_fn timer)
{
    double t[ROUNDS_MAX] = {0}, b[ROUNDS_MAX] = {0}, r[ROUNDS_MAX] = {0};
    const int n = rounds();
    for (int k = 0; k < n; k++) {
        t[k] = b[k] = 1e30;
        for (int i = 0; i < repeats; i++) {
            double y = timer(base_fn, base_ctx), x = timer(fn, ctx);
            b[k] = y < b[k] ? y : b[k];
            t[k] = x < t[k] ? x : t[k];
        }
        r[k] = b[k] / t[k];
    }
    figure_t f = {median(t, n), median(b, n), 0, 1e30, 0};
    for (int k = 0; k < n; k++) {
        f.lo = r[k] < f.lo ? r[k] : f.lo;
        f.hi = r[k] > f.hi ? r[k] : f.hi;
    }
    f.ratio = median(r, n);
    return f;
}

static figure_t measure(bench_fn fn, void *ctx, size_t base_bytes,
                        int repeats, timer_fn timer)
{
    memcpy_ctx_t c = {bench_alloc(base_bytes, 1), bench_alloc(base_bytes, 2),
                      base_bytes};
    figure_t f = measure_pair(fn, ctx, run_memcpy, &c, repeats, timer);
    bench_free(c.dst);
    bench_free(c.src);
    return f;
}

static void best_vs_memcpy(bench_fn fn, void *ctx, size_t base_bytes,
                           figure_t *f_p)
{
    *f_p = measure(fn, ctx, base_bytes, REPEATS, time_once);
}

static void report(const char *what, size_t bytes, const figure_t *f)
{
    printf("  %-28s %8.2f GB/s   memcpy %8.2f GB/s   ratio %.2f [%.2f-%.2f]\n",
           what, (double)bytes / f->t * 1e-9, (double)bytes / f->base * 1e-9,
           f->ratio, f->lo, f->hi);
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
    if (rs__convert(c->to, c->dst, c->from, c->src, c->n) != RS_OK) {
        fprintf(stderr, "exec_bench: rs__convert failed\n");
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
    figure_t f;
    char what[64];
    snprintf(what, sizeof(what), "cast %s -> %s", rs_dtype_name(from),
             rs_dtype_name(to));
    best_vs_memcpy(run_cast, &c, out_bytes, &f);
    report(what, out_bytes, &f);
    if (in_bytes > out_bytes) {
        best_vs_memcpy(run_cast, &c, in_bytes, &f);
        report("  (against its input bytes)", in_bytes, &f);
    }
    bench_free(c.dst);
    bench_free(c.src);
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

typedef struct copy_digest_ctx {
    void *dst;
    const void *src;
    size_t bytes;
    uint64_t sink;
} copy_digest_ctx_t;

/* What verification of a copied shard cost before fusing: the copy, then
 * a second pass reading every byte back. */
static void run_copy_then_digest(void *ctx)
{
    copy_digest_ctx_t *c = ctx;
    memcpy(c->dst, c->src, c->bytes);
    c->sink ^= rs_digest(c->dst, c->bytes);
}

/* The executor's copy with the digest fused (local, local-mt). */
static void run_copy_digest(void *ctx)
{
    copy_digest_ctx_t *c = ctx;
    rs_digest_t d;
    rs_digest_init(&d);
    rs__digest_copy(&d, c->dst, c->src, c->bytes);
    c->sink ^= rs_digest_final(&d);
}

/* The cma way: copies made in steps, each digested while in the cache. */
static void run_copy_step_digest(void *ctx)
{
    copy_digest_ctx_t *c = ctx;
    rs_digest_t d;
    rs_digest_init(&d);
    for (size_t at = 0; at < c->bytes; at += RS__DIGEST_STEP) {
        size_t n = c->bytes - at < RS__DIGEST_STEP ? c->bytes - at
                                                  : RS__DIGEST_STEP;
        memcpy((char *)c->dst + at, (const char *)c->src + at, n);
        rs_digest_update(&d, (char *)c->dst + at, n);
    }
    c->sink ^= rs_digest_final(&d);
}

static void section_digest(const bench_cfg_t *cfg)
{
    printf("rsd64 digest (%zu MiB; ratio = GB/s over one-thread memcpy GB/s "
           "of the same bytes)\n", cfg->bytes >> 20);
    unsigned char *buf = bench_alloc(cfg->bytes, 0);
    for (size_t i = 0; i < cfg->bytes; i++)
        buf[i] = (unsigned char)(i * 131 + (i >> 12));
    digest_ctx_t c = {buf, cfg->bytes, 0};
    figure_t f;
    best_vs_memcpy(run_digest, &c, cfg->bytes, &f);
    report("rs_digest", cfg->bytes, &f);
    copy_digest_ctx_t cc = {bench_alloc(cfg->bytes, 5), buf, cfg->bytes, 0};
    best_vs_memcpy(run_copy_then_digest, &cc, cfg->bytes, &f);
    report("copy, then digest pass", cfg->bytes, &f);
    best_vs_memcpy(run_copy_digest, &cc, cfg->bytes, &f);
    report("copy+digest fused", cfg->bytes, &f);
    best_vs_memcpy(run_copy_step_digest, &cc, cfg->bytes, &f);
    report("copy, digest per 256 KiB", cfg->bytes, &f);
    printf("  (digest %016llx)\n", (unsigned long long)(c.sink ^ cc.sink));
    bench_free(cc.dst);
    bench_free(buf);
}

/* Transport: `local` and `local-mt` reading segments of one region against
 * memcpy loops over the same segments (one thread, and one per core). */

typedef struct seg_ctx {
    uint8_t *dst;
    const uint8_t *src;
    size_t seg, first, count, nseg;
} seg_ctx_t;

/* Destination slot i reads source slot (i * 7919) mod nseg: with a power of
 * two count neighbours never stay neighbours, so no reads coalesce. */
static size_t seg_src(size_t i, size_t nseg)
{
    return (i * 7919) % nseg;
}

static void run_seg_memcpy(void *ctx)
{
    seg_ctx_t *c = ctx;
    for (size_t i = c->first; i < c->first + c->count; i++)
        memcpy(c->dst + i * c->seg, c->src + seg_src(i, c->nseg) * c->seg,
               c->seg);
}

static void *seg_thread(void *ctx)
{
    run_seg_memcpy(ctx);
    return NULL;
}

typedef struct seg_mt_ctx {
    seg_ctx_t all;
    unsigned nthreads;
} seg_mt_ctx_t;

/* The plain multi-threaded baseline: an equal share of segments each. */
static void run_seg_memcpy_mt(void *ctx)
{
    seg_mt_ctx_t *m = ctx;
    pthread_t th[256];
    seg_ctx_t part[256];
    unsigned n = m->nthreads;
    for (unsigned k = 0; k < n; k++) {
        part[k] = m->all;
        part[k].first = m->all.nseg * k / n;
        part[k].count = m->all.nseg * (k + 1) / n - part[k].first;
        if (pthread_create(&th[k], NULL, seg_thread, &part[k]) != 0) {
            fprintf(stderr, "exec_bench: pthread_create failed\n");
            exit(1);
        }
    }
    for (unsigned k = 0; k < n; k++)
        pthread_join(th[k], NULL);
}

typedef struct xport_ctx {
    rs_transport_h t;
    const rs_read_t *reads;
    size_t n;
} xport_ctx_t;

static void run_transport(void *ctx)
{
    xport_ctx_t *x = ctx;
    rs_diag_t d;
    if (rs_transport_post(x->t, x->reads, x->n, &d) != RS_OK ||
        rs_transport_wait(x->t, 0, &d) != RS_OK) {
        fprintf(stderr, "exec_bench: transport: %s\n", d.msg);
        exit(1);
    }
}

static xport_ctx_t open_transport(const char *backend, const seg_ctx_t *c,
                                  rs_read_t *reads)
{
    rs_transport_params_t p;
    rs_transport_params_init(&p);
    p.backend = backend;
    xport_ctx_t x = {NULL, reads, c->nseg};
    rs_diag_t d;
    rs_region_t region = {0x10000, c->nseg * c->seg, c->src};
    rs_peer_t peer = {"bench", 0, &region, 1, NULL, 0};
    if (rs_transport_create(&p, &d, &x.t) != RS_OK ||
        rs_transport_connect(x.t, 0, &peer, &d) != RS_OK) {
        fprintf(stderr, "exec_bench: transport %s: %s\n", backend, d.msg);
        exit(1);
    }
    for (size_t i = 0; i < c->nseg; i++) {
        reads[i].session = 0;
        reads[i].src_addr = region.addr + seg_src(i, c->nseg) * c->seg;
        reads[i].dst = c->dst + i * c->seg;
        reads[i].nbytes = c->seg;
    }
    return x;
}

static void bench_segments(uint8_t *dst, const uint8_t *src, size_t bytes,
                           size_t seg, unsigned cores)
{
    seg_ctx_t c = {dst, src, seg, 0, bytes / seg, bytes / seg};
    seg_mt_ctx_t m = {c, cores};
    rs_read_t *reads = malloc(c.nseg * sizeof(rs_read_t));
    figure_t f, f1;
    char what[64];
    xport_ctx_t x = open_transport("local", &c, reads);
    f = measure_pair(run_transport, &x, run_seg_memcpy, &c, REPEATS, time_once);
    snprintf(what, sizeof(what), "%6zu KiB x %-6zu local", seg >> 10,
             c.nseg);
    report(what, bytes, &f);
    rs_transport_destroy(x.t);
    x = open_transport("local-mt", &c, reads);
    f = measure_pair(run_transport, &x, run_seg_memcpy_mt, &m, REPEATS,
                     time_once);
    f1 = measure_pair(run_seg_memcpy_mt, &m, run_seg_memcpy, &c, REPEATS,
                      time_once);
    snprintf(what, sizeof(what), "%6zu KiB x %-6zu local-mt", seg >> 10,
             c.nseg);
    report(what, bytes, &f);
    printf("  %-28s (%u-thread memcpy %.2f GB/s = %.2fx one thread)\n", "",
           cores, (double)bytes / f1.t * 1e-9, f1.ratio);
    rs_transport_destroy(x.t);
    free(reads);
}

static void section_transport(const bench_cfg_t *cfg)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned cores = online < 1 ? 1 : online > 256 ? 256 : (unsigned)online;
    static const size_t segs[] = {4 << 10, 64 << 10, 1 << 20, 64 << 20};
    printf("transport (%zu MiB per case, segments in shuffled order; local "
           "vs 1-thread memcpy loop, local-mt vs %u-thread memcpy loop)\n",
           cfg->bytes >> 20, cores);
    uint8_t *src = bench_alloc(cfg->bytes, 3);
    uint8_t *dst = bench_alloc(cfg->bytes, 4);
    for (size_t k = 0; k < sizeof(segs) / sizeof(segs[0]); k++) {
        if (cfg->bytes / segs[k] >= 2)
            bench_segments(dst, src, cfg->bytes, segs[k], cores);
    }
    bench_free(dst);
    bench_free(src);
}

/* Strided replay: rs_convert_strided as the executor's full-pull replay and
 * casts run it (a transpose, a narrow, a batched transpose, and a transpose
 * with a cast), over fixed shapes (independent of the MiB argument),
 * against memcpy of the bytes each case writes. */

typedef struct replay_ctx {
    rs_dtype_t to, from;
    void *dst;
    const void *src;
    int ndim;
    int64_t shape[3], ds[3], ss[3];
} replay_ctx_t;

static void run_replay(void *ctx)
{
    replay_ctx_t *c = ctx;
    if (rs__convert_strided(c->to, c->dst, c->ds, c->from, c->src, c->ss,
                            c->ndim, c->shape) != RS_OK) {
        fprintf(stderr, "exec_bench: rs_convert_strided failed\n");
        exit(1);
    }
}

static void bench_replay(const char *what, replay_ctx_t *c)
{
    size_t elems = 1;
    for (int i = 0; i < c->ndim; i++)
        elems *= (size_t)c->shape[i];
    const size_t bytes = elems * rs_dtype_size(c->to);
    char label[64];
    snprintf(label, sizeof(label), "%s %s%s%s", what, rs_dtype_name(c->from),
             c->to == c->from ? "" : "->",
             c->to == c->from ? "" : rs_dtype_name(c->to));
    size_t src_elems = 1;
    for (int i = 0; i < c->ndim; i++)
        src_elems += (size_t)((c->shape[i] - 1) * c->ss[i]);
    /* 0x3f bytes: finite, normal values in every source format. */
    c->src = bench_alloc(src_elems * rs_dtype_size(c->from), 0x3f);
    c->dst = bench_alloc(bytes, 0);
    figure_t f;
    best_vs_memcpy(run_replay, c, bytes, &f);
    report(label, bytes, &f);
    bench_free(c->dst);
    bench_free(c->src);
}

/* dst[i][j] = src[j][i] over n x n. */
static void bench_transpose(rs_dtype_t from, rs_dtype_t to, int64_t n)
{
    replay_ctx_t tr = {to, from, NULL, NULL, 2, {n, n}, {n, 1}, {1, n}};
    char what[32];
    snprintf(what, sizeof(what), "transpose %lldx%lld", (long long)n,
             (long long)n);
    bench_replay(what, &tr);
}

/* permute(0, 2, 1) of [b, n, n]. */
static void bench_batched(rs_dtype_t dt, int64_t b, int64_t n)
{
    replay_ctx_t bt = {dt, dt, NULL, NULL, 3, {b, n, n}, {n * n, n, 1},
                       {n * n, 1, n}};
    char what[32];
    snprintf(what, sizeof(what), "batched %lldx%lldx%lld", (long long)b,
             (long long)n, (long long)n);
    bench_replay(what, &bt);
}

static void section_replay(void)
{
    printf("strided replay (kernels: %s, buffers: %s; ratio = "
           "rs_convert_strided GB/s over memcpy GB/s of the bytes written)\n",
           rs__simd_name(rs__simd_active()),
           use_pages() ? "executor pages" : "malloc");
    const int64_t n = 8192;
    bench_transpose(RS_DTYPE_BF16, RS_DTYPE_BF16, n);
    bench_transpose(RS_DTYPE_F32, RS_DTYPE_F32, n);
    bench_batched(RS_DTYPE_BF16, 64, 1024);
    bench_batched(RS_DTYPE_F32, 64, 1024);
    bench_transpose(RS_DTYPE_U8, RS_DTYPE_U8, n);
    bench_transpose(RS_DTYPE_F64, RS_DTYPE_F64, n / 2);
    /* narrow(1, 0, 4096): rows of 4096 out of 8192. */
    replay_ctx_t nr = {RS_DTYPE_BF16, RS_DTYPE_BF16, NULL, NULL, 2,
                       {n, n / 2}, {n / 2, 1}, {n, 1}};
    bench_replay("narrow 8192x(4096 of 8192)", &nr);
    bench_transpose(RS_DTYPE_BF16, RS_DTYPE_F32, n);
    bench_transpose(RS_DTYPE_F32, RS_DTYPE_BF16, n);
}

/* The transposes with a cast alone (section "tcast"). */
static void section_tcast(void)
{
    printf("transposes with a cast (kernels: %s, buffers: %s; ratio = "
           "rs_convert_strided GB/s over memcpy GB/s of the bytes written)\n",
           rs__simd_name(rs__simd_active()),
           use_pages() ? "executor pages" : "malloc");
    bench_transpose(RS_DTYPE_BF16, RS_DTYPE_F32, 8192);
    bench_transpose(RS_DTYPE_F32, RS_DTYPE_BF16, 8192);
    /* an odd edge: no power-of-two row strides, ragged blocks */
    bench_transpose(RS_DTYPE_BF16, RS_DTYPE_F32, 6001);
    bench_transpose(RS_DTYPE_F32, RS_DTYPE_BF16, 6001);
    /* what bounds them: the same destination with no cast, and the same
     * cast with no transpose (f32 -> bf16 reads twice what it writes) */
    printf(" references:\n");
    bench_transpose(RS_DTYPE_F32, RS_DTYPE_F32, 8192);
    bench_cast(RS_DTYPE_F32, RS_DTYPE_BF16, (size_t)8192 * 8192 * 2);
}

/* Quantization is timed in the thread's CPU time, best of QUANT_REPEATS
 * per round: on a shared machine, time the thread waits for a core is not
 * the kernel's; cache and memory stalls still count. */
#define QUANT_REPEATS 5

static double cpu_once(bench_fn fn, void *ctx)
{
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    fn(ctx);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
}

typedef struct quant_ctx {
    rs_quant_desc_t q;
    rs_dtype_t from;
    int64_t shape[2];
    const void *src;
    uint8_t *dst;
    float *scale;
} quant_ctx_t;

static void run_quant(void *ctx)
{
    quant_ctx_t *c = ctx;
    const int64_t lo[2] = {0, 0};
    rs_diag_t diag;
    check(rs_quant_box(&c->q, c->from, c->src, 2, c->shape, lo, c->shape,
                       "bench", &diag, c->dst, c->scale), &diag, "rs_quant_box");
}

/* Finite values of a trained weight's spread: magnitudes over 2^-8..2^2,
 * both signs, in the source dtype (bf16 or f32). */
static void fill_weights(void *p, rs_dtype_t dt, size_t n)
{
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const uint32_t bits = (uint32_t)((x & 1) << 31) |
                              (uint32_t)(119 + (x >> 1) % 11) << 23 |
                              (uint32_t)(x >> 8 & 0x7fffff);
        if (dt == RS_DTYPE_F32)
            memcpy((char *)p + 4 * i, &bits, 4);
        else {
            const uint16_t h = (uint16_t)(bits >> 16);
            memcpy((char *)p + 2 * i, &h, 2);
        }
    }
}

/* One tensor quantized whole at every level, against memcpy of its input
 * bytes: rows x cols of `from`, blocks of `block` (NULL: per channel). */
static void bench_quant(rs_dtype_t from, rs_dtype_t fmt, const int64_t *block,
                        int64_t rows, int64_t cols)
{
    const size_t n = (size_t)(rows * cols), in_bytes = n * rs_dtype_size(from);
    const size_t nscale = block ? (size_t)(((rows + block[0] - 1) / block[0]) *
                                           ((cols + block[1] - 1) / block[1]))
                                : (size_t)rows;
    quant_ctx_t c = {{block ? RS_QUANT_FP8_BLOCK : RS_QUANT_FP8_CHANNEL, fmt,
                      block ? 2 : 0, block, NULL, 0, 0, NULL, NULL},
                     from, {rows, cols}, bench_alloc(in_bytes, 0),
                     bench_alloc(n, 0), bench_alloc(nscale * 4, 0)};
    fill_weights((void *)(uintptr_t)c.src, from, n);
    char spec[64];
    rs_quant_spec_format(&c.q, spec, sizeof(spec));
    for (int lv = 0; lv <= (int)rs__simd_best(); lv++) {
        if (lv == RS__SIMD_SSE2)
            continue; /* the portable kernels, compiled for the baseline */
        rs__simd_force((rs__simd_t)lv);
        figure_t f;
        char what[96];
        snprintf(what, sizeof(what), "%s %lldx%lld %s [%s]", rs_dtype_name(from),
                 (long long)rows, (long long)cols, spec,
                 rs__simd_name((rs__simd_t)lv));
        f = measure(run_quant, &c, in_bytes, QUANT_REPEATS, cpu_once);
        printf("  %-50s %6.2f GB/s in  memcpy %6.2f GB/s  ratio %.2f "
               "[%.2f-%.2f]\n", what, (double)in_bytes / f.t * 1e-9,
               (double)in_bytes / f.base * 1e-9, f.ratio, f.lo, f.hi);
    }
    rs__simd_force(rs__simd_best());
    bench_free(c.src);
    bench_free(c.dst);
    bench_free(c.scale);
}

static void section_quant(void)
{
    static const int64_t b128[2] = {128, 128};
    printf("FP8 quantization, one core, thread CPU time (ratio = input "
           "bytes/s over memcpy bytes/s of the input bytes; 7168x2048 bf16 is "
           "28 MiB in, 14 MiB out: past L2, most of L3; 256x2048 is 1 MiB "
           "in: within L2 and L3)\n");
    bench_quant(RS_DTYPE_BF16, RS_DTYPE_F8E4M3, b128, 2048, 7168);
    bench_quant(RS_DTYPE_BF16, RS_DTYPE_F8E4M3, b128, 7168, 2048);
    bench_quant(RS_DTYPE_BF16, RS_DTYPE_F8E4M3, b128, 256, 2048);
    bench_quant(RS_DTYPE_BF16, RS_DTYPE_F8E5M2, b128, 7168, 2048);
    bench_quant(RS_DTYPE_F32, RS_DTYPE_F8E4M3, b128, 7168, 2048);
    bench_quant(RS_DTYPE_BF16, RS_DTYPE_F8E4M3, NULL, 7168, 2048);
}

/* Sections named after the size, or all of them when none is. */
static int wanted(int argc, char **argv, const char *section)
{
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], section) == 0)
            return 1;
    }
    return argc <= 2;
}

int main(int argc, char **argv)
{
    bench_cfg_t cfg = {(size_t)256 << 20};
    if (argc > 1) {
        long mib = strtol(argv[1], NULL, 10);
        if (mib <= 0) {
            fprintf(stderr, "usage: exec_bench [MiB] [cast|digest|transport|"
                    "replay|tcast|quant ...]\n");
            return 2;
        }
        cfg.bytes = (size_t)mib << 20;
    }
    if (wanted(argc, argv, "cast"))
        section_cast(&cfg);
    if (wanted(argc, argv, "digest"))
        section_digest(&cfg);
    if (wanted(argc, argv, "transport"))
        section_transport(&cfg);
    if (wanted(argc, argv, "replay"))
        section_replay();
    if (argc > 2 && wanted(argc, argv, "tcast"))
        section_tcast();
    if (wanted(argc, argv, "quant"))
        section_quant();
    return 0;
}
