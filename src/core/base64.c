/* Base64 (RFC 4648, standard alphabet, with padding) for carrying binary
 * transport blobs inside JSON shard tables. Decoding is strict: only the
 * canonical spelling of some byte string is accepted, so a blob has exactly
 * one text form and a corrupted table is noticed rather than half-read. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/base64.h"

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

rs_status_t rs__base64_encode(const void *data, size_t len, char **text_p)
{
    if ((data == NULL && len > 0) || text_p == NULL)
        return RS_ERR_INVALID_ARG;
    if (len / 3 >= (SIZE_MAX - 1) / 4)
        return RS_ERR_NO_MEMORY;
    size_t out_len = (len + 2) / 3 * 4;
    char *out = malloc(out_len + 1);
    if (out == NULL)
        return RS_ERR_NO_MEMORY;
    const uint8_t *in = data;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        size_t left = len - i;
        uint32_t v = (uint32_t)in[i] << 16;
        if (left > 1)
            v |= (uint32_t)in[i + 1] << 8;
        if (left > 2)
            v |= in[i + 2];
        out[o++] = alphabet[v >> 18 & 63];
        out[o++] = alphabet[v >> 12 & 63];
        out[o++] = left > 1 ? alphabet[v >> 6 & 63] : '=';
        out[o++] = left > 2 ? alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    *text_p = out;
    return RS_OK;
}

/* The 6-bit value of c, or -1 for anything outside the alphabet. */
static int sextet(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Decodes one group of four characters into out; returns the number of
 * bytes (1..3), or -1 when the group is not canonical. `last` says whether
 * padding may appear. */
static int decode_group(const char *g, int last, uint8_t *out)
{
    int pad = 0;
    if (last && g[3] == '=')
        pad = g[2] == '=' ? 2 : 1;
    uint32_t v = 0;
    for (int k = 0; k < 4 - pad; k++) {
        int s = sextet(g[k]);
        if (s < 0)
            return -1;
        v = v << 6 | (uint32_t)s;
    }
    v <<= 6 * pad;
    /* Bits the padding hides must be zero in the canonical form. */
    if ((pad == 1 && (v & 0xff)) || (pad == 2 && (v & 0xffff)))
        return -1;
    out[0] = (uint8_t)(v >> 16);
    out[1] = (uint8_t)(v >> 8);
    out[2] = (uint8_t)v;
    return 3 - pad;
}

rs_status_t rs__base64_decode(const char *text, void **data_p, size_t *len_p)
{
    if (text == NULL || data_p == NULL || len_p == NULL)
        return RS_ERR_INVALID_ARG;
    size_t n = strlen(text);
    if (n % 4 != 0)
        return RS_ERR_INPUT;
    uint8_t *out = malloc(n / 4 * 3 + 1); /* +1: never malloc(0) */
    if (out == NULL)
        return RS_ERR_NO_MEMORY;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int got = decode_group(text + i, i + 4 == n, out + o);
        if (got < 0) {
            free(out);
            return RS_ERR_INPUT;
        }
        o += (size_t)got;
    }
    *data_p = out;
    *len_p = o;
    return RS_OK;
}
