/* The receiver path of quantized copies in the executor: each record's
 * block-rounded box of its source is read into staging (in the source's
 * dtype), quantized there by rs_quant_box into an FP8 box and its grid of
 * scales, and the record's two derived copies are replayed from those as
 * from a staged box. A box is quantized once its reads have landed (a
 * serial run: all after the wire stage; a pipelined run: as a task of its
 * wave), and the derived copies are marked ordered, so they replay only
 * after every box is quantized: a refused block (NaN or inf) fails the run
 * before a byte of any quantized copy is written; nothing is installed
 * then. */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/diag.h"
#include "exec/exec_impl.h"

#define OOM(diag) rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory")
#define QALIGN ((size_t)4096)

/* One receiver-path record as prepared. */
typedef struct rs__exec_quant {
    const rs_quantized_t *rec;
    rs_quant_desc_t q;
    int64_t block[RS_MAX_DIMS], grid[RS_MAX_DIMS];
    int64_t glo[RS_MAX_DIMS], gn[RS_MAX_DIMS];
    size_t at_src, at_fp8, at_scale; /* offsets into the staging block */
    uint64_t fp8_bytes, scale_bytes;
    size_t replay_begin;             /* its two replays */
} rs__exec_quant_t;

struct rs_xquants {
    rs__exec_quant_t *v;
    size_t n;
    unsigned char *staging; /* the executor's: not owned */
    double seconds; /* the last run's quantizing */
};

/* The records the executor quantizes: receiver path, planned. */
int rs__exec_quant_wanted(const rs_quantized_t *r)
{
    return r->path == RS_QUANT_PATH_RECEIVER && r->weight_copy != SIZE_MAX &&
           r->staging_bytes > 0;
}

size_t rs__exec_quant_reads(rs_plan_h plan)
{
    size_t n, total = 0;
    const rs_quantized_t *r = rs_plan_quantized(plan, &n);
    for (size_t i = 0; i < n; i++)
        total += rs__exec_quant_wanted(&r[i]) ? r[i].nsegments : 0;
    return total;
}

static size_t round_up(size_t v) { return (v + QALIGN - 1) & ~(QALIGN - 1); }

/* The block geometry of a record and its three buffers, at offsets from
 * the start of its own staging; *len_p: their bytes in whole pages. */
static rs_status_t shape_one(rs_capture_h cap, const rs_quantized_t *r,
                             rs__exec_quant_t *xq, uint64_t *len_p,
                             rs_diag_t *diag)
{
    rs_diag_t d = {RS_OK, ""};
    uint64_t numel = 1, ngrid = 1;
    memset(xq, 0, sizeof(*xq));
    xq->rec = r;
    if (!rs_capture_copy_quant(cap, r->copy, &xq->q) ||
        rs_quant_block_shape(&xq->q, r->ndim, r->global_shape, &d,
                             xq->block) != RS_OK)
        return rs__diag_set(diag, RS_ERR_INPUT, "copy %zu of '%s': its "
                            "quantization no longer resolves%s%s", r->copy,
                            r->src, d.msg[0] ? ": " : "", d.msg);
    for (int k = 0; k < r->ndim; k++) {
        int64_t b = xq->block[k];
        xq->grid[k] = (r->global_shape[k] + b - 1) / b;
        xq->glo[k] = r->box_lo[k] / b;
        xq->gn[k] = (r->box_shape[k] + b - 1) / b;
        numel *= (uint64_t)r->box_shape[k]; /* the plan checked the box */
        ngrid *= (uint64_t)xq->gn[k];
    }
    xq->fp8_bytes = numel;
    xq->scale_bytes = ngrid * sizeof(float);
    xq->at_fp8 = round_up((size_t)r->staging_bytes);
    xq->at_scale = xq->at_fp8 + round_up((size_t)xq->fp8_bytes);
    *len_p = xq->at_scale + round_up((size_t)xq->scale_bytes);
    return RS_OK;
}

rs_status_t rs__exec_quant_box_bytes(rs_capture_h cap, const rs_quantized_t *r,
                                     uint64_t *bytes_p, rs_diag_t *diag)
{
    rs__exec_quant_t xq;
    return shape_one(cap, r, &xq, bytes_p, diag);
}

/* A staged read standing for one of the record's outputs, so the
 * derived copy is replayed as from any staged box. */
static rs_staged_read_t as_staged(const rs__exec_quant_t *xq, int scale)
{
    const rs_quantized_t *r = xq->rec;
    rs_staged_read_t f;
    memset(&f, 0, sizeof(f));
    f.src = r->src;
    f.ndim = r->ndim;
    f.global_shape = scale ? xq->grid : r->global_shape;
    f.dtype = scale ? RS_DTYPE_F32 : xq->q.format;
    f.staging_bytes = scale ? xq->scale_bytes : xq->fp8_bytes;
    f.box_lo = scale ? xq->glo : r->box_lo;
    f.box_shape = scale ? xq->gn : r->box_shape;
    return f;
}

