/* Box mapping and run walking against brute force: every view element is
 * enumerated from the view's own strides, and the runs the walker emits must
 * cover exactly those elements, each once, with the same destinations. A
 * rejected view must really not be a strided box of its source. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "geom/box.h"
#include "geom/walk.h"

static uint64_t rng_state;

static uint64_t rnd(uint64_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (rng_state >> 33) % n;
}

typedef struct {
    int64_t n;
    int64_t *src; /* source linear index per view element (odometer order) */
    int64_t *dst; /* destination element per view element */
} elems_t;

static elems_t enumerate(const rs__view_t *v, const int64_t *dstride,
                         int64_t dst_base)
{
    elems_t e = {1, NULL, NULL};
    for (int i = 0; i < v->ndim; i++)
        e.n *= v->shape[i];
    e.src = malloc(sizeof(int64_t) * (size_t)(e.n + 1));
    e.dst = malloc(sizeof(int64_t) * (size_t)(e.n + 1));
    for (int64_t k = 0; k < e.n; k++) {
        int64_t rem = k, s = v->offset, d = dst_base;
        for (int i = v->ndim - 1; i >= 0; i--) {
            int64_t idx = rem % v->shape[i];
            rem /= v->shape[i];
            s += idx * v->stride[i];
            d += idx * dstride[i];
        }
        e.src[k] = s;
        e.dst[k] = d;
    }
    return e;
}

/* Is a set of linear indices exactly a product of per-dim progressions? */
static int is_box(const elems_t *e, int ndim, const int64_t *shape)
{
    int64_t pitch[RS_MAX_DIMS], p = 1, prod = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        pitch[d] = p;
        p *= shape[d];
    }
    char *seen = calloc((size_t)p + 1, 1);
    for (int64_t k = 0; k < e->n; k++) {
        if (seen[e->src[k]]++) {
            free(seen);
            return 0;
        }
    }
    for (int d = 0; d < ndim; d++) {
        char *c = calloc((size_t)shape[d] + 1, 1);
        for (int64_t k = 0; k < e->n; k++)
            c[(e->src[k] / pitch[d]) % shape[d]] = 1;
        int64_t first = -1, second = -1, count = 0, step = 0, ok = 1;
        for (int64_t x = 0; x < shape[d]; x++) {
            if (!c[x])
                continue;
            if (first < 0)
                first = x;
            else if (second < 0)
                second = x, step = x - first;
            if (count > 0 && step > 0 && (x - first) != step * count)
                ok = 0;
            count++;
        }
        free(c);
        if (!ok) {
            free(seen);
            return 0;
        }
        prod *= count;
    }
    free(seen);
    return prod == e->n;
}

typedef struct {
    char *hit;      /* per destination element: times written */
    int64_t *from;  /* source linear index that landed there */
    const int64_t *pitch_buf;
    const int64_t *buf_off;
    int ndim;
    const int64_t *pitch_src;
} sink_t;

/* Converts a buffer element back to a source linear index. */
static int64_t buf_to_src(const sink_t *s, int64_t e)
{
    int64_t lin = 0;
    for (int d = 0; d < s->ndim; d++) {
        int64_t c = e / s->pitch_buf[d];
        e %= s->pitch_buf[d];
        lin += (c + s->buf_off[d]) * s->pitch_src[d];
    }
    return lin;
}

static void on_run(void *ctx, int64_t src, int64_t dst, int64_t n)
{
    sink_t *s = ctx;
    assert_true(n >= 1);
    for (int64_t i = 0; i < n; i++) {
        s->hit[dst + i]++;
        s->from[dst + i] = buf_to_src(s, src + i);
    }
}

/* Returns 1 when the chain re-split a flattened run of dims: such a view
 * can be a box whose dims cut across source dims at unaligned points (a
 * [2,5,2] source seen as [4,5]), which the planner refuses by design. */
