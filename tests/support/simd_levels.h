/* The SIMD levels the kernels' tests run at: every one up to the best this
 * machine supports (rs__simd_force picks one), and a cmocka teardown that
 * puts the best back after a test that forced another. */
#ifndef RS_TEST_SIMD_LEVELS_H
#define RS_TEST_SIMD_LEVELS_H

/* How many levels to test: levels 0 .. simd_nlevels() - 1. */
int simd_nlevels(void);

/* Forces the best level again; always 0. */
int simd_restore_level(void **state);

#endif
