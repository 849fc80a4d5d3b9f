/* The topology fingerprint that keeps or drops a receiver's cached plan:
 * it changes when any one shard's address, device, geometry or session, or
 * any table's agent or transport blob changes, and stays when only digests
 * or publisher steps change (every version). Tried for every shard of a
 * sources built from several tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "refit/refit_impl.h"
#include "reshard/digest.h"

#define NTABLES 6
#define NT 10 /* tensors, each split over every table */
#define NSHARDS (NTABLES * NT)

typedef enum {
    MUT_NONE, MUT_DIGEST, MUT_STEP, MUT_ADDR, MUT_DEVICE, MUT_SHAPE,
    MUT_OFFSET, MUT_SESSION, MUT_BLOB, MUT_AGENT
} mutation_t;

/* Table r holds rows [r*8, r*8+8) of every tensor. Mutation `m` applies to
 * shard `which` (or table `which` for table fields); `version` only feeds
 * digests and steps. */
static rs_sources_h build(mutation_t m, int which, int version)
{
    rs_sources_h s;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    for (int r = 0; r < NTABLES; r++) {
        char agent[32], blob[32];
        snprintf(agent, sizeof(agent), m == MUT_AGENT && which == r
                                           ? "other-%d" : "trainer-%d", r);
        snprintf(blob, sizeof(blob), m == MUT_BLOB && which == r ? "YmxvYg=="
                                                                 : "dHJ%d", r);
        for (int t = 0; t < NT; t++) {
            int i = r * NT + t;
            static const int64_t full[2] = {NTABLES * 8, 4};
            int64_t off[2] = {r * 8, 0}, shape[2] = {8, 4};
            char name[32], digest[RS_DIGEST_STR_LEN + 1], session[32];
            uint64_t addr = 4096 + (uint64_t)t * 256;
            int64_t device = 0;
            snprintf(name, sizeof(name), "layer.%d", t);
            snprintf(session, sizeof(session), "%s", agent);
            rs_digest_format((uint64_t)version * 1000003u + (uint64_t)i,
                             digest);
            if (which == i && m == MUT_DIGEST)
                rs_digest_format(12345, digest);
            if (which == i && m == MUT_ADDR)
                addr += 4;
            if (which == i && m == MUT_DEVICE)
                device = 1;
            if (which == i && m == MUT_SHAPE)
                shape[0] = 4;
            if (which == i && m == MUT_OFFSET)
                off[1] = 1, shape[1] = 3;
            if (which == i && m == MUT_SESSION)
                snprintf(session, sizeof(session), "trainer-%d",
                         (r + 1) % NTABLES);
            rs_shard_desc_t d = {name, RS_DTYPE_BF16, 2, 2, full, session,
                                 device, addr, off, shape, digest};
            assert_int_equal(rs_sources_add_shard(s, &d, NULL), RS_OK);
        }
        rs_table_info_t info = {agent, NULL, blob,
                                m == MUT_STEP ? 99 : version};
        assert_int_equal(rs_sources_add_table(s, &info, NULL), RS_OK);
    }
    return s;
}

static uint64_t fp(mutation_t m, int which, int version)
{
    rs_sources_h s = build(m, which, version);
    uint64_t f = rs__topology_fingerprint(s);
    rs_sources_destroy(s);
    return f;
}

static void test_same_topology_same_fingerprint(void **state)
{
    (void)state;
    uint64_t base = fp(MUT_NONE, -1, 1);
    assert_int_equal(fp(MUT_NONE, -1, 1), base); /* deterministic */
    assert_int_equal(fp(MUT_NONE, -1, 2), base); /* new digests and steps */
    assert_int_equal(fp(MUT_STEP, -1, 1), base);
    for (int i = 0; i < NSHARDS; i++)
        assert_int_equal(fp(MUT_DIGEST, i, 1), base);
}

static void test_any_one_shard_changes_it(void **state)
{
    (void)state;
    static const mutation_t muts[] = {MUT_ADDR, MUT_DEVICE, MUT_SHAPE,
                                      MUT_OFFSET, MUT_SESSION};
    uint64_t base = fp(MUT_NONE, -1, 1);
    for (size_t k = 0; k < sizeof(muts) / sizeof(muts[0]); k++) {
        for (int i = 0; i < NSHARDS; i++) {
            uint64_t f = fp(muts[k], i, 1);
            if (f == base)
                fail_msg("mutation %d of shard %d kept the fingerprint",
                         (int)muts[k], i);
        }
    }
}

static void test_any_one_table_changes_it(void **state)
{
    (void)state;
    uint64_t base = fp(MUT_NONE, -1, 1);
    for (int r = 0; r < NTABLES; r++) {
        assert_true(fp(MUT_BLOB, r, 1) != base);
        assert_true(fp(MUT_AGENT, r, 1) != base);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_topology_same_fingerprint),
        cmocka_unit_test(test_any_one_shard_changes_it),
        cmocka_unit_test(test_any_one_table_changes_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
