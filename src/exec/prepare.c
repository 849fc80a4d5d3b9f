/* Preparing a plan for execution: resolve every segment to an absolute
 * destination (refusing any that would leave its parameter or staging
 * buffer), allocate staging, and build the replay and cast programs. Done
 * once; later runs reuse all of it. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/mem_avail.h"
#include "core/pages.h"
#include "core/diag.h"
#include "exec/exec_impl.h"
#include "geom/box.h"
#include "geom/view.h"
#include "geom/view_box.h"
#include "core/convert.h"

#define OOM(diag) rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory")

static rs_status_t bound_param(rs_exec_h x, size_t p, rs_diag_t *diag)
{
    rs_param_info_t info;
    rs_capture_param(x->cap, p, &info);
    if (x->binds[p].base == NULL && info.nbytes > 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "param '%s' is written by the plan but not bound",
                            info.name);
    return RS_OK;
}

rs_status_t rs__exec_add_reads(rs_exec_h x, const rs_segment_t *segs,
                               size_t n, unsigned char *base, uint64_t limit,
                               const char *what, rs_diag_t *diag)
{
    for (size_t i = 0; i < n; i++) {
        const rs_segment_t *s = &segs[i];
        if (s->dst_byte > limit || s->nbytes > limit - s->dst_byte)
            return rs__diag_set(diag, RS_ERR_INPUT, "segment of %llu bytes "
                                "at byte %llu leaves %s (%llu bytes)",
                                (unsigned long long)s->nbytes,
                                (unsigned long long)s->dst_byte, what,
                                (unsigned long long)limit);
        x->reads[x->nreads++] = (rs_read_t){s->session, s->src_addr,
                                            base + s->dst_byte, s->nbytes};
        x->plan_bytes += s->nbytes;
    }
    return RS_OK;
}

static rs_status_t prepare_exact(rs_exec_h x, rs_diag_t *diag)
{
    size_t n;
    const rs_segment_t *segs = rs_plan_segments(x->plan, &n);
    for (size_t i = 0; i < n; i++) {
        uint32_t p = segs[i].param;
        rs_param_info_t info;
        rs_status_t st = bound_param(x, p, diag);
        if (st != RS_OK)
            return st;
        rs_capture_param(x->cap, p, &info);
        st = rs__exec_add_reads(x, &segs[i], 1, x->binds[p].base, info.nbytes,
                       info.name, diag);
        if (st != RS_OK)
            return st;
    }
    return RS_OK;
}

/* The destination side of a copy: its bound parameter storage. */
static rs_status_t dest_of(rs_exec_h x, size_t ci, rs__exec_copy_t *xc,
                           rs_diag_t *diag)
{
    rs_copy_desc_t c;
    rs_capture_copy(x->cap, ci, &c);
    long p = rs_capture_find_param(x->cap, c.param);
    if (p < 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "copy %zu: unknown param "
                            "'%s'", ci, c.param);
    rs_status_t st = bound_param(x, (size_t)p, diag);
    if (st != RS_OK)
        return st;
    /* The planner checked the whole region; the start is checked again
     * here because forming a pointer outside the storage is itself
     * undefined, whatever is later written through it. */
    rs_param_info_t info;
    rs_capture_param(x->cap, (size_t)p, &info);
    size_t esize = rs_dtype_size(c.dest_dtype);
    if (c.dest_offset < 0 || esize == 0 ||
        (uint64_t)c.dest_offset > info.nbytes / esize)
        return rs__diag_set(diag, RS_ERR_INPUT, "copy %zu: dest_offset %lld "
                            "leaves param '%s' (%llu bytes)", ci,
                            (long long)c.dest_offset, c.param,
                            (unsigned long long)info.nbytes);
    if (rs__exec_guard_on &&
        (st = rs__exec_guard_dest(&c, ci, info.nbytes, diag)) != RS_OK)
        return st;
    xc->copy = ci;
    xc->ndim = c.ndim;
    memcpy(xc->shape, c.dest_shape, (size_t)c.ndim * sizeof(int64_t));
    memcpy(xc->dst_stride, c.dest_stride, (size_t)c.ndim * sizeof(int64_t));
    /* An unbound param holds no bytes (bound_param), so nothing is written
     * through dst; null plus an offset would itself be undefined. */
    xc->dst = x->binds[p].base != NULL
                  ? x->binds[p].base + (size_t)c.dest_offset * esize
                  : NULL;
    xc->to = c.dest_dtype;
    return RS_OK;
}

