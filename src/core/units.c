/* Sizes, rates and durations as people read them, and the clock durations
 * are measured on (include/reshard/units.h). */
#include <stdio.h>

#include "core/clock.h"
#include "reshard/units.h"

const char *rs_format_bytes(char *buf, size_t len, uint64_t bytes)
{
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB",
                                       "EiB"};
    if (bytes < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    double v = (double)bytes / 1024;
    size_t u = 0;
    for (; v >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0]); u++)
        v /= 1024;
    /* three significant digits; 1023.9 KiB rounds to "1024 KiB", not
     * "1.00e+03" */
    snprintf(buf, len, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s",
             v, unit[u]);
    return buf;
}

const char *rs_format_rate(char *buf, size_t len, double bytes_per_s)
{
    double g = bytes_per_s / 1e9;
    int decimals = 2;
    for (double t = 0.1; g > 0 && g < t && decimals < 9; t /= 10)
        decimals++;
    if (!(g < 1e12))
        snprintf(buf, len, "more than 10^12 GB/s");
    else
        snprintf(buf, len, "%.*f GB/s", decimals, g < 0 ? 0.0 : g);
    return buf;
}

const char *rs_format_seconds(char *buf, size_t len, double seconds)
{
    if (seconds <= 0)
        snprintf(buf, len, "0 s");
    else if (seconds < 1e-3)
        snprintf(buf, len, "%.0f us", seconds * 1e6);
    else if (seconds < 1)
        snprintf(buf, len, "%.1f ms", seconds * 1e3);
    else
        snprintf(buf, len, "%.2f s", seconds);
    return buf;
}

double rs_clock_seconds(void) { return rs__now_s(); }
