/* The guard bytes' check (result_guard.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "result_guard.h"

void assert_result_guard(const unsigned char *b, size_t len, size_t from)
{
    for (size_t i = from; i < len; i++)
        if (b[i] != RESULT_GUARD_BYTE)
            fail_msg("byte %zu past the caller's %zu was written", i, from);
}
