/* A capture's geometry ids (capture_geom.c) and the box memo keyed by them
 * (box_memo.c). Ids: copies with equal op chains, destination shapes and
 * strides share an id and the arrays, any difference (an unused op arg, a
 * getitem key, a list, a stride) gives a new one, ids are numbered densely
 * in order of first appearance, past the table's growth, and a copy reads
 * back what it was given. The memo: against a model of every key put
 * (id, source shape by value), over more keys than slots and with equal
 * shapes in different arrays, a find (and the inline look at the recent
 * slots) returns the box and fact put for an equal key or nothing, never
 * another key's. A plan: copies sharing a
 * geometry id, one after a copy that checked out but out of bounds itself
 * and two whose view writes twice, are refused with the general path's
 * messages, and the rest planned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "plan/box_memo.h"
#include "model/capture_impl.h"
#include "reshard/reshard.h"

static const int64_t SHAPE[2] = {4, 6}, ROW[2] = {6, 1}, COL[2] = {1, 4};

static rs_op_t narrow_op(int64_t start, int64_t unused)
{
    rs_op_t op = {0};
    op.kind = RS_OP_NARROW;
    op.arg[0] = 0;
    op.arg[1] = start;
    op.arg[2] = 4;
    op.arg[3] = unused;
    op.has = 7;
    return op;
}

static uint32_t add(rs_capture_h cap, const rs_op_t *ops, size_t nops,
                    const int64_t *stride)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    /* fresh arrays each time, so equal values never share a pointer here */
    rs_op_t *mine = malloc((nops ? nops : 1) * sizeof(rs_op_t));
    int64_t shape[2] = {SHAPE[0], SHAPE[1]}, st[2] = {stride[0], stride[1]};
    if (nops != 0) /* ops may be NULL then */
        memcpy(mine, ops, nops * sizeof(rs_op_t));
    rs_copy_desc_t c = {"w", "p", mine, nops, 0, 2, shape, st, RS_DTYPE_BF16};
    assert_int_equal(rs_capture_add_copy(cap, &c, &d), RS_OK);
    free(mine);
    size_t i = rs_capture_num_copies(cap) - 1;
    rs_copy_desc_t back;
    rs_capture_copy(cap, i, &back);
    assert_int_equal(back.nops, nops);
    assert_int_equal(back.dest_stride[0], stride[0]);
    assert_int_equal(back.dest_stride[1], stride[1]);
    assert_int_equal(back.dest_shape[0], SHAPE[0]);
    for (size_t k = 0; k < nops; k++) {
        assert_int_equal(back.ops[k].kind, ops[k].kind);
        assert_memory_equal(back.ops[k].arg, ops[k].arg, sizeof(ops[k].arg));
        assert_int_equal(back.ops[k].nlist, ops[k].nlist);
        if (ops[k].nlist)
            assert_memory_equal(back.ops[k].list, ops[k].list,
                                ops[k].nlist * sizeof(int64_t));
        assert_int_equal(back.ops[k].nkeys, ops[k].nkeys);
        if (ops[k].nkeys)
            assert_memory_equal(back.ops[k].keys, ops[k].keys,
                                ops[k].nkeys * sizeof(rs_key_t));
    }
    return cap->copies[i].geom;
}

