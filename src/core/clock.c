/* Monotonic and wall-clock seconds, and absolute deadlines, for every layer
 * (see clock.h). */
#include <errno.h>

#include "core/clock.h"

static double seconds(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double rs__now_s(void) { return seconds(CLOCK_MONOTONIC); }

double rs__wall_s(void) { return seconds(CLOCK_REALTIME); }

/* Whole seconds and nanoseconds added apart, so long waits keep nanosecond
 * precision instead of passing through one double of the absolute time. */
static struct timespec after(clockid_t id, double s)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    time_t whole = (time_t)s;
    ts.tv_sec += whole;
    ts.tv_nsec += (long)((s - (double)whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

struct timespec rs__mono_after(double s) { return after(CLOCK_MONOTONIC, s); }

struct timespec rs__wall_after(double s) { return after(CLOCK_REALTIME, s); }

void rs__sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec until = rs__mono_after(s);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) ==
           EINTR)
        ; /* a signal: sleep on to the same deadline */
}
