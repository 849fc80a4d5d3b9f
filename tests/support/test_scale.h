/* How much of an exhaustive sweep a test runs in this build tree.
 *
 * A sanitizer costs every instrumented load, store and call some ten times
 * over, and what it adds to a sweep is the same for each pattern of a class
 * (the same branches, the same bounds). So the exhaustive sweeps (every
 * 16-bit pattern, every shape up to some size, millions of sampled
 * patterns) run in full in the optimized trees, the Release one among them
 * (`make test` runs it last), and in the sanitizer trees as a fixed,
 * deterministic subset that still reaches every class: every exponent and
 * sign, every rounding boundary, every remainder of every block size.
 * RESHARD_TEST_EXHAUSTIVE=1 in the environment runs the full sweeps in any
 * tree. */
#ifndef RESHARD_TEST_SCALE_H
#define RESHARD_TEST_SCALE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TSCALE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TSCALE_SANITIZED 1
#endif
#endif
#ifndef TSCALE_SANITIZED
#define TSCALE_SANITIZED 0
#endif

/* 1 when the sweeps run in full: an unsanitized build, or
 * RESHARD_TEST_EXHAUSTIVE=1. Says once on stderr when they do not. */
static inline int tscale_exhaustive(void)
{
    static int said;
    const char *e = getenv("RESHARD_TEST_EXHAUSTIVE");
    if (!TSCALE_SANITIZED || (e != NULL && strcmp(e, "1") == 0))
        return 1;
    if (!said++)
        fprintf(stderr, "sanitizer build: exhaustive sweeps run a fixed "
                "subset (RESHARD_TEST_EXHAUSTIVE=1 for all of them; the "
                "optimized trees run them in full)\n");
    return 0;
}

#endif
