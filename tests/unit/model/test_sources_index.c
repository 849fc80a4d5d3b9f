/* The indexed lookups of merged sources: rs_sources_shard gives the
 * documented order (tensor by tensor, each in insertion order) however the
 * shards arrived, also after more arrive and after a failed load rolls
 * back; rs_sources_num_shards follows; rs_sources_find_table finds the first
 * table of an agent. Checked against an independent list kept by the test,
 * with a fixed-seed shuffle of the arrival order. Also whether the sources
 * may hold a quantized copy's derived tensors (a name with '#'). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/sources_impl.h"
#include "reshard/reshard.h"

#define NT 40
#define PER 6 /* shards per tensor */

typedef struct ref {
    int tensor, k;   /* shard k of tensor */
} ref_t;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint64_t addr_of(int t, int k) { return 4096 + (uint64_t)(t * PER + k) * 64; }

static void add(rs_sources_h s, int t, int k)
{
    static const int64_t full[1] = {PER * 8};
    int64_t off[1] = {k * 8}, shape[1] = {8};
    char name[32], session[32];
    snprintf(name, sizeof(name), "w.%d", t);
    snprintf(session, sizeof(session), "trainer-%d", (t + k) % 7);
    rs_shard_desc_t d = {name, RS_DTYPE_F64, 8, 1, full, session, 0,
                         addr_of(t, k), off, shape, NULL};
    assert_int_equal(rs_sources_add_shard(s, &d, NULL), RS_OK);
}

/* The expected order: tensors by first arrival, shards by arrival. */
static size_t expected(const ref_t *arrived, size_t n, ref_t *out)
{
    int first[NT], order[NT], nt = 0;
    for (int t = 0; t < NT; t++)
        first[t] = -1;
    for (size_t i = 0; i < n; i++)
        if (first[arrived[i].tensor] < 0) {
            first[arrived[i].tensor] = nt;
            order[nt++] = arrived[i].tensor;
        }
    size_t m = 0;
    for (int j = 0; j < nt; j++)
        for (size_t i = 0; i < n; i++)
            if (arrived[i].tensor == order[j])
                out[m++] = arrived[i];
    return m;
}

static void assert_order(rs_sources_h s, const ref_t *arrived, size_t n)
{
    ref_t want[NT * PER + 8];
    size_t m = expected(arrived, n, want);
    assert_int_equal(rs_sources_num_shards(s), m);
    for (size_t i = 0; i < m; i++) {
        rs_shard_desc_t d;
        char name[32];
        rs_sources_shard(s, i, &d);
        snprintf(name, sizeof(name), "w.%d", want[i].tensor);
        assert_string_equal(d.tensor, name);
        assert_int_equal(d.addr, addr_of(want[i].tensor, want[i].k));
        assert_int_equal(d.offset[0], want[i].k * 8);
    }
}

static void test_order_any_arrival(void **state)
{
    (void)state;
    ref_t all[NT * PER];
    size_t n = 0;
    for (int t = 0; t < NT; t++)
        for (int k = 0; k < PER; k++)
            all[n++] = (ref_t){t, k};
    for (size_t i = n - 1; i > 0; i--) { /* fixed-seed shuffle */
        size_t j = (size_t)(next_rand() % (i + 1));
        ref_t tmp = all[i];
        all[i] = all[j];
        all[j] = tmp;
    }
    rs_sources_h s;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    /* arrivals interleaved with lookups: the index is extended or rebuilt */
    for (size_t i = 0; i < n; i++) {
        add(s, all[i].tensor, all[i].k);
        if (i % 17 == 0 || i + 1 == n)
            assert_order(s, all, i + 1);
    }
    assert_int_equal(rs_sources_num_tensors(s), NT);
    rs_sources_destroy(s);
}

static void test_in_order_arrival(void **state)
{
    (void)state;
    ref_t all[NT * PER];
    size_t n = 0;
    rs_sources_h s;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    for (int t = 0; t < NT; t++)
        for (int k = 0; k < PER; k++) {
            all[n++] = (ref_t){t, k};
            add(s, t, k);
            assert_order(s, all, n); /* every step: the extended index */
        }
    rs_sources_destroy(s);
}

static const char *table(const char *agent, const char *tensor, int64_t addr,
                         int64_t off, char *buf, size_t len)
{
    snprintf(buf, len,
             "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": "
             "\"%s\", \"agent_meta_b64\": \"%s\", \"tensors\": [{\"name\": "
             "\"%s\", \"dtype\": \"torch.float64\", \"elsize\": 8, "
             "\"full_shape\": [48], \"shards\": [{\"addr\": %lld, "
             "\"shard_offset\": [%lld], \"shape\": [8]}]}]}",
             agent, agent, tensor, (long long)addr, (long long)off);
    return buf;
}

