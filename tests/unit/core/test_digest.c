/* rsd64 digest: test vectors produced by the independent Python
 * implementation (tests/support/rsd64_ref.py), streaming in random pieces
 * equal to one shot, permutations of words, stripes and bytes changing the
 * digest, and the text form (round trip and rejected spellings). When
 * python3 is available the C and Python implementations are also compared
 * on random data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reshard/digest.h"

static uint64_t rng_state;

static uint64_t rnd(uint64_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (rng_state >> 33) % n;
}

static unsigned char *random_bytes(size_t n)
{
    unsigned char *p = malloc(n + 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)rnd(256);
    return p;
}

static void check_text(const void *data, size_t n, const char *want)
{
    char got[RS_DIGEST_STR_LEN + 1];
    rs_digest_format(rs_digest(data, n), got);
    assert_string_equal(got, want);
}

/* The three vectors of docs/formats.md, printed by rsd64_ref.py. */
static void test_doc_vectors(void **state)
{
    (void)state;
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = (unsigned char)(i % 251);
    check_text("", 0, "rsd64:261a09bbc8ddb3b2");
    check_text("abc", 3, "rsd64:9d45a5eaa330e7f1");
    check_text(buf, 1000, "rsd64:ad6d1044f71ce8fe");
}

/* Lengths around word and stripe boundaries (rsd64_ref.py --extra). */
static void test_boundary_vectors(void **state)
{
    (void)state;
    static const struct {
        size_t n;
        const char *want;
    } v[] = {
        {1, "rsd64:e393ed71f1e9bc26"},  {7, "rsd64:6878874a18b30145"},
        {8, "rsd64:51a8f569b57a9faf"},  {9, "rsd64:391c2bd549325530"},
        {31, "rsd64:744fd60c0d1a5e62"}, {32, "rsd64:6654011b3c5cfe93"},
        {33, "rsd64:85dc5d5132a9e00b"}, {40, "rsd64:ed3a832987be2ab1"},
        {63, "rsd64:4b477b19c5217ae6"}, {64, "rsd64:d1cdda1186d4c202"},
        {65, "rsd64:307c45da7c0aa4a2"}, {100, "rsd64:6b1562072ceb3b7c"},
    };
    unsigned char buf[100];
    for (int i = 0; i < 100; i++)
        buf[i] = (unsigned char)((7 * i + 3) % 256);
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        check_text(buf, v[i].n, v[i].want);
}

static void test_streaming(void **state)
{
    (void)state;
    rng_state = 21;
    const size_t n = 5000;
    unsigned char *buf = random_bytes(n);
    for (int it = 0; it < 2000; it++) {
        size_t len = rnd(n + 1);
        rs_digest_t d;
        rs_digest_init(&d);
        size_t at = 0;
        while (at < len) {
            size_t piece = rnd(it % 3 == 0 ? 8 : 100); /* zero-length too */
            if (piece > len - at)
                piece = len - at;
            rs_digest_update(&d, buf + at, piece);
            at += piece;
        }
        assert_int_equal(d.total, len);
        assert_int_equal(rs_digest_final(&d), rs_digest(buf, len));
        /* final does not disturb the state: more data may follow */
        rs_digest_update(&d, buf + len, n - len);
        assert_int_equal(rs_digest_final(&d), rs_digest(buf, n));
    }
    free(buf);
}

static void swap_bytes(unsigned char *p, size_t a, size_t b, size_t width)
{
    unsigned char t[32];
    memcpy(t, p + a, width);
    memcpy(p + a, p + b, width);
    memcpy(p + b, t, width);
}

/* Swapping two different pieces of `width` bytes at aligned or random
 * positions must change the digest. */
static void check_swaps(size_t n, size_t width, int aligned, int count)
{
    unsigned char *buf = random_bytes(n);
    const uint64_t base = rs_digest(buf, n);
    int tried = 0;
    while (tried < count) {
        size_t slots = (n - width) / (aligned ? width : 1) + 1;
        size_t a = rnd(slots) * (aligned ? width : 1);
        size_t b = rnd(slots) * (aligned ? width : 1);
        if ((a > b ? a - b : b - a) < width ||
            memcmp(buf + a, buf + b, width) == 0)
            continue;
        swap_bytes(buf, a, b, width);
        assert_int_not_equal(rs_digest(buf, n), base);
        swap_bytes(buf, a, b, width);
        tried++;
    }
    free(buf);
}

