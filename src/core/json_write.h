/* The one JSON writer every format's writer uses (captures, plans, shard
 * tables, cuts): string literals escaped one way, integers and integer
 * arrays spelled one way ("[1, 2, 3]"), through a buffer that a writer of
 * millions of records (the plan) flushes to its FILE* in large blocks. */
#ifndef RS_CORE_JSON_WRITE_H
#define RS_CORE_JSON_WRITE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Control characters become \u escapes; bytes >= 0x80 pass through (names
 * are UTF-8, as the loaders require). rs__json_quoted_len is the length of
 * s as a quoted, escaped literal; rs__json_quote writes exactly that many
 * bytes (no NUL) to dst. */
size_t rs__json_quoted_len(const char *s);
void rs__json_quote(char *dst, const char *s);

/* A buffered writer to `out`: text gathers in buf[0 .. cap) and is written
 * when it would overflow and at rs__json_out_flush. Write errors are
 * remembered, not returned per call. */
typedef struct rs__json_out {
    FILE *out;
    char *buf;
    size_t cap, len;
    int failed;
} rs__json_out_t;

void rs__json_out_init(rs__json_out_t *w, FILE *out, char *buf, size_t cap);
/* Writes what is buffered; -1 when this or any earlier write failed (the
 * FILE* itself is not flushed), else 0. */
int rs__json_out_flush(rs__json_out_t *w);

void rs__json_out_raw(rs__json_out_t *w, const char *s, size_t n);
/* String literals only: the "" pasting rejects pointers, whose sizeof would
 * silently be the pointer's size. */
#define rs__json_out_lit(w, s) \
    rs__json_out_raw((w), "" s "", sizeof("" s "") - 1)
void rs__json_out_cstr(rs__json_out_t *w, const char *s);
/* s as a quoted, escaped literal. */
void rs__json_out_str(rs__json_out_t *w, const char *s);
void rs__json_out_uint(rs__json_out_t *w, uint64_t v);
void rs__json_out_int(rs__json_out_t *w, int64_t v);
/* "[v0, v1, ...]" */
void rs__json_out_ints(rs__json_out_t *w, const int64_t *v, size_t n);

/* The same for writers that stream with stdio calls of their own: errors
 * stay in ferror(out). */
void rs__json_put_string(FILE *out, const char *s);
void rs__json_put_int(FILE *out, int64_t v);
void rs__json_put_ints(FILE *out, const int64_t *v, size_t n);

#endif
