/* The contents of the delta tests: bf16 patterns whose element i moves at
 * version k about one time in 50, each test's ground truth computed
 * here, independently of the library. */
#ifndef RS_TEST_DELTA_CONTENTS_H
#define RS_TEST_DELTA_CONTENTS_H

#include <stddef.h>
#include <stdint.h>

/* Whether element i changes at version k. */
int delta_changes(size_t i, int64_t k);

/* Element i of version v. */
uint16_t delta_elem(size_t i, int64_t v);

/* w[0..n) = version v. */
void delta_fill(uint16_t *w, size_t n, int64_t v);

/* Fails the test (cmocka) at the first of got[0..n) that is not version
 * v, naming the element. */
void delta_assert_version(const uint16_t *got, size_t n, int64_t v);

#endif