/* Its reads into the source staging, and its two replays. */
static rs_status_t program_one(rs_exec_h x, struct rs_xquants *qs,
                               rs__exec_quant_t *xq, rs_diag_t *diag)
{
    const rs_quantized_t *r = xq->rec;
    rs_staged_read_t w = as_staged(xq, 0), s = as_staged(xq, 1);
    rs_status_t st = rs__exec_add_reads(x, r->segments, r->nsegments,
                                        qs->staging + xq->at_src,
                                        r->staging_bytes,
                                        "its quantize staging", diag);
    xq->replay_begin = x->replays_len;
    if (st == RS_OK)
        st = rs__exec_replay_program(x, &w, qs->staging + xq->at_fp8,
                                     r->weight_copy, diag);
    if (st == RS_OK)
        st = rs__exec_replay_program(x, &s, qs->staging + xq->at_scale,
                                     r->scale_copy, diag);
    return st;
}

/* Every record's buffers, placed where the staging layout put its box in
 * the executor's staging (the quantized boxes own no memory). */
static rs_status_t place_all(struct rs_xquants *qs, const rs_quantized_t *r,
                             size_t n, rs_exec_h x, rs_diag_t *diag)
{
    size_t k = 0;
    qs->v = calloc(n + 1, sizeof(rs__exec_quant_t));
    if (qs->v == NULL)
        return OOM(diag);
    for (size_t i = 0; i < n; i++) {
        if (!rs__exec_quant_wanted(&r[i]))
            continue;
        uint64_t len, at = x->layout.at[x->layout.nfp + k];
        rs__exec_quant_t *xq = &qs->v[k++];
        rs_status_t st = shape_one(x->cap, &r[i], xq, &len, diag);
        if (st != RS_OK)
            return st;
        xq->at_src += (size_t)at;
        xq->at_fp8 += (size_t)at;
        xq->at_scale += (size_t)at;
    }
    qs->n = k;
    qs->staging = x->staging;
    return RS_OK;
}

rs_status_t rs__exec_prepare_quant(rs_exec_h x, rs_diag_t *diag)
{
    size_t n;
    const rs_quantized_t *r = rs_plan_quantized(x->plan, &n);
    if (n == 0)
        return RS_OK;
    struct rs_xquants *qs = calloc(1, sizeof(*qs));
    if (qs == NULL)
        return OOM(diag);
    x->quants = qs;
    rs_status_t st = place_all(qs, r, n, x, diag);
    for (size_t i = 0; st == RS_OK && i < qs->n; i++)
        st = program_one(x, qs, &qs->v[i], diag);
    return st;
}

size_t rs__exec_quant_count(const rs_exec_h x)
{
    return x->quants != NULL ? x->quants->n : 0;
}

size_t rs__exec_quant_nreads(const rs_exec_h x, size_t i)
{
    return x->quants->v[i].rec->nsegments;
}

void rs__exec_quant_order(rs_exec_h x)
{
    for (size_t i = 0; i < rs__exec_quant_count(x); i++) {
        x->replay_ordered[x->quants->v[i].replay_begin] = 1;
        x->replay_ordered[x->quants->v[i].replay_begin + 1] = 1;
    }
}

void rs__exec_release_quant(rs_exec_h x)
{
    struct rs_xquants *qs = x->quants;
    if (qs == NULL)
        return;
    free(qs->v);
    free(qs);
    x->quants = NULL;
}

rs_status_t rs__exec_quantize_one(rs_exec_h x, size_t i, rs_diag_t *diag)
{
    struct rs_xquants *qs = x->quants;
    const rs__exec_quant_t *xq = &qs->v[i];
    const rs_quantized_t *r = xq->rec;
    /* each box has its own three buffers: boxes quantize in parallel */
    return rs_quant_box(&xq->q, r->src_dtype, qs->staging + xq->at_src,
                        r->ndim, r->global_shape, r->box_lo, r->box_shape,
                        r->src, diag, qs->staging + xq->at_fp8,
                        (float *)(void *)(qs->staging + xq->at_scale));
}

rs_status_t rs__exec_quantize(rs_exec_h x, rs_diag_t *diag)
{
    struct rs_xquants *qs = x->quants;
    double t0 = rs__now_s();
    for (size_t i = 0; i < rs__exec_quant_count(x); i++) {
        rs_status_t st = rs__exec_quantize_one(x, i, diag);
        if (st != RS_OK) {
            x->failure = "quantize";
            return st;
        }
    }
    if (qs != NULL)
        qs->seconds = rs__now_s() - t0;
    return RS_OK;
}

void rs__exec_quant_time(rs_exec_h x)
{
    if (rs__exec_quant_count(x) == 0)
        return;
    double *s = &x->stage[RS_STAGE_CONVERT];
    *s = (*s < 0 ? 0 : *s) + x->quants->seconds;
}
