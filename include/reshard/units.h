/* How reshard writes quantities for people: sizes in B, KiB, MiB, GiB,
 * TiB (powers of 1024), rates in GB/s (10^9 bytes per second), never in
 * scientific notation. Every human-facing line of the library and the CLI
 * goes through these two, so a quantity has one unit everywhere. JSON
 * records carry plain numbers under keys that name their unit instead.
 * Threads: both write only the caller's buffer: callable from any thread. */
#ifndef RESHARD_UNITS_H
#define RESHARD_UNITS_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest text either function writes, with its terminator. */
#define RS_UNITS_TEXT_MAX 48

/* "136 B", "1.50 KiB", "3.27 MiB", "12.4 GiB": three significant digits
 * from KiB on. Returns buf (cut short to fit len >= 1). */
RS_API const char *rs_format_bytes(char *buf, size_t len, uint64_t bytes);

/* "9.31 GB/s", "0.043 GB/s", "0.00000012 GB/s": at least two significant
 * digits, down to a byte per second; an unmeasurably fast rate (no time
 * elapsed) reads "more than 10^12 GB/s". Returns buf. */
RS_API const char *rs_format_rate(char *buf, size_t len, double bytes_per_s);

#ifdef __cplusplus
}
#endif
#endif