static void test_permutations(void **state)
{
    (void)state;
    rng_state = 22;
    check_swaps(4096 + 13, 8, 1, 3000);  /* words, within and across lanes */
    check_swaps(4096 + 13, 32, 1, 1000); /* whole stripes */
    check_swaps(4096 + 13, 1, 0, 3000);  /* single bytes, tail included */
    check_swaps(31, 1, 0, 200);          /* tail only */
    /* The four words of one stripe rotated by one lane. */
    unsigned char s[64];
    for (int i = 0; i < 64; i++)
        s[i] = (unsigned char)(i * 37 + 1);
    uint64_t base = rs_digest(s, 64);
    unsigned char r[64];
    memcpy(r, s + 8, 24);
    memcpy(r + 24, s, 8);
    memcpy(r + 32, s + 32, 32);
    assert_int_not_equal(rs_digest(r, 64), base);
}

/* Zero buffers differ by length alone. */
static void test_length_matters(void **state)
{
    (void)state;
    static unsigned char zeros[300];
    uint64_t seen[301];
    for (size_t n = 0; n <= 300; n++) {
        seen[n] = rs_digest(zeros, n);
        for (size_t m = 0; m < n; m++)
            assert_int_not_equal(seen[m], seen[n]);
    }
}

static void test_text_form(void **state)
{
    (void)state;
    rng_state = 23;
    char text[RS_DIGEST_STR_LEN + 1];
    for (int i = 0; i < 1000; i++) {
        uint64_t v = (rnd(1ull << 32) << 32) | rnd(1ull << 32), back = 0;
        if (i == 0)
            v = 0;
        if (i == 1)
            v = UINT64_MAX;
        rs_digest_format(v, text);
        assert_int_equal(strlen(text), RS_DIGEST_STR_LEN - 1);
        assert_int_equal(rs_digest_parse(text, &back), RS_OK);
        assert_int_equal(back, v);
    }
    rs_digest_format(0xabcdef0123456789ull, text);
    assert_string_equal(text, "rsd64:abcdef0123456789");
}

static void test_parse_errors(void **state)
{
    (void)state;
    static const char *bad[] = {
        "",
        "rsd64:",
        "rsd64:0123456789abcde",
        "rsd64:0123456789abcdef0",
        "rsd64:0123456789ABCDEF",
        "RSD64:0123456789abcdef",
        "rsd64 0123456789abcdef",
        "sha256:0123456789abcdef",
        " rsd64:0123456789abcdef",
        "rsd64:0123456789abcdef ",
        "rsd64:0123456789abcdeg",
        "rsd64:-123456789abcdef",
        "rsd64:0x23456789abcdef",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t out = 42;
        assert_int_equal(rs_digest_parse(bad[i], &out), RS_ERR_INPUT);
        assert_int_equal(out, 42);
    }
    uint64_t out = 42;
    assert_int_equal(rs_digest_parse(NULL, &out), RS_ERR_INPUT);
    assert_int_equal(out, 42);
}

/* C against the Python reference on random files, when python3 exists. */
static void test_python_agrees(void **state)
{
    (void)state;
    const char *root = getenv("RESHARD_SOURCE_DIR");
    if (root == NULL || system("python3 -c 1 >/dev/null 2>&1") != 0) {
        fprintf(stderr, "python3 or RESHARD_SOURCE_DIR missing: skipped\n");
        skip();
    }
    static const size_t lens[] = {0, 5, 32, 47, 96, 1000, 4099};
    char path[64], cmd[1024], line[256], want[RS_DIGEST_STR_LEN + 1];
    rng_state = 24;
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        unsigned char *buf = random_bytes(lens[i]);
        snprintf(path, sizeof(path), "/tmp/rsd64_test_%d_%zu.bin",
                 (int)getpid(), i);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(buf, 1, lens[i], f), lens[i]);
        fclose(f);
        snprintf(cmd, sizeof(cmd), "python3 %s/tests/support/rsd64_ref.py %s",
                 root, path);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        assert_non_null(fgets(line, sizeof(line), p));
        assert_int_equal(pclose(p), 0);
        remove(path);
        rs_digest_format(rs_digest(buf, lens[i]), want);
        assert_int_equal(strncmp(line, want, RS_DIGEST_STR_LEN - 1), 0);
        free(buf);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_doc_vectors),
        cmocka_unit_test(test_boundary_vectors),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_permutations),
        cmocka_unit_test(test_length_matters),
        cmocka_unit_test(test_text_form),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_python_agrees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
