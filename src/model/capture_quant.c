/* Quantized captured copies: the checks a copy's quantization spec gets when
 * it is added (what the capture alone can tell: scheme, format, block, the
 * scale parameter and region, the copy's dtype), and the spec's arena copy.
 * What needs the source's full shape is checked by the planner. */
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "model/capture_impl.h"

/* Field names as the C descriptors spell them, by rs__quant_field_t. */
static const char *const field_names[RS__QF_COUNT] = {
    "quant.scheme",       "quant.format",       "quant.block",
    "quant.scale_param",  "quant.scale_offset", "quant.scale_shape",
    "quant.scale_stride", "dest_dtype",
};

const char *rs__quant_field_name(rs__quant_field_t field)
{
    return field < RS__QF_COUNT ? field_names[field] : "quant";
}

static int known_scheme(rs_quant_scheme_t s)
{
    return s == RS_QUANT_FP8_BLOCK || s == RS_QUANT_FP8_CHANNEL ||
           s == RS_QUANT_FP8_TENSOR;
}

static int known_format(rs_dtype_t f)
{
    return f == RS_DTYPE_F8E4M3 || f == RS_DTYPE_F8E5M2;
}

/* Scheme, format and block: rs_quant_block_shape's rules that hold for any
 * source (a block longer than the source's rank is the planner's). */
