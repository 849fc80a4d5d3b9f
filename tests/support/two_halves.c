/* The two-halves tensor of the arena and cut-aligned tests
 * (two_halves.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "two_halves.h"

uint8_t th_value(int64_t v, int r, int c)
{
    return (uint8_t)(v * 37 + r * 11 + c * 5 + 1);
}

void th_fill(uint8_t *const half[2], int64_t v)
{
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < TH_HALF; r++)
            for (int c = 0; c < TH_COLS; c++)
                half[h][r * TH_COLS + c] = th_value(v, h * TH_HALF + r, c);
}

void th_scribble(uint8_t *const half[2])
{
    memset(half[0], TH_GARBAGE, TH_HALF * TH_COLS);
    memset(half[1], TH_GARBAGE, TH_HALF * TH_COLS);
}

rs_status_t th_register(rs_publisher_h pub, uint8_t *half, int h,
                        rs_diag_t *d)
{
    const int64_t full[2] = {TH_ROWS, TH_COLS}, shape[2] = {TH_HALF, TH_COLS};
    const int64_t off[2] = {h * TH_HALF, 0};
    return rs_publisher_register(pub, "w", RS_DTYPE_U8, 2, full, off, shape,
                                 half, RS_MEM_HOST, d);
}

void th_expect(const uint8_t *dest, int c0, int width, int64_t v,
               const char *who)
{
    for (int i = 0; i < TH_ROWS; i++)
        for (int j = 0; j < width; j++)
            if (dest[i * width + j] != th_value(v, i, c0 + j))
                fail_msg("%sversion %lld: w[%d][%d] = %u, want %u", who,
                         (long long)v, i, c0 + j, dest[i * width + j],
                         th_value(v, i, c0 + j));
}