static int random_chain(rs__view_t *v, int64_t *perm_store, int64_t *sizes_store)
{
    int flattened = 0, regrouped = 0;
    int nops = (int)rnd(5);
    for (int i = 0; i < nops && v->ndim > 0; i++) {
        int d = (int)rnd((uint64_t)v->ndim);
        rs_op_t op = {0};
        int64_t size = v->shape[d];
        switch (rnd(7)) {
        case 0:
            if (size == 0)
                continue;
            op = (rs_op_t){.kind = RS_OP_NARROW, .arg = {d, (int64_t)rnd((uint64_t)size)}};
            op.arg[2] = 1 + (int64_t)rnd((uint64_t)(size - op.arg[1]));
            break;
        case 1:
            op = (rs_op_t){.kind = RS_OP_SLICE, .arg = {d, 0, size, 1 + (int64_t)rnd(3)}, .has = 0xf};
            if (size > 1)
                op.arg[1] = (int64_t)rnd(2);
            break;
        case 2:
            op = (rs_op_t){.kind = RS_OP_TRANSPOSE, .arg = {d, (int64_t)rnd((uint64_t)v->ndim)}};
            break;
        case 3:
            if (v->ndim < 2)
                continue;
            op = (rs_op_t){.kind = RS_OP_SELECT, .arg = {d, (int64_t)rnd((uint64_t)(size ? size : 1))}};
            if (size == 0)
                continue;
            break;
        case 4: { /* flatten everything: may be refused as a copy */
            op = (rs_op_t){.kind = RS_OP_FLATTEN};
            break;
        }
        case 5: { /* split a dim into factors */
            int64_t a = 1;
            for (int64_t f = 2; f <= size; f++)
                if (size % f == 0 && rnd(2)) {
                    a = f;
                    break;
                }
            sizes_store[0] = a;
            sizes_store[1] = -1;
            op = (rs_op_t){.kind = RS_OP_UNFLATTEN, .arg = {d}, .list = sizes_store, .nlist = 2};
            if (size == 0 || v->ndim >= RS_MAX_DIMS - 1)
                continue;
            break;
        }
        default:
            for (int k = 0; k < v->ndim; k++)
                perm_store[k] = k;
            for (int k = v->ndim - 1; k > 0; k--) {
                int j = (int)rnd((uint64_t)k + 1);
                int64_t t = perm_store[k];
                perm_store[k] = perm_store[j];
                perm_store[j] = t;
            }
            op = (rs_op_t){.kind = RS_OP_PERMUTE, .list = perm_store, .nlist = (size_t)v->ndim};
        }
        rs__view_t keep = *v;
        if (rs__view_apply(v, &op, NULL, 0) != RS_OK) {
            *v = keep; /* refused ops leave the chain where it was */
            continue;
        }
        if (op.kind == RS_OP_FLATTEN)
            flattened = 1;
        if (op.kind == RS_OP_UNFLATTEN && flattened)
            regrouped = 1;
    }
    return regrouped;
}

static void one_case(int64_t *rejected_legit, int64_t *regroups)
{
    int64_t shape[RS_MAX_DIMS], perm[RS_MAX_DIMS], sizes[2];
    int ndim = 1 + (int)rnd(4);
    for (int d = 0; d < ndim; d++)
        shape[d] = 1 + (int64_t)rnd(6);
    rs__view_t v;
    assert_int_equal(rs__view_init(&v, ndim, shape), RS_OK);
    int regrouped = random_chain(&v, perm, sizes);
    /* destination: the view's shape laid out row-major with padding */
    int64_t dstride[RS_MAX_DIMS], acc = 1, dst_base = (int64_t)rnd(5);
    for (int i = v.ndim - 1; i >= 0; i--) {
        dstride[i] = acc;
        acc *= v.shape[i] + (int64_t)rnd(2);
    }
    elems_t e = enumerate(&v, dstride, dst_base);
    rs__box_t box;
    rs_status_t st = rs__box_from_view(&v, ndim, shape, dstride, &box, NULL, 0);
    if (st != RS_OK) {
        assert_int_equal(st, RS_ERR_UNSUPPORTED);
        if (regrouped && is_box(&e, ndim, shape)) {
            (*regroups)++;
            free(e.src);
            free(e.dst);
            return;
        }
        if (is_box(&e, ndim, shape)) {
            char why[300];
            rs__box_from_view(&v, ndim, shape, dstride, &box, why, sizeof(why));
            print_message("wrongly refused: %s\n src", why);
            for (int d = 0; d < ndim; d++) print_message(" %lld", (long long)shape[d]);
            print_message("\n view off %lld:", (long long)v.offset);
            for (int d = 0; d < v.ndim; d++) print_message(" %lldx%lld", (long long)v.shape[d], (long long)v.stride[d]);
            print_message("\n");
        }
        assert_false(is_box(&e, ndim, shape));
        (*rejected_legit)++;
        free(e.src);
        free(e.dst);
        return;
    }
    assert_int_equal(box.numel, e.n);
    /* a random sub-box in progression indices, read from a buffer that is a
     * random sub-box of the source holding it */
    rs__index_range_t kr;
    int64_t off[RS_MAX_DIMS], bshape[RS_MAX_DIMS], pitch_src[RS_MAX_DIMS], pitch_buf[RS_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        int64_t c = box.count[d];
        kr.lo[d] = c ? (int64_t)rnd((uint64_t)c) : 0;
        kr.hi[d] = c ? kr.lo[d] + 1 + (int64_t)rnd((uint64_t)(c - kr.lo[d])) : 0;
        int64_t first = c ? rs__box_coord(&box, d, kr.lo[d]) : 0;
        int64_t last = c ? rs__box_coord(&box, d, kr.hi[d] - 1) : 0;
        off[d] = first - (int64_t)rnd((uint64_t)first + 1);
        int64_t end = last + 1 + (int64_t)rnd((uint64_t)(shape[d] - last));
        bshape[d] = end - off[d];
    }
    int64_t p = 1, q = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        pitch_src[d] = p;
        p *= shape[d];
        pitch_buf[d] = q;
        q *= bshape[d];
    }
    int64_t dcap = dst_base + acc + 1;
    sink_t s = {calloc((size_t)dcap, 1), calloc((size_t)dcap, sizeof(int64_t)),
                pitch_buf, off, ndim, pitch_src};
    rs__source_buffer_t buf = {off, bshape};
    if (e.n > 0)
        rs__walk_runs(&box, &kr, &buf, dst_base, on_run, &s);
    for (int64_t k = 0; k < e.n; k++) {
        int inside = 1;
        for (int d = 0; d < ndim; d++) {
            int64_t c = (e.src[k] / pitch_src[d]) % shape[d];
            int64_t idx = rs__box_count_below(&box, d, c);
            assert_int_equal(rs__box_coord(&box, d, idx), c);
            if (idx < kr.lo[d] || idx >= kr.hi[d])
                inside = 0;
        }
        assert_int_equal(s.hit[e.dst[k]], inside);
        if (inside)
            assert_int_equal(s.from[e.dst[k]], e.src[k]);
        s.hit[e.dst[k]] = 0;
    }
    for (int64_t i = 0; i < dcap; i++)
        assert_int_equal(s.hit[i], 0); /* nothing outside the region */
    free(s.hit);
    free(s.from);
    free(e.src);
    free(e.dst);
}

