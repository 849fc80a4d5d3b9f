/* The one formatter of geometry refusals (see why.h). */
#include <stdarg.h>
#include <stdio.h>

#include "geom/why.h"

rs_status_t rs__geom_why(rs_status_t st, char *why, size_t n, const char *fmt,
                         ...)
{
    if (why != NULL && n > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return st;
}