/* The staged box of a read; a plan without one stages the whole source. */
static rs_status_t staged_view(const rs_staged_read_t *fp, rs__view_t *v)
{
    int64_t lo[RS_MAX_DIMS] = {0};
    return rs__view_init_box(v, fp->ndim, fp->global_shape,
                             fp->box_lo != NULL ? fp->box_lo : lo,
                             fp->box_shape != NULL ? fp->box_shape
                                                   : fp->global_shape);
}

/* Replays copy ci's op chain over the staging of a staged read: the chain
 * applied to the whole source, rebased on the staged box. Every element
 * it reads must lie in the staging buffer, and (guard.c) in the box. */
rs_status_t rs__exec_replay_program(rs_exec_h x, const rs_staged_read_t *fp,
                                    unsigned char *staging, size_t ci,
                                    rs_diag_t *diag)
{
    rs_copy_desc_t c;
    rs__view_t v;
    rs__exec_copy_t xc;
    char why[256];
    int64_t first, last;
    size_t es = rs_dtype_size(fp->dtype);

    rs__box_t box;
    memset(&xc, 0, sizeof(xc));
    rs_capture_copy(x->cap, ci, &c);
    rs_status_t st = rs__exec_guard_on
                         ? rs__exec_guard_replay(x, fp, ci, &box, diag)
                         : RS_OK;
    if (st != RS_OK)
        return st;
    st = staged_view(fp, &v);
    for (size_t i = 0; st == RS_OK && i < c.nops; i++)
        st = rs__view_apply(&v, &c.ops[i], why, sizeof(why));
    if (st != RS_OK || v.ndim != c.ndim)
        return rs__diag_set(diag, RS_ERR_INPUT, "copy %zu of '%s': its ops "
                            "no longer resolve against its staged read", ci,
                            fp->src);
    int reads = rs__view_span(&v, &first, &last);
    if (reads && (first < 0 || es == 0 ||
                  (uint64_t)last >= fp->staging_bytes / es))
        return rs__diag_set(diag, RS_ERR_INPUT, "copy %zu of '%s' reads "
                            "outside its staged box", ci, fp->src);
    if ((st = dest_of(x, ci, &xc, diag)) != RS_OK)
        return st;
    memcpy(xc.src_stride, v.stride, (size_t)v.ndim * sizeof(int64_t));
    /* an empty view reads nothing, and its offset may lie anywhere */
    xc.src = staging + (reads ? (size_t)v.offset * es : 0);
    xc.from = fp->dtype;
    if (rs__exec_guard_on)
        rs__exec_replay_samples(&xc, fp, staging, &box);
    return RS_VEC_PUSH(x, replays, xc) ? RS_OK : OOM(diag);
}

/* Every staged box's buffer, in one block of whole pages (huge pages when
 * large) laid out by the staging budget (staging.c): boxes of one round
 * side by side, each page-aligned, and every round from the block's start,
 * so the block is as large as the largest round. Reads land on page
 * boundaries, and one mapping per plan instead of one per buffer. Refused
 * before allocating when the block does not fit the memory there is. */
/* A number per staging allocation, never reused in the process: delta
 * reads patched in a staging (delta_read.h) tell it from a new one that
 * happens to get the same address. */
static uint64_t next_staging_gen(void)
{
    static uint64_t gen;
    return __atomic_add_fetch(&gen, 1, __ATOMIC_RELAXED);
}

static rs_status_t alloc_staging(rs_exec_h x, rs_diag_t *diag)
{
    rs__staging_layout_t *l = &x->layout;
    rs_status_t st = rs__staging_layout(x->plan, x->params.staging_budget,
                                        rs__exec_pipelined(&x->params), diag,
                                        l);
    if (st != RS_OK)
        return st;
    if (l->need.bytes > (uint64_t)SIZE_MAX)
        return OOM(diag);
    if ((st = rs__mem_fits(l->need.bytes, "executor staging", diag)) != RS_OK)
        return st;
    x->fp_staging = calloc(l->nfp + 1, sizeof(unsigned char *));
    x->cv_staging = calloc(l->ncv + 1, sizeof(unsigned char *));
    if (x->fp_staging == NULL || x->cv_staging == NULL ||
        (x->staging = rs__pages_alloc((size_t)l->need.bytes)) == NULL)
        return OOM(diag);
    x->staging_len = (size_t)l->need.bytes;
    x->staging_gen = next_staging_gen();
    x->bounded = l->need.rounds > 1;
    for (size_t k = 0; k < l->nfp; k++)
        x->fp_staging[k] = x->staging + l->at[k];
    for (size_t k = 0; k < l->ncv; k++)
        x->cv_staging[k] = x->staging + l->at[l->nfp + l->nquant + k];
    return RS_OK;
}

