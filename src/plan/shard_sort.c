/* A stable merge sort of (session, addr) keys carrying each record's index:
 * qsort moved the 40-byte records themselves through a comparison callback
 * and was the largest part of assembling a plan of a large MoE model. */
#include <stdint.h>
#include <stdlib.h>

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

/* Bottom-up: widths 1, 2, 4, ... alternating between the two buffers;
 * returns the one holding the result. */
static sort_key_t *merge_sort(sort_key_t *a, sort_key_t *b, size_t n)
{
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n;
            size_t hi = lo + 2 * w < n ? lo + 2 * w : n;
            merge(a, lo, mid, hi, b);
        }
        sort_key_t *t = a;
        a = b;
        b = t;
    }
    return a;
}

int rs__shard_refs_sort(rs_shard_ref_t *refs, size_t n)
{
    if (n < 2)
        return 1;
    if (n > UINT32_MAX)
        return 0;
    sort_key_t *keys = malloc(2 * n * sizeof(sort_key_t));
    rs_shard_ref_t *moved = malloc(n * sizeof(rs_shard_ref_t));
    if (keys == NULL || moved == NULL) {
        free(keys);
        free(moved);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = (sort_key_t){refs[i].addr, refs[i].session, (uint32_t)i};
    const sort_key_t *sorted = merge_sort(keys, keys + n, n);
    for (size_t i = 0; i < n; i++)
        moved[i] = refs[sorted[i].index];
    for (size_t i = 0; i < n; i++)
        refs[i] = moved[i];
    free(keys);
    free(moved);
    return 1;
}
