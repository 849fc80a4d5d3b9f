/* Shared helpers of the vllm capture builders: errors, canonical ops,
 * manifest lookups that check shapes, parameters, copies into row-major
 * regions of them (each declaring its source's shape and dtype), and the
 * fused and split shapes every part uses. */
#include <stdio.h>
#include <string.h>

#include "core/checked.h"
#include "layout/vllm_impl.h"

rs_op_t rs__vllm_narrow(int64_t dim, int64_t start, int64_t length)
{
    rs_op_t op = {.kind = RS_OP_NARROW, .arg = {dim, start, length}, .has = 7};
    return op;
}

rs_op_t rs__vllm_select(int64_t dim, int64_t index)
{
    rs_op_t op = {.kind = RS_OP_SELECT, .arg = {dim, index}, .has = 3};
    return op;
}

rs_op_t rs__vllm_unsqueeze(int64_t dim)
{
    rs_op_t op = {.kind = RS_OP_UNSQUEEZE, .arg = {dim}, .has = 1};
    return op;
}

void rs__vllm_lname(char *buf, int64_t layer, const char *suffix)
{
    snprintf(buf, RS_VLLM_NAME_MAX, "model.layers.%lld.%s", (long long)layer,
             suffix);
}

/* A manifest tensor by name, or RS_ERR_INPUT naming it. */
static rs_status_t find_src(rs__vllm_builder_t *b, const char *name, rs_tensor_info_t *t)
{
    long idx = rs_model_find(b->model, name);
    if (idx < 0)
        return rs__vllm_fail(b, "tensor '%s' is not in the %s manifest", name,
                           b->cfg->model_type);
    rs_model_tensor(b->model, (size_t)idx, t);
    return RS_OK;
}

rs_status_t rs__vllm_src_shape(rs__vllm_builder_t *b, const char *name, int *ndim_p,
                             int64_t *shape_p)
{
    rs_tensor_info_t t;
    rs_status_t st = find_src(b, name, &t);
    if (st != RS_OK)
        return st;
    *ndim_p = t.ndim;
    memcpy(shape_p, t.shape, (size_t)t.ndim * sizeof(int64_t));
    return RS_OK;
}

rs_status_t rs__vllm_param(rs__vllm_builder_t *b, const char *name, const char *like, int ndim,
                         const int64_t *shape)
{
    rs_tensor_info_t t;
    rs_status_t st = find_src(b, like, &t);
    if (st != RS_OK)
        return st;
    if (rs__vllm_quantized(b, like))
        return rs__vllm_quant_params(b, name, ndim, shape);
    return rs_capture_add_param(b->cap, name, ndim, shape, t.dtype, b->diag);
}

/* The source must have exactly the shape the layout arithmetic assumed. */
static rs_status_t check_src(rs__vllm_builder_t *b, const rs_tensor_info_t *t, int ndim,
                             const int64_t *shape)
{
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (same)
        return RS_OK;
    char want[96], got[96];
    return rs__vllm_fail(b, "tensor '%s' has shape %s, the config implies %s",
                       t->name, rs__format_dims(got, sizeof(got), t->shape,
                                                t->ndim),
                       rs__format_dims(want, sizeof(want), shape, ndim));
}

