/* A u8 tensor "w" [64, 1000] held by one trainer as two row halves, the
 * odd width making arena slots padded: each version's values, the halves
 * filled with them or scribbled over (the trainer training on), their
 * registration, and the check of a column block a receiver pulled. */
#ifndef RS_TEST_TWO_HALVES_H
#define RS_TEST_TWO_HALVES_H

#include <stdint.h>

#include "reshard/reshard.h"

#define TH_ROWS 64
#define TH_HALF 32
#define TH_COLS 1000
#define TH_GARBAGE 0x5A

/* The ground truth: element (r, c) of "w" in version v. */
uint8_t th_value(int64_t v, int r, int c);

/* Both halves hold version v. */
void th_fill(uint8_t *const half[2], int64_t v);

/* Both halves hold TH_GARBAGE. */
void th_scribble(uint8_t *const half[2]);

/* Registers half h (rows [h * TH_HALF, (h + 1) * TH_HALF)) of "w". */
rs_status_t th_register(rs_publisher_h pub, uint8_t *half, int h,
                        rs_diag_t *d);

/* dest [TH_ROWS, width] holds columns [c0, c0 + width) of version v;
 * fails the test naming the first wrong byte, after `who`. */
void th_expect(const uint8_t *dest, int c0, int width, int64_t v,
               const char *who);

#endif