static rs_status_t prepare_full_pulls(rs_exec_h x, rs_diag_t *diag)
{
    size_t n;
    const rs_staged_read_t *fp = rs_plan_staged_reads(x->plan, &n);
    for (size_t i = 0; i < n; i++) {
        rs_status_t st;
        st = rs__exec_add_reads(x, fp[i].segments, fp[i].nsegments, x->fp_staging[i],
                       fp[i].staging_bytes, "its full-pull staging", diag);
        for (size_t k = 0; st == RS_OK && k < fp[i].ncopies; k++)
            st = rs__exec_replay_program(x, &fp[i], x->fp_staging[i], fp[i].copies[k],
                                diag);
        if (st != RS_OK)
            return st;
    }
    return RS_OK;
}

static rs_status_t cast_program(rs_exec_h x, const rs_convert_t *cv,
                                unsigned char *staging, rs_diag_t *diag)
{
    rs__exec_copy_t xc;
    memset(&xc, 0, sizeof(xc));
    rs_status_t st = dest_of(x, cv->copy, &xc, diag);
    if (st != RS_OK)
        return st;
    if (!rs__convert_supported(cv->src_dtype, cv->dest_dtype))
        return rs__diag_set(diag, RS_ERR_UNSUPPORTED, "copy %zu: no cast "
                            "from %s to %s", cv->copy,
                            rs_dtype_name(cv->src_dtype),
                            rs_dtype_name(cv->dest_dtype));
    if (!rs__row_major(xc.shape, xc.ndim, xc.src_stride))
        return rs__diag_set(diag, RS_ERR_INPUT, "copy %zu: destination "
                            "strides overflow int64", cv->copy);
    if (rs__exec_guard_on && (st = rs__exec_guard_cast(x, cv, &xc, diag)) != RS_OK)
        return st;
    xc.src = staging;
    xc.from = cv->src_dtype;
    return RS_VEC_PUSH(x, casts, xc) ? RS_OK : OOM(diag);
}

static rs_status_t prepare_converts(rs_exec_h x, rs_diag_t *diag)
{
    size_t n;
    const rs_convert_t *cv = rs_plan_converts(x->plan, &n);
    for (size_t i = 0; i < n; i++) {
        rs_status_t st = rs__exec_add_reads(x, cv[i].segments, cv[i].nsegments, x->cv_staging[i],
                       cv[i].staging_bytes, "its convert staging", diag);
        if (st == RS_OK)
            st = cast_program(x, &cv[i], x->cv_staging[i], diag);
        if (st != RS_OK)
            return st;
    }
    return RS_OK;
}

/* Total reads, so the read array is sized once. */
static size_t count_reads(rs_plan_h plan)
{
    size_t n, total, k;
    rs_plan_segments(plan, &total);
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &n);
    for (k = 0; k < n; k++)
        total += fp[k].nsegments;
    const rs_convert_t *cv = rs_plan_converts(plan, &n);
    for (k = 0; k < n; k++)
        total += cv[k].nsegments;
    return total + rs__exec_quant_reads(plan);
}

