/* The one JSON writer (json_write.h): the string escaper, integers and
 * integer arrays, and the buffer they go through, for every writer of a
 * JSON format (captures, plans, shard tables, cuts). */
#include <string.h>

#include "core/json_write.h"

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

void rs__json_out_init(rs__json_out_t *w, FILE *out, char *buf, size_t cap)
{
    *w = (rs__json_out_t){.out = out, .buf = buf, .cap = cap};
}

int rs__json_out_flush(rs__json_out_t *w)
{
    if (w->len > 0 && fwrite(w->buf, 1, w->len, w->out) != w->len)
        w->failed = 1;
    w->len = 0;
    return w->failed ? -1 : 0;
}

void rs__json_out_raw(rs__json_out_t *w, const char *s, size_t n)
{
    if (n > w->cap - w->len)
        (void)rs__json_out_flush(w);
    if (n > w->cap) {
        if (fwrite(s, 1, n, w->out) != n)
            w->failed = 1;
        return;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

void rs__json_out_cstr(rs__json_out_t *w, const char *s)
{
    rs__json_out_raw(w, s, strlen(s));
}

void rs__json_out_str(rs__json_out_t *w, const char *s)
{
    size_t need = rs__json_quoted_len(s);
    if (need <= w->cap) { /* escaped straight into the buffer */
        if (need > w->cap - w->len)
            (void)rs__json_out_flush(w);
        rs__json_quote(w->buf + w->len, s);
        w->len += need;
        return;
    }
    char esc[6]; /* longer than the whole buffer: byte by byte */
    rs__json_out_lit(w, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        rs__json_out_raw(w, esc, escape_byte(esc, *p));
    rs__json_out_lit(w, "\"");
}

void rs__json_out_uint(rs__json_out_t *w, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    rs__json_out_raw(w, tmp + i, sizeof(tmp) - i);
}

void rs__json_out_int(rs__json_out_t *w, int64_t v)
{
    if (v < 0) {
        rs__json_out_lit(w, "-");
        /* Negate in unsigned arithmetic so INT64_MIN survives. */
        rs__json_out_uint(w, (uint64_t)0 - (uint64_t)v);
        return;
    }
    rs__json_out_uint(w, (uint64_t)v);
}

void rs__json_out_ints(rs__json_out_t *w, const int64_t *v, size_t n)
{
    rs__json_out_lit(w, "[");
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            rs__json_out_lit(w, ", ");
        rs__json_out_int(w, v[i]);
    }
    rs__json_out_lit(w, "]");
}

/* The stdio forms: a small buffer on the stack, written at once. */
#define PUT_BUF 256

void rs__json_put_string(FILE *out, const char *s)
{
    char buf[PUT_BUF];
    rs__json_out_t w;
    rs__json_out_init(&w, out, buf, sizeof(buf));
    rs__json_out_str(&w, s);
    (void)rs__json_out_flush(&w);
}

void rs__json_put_int(FILE *out, int64_t v)
{
    char buf[24];
    rs__json_out_t w;
    rs__json_out_init(&w, out, buf, sizeof(buf));
    rs__json_out_int(&w, v);
    (void)rs__json_out_flush(&w);
}

void rs__json_put_ints(FILE *out, const int64_t *v, size_t n)
{
    char buf[PUT_BUF];
    rs__json_out_t w;
    rs__json_out_init(&w, out, buf, sizeof(buf));
    rs__json_out_ints(&w, v, n);
    (void)rs__json_out_flush(&w);
}
