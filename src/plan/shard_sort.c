/* Sorting (session, addr) keys carrying each record's index, then moving
 * the records once: qsort moved the 40-byte records themselves through a
 * comparison callback and was the largest part of assembling a plan of a
 * large MoE model (a replicated tensor lists every replica's shard). The
 * list arrives grouped by session, so only the parts whose addresses go
 * down are sorted, each on its own. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/shard_sort.h"

typedef struct {
    uint64_t addr;
    uint64_t index; /* ties broken by position: stable */
} sort_key_t;

static int key_before(const sort_key_t *x, const sort_key_t *y)
{
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

/* Sorts refs[lo, hi) by address through keys (room for 2 (hi - lo)) and
 * moved (room for hi - lo records). */
static void sort_part(rs_shard_ref_t *refs, size_t lo, size_t hi,
                      sort_key_t *keys, rs_shard_ref_t *moved)
{
    size_t n = hi - lo;
    for (size_t i = 0; i < n; i++)
        keys[i] = (sort_key_t){refs[lo + i].addr, i};
    const sort_key_t *sorted = merge_sort(keys, keys + n, n);
    for (size_t i = 0; i < n; i++)
        moved[i] = refs[lo + sorted[i].index];
    memcpy(refs + lo, moved, n * sizeof(rs_shard_ref_t));
}

int rs__shard_refs_sort_parts(rs_shard_ref_t *refs, const size_t *end,
                              size_t nparts, const unsigned char *unsorted)
{
    size_t most = 0, lo = 0;
    for (size_t k = 0; k < nparts; lo = end[k++])
        if (unsorted[k] && end[k] - lo > most)
            most = end[k] - lo;
    if (most < 2)
        return 1;
    sort_key_t *keys = malloc(2 * most * sizeof(sort_key_t));
    rs_shard_ref_t *moved = malloc(most * sizeof(rs_shard_ref_t));
    if (keys == NULL || moved == NULL) {
        free(keys);
        free(moved);
        return 0;
    }
    lo = 0;
    for (size_t k = 0; k < nparts; lo = end[k++])
        if (unsorted[k])
            sort_part(refs, lo, end[k], keys, moved);
    free(keys);
    free(moved);
    return 1;
}
