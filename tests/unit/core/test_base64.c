/* Base64: the RFC 4648 test vectors, round trips of random data at every
 * length up to a few hundred bytes checked against a bit-by-bit reference
 * encoder written here, and the spellings strict decoding must refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "core/base64.h"

static uint64_t rng_state;

static uint64_t rnd(uint64_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (rng_state >> 33) % n;
}

static void check_vector(const char *plain, const char *want)
{
    char *text;
    assert_int_equal(rs__base64_encode(plain, strlen(plain), &text), RS_OK);
    assert_string_equal(text, want);
    void *back;
    size_t len;
    assert_int_equal(rs__base64_decode(want, &back, &len), RS_OK);
    assert_int_equal(len, strlen(plain));
    assert_memory_equal(back, plain, len);
    free(back);
    free(text);
}

static void test_rfc4648_vectors(void **state)
{
    (void)state;
    check_vector("", "");
    check_vector("f", "Zg==");
    check_vector("fo", "Zm8=");
    check_vector("foo", "Zm9v");
    check_vector("foob", "Zm9vYg==");
    check_vector("fooba", "Zm9vYmE=");
    check_vector("foobar", "Zm9vYmFy");
}

/* Reference: take the input six bits at a time, most significant first,
 * then pad to a multiple of four characters. */
static char *reference_encode(const uint8_t *p, size_t n)
{
    static const char abc[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = calloc(n * 2 + 8, 1);
    size_t bits = n * 8, o = 0;
    for (size_t b = 0; b < bits; b += 6) {
        unsigned v = 0;
        for (size_t k = b; k < b + 6; k++) {
            unsigned bit = k < bits ? (p[k / 8] >> (7 - k % 8)) & 1 : 0;
            v = v << 1 | bit;
        }
        out[o++] = abc[v];
    }
    while (o % 4 != 0)
        out[o++] = '=';
    return out;
}

static void test_random_round_trips(void **state)
{
    (void)state;
    rng_state = 17;
    for (size_t n = 0; n < 400; n++) {
        uint8_t *data = malloc(n + 1);
        for (size_t i = 0; i < n; i++)
            data[i] = (uint8_t)rnd(256);
        char *text, *want = reference_encode(data, n);
        assert_int_equal(rs__base64_encode(data, n, &text), RS_OK);
        assert_string_equal(text, want);
        void *back;
        size_t len = 12345;
        assert_int_equal(rs__base64_decode(text, &back, &len), RS_OK);
        assert_int_equal(len, n);
        assert_memory_equal(back, data, n);
        free(back);
        free(want);
        free(text);
        free(data);
    }
}

static void expect_refused(const char *text)
{
    void *out = (void *)0x1;
    size_t len = 77;
    if (rs__base64_decode(text, &out, &len) != RS_ERR_INPUT)
        fail_msg("'%s' was not refused", text);
    assert_ptr_equal(out, (void *)0x1);
    assert_int_equal(len, 77);
}

static void test_refused_spellings(void **state)
{
    (void)state;
    expect_refused("Zg=");      /* not a multiple of four */
    expect_refused("Zg");
    expect_refused("Zm9vY");
    expect_refused("Zm9v\n");   /* whitespace */
    expect_refused("Zm 9");
    expect_refused("Zm9-");     /* URL-safe alphabet */
    expect_refused("Zm9_");
    expect_refused("Zg==Zm9v"); /* padding before the end */
    expect_refused("Z===");     /* too much padding */
    expect_refused("====");
    expect_refused("Zg=a");     /* data after padding */
    expect_refused("Zh==");     /* bits hidden by padding are not zero */
    expect_refused("Zm9=");
    expect_refused("Zm8\xc3");
    /* The canonical neighbours are accepted. */
    void *out;
    size_t len;
    assert_int_equal(rs__base64_decode("Zm8=", &out, &len), RS_OK);
    free(out);
}

static void test_invalid_args(void **state)
{
    (void)state;
    char *text;
    void *out;
    size_t len;
    assert_int_equal(rs__base64_encode(NULL, 3, &text), RS_ERR_INVALID_ARG);
    assert_int_equal(rs__base64_encode("abc", 3, NULL), RS_ERR_INVALID_ARG);
    assert_int_equal(rs__base64_encode(NULL, 0, &text), RS_OK);
    assert_string_equal(text, "");
    free(text);
    assert_int_equal(rs__base64_decode(NULL, &out, &len), RS_ERR_INVALID_ARG);
    assert_int_equal(rs__base64_decode("", NULL, &len), RS_ERR_INVALID_ARG);
    assert_int_equal(rs__base64_decode("", &out, NULL), RS_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc4648_vectors),
        cmocka_unit_test(test_random_round_trips),
        cmocka_unit_test(test_refused_spellings),
        cmocka_unit_test(test_invalid_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
