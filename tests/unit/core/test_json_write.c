/* The JSON string writer: every byte class against a hand-written expected
 * literal, the buffer and stream forms agreeing, and jansson (an independent
 * parser) reading every ASCII byte back unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/json.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_every_ascii_byte_parses_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
