/* Reading a Hugging Face config.json: the keys every architecture shares
 * (sizes, vocabulary, tied embeddings, dtype) and bounded integer and
 * boolean readers whose errors name the file and the key. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/diag.h"
#include "layout/model_impl.h"

/* Bounds that keep every derived dimension (a product of two config
 * values) far from overflow; real models are orders of magnitude below. */
#define RS_MODEL_MAX_WIDTH ((int64_t)1 << 31) /* hidden, intermediate, vocab */
#define RS_MODEL_MAX_COUNT ((int64_t)1 << 16) /* layers, heads */

rs_status_t rs__model_read_int(rs__json_ctx_t *c, const json_t *root,
                               const char *key, int required, int64_t min,
                               int64_t max, int64_t *out_p)
{
    int64_t v = min - 1;
    rs_status_t st = rs__json_field_int(c, root, key, required, min, &v);
    if (st != RS_OK || v == min - 1)
        return st; /* error, or absent and optional */
    if (v > max) {
        size_t mark = rs__json_push_key(c, key);
        st = rs__json_fail(c, "%lld is larger than the supported maximum %lld",
                          (long long)v, (long long)max);
        rs__json_pop(c, mark);
        return st;
    }
    *out_p = v;
    return RS_OK;
}

rs_status_t rs__model_read_bool(rs__json_ctx_t *c, const json_t *root,
                                const char *key, int *out_p)
{
    json_t *v = json_object_get(root, key);
    rs_status_t st = RS_OK;

    if (v == NULL || json_is_null(v))
        return RS_OK;
    size_t mark = rs__json_push_key(c, key);
    if (json_is_boolean(v))
        *out_p = json_is_true(v);
    else
        st = rs__json_fail(c, "expected a boolean, got %s",
                          rs__json_type_name(v));
    rs__json_pop(c, mark);
    return st;
}

/* torch_dtype (or its newer name dtype): bfloat16 when absent. */
static rs_status_t read_dtype(rs__json_ctx_t *c, const json_t *root,
                              rs_dtype_t *out_p)
{
    const char *key = json_object_get(root, "torch_dtype") != NULL
                          ? "torch_dtype" : "dtype";
    const char *name = NULL;
    rs_status_t st = rs__json_field_string(c, root, key, 0, &name);
    if (st != RS_OK)
        return st;
    if (name == NULL) {
        *out_p = RS_DTYPE_BF16;
        return RS_OK;
    }
    rs_dtype_t d = rs_dtype_parse(name);
    if (d == RS_DTYPE_BF16 || d == RS_DTYPE_F16 || d == RS_DTYPE_F32) {
        *out_p = d;
        return RS_OK;
    }
    size_t mark = rs__json_push_key(c, key);
    st = rs__json_fail(c, "unsupported dtype \"%s\" (accepted: bfloat16, "
                      "float16, float32)", name);
    rs__json_pop(c, mark);
    return st;
}

rs_status_t rs__model_read_common(rs__json_ctx_t *c, const json_t *root,
                                  rs_model_h m)
{
    rs_model_config_t *g = &m->cfg;
    rs_status_t st;

    if ((st = rs__model_read_int(c, root, "hidden_size", 1, 1,
                                 RS_MODEL_MAX_WIDTH, &g->hidden)) != RS_OK ||
        (st = rs__model_read_int(c, root, "num_hidden_layers", 1, 1,
                                 RS_MODEL_MAX_COUNT, &g->layers)) != RS_OK ||
        (st = rs__model_read_int(c, root, "num_attention_heads", 1, 1,
                                 RS_MODEL_MAX_COUNT, &g->heads)) != RS_OK ||
        (st = rs__model_read_int(c, root, "intermediate_size", 1, 1,
                                 RS_MODEL_MAX_WIDTH, &g->intermediate)) != RS_OK ||
        (st = rs__model_read_int(c, root, "vocab_size", 1, 1,
                                 RS_MODEL_MAX_WIDTH, &g->vocab)) != RS_OK)
        return st;
    g->kv_heads = g->heads; /* Hugging Face's default: plain multi-head */
    if ((st = rs__model_read_int(c, root, "num_key_value_heads", 0, 1,
                                 RS_MODEL_MAX_COUNT, &g->kv_heads)) != RS_OK ||
        (st = rs__model_read_bool(c, root, "tie_word_embeddings",
                                  &g->tie_embeddings)) != RS_OK)
        return st;
    return read_dtype(c, root, &g->dtype);
}
