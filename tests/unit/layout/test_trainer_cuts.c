/* Cut-aligned trainer tables: on every rank, the sub-boxes of each shard
 * tile it exactly (inside it, as many elements), no cut of the inference
 * layout lies strictly inside a sub-box, a shard's sub-boxes follow one
 * another on 64-byte boundaries from an aligned start, the written tables load back to the same
 * boxes, NULL cuts publish the whole shards, and cuts made for another
 * shape are refused naming the tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "layout_env.h"
#include "reshard/reshard.h"
#include "reshard_layout/layout.h"

/* qwen2 with q/k/v biases, an odd vocab so vocab parts differ by one row */
static const char dense_cfg[] =
    "{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"num_hidden_layers\": 3,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"intermediate_size\": 128, \"vocab_size\": 1001,"
    " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";

typedef struct box {
    const char *tensor;
    int ndim;
    int64_t off[4], ext[4];
    uint64_t addr, nbytes;
} box_t;

typedef struct boxes {
    box_t *b;
    size_t n, cap;
} boxes_t;

static rs_status_t collect(void *ctx, const rs_shard_desc_t *s)
{
    boxes_t *v = ctx;
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 64;
        v->b = realloc(v->b, v->cap * sizeof(box_t));
        assert_non_null(v->b);
    }
    box_t *b = &v->b[v->n++];
    memset(b, 0, sizeof(*b)); /* so boxes compare with memcmp */
    assert_true(s->ndim <= 4);
    b->tensor = s->tensor;
    b->ndim = s->ndim;
    b->addr = s->addr;
    b->nbytes = s->elsize;
    for (int d = 0; d < s->ndim; d++) {
        b->off[d] = s->offset[d];
        b->ext[d] = s->shape[d];
        b->nbytes *= (uint64_t)s->shape[d];
    }
    return RS_OK;
}

static int inside(const box_t *in, const box_t *out)
{
    if (strcmp(in->tensor, out->tensor) != 0 || in->ndim != out->ndim)
        return 0;
    for (int d = 0; d < in->ndim; d++)
        if (in->off[d] < out->off[d] ||
            in->off[d] + in->ext[d] > out->off[d] + out->ext[d])
            return 0;
    return 1;
}

static rs_model_h model(void)
{
    rs_model_h m = NULL;
    rs_diag_t d;
    assert_int_equal(rs_model_load_string(dense_cfg, strlen(dense_cfg), "cfg",
                                          &d, &m), RS_OK);
    return m;
}

/* The sub-boxes of whole shard w, from cut[*k] on: inside it, each at the
 * next 64-byte boundary, no cut inside any, as many elements as w. */
static void check_shard(rs_cuts_h cuts, const box_t *w, const boxes_t *cut,
                        size_t *k)
{
    uint64_t bytes = 0, at = w->addr;
    assert_int_equal(cut->b[*k].addr, w->addr); /* same aligned start */
    while (bytes < w->nbytes) {
        const box_t *s = &cut->b[(*k)++];
        assert_true(inside(s, w));
        assert_int_equal(s->addr, (at + 63) / 64 * 64); /* arena slots */
        for (int d = 0; d < s->ndim; d++) {
            size_t n;
            const int64_t *c = rs_cuts_get(cuts, s->tensor, d, &n);
            for (size_t j = 0; j < n; j++)
                assert_false(c[j] > s->off[d] && c[j] < s->off[d] + s->ext[d]);
        }
        bytes += s->nbytes;
        at = s->addr + s->nbytes;
    }
    assert_int_equal(bytes, w->nbytes);
}

