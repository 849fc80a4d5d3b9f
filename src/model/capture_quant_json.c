/* Reader and writer of a copy's "quant" object in reshard.capture.v1: the
 * scheme, the FP8 format, the block (fp8_block only) and the region of the
 * scale parameter the copy's scales land in. What the capture can check
 * beyond the text (a declared float32 scale parameter, the copy's dtype)
 * is rs__capture_check_quant's, reported here at the field's JSON path. */
#include <inttypes.h>
#include <string.h>

#include "core/json_write.h"
#include "model/capture_quant_json.h"

static const struct {
    const char *name;
    rs_quant_scheme_t scheme;
} schemes[] = {
    {"fp8_block", RS_QUANT_FP8_BLOCK},
    {"fp8_channel", RS_QUANT_FP8_CHANNEL},
    {"fp8_tensor", RS_QUANT_FP8_TENSOR},
};

#define NSCHEMES (sizeof(schemes) / sizeof(schemes[0]))

static const char *scheme_name(rs_quant_scheme_t s)
{
    for (size_t i = 0; i < NSCHEMES; i++) {
        if (schemes[i].scheme == s)
            return schemes[i].name;
    }
    return "?";
}

/* Every key of `obj` is one of `keys` (NULL-terminated); the path is at obj. */
static rs_status_t only_keys(rs__json_ctx_t *c, const json_t *obj,
                             const char *const *keys, const char *usage)
{
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)obj, key, v) {
        size_t i = 0;
        while (keys[i] != NULL && strcmp(keys[i], key) != 0)
            i++;
        if (keys[i] == NULL) {
            size_t mark = rs__json_push_key(c, key);
            rs_status_t st = rs__json_fail(c, "unknown key (%s)", usage);
            rs__json_pop(c, mark);
            return st;
        }
    }
    return RS_OK;
}

static rs_status_t parse_scheme(rs__json_ctx_t *c, const json_t *obj,
                                rs_quant_scheme_t *out)
{
    const char *name = NULL;
    rs_status_t st = rs__json_field_string(c, obj, "scheme", 1, &name);
    if (st != RS_OK)
        return st;
    for (size_t i = 0; i < NSCHEMES; i++) {
        if (strcmp(schemes[i].name, name) == 0) {
            *out = schemes[i].scheme;
            return RS_OK;
        }
    }
    size_t mark = rs__json_push_key(c, "scheme");
    st = rs__json_fail(c, "unknown scheme '%s' (fp8_block, fp8_channel or "
                       "fp8_tensor)", name);
    rs__json_pop(c, mark);
    return st;
}

static rs_status_t parse_format(rs__json_ctx_t *c, const json_t *obj,
                                rs_dtype_t *out)
{
    rs_status_t st = rs__json_field_dtype(c, obj, "format", out);
    if (st != RS_OK || *out == RS_DTYPE_F8E4M3 || *out == RS_DTYPE_F8E5M2)
        return st;
    size_t mark = rs__json_push_key(c, "format");
    st = rs__json_fail(c, "%s is not an FP8 format (f8e4m3 or f8e5m2)",
                       rs_dtype_name(*out));
    rs__json_pop(c, mark);
    return st;
}

/* "block": required on fp8_block (1..RS_MAX_DIMS positive extents, so the
 * blocks tile any source of that rank), refused on the other schemes. */
static rs_status_t parse_block(rs__json_ctx_t *c, const json_t *obj,
                               rs__quant_in_t *in)
{
    json_t *v = json_object_get(obj, "block");
    size_t n = 0, mark;
    rs_status_t st;

    if (in->q.scheme != RS_QUANT_FP8_BLOCK) {
        if (v == NULL || json_is_null(v))
            return RS_OK;
        mark = rs__json_push_key(c, "block");
        st = rs__json_fail(c, "only fp8_block takes a block, the scheme is "
                           "%s", scheme_name(in->q.scheme));
        rs__json_pop(c, mark);
        return st;
    }
    if ((st = rs__json_field(c, obj, "block", 1, JSON_ARRAY, &v)) != RS_OK)
        return st;
    mark = rs__json_push_key(c, "block");
    st = rs__json_as_ints(c, v, 1, RS_MAX_DIMS, in->block, &n);
    if (st == RS_OK && n == 0)
        st = rs__json_fail(c, "fp8_block needs at least one block extent");
    rs__json_pop(c, mark);
    in->q.block_ndim = (int)n;
    in->q.block = in->block;
    return st;
}

