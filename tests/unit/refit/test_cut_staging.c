/* The sub-box copy of cut-aligned staging, as a property over seeded
 * random geometry: tensors of 1 to 4 dims (i16), one shard of each at an
 * offset, cuts given as a set (rs_publisher_params_t.cuts), some inside
 * the shard and some outside it. After publish, the table's entries of a
 * tensor must tile its shard exactly (every entry inside it, volumes
 * summing to the shard's, none overlapping: each element is counted once),
 * every entry must be cut exactly at the cuts inside the shard, and the
 * bytes at each entry's arena address (this process's own memory) must be
 * the ground truth value of each element's full-tensor coordinates,
 * computed here by a naive loop; the caller's shards are scribbled over
 * right after publish. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dir_env.h"
#include "reshard/reshard.h"
#include "assert_status.h"

#define TENSORS 6
#define ROUNDS 12

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static size_t served_total; /* entries over every round */

static int64_t pick(int64_t lo, int64_t hi) /* [lo, hi] */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (int64_t)((rng >> 33) % (uint64_t)(hi - lo + 1));
}

typedef struct tensor {
    char name[16];
    int ndim;
    int64_t full[4], off[4], shape[4];
    uint16_t *data;
    int64_t numel;
} tensor_t;

/* The ground truth of element `at` (full coordinates) of tensor t. */
static uint16_t truth(int t, int ndim, const int64_t *at)
{
    uint64_t x = (uint64_t)t * 977u + 1;
    for (int d = 0; d < ndim; d++)
        x = x * 131u + (uint64_t)at[d];
    return (uint16_t)(x ^ (x >> 16));
}

static void make_tensor(int t, tensor_t *x, rs_cuts_h cuts)
{
    rs_diag_t d;
    snprintf(x->name, sizeof(x->name), "t%d", t);
    x->ndim = (int)pick(1, 4);
    x->numel = 1;
    for (int k = 0; k < x->ndim; k++) {
        x->full[k] = pick(1, 12);
        x->off[k] = pick(0, x->full[k] - 1);
        x->shape[k] = pick(1, x->full[k] - x->off[k]);
        x->numel *= x->shape[k];
    }
    for (int k = 0; k < x->ndim; k++)
        for (int c = (int)pick(1, 5); c > 0; c--) /* inside or outside */
            ASSERT_ST(rs_cuts_add(cuts, x->name, x->ndim, x->full, k,
                                  pick(0, x->full[k]), &d), RS_OK, d);
    x->data = malloc((size_t)x->numel * sizeof(uint16_t));
    assert_non_null(x->data);
    int64_t at[4], rel[4] = {0};
    for (int64_t i = 0; i < x->numel; i++) {
        for (int k = 0; k < x->ndim; k++)
            at[k] = x->off[k] + rel[k];
        x->data[i] = truth(t, x->ndim, at);
        for (int k = x->ndim - 1; k >= 0 && ++rel[k] == x->shape[k]; k--)
            rel[k] = 0;
    }
}

/* Whether `at` of dim k is a cut of the set or a bound of the shard. */
static int edge(rs_cuts_h cuts, const tensor_t *x, int k, int64_t at)
{
    size_t n = 0;
    const int64_t *c = rs_cuts_get(cuts, x->name, k, &n);
    if (at == x->off[k] || at == x->off[k] + x->shape[k])
        return 1;
    for (size_t i = 0; i < n; i++)
        if (c[i] == at)
            return 1;
    return 0;
}

/* One entry: inside the shard, bounded by cuts, bytes exact; returns its
 * element count and marks its elements in `seen`. */
