/* Overflow-checked 64-bit arithmetic. Every product or sum of shapes,
 * strides, offsets and addresses goes through these: they return 0 on
 * overflow and leave *out untouched. */
#ifndef RS_CORE_CHECKED_H
#define RS_CORE_CHECKED_H

#include <stdint.h>

static inline int rs__mul_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return 0;
    *out = r;
    return 1;
}

static inline int rs__add_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return 0;
    *out = r;
    return 1;
}

static inline int rs__mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return 0;
    *out = r;
    return 1;
}

static inline int rs__add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return 0;
    *out = r;
    return 1;
}

/* Product of n non-negative sizes; 0 on overflow or a negative size. A
 * zero size does not hide an overflow of the others: a zero-size tensor
 * still has row-major strides (the product of the inner sizes), and those
 * must fit too. */
static inline int rs__numel(const int64_t *shape, int n, int64_t *out)
{
    int64_t p = 1;
    int empty = 0;
    for (int i = 0; i < n; i++) {
        if (shape[i] < 0)
            return 0;
        if (shape[i] == 0)
            empty = 1;
        else if (!rs__mul_i64(p, shape[i], &p))
            return 0;
    }
    *out = empty ? 0 : p;
    return 1;
}

/* Row-major strides (in elements) of a shape, the one copy every layer
 * uses. A size <= 0 counts as 1, so the strides of an empty tensor are
 * still those of its inner sizes. 0 when a stride overflows int64. */
static inline int rs__row_major(const int64_t *shape, int n, int64_t *stride)
{
    int64_t s = 1;
    for (int i = n - 1; i >= 0; i--) {
        stride[i] = s;
        if (i > 0 && !rs__mul_i64(s, shape[i] > 0 ? shape[i] : 1, &s))
            return 0;
    }
    return 1;
}

#endif
