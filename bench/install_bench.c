/* The receiver's install copy against memcpy: the parameters of one
 * Qwen2.5-0.5B `vllm:tp=2` rank (170 of them, 471 MiB: a 136 MiB
 * embedding slice, then per layer qkv, o_proj, gate_up, down and the
 * small ones) copied from page-aligned shadows (as the receiver allocates
 * them) into 64-byte aligned storage (as torch places tensors), or with
 * `offset` bytes more, three ways: memcpy parameter by parameter (the
 * install before streaming), rs__copy_stream parameter by parameter on
 * one thread, and the same cut into 8 MiB pieces over a pool of
 * `threads` (the receiver's way on the executor's threads). Each round
 * times a 256 MiB memcpy between two aligned buffers first (the demo's
 * baseline) and then each way; prints each way's best time and its ratio
 * to the baseline's best, scaled to the same bytes.
 *
 *   install_bench [rounds] [offset] [threads]   (defaults 7 0 2) */
#define BENCH_NAME "install_bench"
#include <stdint.h>
#include <string.h>

#include "bench_util.h"
#include "core/copy_stream.h"
#include "core/pages.h"
#include "core/pool.h"

#define MAXP 200
#define BASELINE ((size_t)256 << 20)
#define PIECE ((size_t)8 << 20)

static size_t nparams, sizes[MAXP], total;
static unsigned char *shadow[MAXP], *base[MAXP];

static void add(size_t n, size_t offset)
{
    shadow[nparams] = rs__pages_alloc(n);
    unsigned char *b = aligned_alloc(64, (n + offset + 63) / 64 * 64);
    if (shadow[nparams] == NULL || b == NULL) {
        fprintf(stderr, "%s: out of memory\n", BENCH_NAME);
        exit(1);
    }
    memset(shadow[nparams], 1, n);
    memset(b, 2, n + offset);
    base[nparams] = b + offset;
    sizes[nparams++] = n;
    total += n;
}

static void qwen_rank(size_t offset)
{
    add((size_t)151936 * 448 * 2, offset);
    for (int l = 0; l < 24; l++) {
        add((size_t)1152 * 896, offset);       /* qkv_proj */
        add(1152 * 2, offset);                 /* its bias */
        add((size_t)896 * 448 * 2, offset);    /* o_proj */
        add((size_t)9728 * 896, offset);       /* gate_up_proj */
        add((size_t)896 * 2432 * 2, offset);   /* down_proj */
        add(896 * 2, offset);                  /* the two norms */
        add(896 * 2, offset);
    }
    add(896 * 2, offset);
}

/* Piece k of the concatenated parameters, streamed. */
static void piece(void *ctx, size_t k)
{
    (void)ctx;
    size_t lo = k * PIECE, hi = lo + PIECE < total ? lo + PIECE : total;
    for (size_t p = 0, at = 0; p < nparams && at < hi; at += sizes[p++]) {
        size_t from = lo > at ? lo : at;
        size_t to = hi < at + sizes[p] ? hi : at + sizes[p];
        if (to > from)
            rs__copy_stream(base[p] + (from - at), shadow[p] + (from - at),
                            to - from);
    }
}

static double timed(int way, rs__pool_t *pool)
{
    double t = rs_clock_seconds();
    if (way == 2) {
        rs__pool_start(pool, piece, NULL, (total + PIECE - 1) / PIECE);
        rs__pool_join(pool);
    } else {
        for (size_t p = 0; p < nparams; p++)
            if (way == 0)
                memcpy(base[p], shadow[p], sizes[p]);
            else
                rs__copy_stream(base[p], shadow[p], sizes[p]);
    }
    return rs_clock_seconds() - t;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    size_t offset = argc > 2 ? (size_t)atoi(argv[2]) : 0;
    unsigned threads = argc > 3 ? (unsigned)atoi(argv[3]) : 2;
    rs_diag_t diag;
    rs__pool_t *pool = NULL;
    if (rounds < 1 || threads < 2) {
        fprintf(stderr, "usage: install_bench [rounds >= 1] [offset] "
                        "[threads >= 2]\n");
        return 2;
    }
    check(rs__pool_create(threads - 1, BENCH_NAME, &diag, &pool), &diag,
          "pool");
    qwen_rank(offset);
    unsigned char *a = malloc(BASELINE), *b = malloc(BASELINE);
    if (a == NULL || b == NULL)
        return 1;
    memset(a, 1, BASELINE);
    memset(b, 2, BASELINE);
    double best[4] = {1e9, 1e9, 1e9, 1e9};
    for (int r = 0; r < rounds; r++) {
        double t = rs_clock_seconds();
        memcpy(b, a, BASELINE);
        t = (rs_clock_seconds() - t) * (double)total / (double)BASELINE;
        best[3] = t < best[3] ? t : best[3];
        for (int way = 0; way < 3; way++) {
            t = timed(way, pool);
            best[way] = t < best[way] ? t : best[way];
        }
    }
    static const char *const names[3] = {
        "memcpy per parameter", "streamed per parameter",
        "streamed, 8 MiB pieces on the pool"};
    printf("%zu parameters, %.0f MiB, destination offset %zu, %u threads; "
           "best of %d; the 256 MiB memcpy scaled to these bytes: %.4f s\n",
           nparams, (double)total / 1048576.0, offset, threads, rounds,
           best[3]);
    for (int way = 0; way < 3; way++)
        printf("  %-36s %.4f s  %.2fx of memcpy\n", names[way], best[way],
               best[3] / best[way]);
    rs__pool_destroy(pool);
    free(a);
    free(b);
    return 0;
}
