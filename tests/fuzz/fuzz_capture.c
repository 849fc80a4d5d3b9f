/* Fuzz target for reshard.capture.v1 JSON: any bytes either load into a
 * capture whose records read back consistently or fail with a status and a
 * message; never a crash, a leak or a read past the input. A capture with
 * unattributed writes is refused by the planner. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/capture.h"
#include "reshard/plan.h"
#include "reshard/sources.h"

/* Reads every record back, so that whatever the loader kept is well formed
 * (shapes within RS_MAX_DIMS, non-negative, declared sources with a real
 * dtype, copies naming known params, quantized copies with a known
 * scheme, an FP8 format that is the copy's dtype, positive block extents and
 * a declared float32 scale parameter). */
static void walk_quant(rs_capture_h cap, size_t i, const rs_copy_desc_t *c)
{
    rs_quant_desc_t q;
    rs_param_info_t p;

    if (!rs_capture_copy_quant(cap, i, &q))
        return;
    if (q.scheme < RS_QUANT_FP8_BLOCK || q.scheme > RS_QUANT_FP8_TENSOR ||
        q.format != c->dest_dtype || rs_dtype_size(q.format) != 1 ||
        q.block_ndim < 0 || q.block_ndim > RS_MAX_DIMS ||
        (q.scheme == RS_QUANT_FP8_BLOCK) != (q.block_ndim > 0) ||
        q.scale_ndim < 0 || q.scale_ndim > RS_MAX_DIMS || q.scale_offset < 0)
        abort();
    for (int d = 0; d < q.block_ndim; d++)
        if (q.block[d] < 1)
            abort();
    for (int d = 0; d < q.scale_ndim; d++)
        if (q.scale_shape[d] < 0 || q.scale_stride[d] < 0)
            abort();
    long s = rs_capture_find_param(cap, q.scale_param);
    if (s < 0)
        abort();
    rs_capture_param(cap, (size_t)s, &p);
    if (p.dtype != RS_DTYPE_F32)
        abort();
}

static void walk(rs_capture_h cap)
{
    for (size_t i = 0; i < rs_capture_num_params(cap); i++) {
        rs_param_info_t p;
        rs_capture_param(cap, i, &p);
        if (p.ndim < 0 || p.ndim > RS_MAX_DIMS || p.name == NULL)
            abort();
        for (int d = 0; d < p.ndim; d++)
            if (p.shape[d] < 0)
                abort();
        if (rs_capture_find_param(cap, p.name) != (long)i)
            abort();
    }
    for (size_t i = 0; i < rs_capture_num_sources(cap); i++) {
        rs_source_info_t s;
        rs_capture_source(cap, i, &s);
        if (s.ndim < 0 || s.ndim > RS_MAX_DIMS || s.name == NULL ||
            rs_dtype_size(s.dtype) == 0 ||
            rs_capture_find_source(cap, s.name) != (long)i)
            abort();
        for (int d = 0; d < s.ndim; d++)
            if (s.shape[d] < 0)
                abort();
    }
    for (size_t i = 0; i < rs_capture_num_copies(cap); i++) {
        rs_copy_desc_t c;
        rs_capture_copy(cap, i, &c);
        if (c.src == NULL || c.param == NULL || c.ndim < 0 ||
            c.ndim > RS_MAX_DIMS || (c.nops > 0 && c.ops == NULL))
            abort();
        for (int d = 0; d < c.ndim; d++)
            if (c.dest_shape[d] < 0)
                abort();
        walk_quant(cap, i, &c);
    }
    for (size_t i = 0; i < rs_capture_num_unsupported(cap); i++) {
        const char *src, *reason;
        rs_capture_unsupported(cap, i, &src, &reason);
        if (src == NULL || reason == NULL)
            abort();
    }
}

/* A capture that counts unattributed writes is refused by the planner
 * (RS_ERR_INPUT, no plan, a message naming the count), whatever else it
 * holds; planning one without sources is cheap. */
static void plan_refuses_unattributed(rs_capture_h cap)
{
    if (rs_capture_unattributed(cap) <= 0)
        return;
    rs_sources_h src = NULL;
    rs_plan_h plan = NULL;
    rs_diag_t diag;
    rs_diag_clear(&diag);
    if (rs_sources_create(&src) != RS_OK)
        abort();
    if (rs_plan_build(cap, src, NULL, &diag, &plan) != RS_ERR_INPUT ||
        plan != NULL || strstr(diag.msg, "unattributed write(s)") == NULL)
        abort();
    rs_sources_destroy(src);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rs_diag_t diag;
    rs_capture_h cap = NULL;
    rs_diag_clear(&diag);
    rs_status_t st = rs_capture_load_string((const char *)data, size,
                                            "fuzz.json", &diag, &cap);
    if (st == RS_OK) {
        walk(cap);
        plan_refuses_unattributed(cap);
        rs_capture_destroy(cap);
        return 0;
    }
    /* a failure always says what is wrong */
    if (cap != NULL || diag.msg[0] == '\0' ||
        memchr(diag.msg, '\0', sizeof(diag.msg)) == NULL)
        abort();
    return 0;
}
