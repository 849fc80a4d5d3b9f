/* The one clock helper: monotonic seconds for timeouts and timings, and
 * absolute deadlines for the calls that take a timespec (condition variables
 * set to CLOCK_MONOTONIC, clock_nanosleep; CLOCK_REALTIME where a condition
 * variable keeps the default clock, and for wall-clock timestamps). */
#ifndef RS_CORE_CLOCK_H
#define RS_CORE_CLOCK_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC (an arbitrary origin; only differences mean
 * anything). */
double rs__now_s(void);

/* Seconds since the epoch on CLOCK_REALTIME. */
double rs__wall_s(void);

/* The CLOCK_MONOTONIC / CLOCK_REALTIME time `s` seconds (>= 0) from now. */
struct timespec rs__mono_after(double s);
struct timespec rs__wall_after(double s);

/* Sleeps `s` seconds on CLOCK_MONOTONIC (nothing when s <= 0); a signal
 * does not cut the sleep short. */
void rs__sleep_s(double s);

#endif
