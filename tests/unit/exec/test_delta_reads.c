/* The delta reads (exec/delta_read.h) over the local transport, on their
 * own: one published shard whose versions 1 to 4 change about one element
 * in 50, each version listing the delta from the one before, read into a
 * buffer handed over as the executor's staging. Asserted, every byte of
 * the buffer against the version's own bytes:
 * - the first version is read whole; the next is patched in place in
 *   the staging, reading a few percent of the bytes;
 * - a staging of a new generation (allocated again, maybe at the same
 *   address) holds no version, with no epoch change beside it: the next
 *   read is whole, not a patch of whatever the buffer holds (which the
 *   delta's checks may not catch), and no delta is refused; the one after
 *   is patched in place again;
 * - a run that failed verification leaves the staging holding no
 *   version: the next read is whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "assert_status.h"
#include "core/delta.h"
#include "delta_contents.h"
#include "exec/delta_read.h"
#include "reshard/reshard.h"

#define NELEM 32768u /* bf16 elements: 64 KiB */
#define NBYTES ((uint64_t)NELEM * 2)
#define VERSIONS 6
#define SHARD_ADDR 0x100000u
#define DELTA_ADDR 0x400000u /* version v's delta at DELTA_ADDR * v */

static void fill(uint16_t *w, int64_t v) { delta_fill(w, NELEM, v); }

static void assert_version(const uint16_t *got, int64_t v)
{
    delta_assert_version(got, NELEM, v);
}

/* The publisher's memory: the shard (its newest version) and the delta
 * producing each version from the one before. */
typedef struct world {
    uint16_t *shard;
    int64_t version;
    unsigned char *delta[VERSIONS + 1];
    size_t delta_len[VERSIONS + 1];
    rs_transport_h t;
    uint16_t *staging;
} world_t;

/* The next version into the shard, with its delta from the one before,
 * and the session connected again over the publisher's memory. */
static void publish(world_t *o)
{
    rs_diag_t d;
    rs_region_t regions[VERSIONS + 1];
    size_t n = 0;
    int64_t v = ++o->version;
    uint16_t *next = malloc(NBYTES);
    assert_non_null(next);
    fill(next, v);
    if (v == 1) {
        memcpy(o->shard, next, NBYTES);
    } else {
        size_t cap = rs__delta_bound(NELEM, 2, RS__DELTA_CHUNK);
        o->delta[v] = malloc(cap);
        assert_non_null(o->delta[v]);
        ASSERT_ST(rs__delta_encode(o->shard, next, NELEM, 2, RS__DELTA_CHUNK,
                                   v - 1, v, o->delta[v], &d,
                                   &o->delta_len[v]),
                  RS_OK, d);
        assert_true(o->delta_len[v] > 0 && o->delta_len[v] < NBYTES / 10);
    }
    free(next);
    regions[n++] = (rs_region_t){SHARD_ADDR, NBYTES, o->shard};
    for (int64_t k = 2; k <= v; k++)
        regions[n++] = (rs_region_t){DELTA_ADDR * (uint64_t)k,
                                     o->delta_len[k], o->delta[k]};
    rs_peer_t peer = {"trainer-r0", 0, regions, n, NULL, 0};
    ASSERT_ST(rs_transport_connect(o->t, 0, &peer, &d), RS_OK, d);
}

static void world_open(world_t *o)
{
    rs_diag_t d;
    rs_transport_h inner;
    memset(o, 0, sizeof(*o));
    o->shard = malloc(NBYTES);
    o->staging = malloc(NBYTES);
    assert_non_null(o->shard);
    assert_non_null(o->staging);
    ASSERT_ST(rs_transport_create(NULL, &d, &inner), RS_OK, d);
    /* a descriptor priced at 1 ns: these reads are small */
    ASSERT_ST(rs__delta_reads_wrap(inner, 400, 1, &d, &o->t), RS_OK, d);
    assert_true(rs__delta_reads_is(o->t));
}

static void world_close(world_t *o)
{
    rs_transport_destroy(o->t);
    for (int v = 0; v <= VERSIONS; v++)
        free(o->delta[v]);
    free(o->shard);
    free(o->staging);
}

/* One run of the newest version, as the receiver and the executor make
 * it: the listed delta armed, the staging handed over with generation
 * `gen`, the shard read into the staging, the run's verdict `ok`. */
static void run(world_t *o, uint64_t gen, int ok, rs__delta_stats_t *st)
{
    rs_diag_t d;
    int64_t v = o->version;
    rs__delta_ref_t ref = {v - 1, v, DELTA_ADDR * (uint64_t)v,
                           v > 1 ? o->delta_len[v] : 0, 0, 2,
                           RS__DELTA_CHUNK};
    rs__delta_src_t src = {0, SHARD_ADDR, NBYTES, 0, v > 1 ? 1 : 0, 1};
    ASSERT_ST(rs__delta_reads_set(o->t, v, &src, 1, &ref, v > 1 ? 1 : 0, &d),
              RS_OK, d);
    ASSERT_ST(rs__delta_reads_in_place(o->t, NULL, 0, 0, &d), RS_OK, d);
    rs__delta_reads_staging(o->t, (unsigned char *)o->staging, NBYTES, gen);
    rs_read_t rd = {0, SHARD_ADDR, o->staging, NBYTES};
    ASSERT_ST(rs_transport_post(o->t, &rd, 1, &d), RS_OK, d);
    ASSERT_ST(rs_transport_wait(o->t, 10, &d), RS_OK, d);
    assert_version(o->staging, v);
    rs__delta_reads_done(o->t, ok);
    rs__delta_reads_stats(o->t, st);
    assert_int_equal(st->refused, 0);
}

enum { WHOLE, IN_PLACE };

/* The next version published and run (run's gen, ok); its read was
 * `expect`: whole, or patched in place for a few percent of the bytes. */
static void step(world_t *o, uint64_t gen, int ok, int expect)
{
    rs__delta_stats_t st;
    publish(o);
    run(o, gen, ok, &st);
    if (expect == WHOLE) {
        assert_int_equal(st.delta_runs, 0);
        assert_int_equal(st.whole_runs, 1);
        assert_int_equal(st.whole_bytes, NBYTES);
        return;
    }
    assert_int_equal(st.delta_runs, 1);
    assert_int_equal(st.in_place_runs, 1);
    assert_int_equal(st.in_place_bytes, NBYTES);
    assert_int_equal(st.whole_runs, 0);
    assert_true(st.delta_bytes > 0 &&
                st.delta_bytes <= o->delta_len[o->version]);
}

static void test_generation(void **state)
{
    (void)state;
    world_t o;
    world_open(&o);
    step(&o, 1, 1, WHOLE);
    step(&o, 1, 1, IN_PLACE);
    /* staging allocated again at the same address, holding other bytes:
     * nothing in it holds a version */
    memset(o.staging, 0xEE, NBYTES);
    step(&o, 2, 1, WHOLE);
    step(&o, 2, 1, IN_PLACE);
    world_close(&o);
}

static void test_failed_run(void **state)
{
    (void)state;
    world_t o;
    world_open(&o);
    step(&o, 1, 1, WHOLE);
    step(&o, 1, 0, IN_PLACE); /* patched, then failed verification */
    step(&o, 1, 1, WHOLE);
    step(&o, 1, 1, IN_PLACE);
    world_close(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generation),
        cmocka_unit_test(test_failed_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
