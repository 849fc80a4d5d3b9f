/* Sizes and rates as people read them (include/reshard/units.h). */
#include <stdio.h>

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
