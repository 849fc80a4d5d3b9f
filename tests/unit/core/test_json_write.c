/* The JSON writer: every byte class of a string against a hand-written
 * expected literal, the buffer and stream forms agreeing, jansson (an
 * independent parser) reading every ASCII byte back unchanged; integers as
 * printf spells them; a tiny buffer writing the same text as a large one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/json_write.h"

static char *quoted(const char *s)
{
    size_t n = rs__json_quoted_len(s);
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    rs__json_quote(buf, s);
    buf[n] = '\0';
    return buf;
}

static char *streamed(const char *s)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    rs__json_put_string(out, s);
    fclose(out);
    return text;
}

static void test_escapes(void **state)
{
    (void)state;
    const char *in = "a\"b\\c\n\x01\x1f \xc3\xa9/";
    const char *want = "\"a\\\"b\\\\c\\u000a\\u0001\\u001f \xc3\xa9/\"";
    char *q = quoted(in), *w = streamed(in);
    assert_string_equal(q, want);
    assert_string_equal(w, want);
    assert_int_equal(rs__json_quoted_len(""), 2);
    free(q);
    free(w);
}

/* Bytes >= 0x80 pass through (UTF-8 names), shown in test_escapes; here
 * every ASCII byte goes through an independent parser and back. */
static void test_every_ascii_byte_parses_back(void **state)
{
    (void)state;
    char in[128], doc[1024];
    json_error_t err;
    for (int i = 1; i < 128; i++)
        in[i - 1] = (char)i;
    in[127] = '\0';
    char *q = quoted(in);
    snprintf(doc, sizeof(doc), "[%s]", q);
    json_t *root = json_loads(doc, 0, &err);
    if (root == NULL)
        fail_msg("%s: %s", err.text, doc);
    assert_string_equal(json_string_value(json_array_get(root, 0)), in);
    json_decref(root);
    free(q);
}

/* What the buffered writer made of fn, through a buffer of `cap` bytes. */
static char *written(size_t cap, void (*fn)(rs__json_out_t *w))
{
    char *text = NULL, *buf = malloc(cap);
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    assert_non_null(buf);
    rs__json_out_t w;
    rs__json_out_init(&w, out, buf, cap);
    fn(&w);
    assert_int_equal(rs__json_out_flush(&w), 0);
    fclose(out);
    free(buf);
    return text;
}

static const int64_t some_ints[] = {0, 1, -1, 42, -7000000000LL, INT64_MAX,
                                    INT64_MIN};
#define NSOME (sizeof(some_ints) / sizeof(some_ints[0]))

static void write_record(rs__json_out_t *w)
{
    rs__json_out_lit(w, "{\"name\": ");
    rs__json_out_str(w, "a \"long\" name\n that does not fit a tiny buffer");
    rs__json_out_lit(w, ", \"dims\": ");
    rs__json_out_ints(w, some_ints, NSOME);
    rs__json_out_lit(w, ", \"none\": ");
    rs__json_out_ints(w, some_ints, 0);
    rs__json_out_lit(w, ", \"bytes\": ");
    rs__json_out_uint(w, UINT64_MAX);
    rs__json_out_cstr(w, "}");
}

static void test_integers(void **state)
{
    (void)state;
    char want[512], *text = NULL;
    size_t len = 0, at = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    rs__json_put_ints(out, some_ints, NSOME);
    rs__json_put_int(out, INT64_MIN);
    fclose(out);
    for (size_t i = 0; i < NSOME; i++)
        at += (size_t)snprintf(want + at, sizeof(want) - at, "%s%lld",
                               i ? ", " : "[", (long long)some_ints[i]);
    snprintf(want + at, sizeof(want) - at, "]%lld", (long long)INT64_MIN);
    assert_string_equal(text, want);
    free(text);

    char *big = written(65536, write_record);
    assert_string_equal(big, "{\"name\": \"a \\\"long\\\" name\\u000a that "
                             "does not fit a tiny buffer\", \"dims\": [0, 1, "
                             "-1, 42, -7000000000, 9223372036854775807, "
                             "-9223372036854775808], \"none\": [], "
                             "\"bytes\": 18446744073709551615}");
    for (size_t cap = 1; cap < 40; cap++) {
        char *small = written(cap, write_record);
        assert_string_equal(small, big);
        free(small);
    }
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_every_ascii_byte_parses_back),
        cmocka_unit_test(test_integers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