/* "scale": {"param", "dest_offset", "dest_shape", "dest_stride"}. */
static rs_status_t parse_scale(rs__json_ctx_t *c, const json_t *scale,
                               rs__quant_in_t *in)
{
    static const char *const keys[] = {"param", "dest_offset", "dest_shape",
                                       "dest_stride", NULL};
    json_t *v = NULL;
    size_t nstride = 0, mark;
    rs_status_t st;

    if ((st = only_keys(c, scale, keys, "param, dest_offset, dest_shape, "
                        "dest_stride")) != RS_OK ||
        (st = rs__json_field_string(c, scale, "param", 1,
                                    &in->q.scale_param)) != RS_OK ||
        (st = rs__json_field_int(c, scale, "dest_offset", 1, 0,
                                 &in->q.scale_offset)) != RS_OK ||
        (st = rs__json_field_dims(c, scale, "dest_shape", in->scale_shape,
                                  &in->q.scale_ndim)) != RS_OK ||
        (st = rs__json_field(c, scale, "dest_stride", 1, JSON_ARRAY, &v)) !=
            RS_OK)
        return st;
    mark = rs__json_push_key(c, "dest_stride");
    st = rs__json_as_ints(c, v, 0, RS_MAX_DIMS, in->scale_stride, &nstride);
    if (st == RS_OK && nstride != (size_t)in->q.scale_ndim)
        st = rs__json_fail(c, "has %zu entries but dest_shape has %d",
                           nstride, in->q.scale_ndim);
    rs__json_pop(c, mark);
    in->q.scale_shape = in->scale_shape;
    in->q.scale_stride = in->scale_stride;
    return st;
}

static rs_status_t parse_quant(rs__json_ctx_t *c, const json_t *obj,
                               rs__quant_in_t *in)
{
    static const char *const keys[] = {"scheme", "format", "block", "scale",
                                       NULL};
    json_t *scale = NULL;
    rs_status_t st;

    if ((st = rs__json_expect(c, obj, JSON_OBJECT)) != RS_OK ||
        (st = only_keys(c, obj, keys, "scheme, format, block, scale")) !=
            RS_OK ||
        (st = parse_scheme(c, obj, &in->q.scheme)) != RS_OK ||
        (st = parse_format(c, obj, &in->q.format)) != RS_OK ||
        (st = parse_block(c, obj, in)) != RS_OK ||
        (st = rs__json_field(c, obj, "scale", 1, JSON_OBJECT, &scale)) !=
            RS_OK)
        return st;
    size_t mark = rs__json_push_key(c, "scale");
    st = parse_scale(c, scale, in);
    rs__json_pop(c, mark);
    return st;
}

rs_status_t rs__capture_json_quant(rs__json_ctx_t *c, const json_t *copy,
                                   rs__quant_in_t *in, int *given_p)
{
    const json_t *obj = json_object_get(copy, "quant");

    memset(in, 0, sizeof(*in));
    *given_p = 0;
    if (obj == NULL || json_is_null(obj))
        return RS_OK;
    size_t mark = rs__json_push_key(c, "quant");
    rs_status_t st = parse_quant(c, obj, in);
    rs__json_pop(c, mark);
    if (st == RS_OK)
        *given_p = 1;
    return st;
}

/* The JSON path of each field under the copy, by rs__quant_field_t. */
static const char *const field_paths[RS__QF_COUNT][3] = {
    {"quant", "scheme", NULL},       {"quant", "format", NULL},
    {"quant", "block", NULL},        {"quant", "scale", "param"},
    {"quant", "scale", "dest_offset"}, {"quant", "scale", "dest_shape"},
    {"quant", "scale", "dest_stride"}, {"dest_dtype", NULL, NULL},
};

rs_status_t rs__capture_json_quant_fail(rs__json_ctx_t *c,
                                        const rs_copy_desc_t *copy,
                                        rs__quant_field_t field)
{
    size_t mark = c->len;

    rs__diag_prefix(c->diag, "copy of '%s' into '%s': ", copy->src,
                    copy->param);
    for (int i = 0; i < 3 && field < RS__QF_COUNT &&
                    field_paths[field][i] != NULL; i++)
        (void)rs__json_push_key(c, field_paths[field][i]);
    rs_status_t st = rs__json_prefix(c);
    rs__json_pop(c, mark);
    return st;
}

void rs__capture_put_quant(FILE *out, const rs_quant_desc_t *q)
{
    fputs(", \"quant\": {\"scheme\": ", out);
    rs__json_put_string(out, scheme_name(q->scheme));
    fputs(", \"format\": ", out);
    rs__json_put_string(out, rs_dtype_name(q->format));
    if (q->scheme == RS_QUANT_FP8_BLOCK) {
        fputs(", \"block\": ", out);
        rs__json_put_ints(out, q->block, (size_t)q->block_ndim);
    }
    fputs(", \"scale\": {\"param\": ", out);
    rs__json_put_string(out, q->scale_param);
    fprintf(out, ", \"dest_offset\": %" PRId64 ", \"dest_shape\": ",
            q->scale_offset);
    rs__json_put_ints(out, q->scale_shape, (size_t)q->scale_ndim);
    fputs(", \"dest_stride\": ", out);
    rs__json_put_ints(out, q->scale_stride, (size_t)q->scale_ndim);
    fputs("}}", out);
}
