/* Sizes as people type them (include/reshard/units.h, rs_parse_bytes):
 * the inverse of rs_format_bytes, for options such as a staging budget. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "reshard/units.h"

/* The power of 1024 a unit names, or -1. */
static int unit_power(const char *u)
{
    static const char *const names[][3] = {
        {"b", "", ""}, {"k", "kib", "kb"}, {"m", "mib", "mb"},
        {"g", "gib", "gb"}, {"t", "tib", "tb"}};
    if (*u == '\0')
        return 0;
    for (int p = 0; p < 5; p++)
        for (int k = 0; k < 3; k++)
            if (names[p][k][0] != '\0' && strcasecmp(u, names[p][k]) == 0)
                return p;
    return -1;
}

rs_status_t rs_parse_bytes(const char *text, uint64_t *bytes_p)
{
    char *end = NULL;
    if (text == NULL || bytes_p == NULL || !isdigit((unsigned char)text[0]))
        return RS_ERR_INPUT;
    /* a whole number is taken exactly; a fraction through a double */
    unsigned long long whole = strtoull(text, &end, 10);
    double value = (double)whole;
    int exact = *end != '.';
    if (!exact)
        value = strtod(text, &end);
    while (*end == ' ')
        end++;
    int p = unit_power(end);
    if (p < 0)
        return RS_ERR_INPUT;
    double scaled = value;
    for (int k = 0; k < p; k++)
        scaled *= 1024.0;
    if (scaled >= 18446744073709551616.0)
        return RS_ERR_INPUT;
    if (exact && p == 0) {
        *bytes_p = whole;
        return RS_OK;
    }
    if (exact && whole <= (UINT64_MAX >> (10 * p))) {
        *bytes_p = (uint64_t)whole << (10 * p);
        return RS_OK;
    }
    *bytes_p = (uint64_t)scaled;
    return RS_OK;
}
