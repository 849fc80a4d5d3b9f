/* FP8 checkpoints under the vllm layout: what vLLM's Fp8LinearMethod and
 * its fused-MoE counterpart allocate and load. A quantized weight is an FP8
 * param of the bf16 param's shape beside a float32 "<weight>_scale_inv"
 * holding one scale per block of its two trailing dims (rows of
 * weight_block_size[0], columns of [1]); each source lands in its rows and
 * its blocks' scales in the matching rows of the scales, so the scales of
 * merged parts (qkv, gate_up, fused_qkv_a, w13) follow one another as the
 * parts do. A tp slice, or a part of a merged weight but the last, that is
 * not a whole number of blocks is refused, as vLLM refuses it. */
#include <stdio.h>
#include <string.h>

#include "core/checked.h"
#include "layout/quant_impl.h"
#include "layout/vllm_impl.h"

int rs__vllm_quantized(rs__vllm_builder_t *b, const char *src)
{
    return b->quant.scheme != RS_QUANT_NONE &&
           rs__layout_fp8_tensor(b->model, src);
}

static void scale_name(char *out, const char *param)
{
    snprintf(out, RS_VLLM_NAME_MAX + 16, "%s_scale_inv", param);
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

rs_status_t rs__vllm_quant_params(rs__vllm_builder_t *b, const char *name, int ndim,
                                const int64_t *shape)
{
    char scale[RS_VLLM_NAME_MAX + 16];
    int64_t grid[RS_MAX_DIMS];
    if (ndim < 2 || ndim > 3)
        return rs__vllm_fail(b, "parameter '%s': an FP8 weight has 2 or 3 "
                           "dims, not %d", name, ndim);
    memcpy(grid, shape, (size_t)ndim * sizeof(int64_t));
    grid[ndim - 2] = ceil_div(shape[ndim - 2], b->quant.block[0]);
    grid[ndim - 1] = ceil_div(shape[ndim - 1], b->quant.block[1]);
    scale_name(scale, name);
    rs_status_t st = rs_capture_add_param(b->cap, name, ndim, shape,
                                          b->quant.format, b->diag);
    if (st == RS_OK)
        st = rs_capture_add_param(b->cap, scale, ndim, grid, RS_DTYPE_F32,
                                  b->diag);
    return st;
}

/* The box of the source a copy's view reads: its ops (narrows, and the
 * unsqueeze/select pair of a fused-MoE loader) applied to the whole
 * source. 0 for an op these layouts never emit on a quantized weight. */
static int view_box(const rs_tensor_info_t *t, const rs_copy_desc_t *c,
                    int64_t *lo, int64_t *len)
{
    int map[RS_MAX_DIMS + 1], n = t->ndim; /* view dim -> source dim or -1 */
    for (int d = 0; d < n; d++) {
        map[d] = d;
        lo[d] = 0;
        len[d] = t->shape[d];
    }
    for (size_t k = 0; k < c->nops; k++) {
        const rs_op_t *op = &c->ops[k];
        int d = (int)op->arg[0];
        if (d < 0 || d > n || (op->kind != RS_OP_UNSQUEEZE && d == n))
            return 0;
        if (op->kind == RS_OP_UNSQUEEZE && n < RS_MAX_DIMS) {
            memmove(map + d + 1, map + d, (size_t)(n - d) * sizeof(int));
            map[d] = -1;
            n++;
        } else if (op->kind == RS_OP_SELECT && map[d] < 0 && op->arg[1] == 0) {
            memmove(map + d, map + d + 1, (size_t)(n - d - 1) * sizeof(int));
            n--;
        } else if (op->kind == RS_OP_NARROW && map[d] >= 0) {
            lo[map[d]] += op->arg[1];
            len[map[d]] = op->arg[2];
        } else {
            return 0;
        }
    }
    return n == t->ndim;
}

static const char *const dim_names[2] = {"rows", "columns"};

/* The view of dim d takes whole blocks, or the whole dim. */
static rs_status_t check_view(rs__vllm_builder_t *b, const rs_tensor_info_t *t,
                              const int64_t *lo, const int64_t *len)
{
    const int64_t *blk = b->quant.block;
    for (int d = 0; d < 2; d++) {
        if ((lo[d] == 0 && len[d] == t->shape[d]) ||
            (lo[d] % blk[d] == 0 && len[d] % blk[d] == 0))
            continue;
        return rs__vllm_fail(b, "tensor '%s' [%lld, %lld]: this rank's %s "
                           "[%lld, %lld) cut its %lldx%lld FP8 blocks "
                           "(quantization_config.weight_block_size): a "
                           "tensor-parallel slice must be a whole number of "
                           "blocks", t->name, (long long)t->shape[0],
                           (long long)t->shape[1], dim_names[d],
                           (long long)lo[d], (long long)(lo[d] + len[d]),
                           (long long)blk[0], (long long)blk[1]);
    }
    return RS_OK;
}

/* Where the copy lands in the param (coordinates of dest_offset), on block
 * boundaries, each part ending on one or at the param's end. */
static rs_status_t check_dest(rs__vllm_builder_t *b, const rs_tensor_info_t *t,
                              const rs_copy_desc_t *c,
                              const rs_param_info_t *p, int64_t *at)
{
    int64_t rest = c->dest_offset;
    for (int d = p->ndim - 1; d >= 0; d--) {
        at[d] = rest % p->shape[d];
        rest /= p->shape[d];
    }
    for (int k = 0; k < 2; k++) {
        int d = p->ndim - 2 + k;
        int64_t blk = b->quant.block[k], n = c->dest_shape[c->ndim - 2 + k];
        if (at[d] % blk == 0 && (n % blk == 0 || at[d] + n == p->shape[d]))
            continue;
        return rs__vllm_fail(b, "parameter '%s': tensor '%s' [%lld, %lld] lands "
                           "at %s [%lld, %lld), across its %lldx%lld FP8 "
                           "blocks: every part of a merged FP8 weight but the "
                           "last must be a whole number of blocks", p->name,
                           t->name, (long long)t->shape[0],
                           (long long)t->shape[1], dim_names[k],
                           (long long)at[d], (long long)(at[d] + n),
                           (long long)b->quant.block[0],
                           (long long)b->quant.block[1]);
    }
    return RS_OK;
}

/* A merged weight is FP8 or not as a whole: vLLM refuses one whose parts
 * modules_to_not_convert splits. */
static rs_status_t check_same(rs__vllm_builder_t *b, const rs_tensor_info_t *t,
                              const rs_param_info_t *p, long scale_idx)
{
    int src_q = rs__vllm_quantized(b, t->name);
    int param_q = p->dtype == b->quant.format && scale_idx >= 0;
    if (src_q == param_q)
        return RS_OK;
    return rs__vllm_fail(b, "parameter '%s' is %s but tensor '%s' is %s "
                       "(quantization_config.modules_to_not_convert names "
                       "some parts of a merged weight but not all)", p->name,
                       param_q ? "FP8" : "not FP8", t->name,
                       src_q ? "FP8" : "not FP8");
}

rs_status_t rs__vllm_quant_copy(rs__vllm_builder_t *b, const rs_tensor_info_t *t,
                              const rs_copy_desc_t *c,
                              const rs_param_info_t *p)
{
    char scale[RS_VLLM_NAME_MAX + 16];
    int64_t lo[RS_MAX_DIMS], len[RS_MAX_DIMS], at[RS_MAX_DIMS];
    int64_t shape[2], stride[2];
    rs_param_info_t sp;
    scale_name(scale, p->name);
    long si = rs_capture_find_param(b->cap, scale);
    rs_status_t st = check_same(b, t, p, si);
    if (st != RS_OK)
        return st;
    if (t->ndim != 2 || c->ndim != 2 || p->ndim < 2 || !view_box(t, c, lo, len))
        return rs__diag_set(b->diag, RS_ERR_INVALID_ARG, "vllm layout: copy "
                            "of '%s' into '%s' is not a box of a 2-D FP8 "
                            "weight", t->name, p->name);
    if ((st = check_view(b, t, lo, len)) != RS_OK ||
        (st = check_dest(b, t, c, p, at)) != RS_OK)
        return st;
    rs_capture_param(b->cap, (size_t)si, &sp);
    int64_t offset = 0, s = 1;
    for (int d = sp.ndim - 1; d >= 0; d--) {
        int k = d - (sp.ndim - 2); /* 0, 1: the blocked dims */
        int64_t coord = k >= 0 ? at[d] / b->quant.block[k] : at[d];
        if (k >= 0) {
            stride[k] = s;
            shape[k] = ceil_div(c->dest_shape[k], b->quant.block[k]);
        }
        offset += coord * s;
        s *= sp.shape[d];
    }
    rs_quant_desc_t q = b->quant;
    q.scale_param = scale;
    q.scale_offset = offset;
    q.scale_ndim = 2;
    q.scale_shape = shape;
    q.scale_stride = stride;
    return rs_capture_add_quant_copy(b->cap, c, &q, b->diag);
}