rs_status_t rs__vllm_copy(rs__vllm_builder_t *b, const char *src, int src_ndim,
                        const int64_t *src_shape, const rs_op_t *ops,
                        size_t nops, const char *param, int64_t dest_offset,
                        int ndim, const int64_t *dest_shape)
{
    rs_tensor_info_t t;
    rs_param_info_t p;
    int64_t stride[RS_MAX_DIMS];
    long pidx = rs_capture_find_param(b->cap, param);
    rs_status_t st = find_src(b, src, &t);

    if (st == RS_OK)
        st = check_src(b, &t, src_ndim, src_shape);
    /* The planner refuses the copy if the publisher's tensor differs. */
    if (st == RS_OK)
        st = rs_capture_declare_source(b->cap, src, t.ndim, t.shape, t.dtype,
                                       b->diag);
    if (st != RS_OK)
        return st;
    if (pidx < 0)
        return rs__diag_set(b->diag, RS_ERR_INVALID_ARG, "vllm layout: copy "
                            "into undeclared parameter '%s'", param);
    rs_capture_param(b->cap, (size_t)pidx, &p);
    if (ndim > p.ndim)
        return rs__diag_set(b->diag, RS_ERR_INVALID_ARG, "vllm layout: copy "
                            "of rank %d into '%s' of rank %d", ndim, param,
                            p.ndim);
    /* The region's dims are the parameter's trailing dims: its strides are
     * the parameter's row-major strides for them. */
    int64_t s = 1;
    for (int i = p.ndim - 1, j = ndim - 1; j >= 0; i--, j--) {
        stride[j] = s;
        if (!rs__mul_i64(s, p.shape[i], &s))
            return rs__vllm_fail(b, "parameter '%s' overflows", param);
    }
    rs_copy_desc_t c = {src,    param,      ops,    nops,   dest_offset,
                        ndim,   dest_shape, stride, p.dtype};
    if (rs__vllm_quantized(b, src) || p.dtype == b->quant.format)
        return rs__vllm_quant_copy(b, &t, &c, &p);
    return rs_capture_add_copy(b->cap, &c, b->diag);
}

rs_status_t rs__vllm_whole(rs__vllm_builder_t *b, const char *name)
{
    int ndim = 0;
    int64_t shape[RS_MAX_DIMS];
    rs_status_t st = rs__vllm_src_shape(b, name, &ndim, shape);
    if (st == RS_OK)
        st = rs__vllm_param(b, name, name, ndim, shape);
    if (st == RS_OK)
        st = rs__vllm_copy(b, name, ndim, shape, NULL, 0, name, 0, ndim, shape);
    return st;
}

rs_status_t rs__vllm_whole_layer(rs__vllm_builder_t *b, int64_t layer, const char *suffix)
{
    char name[RS_VLLM_NAME_MAX];
    rs__vllm_lname(name, layer, suffix);
    return rs__vllm_whole(b, name);
}

/* One source's rows in a parameter fused along dim 0. */
/* A parameter of rows [sum of parts' rows] x cols (cols 0: 1-D, a bias)
 * filled part after part, as a merged/qkv column-parallel loader does. */
rs_status_t rs__vllm_fused_rows(rs__vllm_builder_t *b, int64_t layer, const char *suffix,
                              const rs__vllm_part_t *parts, int nparts, int64_t cols)
{
    char param[RS_VLLM_NAME_MAX], src[RS_VLLM_NAME_MAX];
    int ndim = cols > 0 ? 2 : 1;
    int64_t rows = 0, offset = 0;
    rs_status_t st = RS_OK;

    for (int i = 0; i < nparts; i++)
        rows += parts[i].rows;
    rs__vllm_lname(param, layer, suffix);
    rs__vllm_lname(src, layer, parts[0].suffix);
    int64_t shape[2] = {rows, cols};
    st = rs__vllm_param(b, param, src, ndim, shape);
    for (int i = 0; i < nparts && st == RS_OK; i++) {
        const rs__vllm_part_t *p = &parts[i];
        int64_t src_shape[2] = {p->src_rows, cols}, dest[2] = {p->rows, cols};
        rs_op_t op = rs__vllm_narrow(0, p->start, p->rows);
        rs__vllm_lname(src, layer, p->suffix);
        st = rs__vllm_copy(b, src, ndim, src_shape, &op, p->split ? 1 : 0, param,
                         offset * (cols > 0 ? cols : 1), ndim, dest);
        offset += p->rows;
    }
    return st;
}

/* A row-parallel parameter [rows, cols]: columns [start, start + cols) of
 * the source [rows, src_cols]. */
rs_status_t rs__vllm_split_cols(rs__vllm_builder_t *b, int64_t layer, const char *suffix,
                              int64_t rows, int64_t src_cols, int64_t start,
                              int64_t cols)
{
    char name[RS_VLLM_NAME_MAX];
    int64_t shape[2] = {rows, cols}, src_shape[2] = {rows, src_cols};
    rs_op_t op = rs__vllm_narrow(1, start, cols);
    rs__vllm_lname(name, layer, suffix);
    rs_status_t st = rs__vllm_param(b, name, name, 2, shape);
    if (st == RS_OK)
        st = rs__vllm_copy(b, name, 2, src_shape, &op, 1, name, 0, 2, shape);
    return st;
}