static void test_random_views(void **state)
{
    (void)state;
    int64_t rejected = 0, regroups = 0;
    rng_state = 12345;
    for (int i = 0; i < 20000; i++)
        one_case(&rejected, &regroups);
    assert_true(rejected > 0); /* the generator does reach non-box views */
    print_message("non-box views refused: %lld, unaligned regroups refused: "
                  "%lld\n", (long long)rejected, (long long)regroups);
}

static void test_known_boxes(void **state)
{
    (void)state;
    rs__view_t v;
    rs__box_t box;
    int64_t shape[2] = {4, 6}, flat[1] = {-1}, ds[2] = {1, 1};
    rs_op_t step = {.kind = RS_OP_SLICE, .arg = {1, 1, 6, 2}, .has = 0xf};
    rs_op_t view = {.kind = RS_OP_VIEW, .list = flat, .nlist = 1};
    /* w[:, 1::2].view(-1): dim 1 from 1 step 2, all of dim 0 */
    assert_int_equal(rs__view_init(&v, 2, shape), RS_OK);
    assert_int_equal(rs__view_apply(&v, &step, NULL, 0), RS_OK);
    assert_int_equal(rs__view_apply(&v, &view, NULL, 0), RS_OK);
    assert_int_equal(rs__box_from_view(&v, 2, shape, ds, &box, NULL, 0), RS_OK);
    assert_int_equal(box.start[1], 1);
    assert_int_equal(box.step[1], 2);
    assert_int_equal(box.count[1], 3);
    assert_int_equal(box.count[0], 4);
    /* a flat narrow crossing a row boundary is not a box */
    rs_op_t nar = {.kind = RS_OP_NARROW, .arg = {0, 3, 6}};
    char why[200] = "";
    assert_int_equal(rs__view_init(&v, 2, shape), RS_OK);
    assert_int_equal(rs__view_apply(&v, &view, NULL, 0), RS_OK);
    assert_int_equal(rs__view_apply(&v, &nar, NULL, 0), RS_OK);
    assert_int_equal(rs__box_from_view(&v, 2, shape, ds, &box, why, sizeof(why)),
                     RS_ERR_UNSUPPORTED);
    assert_true(strlen(why) > 0);
    /* the up half of a fused [E*2*I, H] expert dim: ordered, not an AP */
    int64_t fused[2] = {3 * 2 * 4, 5}, eig[3] = {3, 2, 4}, ds3[2] = {5, 1};
    rs_op_t unf = {.kind = RS_OP_UNFLATTEN, .arg = {0}, .list = eig, .nlist = 3};
    rs_op_t up = {.kind = RS_OP_SELECT, .arg = {1, 1}};
    assert_int_equal(rs__view_init(&v, 2, fused), RS_OK);
    assert_int_equal(rs__view_apply(&v, &unf, NULL, 0), RS_OK);
    assert_int_equal(rs__view_apply(&v, &up, NULL, 0), RS_OK);
    int64_t ds_up[3] = {20, 5, 1};
    assert_int_equal(rs__box_from_view(&v, 2, fused, ds_up, &box, NULL, 0), RS_OK);
    assert_int_equal(box.count[0], 12);
    assert_int_equal(rs__box_coord(&box, 0, 0), 4);   /* expert 0, row I */
    assert_int_equal(rs__box_coord(&box, 0, 4), 12);  /* expert 1, row 3I */
    assert_int_equal(rs__box_count_below(&box, 0, 12), 4);
    assert_int_equal(rs__box_count_below(&box, 0, 11), 4);
    assert_int_equal(rs__box_count_below(&box, 0, 24), 12);
    (void)ds3;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_boxes),
        cmocka_unit_test(test_random_views),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