static void test_ids_group_equal_geometries(void **state)
{
    (void)state;
    rs_capture_h cap;
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    rs_op_t a = narrow_op(0, 0);
    rs_op_t unused = narrow_op(0, 9);
    rs_key_t k1[2] = {{RS_KEY_INDEX, 1, 0, 0, 0, 0, 0, 0},
                      {RS_KEY_SLICE, 0, 0, 6, 1, 1, 1, 1}};
    rs_key_t k2[2] = {{RS_KEY_INDEX, 1, 0, 0, 0, 0, 0, 0},
                      {RS_KEY_SLICE, 0, 0, 6, 2, 1, 1, 1}};
    rs_op_t g1 = {0}, g2 = {0}, v1 = {0}, v2 = {0};
    g1.kind = g2.kind = RS_OP_GETITEM;
    g1.keys = k1, g1.nkeys = 2;
    g2.keys = k2, g2.nkeys = 2;
    int64_t l1[2] = {4, 6}, l2[2] = {6, 4};
    v1.kind = v2.kind = RS_OP_VIEW;
    v1.list = l1, v1.nlist = 2;
    v2.list = l2, v2.nlist = 2;
    rs_op_t two[2] = {a, g1};

    assert_int_equal(add(cap, &a, 1, ROW), 0);
    assert_int_equal(add(cap, &a, 1, ROW), 0);
    assert_ptr_equal(cap->copies[1].ops, cap->copies[0].ops);
    assert_ptr_equal(cap->copies[1].dest_shape, cap->copies[0].dest_shape);
    assert_int_equal(add(cap, &unused, 1, ROW), 1);
    assert_int_equal(add(cap, &a, 1, COL), 2);
    assert_int_equal(add(cap, &g1, 1, ROW), 3);
    assert_int_equal(add(cap, &g2, 1, ROW), 4);
    assert_int_equal(add(cap, &g1, 1, ROW), 3);
    assert_int_equal(add(cap, &v1, 1, ROW), 5);
    assert_int_equal(add(cap, &v2, 1, ROW), 6);
    assert_int_equal(add(cap, NULL, 0, ROW), 7);
    assert_int_equal(add(cap, two, 2, ROW), 8);
    assert_int_equal(add(cap, NULL, 0, ROW), 7);
    assert_int_equal(add(cap, &v1, 1, ROW), 5);
    /* past the table's first sizes: ids stay dense and found again */
    for (int64_t i = 0; i < 300; i++) {
        rs_op_t n = narrow_op(i + 1, 0);
        assert_int_equal(add(cap, &n, 1, ROW), 9 + i);
    }
    for (int64_t i = 299; i >= 0; i--) {
        rs_op_t n = narrow_op(i + 1, 0);
        assert_int_equal(add(cap, &n, 1, ROW), 9 + i);
    }
    assert_int_equal(cap->geoms_len, 309);
    rs_capture_destroy(cap);
}

/* The box a key stands for in the model: its id and shape in fields a
 * find hands back. */
static void model_box(uint32_t geom, int shape, rs__box_t *box)
{
    memset(box, 0, sizeof(*box));
    box->ndim = 2;
    box->start[0] = geom;
    box->start[1] = shape;
    box->count[0] = box->count[1] = 1;
    box->nfactors = 0;
    box->numel = (int64_t)geom * 16 + shape;
}

static void test_memo_never_answers_another_key(void **state)
{
    (void)state;
    /* three shapes, each held in two arrays; shape 2 is shape 0 transposed */
    static const int64_t shapes[2][3][2] = {
        {{8, 6}, {16, 6}, {6, 8}},
        {{8, 6}, {16, 6}, {6, 8}},
    };
    rs__box_memo_t *memo = rs__box_memo_create();
    assert_non_null(memo);
    unsigned seed = 12345u;
    int hits = 0, recent = 0;
    for (int i = 0; i < 20000; i++) {
        seed = seed * 1103515245u + 12345u;
        /* runs of a few keys (the memo's recent slots), and a wide spread */
        uint32_t geom = (seed >> 8) % (i % 3 ? 4u : 400u);
        int shape = (int)((seed >> 20) % 3), arr = (int)((seed >> 24) & 1);
        rs__geom_key_t key = {geom, 2, shapes[arr][shape]};
        /* the inline look at the recent slots: the same answer or none */
        const rs__memo_entry_t *e =
            rs__box_memo_recent(memo, geom, 2, shapes[arr][shape]);
        if (e != NULL) {
            assert_int_equal(e->box->numel, (int64_t)geom * 16 + shape);
            assert_int_equal(e->dest.span, e->box->numel);
            recent++;
        }
        uint64_t hash;
        rs__dest_fact_t *fact = NULL;
        const rs__box_t *got = rs__box_memo_find(memo, &key, &hash, &fact);
        rs__box_t want;
        model_box(geom, shape, &want);
        if (got != NULL) {
            hits++;
            assert_int_equal(got->numel, want.numel);
            assert_int_equal(got->start[0], want.start[0]);
            assert_int_equal(got->start[1], want.start[1]);
            assert_non_null(fact);
            assert_int_equal(fact->known, 1);
            assert_int_equal(fact->span, want.numel);
            continue;
        }
        fact = rs__box_memo_put(memo, &key, hash, &want);
        assert_non_null(fact);
        assert_int_equal(fact->known, 0);
        fact->known = 1;
        fact->span = want.numel;
    }
    assert_true(hits > 10000);
    assert_true(recent > 1000);
    rs__box_memo_destroy(memo);
}

