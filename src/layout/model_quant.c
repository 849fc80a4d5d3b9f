/* A checkpoint's quantization_config (Hugging Face's fine-grained FP8
 * config, as DeepSeek-V3 and Kimi-K2 ship it): read and checked field by
 * field, and kept in the model so that tools report what the checkpoint
 * stores instead of assuming the config's dtype everywhere. */
#include <string.h>

#include "core/diag.h"
#include "layout/model_impl.h"

/* A scale block past this many rows or columns is a typo, not a block. */
#define RS_MODEL_QUANT_MAX_BLOCK ((int64_t)1 << 20)

static const char *const fmt_names[] = {"e4m3", "e5m2"};
static const rs_dtype_t fmt_dtypes[] = {RS_DTYPE_F8E4M3, RS_DTYPE_F8E5M2};
static const char *const scheme_names[] = {"dynamic", "static"};

/* An optional string key that must be one of names[0..n): its index in
 * *idx_p, left alone when the key is absent or null. */
static rs_status_t read_choice(rs__json_ctx_t *c, const json_t *q,
                               const char *key, const char *const *names,
                               size_t n, size_t *idx_p)
{
    const char *v = NULL;
    rs_status_t st = rs__json_field_string(c, q, key, 0, &v);
    if (st != RS_OK || v == NULL)
        return st;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v, names[i]) == 0) {
            *idx_p = i;
            return RS_OK;
        }
    }
    size_t mark = rs__json_push_key(c, key);
    st = rs__json_fail(c, "unknown value \"%s\" (accepted: \"%s\" or \"%s\")",
                      v, names[0], names[1]);
    rs__json_pop(c, mark);
    return st;
}

/* weight_block_size: [rows, columns], both positive; absent or null means
 * one scale per tensor. */
static rs_status_t read_block(rs__json_ctx_t *c, const json_t *q,
                              int64_t block[2])
{
    json_t *v = NULL;
    int64_t dims[3] = {0, 0, 0};
    size_t n = 0;
    rs_status_t st = rs__json_field(c, q, "weight_block_size", 0, JSON_ARRAY,
                                    &v);
    if (st != RS_OK || v == NULL)
        return st;
    size_t mark = rs__json_push_key(c, "weight_block_size");
    st = rs__json_as_ints(c, v, 1, 3, dims, &n);
    if (st == RS_OK && n != 2)
        st = rs__json_fail(c, "expected two integers [rows, columns], got "
                          "%zu", n);
    if (st == RS_OK && (dims[0] > RS_MODEL_QUANT_MAX_BLOCK ||
                        dims[1] > RS_MODEL_QUANT_MAX_BLOCK))
        st = rs__json_fail(c, "[%lld, %lld] is larger than the supported "
                          "maximum %lld", (long long)dims[0],
                          (long long)dims[1], (long long)RS_MODEL_QUANT_MAX_BLOCK);
    rs__json_pop(c, mark);
    if (st == RS_OK) {
        block[0] = dims[0];
        block[1] = dims[1];
    }
    return st;
}

/* modules_to_not_convert: null or an array of module names, kept in the
 * model's arena (the JSON is freed once the config is read). */
static rs_status_t read_excluded(rs__json_ctx_t *c, const json_t *q,
                                 rs_model_h m, rs_model_quant_t *out)
{
    json_t *v = NULL;
    rs_status_t st = rs__json_field(c, q, "modules_to_not_convert", 0,
                                    JSON_ARRAY, &v);
    if (st != RS_OK || v == NULL)
        return st;
    size_t n = json_array_size(v), mark = rs__json_push_key(c, "modules_to_not_convert");
    const char **names = rs__arena_alloc(&m->arena, (n ? n : 1) * sizeof(char *));
    if (names == NULL)
        st = rs__diag_set(c->diag, RS_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; st == RS_OK && i < n; i++) {
        size_t at = rs__json_push_index(c, i);
        st = rs__json_expect(c, json_array_get(v, i), JSON_STRING);
        if (st == RS_OK &&
            (names[i] = rs__arena_strdup(&m->arena, json_string_value(
                 json_array_get(v, i)))) == NULL)
            st = rs__diag_set(c->diag, RS_ERR_NO_MEMORY, "out of memory");
        rs__json_pop(c, at);
    }
    rs__json_pop(c, mark);
    if (st == RS_OK) {
        out->modules_not_converted = n;
        out->not_converted = names;
    }
    return st;
}

static rs_status_t read_fields(rs__json_ctx_t *c, const json_t *q,
                               rs_model_h m, rs_model_quant_t *out)
{
    const char *method = NULL;
    size_t fmt = 0, scheme = 0;
    rs_status_t st = rs__json_field_string(c, q, "quant_method", 1, &method);
    if (st != RS_OK)
        return st;
    if (strcmp(method, "fp8") != 0)
        return rs__model_unsupported(c, "quantization_config.quant_method",
                                     "unsupported quant_method \"%s\" "
                                     "(supported: fp8)", method);
    if ((st = read_choice(c, q, "fmt", fmt_names, 2, &fmt)) != RS_OK ||
        (st = read_choice(c, q, "activation_scheme", scheme_names, 2,
                          &scheme)) != RS_OK ||
        (st = read_block(c, q, out->weight_block)) != RS_OK ||
        (st = read_excluded(c, q, m, out)) != RS_OK)
        return st;
    out->method = RS_MODEL_QUANT_FP8;
    out->method_name = "fp8";
    out->fmt = fmt_names[fmt];
    out->weight_dtype = fmt_dtypes[fmt];
    out->activation_scheme = scheme_names[scheme];
    return RS_OK;
}

rs_status_t rs__model_read_quant(rs__json_ctx_t *c, const json_t *root,
                                 rs_model_h m)
{
    json_t *q = NULL;
    rs_model_quant_t quant;
    rs_status_t st = rs__json_field(c, root, "quantization_config", 0,
                                    JSON_OBJECT, &q);
    if (st != RS_OK || q == NULL)
        return st;
    memset(&quant, 0, sizeof(quant));
    size_t mark = rs__json_push_key(c, "quantization_config");
    st = read_fields(c, q, m, &quant);
    rs__json_pop(c, mark);
    if (st == RS_OK)
        m->quant = quant;
    return st;
}
