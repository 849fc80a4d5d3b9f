/* The delta tests' contents (delta_contents.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "delta_contents.h"

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

int delta_changes(size_t i, int64_t k)
{
    return mix((uint64_t)i * 1000003u + (uint64_t)k) % 50 == 0;
}

uint16_t delta_elem(size_t i, int64_t v)
{
    uint16_t x = (uint16_t)(i * 7u + 3u);
    for (int64_t k = 1; k <= v; k++)
        x = (uint16_t)(x + 13u * (uint16_t)delta_changes(i, k));
    return x;
}

void delta_fill(uint16_t *w, size_t n, int64_t v)
{
    for (size_t i = 0; i < n; i++)
        w[i] = delta_elem(i, v);
}

void delta_assert_version(const uint16_t *got, size_t n, int64_t v)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != delta_elem(i, v))
            fail_msg("element %zu: %u, version %lld has %u", i, got[i],
                     (long long)v, delta_elem(i, v));
}
