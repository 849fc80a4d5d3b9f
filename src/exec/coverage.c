/* The coverage gate's accounting: which parameter bytes the plan writes,
 * computed from segments and copy regions as intervals (cost proportional
 * to runs, not elements), then swept per parameter. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "exec/exec_impl.h"
#include "geom/region.h"

typedef struct {
    uint32_t param;
    uint64_t start, end; /* bytes */
} ival_t;

typedef struct {
    RS_VEC(ival_t, iv);
    uint32_t param;
    uint64_t elsize;
    int oom;
} ivs_t;

static void push(ivs_t *v, uint32_t param, uint64_t start, uint64_t len)
{
    ival_t i = {param, start, start + len};
    if (!RS_VEC_PUSH(v, iv, i))
        v->oom = 1;
}

static void on_region_run(void *ctx, int64_t start, int64_t nelem)
{
    ivs_t *v = ctx;
    push(v, v->param, (uint64_t)start * v->elsize,
         (uint64_t)nelem * v->elsize);
}

static void add_copy_region(rs_exec_h x, size_t ci, ivs_t *v)
{
    rs_copy_desc_t c;
    rs_capture_copy(x->cap, ci, &c);
    long p = rs_capture_find_param(x->cap, c.param);
    if (p < 0)
        return;
    v->param = (uint32_t)p;
    v->elsize = rs_dtype_size(c.dest_dtype);
    rs__region_runs(c.ndim, c.dest_shape, c.dest_stride, c.dest_offset,
                   on_region_run, v);
}

static void collect(rs_exec_h x, ivs_t *v)
{
    size_t n;
    const rs_segment_t *s = rs_plan_segments(x->plan, &n);
    for (size_t i = 0; i < n; i++)
        push(v, s[i].param, s[i].dst_byte, s[i].nbytes);
    const rs_staged_read_t *fp = rs_plan_staged_reads(x->plan, &n);
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < fp[i].ncopies; k++)
            add_copy_region(x, fp[i].copies[k], v);
    }
    const rs_convert_t *cv = rs_plan_converts(x->plan, &n);
    for (size_t i = 0; i < n; i++)
        add_copy_region(x, cv[i].copy, v);
    /* a quantized copy on the receiver path writes its values and its
     * scale region (planned records only: a refused one has no copies) */
    const rs_quantized_t *q = rs_plan_quantized(x->plan, &n);
    for (size_t i = 0; i < n; i++) {
        if (q[i].path != RS_QUANT_PATH_RECEIVER || q[i].staging_bytes == 0)
            continue;
        add_copy_region(x, q[i].weight_copy, v);
        add_copy_region(x, q[i].scale_copy, v);
    }
}

static int cmp_ival(const void *a, const void *b)
{
    const ival_t *x = a, *y = b;
    if (x->param != y->param)
        return x->param < y->param ? -1 : 1;
    return (x->start > y->start) - (x->start < y->start);
}

/* Sweeps sorted intervals: union and doubly written bytes per param. */
static int sweep(rs_exec_h x, const ival_t *iv, size_t n)
{
    rs_coverage_t *c = &x->cov;
    uint64_t *covered = calloc(x->nparams + 1, sizeof(uint64_t));
    size_t i = 0;
    if (covered == NULL)
        return 0;
    while (i < n) {
        uint32_t p = iv[i].param;
        uint64_t reach = 0;
        for (; i < n && iv[i].param == p; i++) {
            uint64_t s = iv[i].start, e = iv[i].end;
            if (s < reach)
                c->bytes_multi += (e < reach ? e : reach) - s;
            if (e > reach) {
                covered[p] += e - (s > reach ? s : reach);
                reach = e;
            }
        }
    }
    for (size_t p = 0; p < x->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(x->cap, p, &info);
        c->bytes_total += info.nbytes;
        c->bytes_covered += covered[p];
        x->param_state[p] = covered[p] == info.nbytes ? 2 : covered[p] ? 1 : 0;
        c->params_full += x->param_state[p] == 2;
        c->params_partial += x->param_state[p] == 1;
        c->params_missing += x->param_state[p] == 0;
    }
    free(covered);
    return 1;
}

rs_status_t rs__exec_compute_coverage(rs_exec_h x, rs_diag_t *diag)
{
    ivs_t v;
    memset(&v, 0, sizeof(v));
    memset(&x->cov, 0, sizeof(x->cov));
    free(x->param_state);
    x->param_state = calloc(x->nparams + 1, 1);
    if (x->param_state == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    collect(x, &v);
    if (v.oom) {
        free(v.iv);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    if (v.iv_len > 1)
        qsort(v.iv, v.iv_len, sizeof(ival_t), cmp_ival);
    int ok = sweep(x, v.iv, v.iv_len);
    free(v.iv);
    if (!ok)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    x->cov.params_total = x->nparams;
    x->cov.fraction = x->cov.bytes_total
        ? (double)x->cov.bytes_covered / (double)x->cov.bytes_total : 1.0;
    x->have_coverage = 1;
    return RS_OK;
}

rs_status_t rs_exec_coverage(rs_exec_h x, rs_diag_t *diag,
                             rs_coverage_t *coverage_p)
{
    if (!x->have_coverage) {
        rs_status_t st = rs__exec_compute_coverage(x, diag);
        if (st != RS_OK)
            return st;
    }
    *coverage_p = x->cov;
    return RS_OK;
}
