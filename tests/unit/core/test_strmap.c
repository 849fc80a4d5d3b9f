/* The string map: growth from empty through several doublings keeps every
 * key and its latest value, replacing a key does not add one, and absent
 * keys (including from an empty map) are reported absent; a lookup with a
 * precomputed hash agrees with the plain one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "core/strmap.h"

#define NKEYS 1000

static char keys[NKEYS][16];

static void test_empty_map(void **state)
{
    (void)state;
    rs__strmap_t m;
    uint32_t v = 7;
    rs__strmap_init(&m);
    assert_int_equal(rs__strmap_get(&m, "a", &v), 0);
    assert_int_equal(v, 7);
    rs__strmap_free(&m);
    assert_int_equal(m.cap, 0);
    assert_null(m.slots);
}

static void test_growth_keeps_everything(void **state)
{
    (void)state;
    rs__strmap_t m;
    rs__strmap_init(&m);
    for (uint32_t i = 0; i < NKEYS; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%u", (unsigned)i);
        assert_int_equal(rs__strmap_put(&m, keys[i], i), 1);
        assert_int_equal(m.len, i + 1);
        assert_true(m.len * 2 <= m.cap); /* load stays <= 1/2 */
    }
    /* Replacing keeps the count; lookups by an equal string, not the
     * stored pointer, find the newest value. */
    for (uint32_t i = 0; i < NKEYS; i += 3)
        assert_int_equal(rs__strmap_put(&m, keys[i], i + 5000), 1);
    assert_int_equal(m.len, NKEYS);
    for (uint32_t i = 0; i < NKEYS; i++) {
        char probe[16];
        uint32_t v = 0;
        snprintf(probe, sizeof(probe), "k%u", (unsigned)i);
        assert_int_equal(rs__strmap_get(&m, probe, &v), 1);
        assert_int_equal(v, i % 3 == 0 ? i + 5000 : i);
        v = 0; /* the hashed lookup finds the same */
        assert_int_equal(rs__strmap_get_hashed(&m, probe, rs__hash_str(probe),
                                               &v), 1);
        assert_int_equal(v, i % 3 == 0 ? i + 5000 : i);
    }
    uint32_t v = 0;
    assert_int_equal(rs__strmap_get(&m, "k1000", &v), 0);
    assert_int_equal(rs__strmap_get(&m, "", &v), 0);
    rs__strmap_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_map),
        cmocka_unit_test(test_growth_keeps_everything),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
