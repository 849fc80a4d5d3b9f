/* Sorting (session, addr) keys carrying each record's index, then moving
 * the records once: qsort moved the 40-byte records themselves through a
 * comparison callback and was the largest part of assembling a plan of a
 * large MoE model (a replicated tensor lists every replica's shard). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/shard_sort.h"

typedef struct {
    uint64_t addr;
    uint32_t session;
    uint32_t index; /* ties broken by position: stable */
} sort_key_t;

static int key_before(const sort_key_t *x, const sort_key_t *y)
{
    if (x->session != y->session)
        return x->session < y->session;
    if (x->addr != y->addr)
        return x->addr < y->addr;
    return x->index < y->index;
}

/* Merges the sorted runs a[lo..mid) and a[mid..hi) into out[lo..hi). */
static void merge(const sort_key_t *a, size_t lo, size_t mid, size_t hi,
                  sort_key_t *out)
{
    size_t i = lo, j = mid, k = lo;
    while (i < mid && j < hi)
        out[k++] = key_before(&a[j], &a[i]) ? a[j++] : a[i++];
    while (i < mid)
        out[k++] = a[i++];
    while (j < hi)
        out[k++] = a[j++];
}

/* The end of the ascending run of a that starts at lo. */
static size_t run_end(const sort_key_t *a, size_t lo, size_t n)
{
    size_t i = lo + 1;
    while (i < n && !key_before(&a[i], &a[i - 1]))
        i++;
    return i;
}

/* Natural merge sort: each pass merges neighbouring ascending runs in
 * pairs, alternating between the two buffers, until one run is left;
 * returns the buffer holding it. A list that is a few sorted runs (a
 * plan's plain sources, then the FP8 and scale tensors its quantized
 * copies read, each in address order) takes a pass or two, not log n. */
static sort_key_t *merge_sort(sort_key_t *a, sort_key_t *b, size_t n)
{
    for (;;) {
        size_t lo = 0, runs = 0;
        while (lo < n) {
            size_t mid = run_end(a, lo, n);
            size_t hi = mid < n ? run_end(a, mid, n) : n;
            merge(a, lo, mid, hi, b);
            lo = hi;
            runs++;
        }
        sort_key_t *t = a;
        a = b;
        b = t;
        if (runs <= 1)
            return a;
    }
}

/* Keys grouped by session (a stable counting sort: sessions are few), so
 * that each session's addresses, listed source by source in the order the
 * trainers published them, are usually sorted already. */
static int by_session(const rs_shard_ref_t *refs, size_t n, sort_key_t *keys,
                      size_t **start_p, size_t *nsess_p)
{
    size_t nsess = 0;
    for (size_t i = 0; i < n; i++)
        nsess = refs[i].session >= nsess ? (size_t)refs[i].session + 1 : nsess;
    size_t *start = calloc(nsess + 1, sizeof(size_t));
    if (start == NULL)
        return 0;
    for (size_t i = 0; i < n; i++)
        start[refs[i].session + 1]++;
    for (size_t k = 0; k < nsess; k++)
        start[k + 1] += start[k];
    size_t *fill = malloc((nsess + 1) * sizeof(size_t));
    if (fill == NULL) {
        free(start);
        return 0;
    }
    for (size_t k = 0; k <= nsess; k++)
        fill[k] = start[k];
    for (size_t i = 0; i < n; i++)
        keys[fill[refs[i].session]++] =
            (sort_key_t){refs[i].addr, refs[i].session, (uint32_t)i};
    free(fill);
    *start_p = start;
    *nsess_p = nsess;
    return 1;
}

/* Sorts each session's keys by address unless they already are. */
static void sort_sessions(sort_key_t *keys, sort_key_t *tmp,
                          const size_t *start, size_t nsess)
{
    for (size_t k = 0; k < nsess; k++) {
        size_t lo = start[k], n = start[k + 1] - lo, i = 1;
        while (i < n && !key_before(&keys[lo + i], &keys[lo + i - 1]))
            i++;
        if (i >= n)
            continue;
        const sort_key_t *sorted = merge_sort(keys + lo, tmp + lo, n);
        if (sorted != keys + lo)
            memcpy(keys + lo, sorted, n * sizeof(sort_key_t));
    }
}

int rs__shard_refs_sort(rs_shard_ref_t **refs_p, size_t n)
{
    rs_shard_ref_t *refs = *refs_p;
    size_t *start = NULL, nsess = 0;
    if (n < 2)
        return 1;
    if (n > UINT32_MAX)
        return 0;
    sort_key_t *keys = malloc(2 * n * sizeof(sort_key_t));
    rs_shard_ref_t *moved = malloc(n * sizeof(rs_shard_ref_t));
    if (keys == NULL || moved == NULL || !by_session(refs, n, keys, &start,
                                                     &nsess)) {
        free(keys);
        free(moved);
        return 0;
    }
    sort_sessions(keys, keys + n, start, nsess);
    for (size_t i = 0; i < n; i++)
        moved[i] = refs[keys[i].index];
    free(start);
    free(keys);
    free(refs);
    *refs_p = moved;
    return 1;
}