static int64_t check_entry(int t, const tensor_t *x, rs_cuts_h cuts,
                           const rs_shard_desc_t *sh, uint8_t *seen)
{
    int64_t vol = 1;
    for (int k = 0; k < x->ndim; k++) {
        assert_true(sh->offset[k] >= x->off[k]);
        assert_true(sh->offset[k] + sh->shape[k] <= x->off[k] + x->shape[k]);
        assert_true(edge(cuts, x, k, sh->offset[k]));
        assert_true(edge(cuts, x, k, sh->offset[k] + sh->shape[k]));
        for (int64_t a = sh->offset[k] + 1; a < sh->offset[k] + sh->shape[k];
             a++)
            assert_false(edge(cuts, x, k, a)); /* no cut left inside */
        vol *= sh->shape[k];
    }
    const uint16_t *p = (const uint16_t *)(uintptr_t)sh->addr;
    int64_t rel[4] = {0}, at[4];
    for (int64_t i = 0; i < vol; i++) {
        int64_t pos = 0;
        for (int k = 0; k < x->ndim; k++) {
            at[k] = sh->offset[k] + rel[k];
            pos = pos * x->shape[k] + (at[k] - x->off[k]);
        }
        if (p[i] != truth(t, x->ndim, at))
            fail_msg("%s element %lld of its entry: %u, want %u", x->name,
                     (long long)i, p[i], truth(t, x->ndim, at));
        assert_int_equal(seen[pos], 0);
        seen[pos] = 1;
        for (int k = x->ndim - 1; k >= 0 && ++rel[k] == sh->shape[k]; k--)
            rel[k] = 0;
    }
    return vol;
}

static void one_round(dir_env_t *env, int round)
{
    rs_publisher_params_t pp;
    rs_publisher_h pub;
    rs_cuts_h cuts;
    rs_diag_t d;
    tensor_t x[TENSORS];
    char model[32];
    snprintf(model, sizeof(model), "stage%d", round);
    ASSERT_ST(rs_cuts_create(&d, &cuts), RS_OK, d);
    rs_publisher_params_init(&pp);
    pp.directory = env->url;
    pp.model = model;
    pp.world = 1;
    pp.backend = "cma";
    pp.heartbeat_s = 0;
    pp.staging = RS_STAGING_ARENA;
    pp.cuts = cuts;
    ASSERT_ST(rs_publisher_create(&pp, &d, &pub), RS_OK, d);
    for (int t = 0; t < TENSORS; t++) {
        make_tensor(t, &x[t], cuts);
        ASSERT_ST(rs_publisher_register(pub, x[t].name, RS_DTYPE_I16,
                                        x[t].ndim, x[t].full, x[t].off,
                                        x[t].shape, x[t].data, RS_MEM_HOST,
                                        &d), RS_OK, d);
    }
    ASSERT_ST(rs_publisher_publish(pub, 1, &d), RS_OK, d);
    for (int t = 0; t < TENSORS; t++) /* arena semantics */
        memset(x[t].data, 0xA5, (size_t)x[t].numel * sizeof(uint16_t));
    rs_sources_h src = dir_env_table(env, model, 1, 0);
    assert_non_null(src);
    assert_int_equal(rs_sources_num_shards(src),
                     rs_publisher_num_served(pub));
    served_total += rs_publisher_num_served(pub);
    for (int t = 0; t < TENSORS; t++) {
        uint8_t *seen = calloc((size_t)x[t].numel, 1);
        int64_t covered = 0;
        for (size_t i = 0; i < rs_sources_num_shards(src); i++) {
            rs_shard_desc_t sh;
            rs_sources_shard(src, i, &sh);
            if (strcmp(sh.tensor, x[t].name) == 0)
                covered += check_entry(t, &x[t], cuts, &sh, seen);
        }
        assert_int_equal(covered, x[t].numel); /* tiled exactly */
        free(seen);
        free(x[t].data);
    }
    rs_sources_destroy(src);
    rs_publisher_destroy(pub);
    rs_cuts_destroy(cuts);
}

static void test_sub_boxes_tile_shards_exactly(void **state)
{
    (void)state;
    dir_env_t env = {.backend = "file"};
    assert_int_equal(dir_env_setup(&env, "cut-staging"), 0);
    for (int r = 0; r < ROUNDS; r++)
        one_round(&env, r);
    /* the seeded cuts split many shards: more entries than shards */
    fprintf(stderr, "%zu entries for %d shards\n", served_total,
            ROUNDS * TENSORS);
    assert_true(served_total > 2 * ROUNDS * TENSORS);
    dir_env_teardown(&env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sub_boxes_tile_shards_exactly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