/* Tensors "a" .. "e", [4, 4] u8, each published whole by session "r0". */
static rs_sources_h sources_abcde(void)
{
    int64_t full[2] = {4, 4}, off[2] = {0, 0};
    rs_sources_h s = NULL;
    rs_diag_t diag;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    for (int i = 0; i < 5; i++) {
        char name[2] = {(char)('a' + i), 0};
        rs_shard_desc_t d = {.tensor = name, .dtype = RS_DTYPE_U8,
                             .elsize = 1, .ndim = 2, .full_shape = full,
                             .session = "r0", .addr = 0x1000u * (i + 1),
                             .offset = off, .shape = full};
        assert_int_equal(rs_sources_add_shard(s, &d, &diag), RS_OK);
    }
    return s;
}

static const char *reason_of(rs_plan_h plan, const char *name)
{
    for (size_t i = 0; i < rs_plan_num_fallback(plan); i++) {
        const char *src, *reason;
        rs_plan_fallback(plan, i, &src, &reason);
        if (strcmp(src, name) == 0)
            return reason;
    }
    return NULL;
}

static void test_plan_refuses_per_copy_on_one_geometry(void **state)
{
    (void)state;
    int64_t pshape[2] = {4, 16}, shape[2] = {4, 4}, row[2] = {16, 1},
            twice[2] = {1, 1};
    struct { const char *src; int64_t off; const int64_t *stride; } cs[] = {
        {"a", 0, row}, {"b", 13, row}, {"c", 4, row},
        {"d", 0, twice}, {"e", 8, twice},
    };
    rs_sources_h s = sources_abcde();
    rs_capture_h cap = NULL;
    rs_plan_h plan = NULL;
    rs_plan_params_t params;
    rs_diag_t diag;
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "p", 2, pshape, RS_DTYPE_U8,
                                          &diag), RS_OK);
    for (size_t i = 0; i < 5; i++) {
        rs_copy_desc_t c = {cs[i].src, "p", NULL, 0, cs[i].off, 2, shape,
                            cs[i].stride, RS_DTYPE_U8};
        assert_int_equal(rs_capture_add_copy(cap, &c, &diag), RS_OK);
    }
    assert_int_equal(cap->copies[1].geom, cap->copies[0].geom);
    assert_int_equal(cap->copies[4].geom, cap->copies[3].geom);
    rs_plan_params_init(&params);
    assert_int_equal(rs_plan_build(cap, s, &params, &diag, &plan), RS_OK);
    assert_int_equal(rs_plan_num_fallback(plan), 3);
    assert_null(reason_of(plan, "a"));
    assert_null(reason_of(plan, "c"));
    assert_string_equal(reason_of(plan, "b"), "copy 1 into 'p': destination "
                        "region leaves its parameter");
    assert_string_equal(reason_of(plan, "d"), "copy 3 into 'p': destination "
                        "view writes some elements twice");
    assert_string_equal(reason_of(plan, "e"), "copy 4 into 'p': destination "
                        "view writes some elements twice");
    rs_plan_stats_t st;
    rs_plan_stats(plan, &st);
    assert_int_equal(st.copies_planned, 2); /* "a" and "c" */
    assert_int_equal(st.needed_bytes, 32);
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_group_equal_geometries),
        cmocka_unit_test(test_memo_never_answers_another_key),
        cmocka_unit_test(test_plan_refuses_per_copy_on_one_geometry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
