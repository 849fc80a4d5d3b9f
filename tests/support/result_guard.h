/* A caller's result struct with guard bytes after it, for the tests of
 * results sized by the caller (docs/architecture.md, "Result structs"):
 * the library must write no byte past the size it is given. */
#ifndef RS_TEST_RESULT_GUARD_H
#define RS_TEST_RESULT_GUARD_H

#include <stddef.h>

#define RESULT_GUARD_BYTE 0xA5
#define RESULT_GUARD_SLACK 64

/* Fails the test (cmocka) naming the first of b[from, len) that is not
 * RESULT_GUARD_BYTE. */
void assert_result_guard(const unsigned char *b, size_t len, size_t from);

#endif