/* A failed load leaves shards, tensors, tables and every index as before. */
static void test_rollback_restores_indexes(void **state)
{
    (void)state;
    ref_t all[NT * PER + 8];
    size_t n = 0;
    char buf[1024], bad[2200];
    rs_sources_h s;
    rs_table_info_t t;
    rs_diag_t diag;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    for (int k = 0; k < PER; k++)
        for (int tt = 0; tt < 5; tt++) {
            add(s, tt, k);
            all[n++] = (ref_t){tt, k};
        }
    table("agent-a", "w.1", 9000, 0, buf, sizeof(buf));
    assert_int_equal(rs_sources_load_string(s, buf, strlen(buf), "a", NULL),
                     RS_OK);
    all[n++] = (ref_t){1, -1};
    assert_int_equal(rs_sources_num_shards(s), n);
    rs_shard_desc_t d;
    rs_sources_shard(s, 0, &d); /* builds the index */
    /* an array of two blobs: the first adds to w.2 and a new tensor and a
     * table, the second is malformed, so the whole file rolls back */
    char one[1024], two[1024];
    table("agent-b", "w.2", 9100, 8, one, sizeof(one));
    table("agent-c", "w.new", 9200, 0, two, sizeof(two));
    snprintf(bad, sizeof(bad), "[%s, %s, {\"schema\": 3}]", one, two);
    rs_diag_clear(&diag);
    assert_int_equal(rs_sources_load_string(s, bad, strlen(bad), "bad", &diag),
                     RS_ERR_INPUT);
    assert_int_equal(rs_sources_num_tables(s), 1);
    assert_int_equal(rs_sources_num_tensors(s), 5);
    assert_int_equal(rs_sources_find_table(s, "agent-b"), -1);
    assert_int_equal(rs_sources_find_table(s, "agent-c"), -1);
    assert_int_equal(rs_sources_find_table(s, "agent-a"), 0);
    /* expected order: the shard of agent-a (k = -1) is last of w.1 */
    ref_t want[NT * PER + 8];
    size_t m = expected(all, n, want);
    assert_int_equal(rs_sources_num_shards(s), m);
    for (size_t i = 0; i < m; i++) {
        rs_sources_shard(s, i, &d);
        char name[32];
        snprintf(name, sizeof(name), "w.%d", want[i].tensor);
        assert_string_equal(d.tensor, name);
        assert_int_equal(d.addr, want[i].k < 0 ? 9000
                                               : addr_of(want[i].tensor,
                                                         want[i].k));
    }
    /* the same file without the malformed blob loads, and indexes follow */
    snprintf(bad, sizeof(bad), "[%s, %s]", one, two);
    assert_int_equal(rs_sources_load_string(s, bad, strlen(bad), "ok", NULL),
                     RS_OK);
    assert_int_equal(rs_sources_num_shards(s), m + 2);
    assert_int_equal(rs_sources_find_table(s, "agent-c"), 2);
    rs_sources_table(s, 2, &t);
    assert_string_equal(t.agent_name, "agent-c");
    rs_sources_shard(s, m + 1, &d);
    assert_string_equal(d.tensor, "w.new");
    rs_sources_destroy(s);
}

static void test_find_table_first_of_duplicates(void **state)
{
    (void)state;
    rs_sources_h s;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    const char *names[] = {"x", "y", "x", "z", "y"};
    for (int i = 0; i < 5; i++) {
        rs_table_info_t t = {names[i], NULL, NULL, i};
        assert_int_equal(rs_sources_add_table(s, &t, NULL), RS_OK);
    }
    assert_int_equal(rs_sources_find_table(s, "x"), 0);
    assert_int_equal(rs_sources_find_table(s, "y"), 1);
    assert_int_equal(rs_sources_find_table(s, "z"), 3);
    assert_int_equal(rs_sources_find_table(s, "w"), -1);
    assert_int_equal(rs_sources_find_table(s, NULL), -1);
    assert_int_equal(rs_sources_find_table(NULL, "x"), -1);
    rs_sources_destroy(s);
}

/* Sources whose names have no '#' hold no "<src>#<spec>" tensor, and
 * the planner looks none up; one such name, added directly or merged
 * from other sources, turns that off for good (a rollback keeps it off:
 * a lookup that finds nothing is only slower). */
static void test_derived_names(void **state)
{
    (void)state;
    static const int64_t full[1] = {8};
    rs_sources_h s, other;
    rs_diag_t d;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_create(&other), RS_OK);
    for (int t = 0; t < 3; t++)
        add(s, t, 0);
    assert_int_equal(rs__sources_may_derive(s), 0);
    int64_t off[1] = {0};
    rs_shard_desc_t q = {"w.0#fp8_block:128x128:f8e4m3", RS_DTYPE_F8E4M3, 1, 1,
                         full, "s0", 0, 0x100, off, full, NULL};
    assert_int_equal(rs_sources_add_shard(other, &q, &d), RS_OK);
    assert_int_equal(rs__sources_may_derive(other), 1);
    assert_int_equal(rs__sources_may_derive(s), 0);
    assert_int_equal(rs_sources_merge(s, other, &d), RS_OK);
    assert_int_equal(rs__sources_may_derive(s), 1);
    rs__sources_mark_t mark;
    rs_sources_h fresh;
    assert_int_equal(rs_sources_create(&fresh), RS_OK);
    assert_int_equal(rs__sources_mark(fresh, &mark), RS_OK);
    assert_int_equal(rs_sources_add_shard(fresh, &q, &d), RS_OK);
    rs__sources_rollback(fresh, &mark);
    rs__sources_mark_free(&mark);
    assert_int_equal(rs_sources_num_tensors(fresh), 0);
    assert_int_equal(rs__sources_may_derive(fresh), 1);
    rs_sources_destroy(fresh);
    rs_sources_destroy(other);
    rs_sources_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_any_arrival),
        cmocka_unit_test(test_in_order_arrival),
        cmocka_unit_test(test_rollback_restores_indexes),
        cmocka_unit_test(test_find_table_first_of_duplicates),
        cmocka_unit_test(test_derived_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
