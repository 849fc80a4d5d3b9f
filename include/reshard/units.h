/* How reshard writes quantities for people: sizes in B, KiB, MiB, GiB,
 * TiB (powers of 1024), rates in GB/s (10^9 bytes per second), durations
 * in us, ms and s, never in scientific notation; and the monotonic clock
 * that durations are measured on. Human-facing lines of the library and
 * the CLI go through these, so a quantity has one unit everywhere. JSON
 * records carry plain numbers under keys that name their unit instead.
 * Threads: each writes only the caller's buffer: callable from any
 * thread. */
#ifndef RESHARD_UNITS_H
#define RESHARD_UNITS_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest text a formatter here writes, with its terminator (a duration
 * longer than 10^40 s is cut short). */
#define RS_UNITS_TEXT_MAX 48

/* "136 B", "1.50 KiB", "3.27 MiB", "12.4 GiB": three significant digits
 * from KiB on. Returns buf (cut short to fit len >= 1). */
RS_API const char *rs_format_bytes(char *buf, size_t len, uint64_t bytes);

/* "9.31 GB/s", "0.043 GB/s", "0.00000012 GB/s": at least two significant
 * digits, down to a byte per second; an unmeasurably fast rate (no time
 * elapsed) reads "more than 10^12 GB/s". Returns buf. */
RS_API const char *rs_format_rate(char *buf, size_t len, double bytes_per_s);

/* "850 us", "14.4 ms", "2.31 s": whole microseconds below a millisecond,
 * milliseconds to one decimal below a second, then seconds to two
 * decimals; zero or less reads "0 s". Returns buf (cut short to fit
 * len >= 1). */
RS_API const char *rs_format_seconds(char *buf, size_t len, double seconds);

/* Parses a size: a whole or decimal number of bytes, optionally followed
 * (a space allowed) by B, KiB, MiB, GiB or TiB (K, M, G, T and KB, MB,
 * GB, TB mean the same powers of 1024; case ignored): "1073741824",
 * "1 GiB", "512MiB", "1.5G". RS_ERR_INPUT for anything else, a negative
 * number or more than 2^64 - 1 bytes (*bytes_p untouched). */
RS_API rs_status_t rs_parse_bytes(const char *text, uint64_t *bytes_p);

/* Seconds on CLOCK_MONOTONIC: an arbitrary origin, so only differences
 * mean anything; never goes back when the wall clock is set. */
RS_API double rs_clock_seconds(void);

#ifdef __cplusplus
}
#endif
#endif
