/* The one JSON string writer: quotes and escapes a string for every writer
 * of a JSON format (captures, plans, shard tables). Control characters
 * become \u escapes; bytes >= 0x80 pass through (names are UTF-8, as the
 * loaders require). */
#include <stdio.h>

#include "core/json.h"

/* Bytes one input byte takes in the literal's body. */
static size_t escaped_size(unsigned char ch)
{
    return (ch == '"' || ch == '\\') ? 2 : (ch < 0x20 ? 6 : 1);
}

/* One byte of the literal's body into dst (up to 6 bytes); its length. */
static size_t escape_byte(char *dst, unsigned char ch)
{
    static const char hex[] = "0123456789abcdef";
    if (ch == '"' || ch == '\\') {
        dst[0] = '\\';
        dst[1] = (char)ch;
        return 2;
    }
    if (ch < 0x20) { /* backslash, u, 00, two hex digits */
        dst[0] = '\\';
        dst[1] = 'u';
        dst[2] = '0';
        dst[3] = '0';
        dst[4] = hex[ch >> 4];
        dst[5] = hex[ch & 15];
        return 6;
    }
    dst[0] = (char)ch;
    return 1;
}

size_t rs__json_quoted_len(const char *s)
{
    size_t n = 2;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        n += escaped_size(*p);
    return n;
}

void rs__json_quote(char *dst, const char *s)
{
    *dst++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        dst += escape_byte(dst, *p);
    *dst = '"';
}

void rs__json_put_string(FILE *out, const char *s)
{
    char esc[6];
    putc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        size_t n = escape_byte(esc, *p);
        if (n == 1) /* the common case, without fwrite's overhead */
            putc(esc[0], out);
        else
            fwrite(esc, 1, n, out);
    }
    putc('"', out);
}