void rs__exec_release(rs_exec_h x)
{
    rs__pages_free(x->staging, x->staging_len);
    x->staging = NULL;
    x->staging_len = 0;
    x->bounded = 0;
    rs__staging_layout_free(&x->layout);
    memset(&x->layout, 0, sizeof(x->layout));
    rs__exec_release_waves(x);
    rs__exec_release_quant(x);
    free(x->fp_staging);
    free(x->cv_staging);
    free(x->reads);
    free(x->chunk);
    free(x->group_at);
    x->chunk = NULL;
    x->group_at = NULL;
    free(x->replays);
    free(x->casts);
    free(x->replay_ordered);
    free(x->cast_ordered);
    x->replay_ordered = x->cast_ordered = NULL;
    rs__exec_release_taps(x);
    free(x->pieces);
    free(x->partial);
    free(x->verify_buf);
    x->fp_staging = x->cv_staging = NULL;
    x->reads = NULL;
    x->replays = x->casts = NULL;
    x->pieces = NULL;
    x->partial = NULL;
    x->verify_buf = NULL;
    x->nreads = x->replays_len = x->replays_cap = x->casts_len =
        x->casts_cap = x->pieces_len = x->pieces_cap = x->partial_len =
            x->partial_cap = 0;
    x->verify_buf_len = x->plan_bytes = 0;
    x->prepared = 0;
}

/* A counting sort: the transport then posts each session's reads as they
 * lie, with no copy and no allocation on later runs. */
int rs__exec_group_reads(rs_read_t *reads, size_t begin, size_t end,
                         size_t nsess)
{
    size_t n = end - begin;
    if (n < 2)
        return 1;
    size_t *at = calloc(nsess + 1, sizeof(size_t));
    rs_read_t *tmp = malloc(n * sizeof(rs_read_t));
    if (at == NULL || tmp == NULL) {
        free(at);
        free(tmp);
        return 0;
    }
    for (size_t i = begin; i < end; i++)
        at[reads[i].session + 1]++;
    for (size_t k = 1; k <= nsess; k++)
        at[k] += at[k - 1];
    for (size_t i = begin; i < end; i++)
        tmp[at[reads[i].session]++] = reads[i];
    memcpy(reads + begin, tmp, n * sizeof(rs_read_t));
    free(at);
    free(tmp);
    return 1;
}

static int group_by_session(rs_exec_h x, size_t begin, size_t end)
{
    return rs__exec_group_reads(x->reads, begin, end,
                                rs_plan_num_sessions(x->plan));
}

rs_status_t rs__exec_prepare(rs_exec_h x, rs_diag_t *diag)
{
    rs_status_t st;
    double t0 = rs__now_s();
    rs__exec_release(x);
    x->reads = malloc((count_reads(x->plan) + 1) * sizeof(rs_read_t));
    if (x->reads == NULL)
        return OOM(diag);
    if ((st = alloc_staging(x, diag)) != RS_OK ||
        (st = prepare_exact(x, diag)) != RS_OK)
        goto fail;
    x->phase_end[0] = x->nreads;
    if ((st = prepare_full_pulls(x, diag)) != RS_OK ||
        (st = rs__exec_prepare_quant(x, diag)) != RS_OK) /* quantize.c */
        goto fail;
    x->phase_end[1] = x->nreads;
    if ((st = prepare_converts(x, diag)) != RS_OK ||
        (rs__exec_guard_on && (st = rs__exec_guard_writes(x, diag)) != RS_OK))
        goto fail;
    x->phase_end[2] = x->nreads;
    if ((st = x->bounded ? rs__exec_prepare_rounds(x, diag)
                         : rs__exec_prepare_waves(x, diag)) != RS_OK ||
        (st = rs__exec_mark_overlaps(x, diag)) != RS_OK)
        goto fail;
    rs__exec_quant_order(x);
    if (!group_by_session(x, 0, x->phase_end[0]) ||
        !group_by_session(x, x->phase_end[0], x->phase_end[1]) ||
        !group_by_session(x, x->phase_end[1], x->phase_end[2])) {
        st = OOM(diag);
        goto fail;
    }
    if (!x->params.phased && !group_by_session(x, 0, x->nreads)) {
        st = OOM(diag);
        goto fail;
    }
    x->stage[RS_STAGE_DESCRIPTORS] = rs__now_s() - t0;
    if (x->params.verify_digests &&
        ((st = rs__exec_prepare_pieces(x, diag)) != RS_OK ||
         (st = rs__exec_rounds_spanning(x, diag)) != RS_OK ||
         (st = rs__exec_schedule_verify(x, diag)) != RS_OK ||
         (st = rs__exec_prepare_taps(x, diag)) != RS_OK))
        goto fail;
    x->prepared = 1;
    x->stats.prepares++;
    x->stage[RS_STAGE_PREPARE] = rs__now_s() - t0;
    return RS_OK;
fail:
    rs__exec_release(x);
    return st;
}
