/* Status names, the diagnostic record helpers and the shape formatting
 * their messages share. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/diag.h"

const char *rs_status_str(rs_status_t status)
{
    switch (status) {
    case RS_OK: return "RS_OK";
    case RS_ERR_INVALID_ARG: return "RS_ERR_INVALID_ARG";
    case RS_ERR_INPUT: return "RS_ERR_INPUT";
    case RS_ERR_IO: return "RS_ERR_IO";
    case RS_ERR_UNSUPPORTED: return "RS_ERR_UNSUPPORTED";
    case RS_ERR_INCOMPLETE: return "RS_ERR_INCOMPLETE";
    case RS_ERR_VERIFY: return "RS_ERR_VERIFY";
    case RS_ERR_TRANSPORT: return "RS_ERR_TRANSPORT";
    case RS_ERR_TIMEOUT: return "RS_ERR_TIMEOUT";
    case RS_ERR_NO_MEMORY: return "RS_ERR_NO_MEMORY";
    case RS_ERR_CANCELLED: return "RS_ERR_CANCELLED";
    }
    return "RS_ERR_UNKNOWN";
}

void rs_diag_clear(rs_diag_t *diag)
{
    if (diag == NULL)
        return;
    diag->status = RS_OK;
    diag->msg[0] = '\0';
}

rs_status_t (rs__diag_set)(rs_diag_t *diag, rs_status_t status,
                           const char *fmt, ...)
{
    if (diag != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(diag->msg, sizeof(diag->msg), fmt, ap);
        va_end(ap);
        diag->status = status;
    }
    return status;
}

rs_status_t rs__diag_prefix(rs_diag_t *diag, const char *fmt, ...)
{
    char prefix[RS_DIAG_MSG_MAX];
    char joined[RS_DIAG_MSG_MAX];
    va_list ap;

    if (diag == NULL)
        return RS_OK;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    size_t plen = strnlen(prefix, sizeof(joined) - 1);
    memcpy(joined, prefix, plen);
    size_t rest = strnlen(diag->msg, sizeof(diag->msg));
    if (rest > sizeof(joined) - 1 - plen)
        rest = sizeof(joined) - 1 - plen;
    memcpy(joined + plen, diag->msg, rest);
    joined[plen + rest] = '\0';
    memcpy(diag->msg, joined, sizeof(diag->msg));
    return diag->status;
}

const char *rs__format_dims(char *buf, size_t len, const int64_t *dims,
                            int ndim)
{
    size_t used = 0;
    int n = snprintf(buf, len, "[");
    for (int i = 0; i < ndim && n >= 0 && (used += (size_t)n) < len; i++)
        n = snprintf(buf + used, len - used, "%s%lld", i ? ", " : "",
                     (long long)dims[i]);
    if (n >= 0 && (used += (size_t)n) < len)
        snprintf(buf + used, len - used, "]");
    return buf;
}