static void check_pair(rs_model_h m, const char *train, const char *infer,
                       size_t *more_p)
{
    rs_layout_t tl, il;
    rs_cuts_h cuts = NULL;
    rs_diag_t d;
    tl = lx_layout(m, train);
    il = lx_layout(m, infer);
    assert_int_equal(rs_layout_infer_cuts(m, &il, &d, &cuts), RS_OK);
    for (int64_t r = 0; r < tl.world; r++) {
        boxes_t whole = {0}, cut = {0}, plain = {0};
        size_t k = 0;
        assert_int_equal(rs_layout_trainer_shards(m, &tl, r, collect, &whole,
                                                  &d), RS_OK);
        assert_int_equal(rs_layout_trainer_shards_cut(m, &tl, r, cuts, collect,
                                                      &cut, &d), RS_OK);
        assert_int_equal(rs_layout_trainer_shards_cut(m, &tl, r, NULL, collect,
                                                      &plain, &d), RS_OK);
        assert_int_equal(plain.n, whole.n);
        assert_memory_equal(plain.b, whole.b, whole.n * sizeof(box_t));
        for (size_t i = 0; i < whole.n; i++)
            check_shard(cuts, &whole.b[i], &cut, &k);
        assert_int_equal(k, cut.n);
        *more_p += cut.n - whole.n;
        free(whole.b);
        free(cut.b);
        free(plain.b);
    }
    rs_cuts_destroy(cuts);
}

static void test_sub_boxes_tile_shards(void **state)
{
    (void)state;
    rs_model_h m = model();
    size_t more = 0;
    check_pair(m, "megatron:tp=2", "vllm:tp=4", &more);
    check_pair(m, "fsdp:3", "vllm:tp=2", &more);
    check_pair(m, "megatron:tp=4,pp=3", "vllm:tp=2", &more);
    check_pair(m, "megatron:tp=1", "vllm:tp=4", &more);
    assert_true(more > 0); /* the cuts did split some shards */
    rs_model_destroy(m);
}

/* The written cut-aligned table of a rank loads back to its sub-boxes. */
static void test_table_round_trip(void **state)
{
    (void)state;
    rs_model_h m = model();
    rs_layout_t tl, il;
    rs_cuts_h cuts = NULL;
    rs_sources_h s = NULL;
    boxes_t cut = {0};
    rs_diag_t d;
    char *buf = NULL;
    size_t len = 0;
    tl = lx_layout(m, "fsdp:3");
    il = lx_layout(m, "vllm:tp=2");
    assert_int_equal(rs_layout_infer_cuts(m, &il, &d, &cuts), RS_OK);
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(rs_layout_write_table_cut(m, &tl, 1, cuts, f, &d), RS_OK);
    fclose(f);
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_load_string(s, buf, len, "t", &d), RS_OK);
    assert_int_equal(rs_layout_trainer_shards_cut(m, &tl, 1, cuts, collect,
                                                  &cut, &d), RS_OK);
    assert_int_equal(rs_sources_num_shards(s), cut.n);
    for (size_t i = 0; i < cut.n; i++) {
        rs_shard_desc_t sd;
        rs_sources_shard(s, i, &sd);
        assert_string_equal(sd.tensor, cut.b[i].tensor);
        assert_int_equal(sd.addr, cut.b[i].addr);
        for (int k = 0; k < sd.ndim; k++)
            assert_int_equal(sd.offset[k], cut.b[i].off[k]);
    }
    free(cut.b);
    free(buf);
    rs_sources_destroy(s);
    rs_cuts_destroy(cuts);
    rs_model_destroy(m);
}

static void test_foreign_cuts(void **state)
{
    (void)state;
    rs_model_h m = model();
    rs_layout_t tl;
    rs_cuts_h cuts = NULL;
    rs_sources_h s = NULL;
    boxes_t cut = {0};
    rs_diag_t d;
    const int64_t wrong[2] = {64, 65};
    tl = lx_layout(m, "megatron:tp=2");
    assert_int_equal(rs_cuts_create(NULL, &cuts), RS_OK);
    assert_int_equal(rs_cuts_add(cuts, "model.layers.0.self_attn.o_proj.weight",
                                 2, wrong, 1, 7, NULL), RS_OK);
    assert_int_equal(rs_layout_trainer_shards_cut(m, &tl, 0, cuts, collect,
                                                  &cut, &d), RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "'model.layers.0.self_attn.o_proj.weight'"));
    assert_non_null(strstr(d.msg, "[64, 65]"));
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_layout_publish_all_cut(m, &tl, cuts, s, &d),
                     RS_ERR_INPUT);
    assert_int_equal(rs_sources_num_shards(s), 0);
    free(cut.b);
    rs_sources_destroy(s);
    rs_cuts_destroy(cuts);
    rs_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sub_boxes_tile_shards),
        cmocka_unit_test(test_table_round_trip),
        cmocka_unit_test(test_foreign_cuts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