static rs_status_t check_spec(const rs_quant_desc_t *q, rs_diag_t *diag,
                              rs__quant_field_t *field_p)
{
    *field_p = RS__QF_SCHEME;
    if (!known_scheme(q->scheme))
        return rs__diag_set(diag, RS_ERR_INPUT, "unknown scheme %d",
                            (int)q->scheme);
    *field_p = RS__QF_FORMAT;
    if (!known_format(q->format))
        return rs__diag_set(diag, RS_ERR_INPUT, "%s is not an FP8 format "
                            "(f8e4m3 or f8e5m2)", rs_dtype_name(q->format));
    *field_p = RS__QF_BLOCK;
    if (q->scheme != RS_QUANT_FP8_BLOCK)
        return q->block_ndim == 0
                   ? RS_OK
                   : rs__diag_set(diag, RS_ERR_INPUT, "a block is given (%d "
                                  "dims) but only fp8_block takes one",
                                  q->block_ndim);
    if (q->block_ndim < 1 || q->block_ndim > RS_MAX_DIMS)
        return rs__diag_set(diag, RS_ERR_INPUT, "fp8_block needs 1..%d block "
                            "extents, got %d", RS_MAX_DIMS, q->block_ndim);
    if (q->block == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL block");
    for (int i = 0; i < q->block_ndim; i++) {
        if (q->block[i] < 1)
            return rs__diag_set(diag, RS_ERR_INPUT, "extent %d is %lld, not "
                                "positive", i, (long long)q->block[i]);
    }
    return RS_OK;
}

/* The last element the scale region reaches, which must lie inside the
 * scale parameter (an empty region reaches nothing). */
static rs_status_t check_scale_bounds(const rs_quant_desc_t *q,
                                      const rs__capture_param_t *p,
                                      rs_diag_t *diag,
                                      rs__quant_field_t *field_p)
{
    int64_t numel, last = q->scale_offset, step;

    *field_p = RS__QF_SCALE_SHAPE;
    if (!rs__numel(q->scale_shape, q->scale_ndim, &numel))
        return rs__diag_set(diag, RS_ERR_INPUT, "negative or overflowing");
    if (q->scheme == RS_QUANT_FP8_TENSOR && numel != 1)
        return rs__diag_set(diag, RS_ERR_INPUT, "fp8_tensor has one scale, "
                            "the region holds %lld", (long long)numel);
    if (numel == 0)
        return RS_OK;
    for (int i = 0; i < q->scale_ndim; i++) {
        if (!rs__mul_i64(q->scale_shape[i] - 1, q->scale_stride[i], &step) ||
            !rs__add_i64(last, step, &last))
            return rs__diag_set(diag, RS_ERR_INPUT, "region overflows");
    }
    if (last >= p->numel)
        return rs__diag_set(diag, RS_ERR_INPUT, "region reaches element %lld "
                            "of scale parameter '%s', which has %lld",
                            (long long)last, p->name, (long long)p->numel);
    return RS_OK;
}

/* The scale parameter (declared, float32) and its region (rank, sizes,
 * strides, offset, bounds). */
static rs_status_t check_scale(rs_capture_h cap, const rs_quant_desc_t *q,
                               rs_diag_t *diag, rs__quant_field_t *field_p)
{
    uint32_t idx;

    *field_p = RS__QF_SCALE_PARAM;
    if (q->scale_param == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL scale_param");
    if (!rs__strmap_get(&cap->param_index, q->scale_param, &idx))
        return rs__diag_set(diag, RS_ERR_INPUT, "'%s' is not a declared "
                            "parameter", q->scale_param);
    const rs__capture_param_t *p = &cap->params[idx];
    if (p->dtype != RS_DTYPE_F32)
        return rs__diag_set(diag, RS_ERR_INPUT, "parameter '%s' is %s, scales "
                            "are f32", p->name, rs_dtype_name(p->dtype));
    *field_p = RS__QF_SCALE_OFFSET;
    if (q->scale_offset < 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "%lld is negative",
                            (long long)q->scale_offset);
    *field_p = RS__QF_SCALE_SHAPE;
    if (q->scale_ndim < 0 || q->scale_ndim > RS_MAX_DIMS)
        return rs__diag_set(diag, RS_ERR_INPUT, "rank %d outside 0..%d",
                            q->scale_ndim, RS_MAX_DIMS);
    if (q->scale_ndim > 0 && (q->scale_shape == NULL || q->scale_stride == NULL))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL scale region");
    *field_p = RS__QF_SCALE_STRIDE;
    for (int i = 0; i < q->scale_ndim; i++) {
        if (q->scale_stride[i] < 0)
            return rs__diag_set(diag, RS_ERR_INPUT, "entry %d is negative", i);
    }
    return check_scale_bounds(q, p, diag, field_p);
}

/* The copy writes FP8 values: its dtype, and its parameter's when declared,
 * is the format. */
static rs_status_t check_dest(rs_capture_h cap, const rs_copy_desc_t *copy,
                              const rs_quant_desc_t *q, rs_diag_t *diag,
                              rs__quant_field_t *field_p)
{
    uint32_t idx;

    *field_p = RS__QF_DEST_DTYPE;
    if (copy->dest_dtype != q->format)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s is not the quantization "
                            "format %s", rs_dtype_name(copy->dest_dtype),
                            rs_dtype_name(q->format));
    if (rs__strmap_get(&cap->param_index, copy->param, &idx) &&
        cap->params[idx].dtype != q->format)
        return rs__diag_set(diag, RS_ERR_INPUT, "parameter '%s' is %s, not "
                            "the quantization format %s", copy->param,
                            rs_dtype_name(cap->params[idx].dtype),
                            rs_dtype_name(q->format));
    return RS_OK;
}

/* What a source declared before the copy allows (rs_quant_block_shape's
 * rules that need its rank); an undeclared source is the planner's. */
static rs_status_t check_declared_source(rs_capture_h cap,
                                         const rs_copy_desc_t *copy,
                                         const rs_quant_desc_t *q,
                                         rs_diag_t *diag,
                                         rs__quant_field_t *field_p)
{
    const rs__capture_source_t *s = rs__capture_find_source(cap, copy->src);

    if (s == NULL)
        return RS_OK;
    *field_p = RS__QF_BLOCK;
    if (q->scheme == RS_QUANT_FP8_BLOCK && q->block_ndim > s->ndim)
        return rs__diag_set(diag, RS_ERR_INPUT, "%d dims, source '%s' is "
                            "declared with %d", q->block_ndim, s->name,
                            s->ndim);
    *field_p = RS__QF_SCHEME;
    if (q->scheme == RS_QUANT_FP8_CHANNEL && s->ndim < 1)
        return rs__diag_set(diag, RS_ERR_INPUT, "fp8_channel needs a source "
                            "of at least 1 dim, '%s' is declared with 0",
                            s->name);
    return RS_OK;
}

rs_status_t rs__capture_check_quant(rs_capture_h capture,
                                    const rs_copy_desc_t *copy,
                                    const rs_quant_desc_t *quant,
                                    rs_diag_t *diag,
                                    rs__quant_field_t *field_p)
{
    rs_status_t st = check_spec(quant, diag, field_p);
    if (st == RS_OK)
        st = check_declared_source(capture, copy, quant, diag, field_p);
    if (st == RS_OK)
        st = check_scale(capture, quant, diag, field_p);
    if (st == RS_OK)
        st = check_dest(capture, copy, quant, diag, field_p);
    return st;
}

static int64_t *dup_dims(rs__arena_t *a, const int64_t *dims, int n)
{
    return rs__arena_memdup(a, dims, (size_t)(n > 0 ? n : 1) * sizeof(int64_t));
}

/* The capture's own copy of a checked spec; NULL on exhaustion. The scale
 * parameter's name is the declared parameter's. */
rs_quant_desc_t *rs__capture_dup_quant(rs_capture_h cap,
                                       const rs_quant_desc_t *q,
                                       uint32_t *scale_param_p)
{
    rs_quant_desc_t *out = rs__arena_alloc(&cap->arena, sizeof(*out));
    uint32_t idx = 0;

    if (out == NULL)
        return NULL;
    *out = *q;
    (void)rs__strmap_get(&cap->param_index, q->scale_param, &idx);
    out->scale_param = cap->params[idx].name;
    *scale_param_p = idx;
    out->block = q->block_ndim > 0 ? dup_dims(&cap->arena, q->block,
                                              q->block_ndim)
                                   : NULL;
    out->scale_shape = dup_dims(&cap->arena, q->scale_shape, q->scale_ndim);
    out->scale_stride = dup_dims(&cap->arena, q->scale_stride, q->scale_ndim);
    if ((q->block_ndim > 0 && out->block == NULL) ||
        out->scale_shape == NULL || out->scale_stride == NULL)
        return NULL;
    return out;
}

rs_status_t rs_capture_add_quant_copy(rs_capture_h capture,
                                      const rs_copy_desc_t *copy,
                                      const rs_quant_desc_t *quant,
                                      rs_diag_t *diag)
{
    rs__quant_field_t field;
    rs_quant_desc_t *q;
    uint32_t scale_param = 0;

    if (capture == NULL || copy == NULL || quant == NULL ||
        copy->src == NULL || copy->param == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    rs_status_t st = rs__capture_check_quant(capture, copy, quant, diag,
                                             &field);
    if (st != RS_OK) {
        rs__diag_prefix(diag, "copy %zu ('%s' into '%s'): %s: ",
                        capture->copies_len, copy->src, copy->param,
                        rs__quant_field_name(field));
        return st;
    }
    if ((q = rs__capture_dup_quant(capture, quant, &scale_param)) == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if ((st = rs_capture_add_copy(capture, copy, diag)) != RS_OK)
        return st;
    capture->copies[capture->copies_len - 1].quant = q;
    capture->copies[capture->copies_len - 1].scale_param_id = scale_param;
    return RS_OK;
}

int rs_capture_copy_quant(rs_capture_h capture, size_t index,
                          rs_quant_desc_t *quant_p)
{
    const rs_quant_desc_t *q = capture->copies[index].quant;
    if (q == NULL)
        return 0;
    *quant_p = *q;
    return 1;
}
