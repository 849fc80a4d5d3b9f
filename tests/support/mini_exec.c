/* In-memory plan execution for tests. Every byte moved is bounds-checked
 * against the registered buffers and counted, so tests can assert that each
 * destination byte is written exactly once. Full-pull replays use the
 * test ground truth (gt_tensor), not the library's geometry, and place
 * each element in its staged box by index arithmetic of their own. */
#include "mini_exec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gt_tensor.h"

typedef struct mx_shard {
    char *session;
    uint64_t addr, nbytes;
    const uint8_t *buf;
} mx_shard_t;

typedef struct mx_param {
    uint8_t *buf;
    uint8_t *writes;
    uint64_t nbytes;
} mx_param_t;

/* A write target: a parameter or a staging buffer, with its counters. */
typedef struct mx_target {
    uint8_t *buf;
    uint8_t *writes;
    uint64_t nbytes;
    const char *what;
} mx_target_t;

struct mini_exec {
    rs_plan_h plan;
    rs_capture_h capture;
    mx_shard_t *shards;
    size_t nshards, cap_shards;
    mx_param_t *params;
    size_t nparams;
    uint64_t skipped;
    char *err;
    size_t errlen;
};

static int fail(mini_exec_t *mx, const char *fmt, ...)
{
    if (mx->err != NULL && mx->errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(mx->err, mx->errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

mini_exec_t *mini_exec_create(rs_plan_h plan)
{
    mini_exec_t *mx = calloc(1, sizeof(*mx));
    if (mx == NULL)
        abort();
    mx->plan = plan;
    mx->capture = rs_plan_capture(plan);
    mx->nparams = rs_capture_num_params(mx->capture);
    mx->params = calloc(mx->nparams + 1, sizeof(mx_param_t));
    if (mx->params == NULL)
        abort();
    return mx;
}

void mini_exec_destroy(mini_exec_t *mx)
{
    if (mx == NULL)
        return;
    for (size_t i = 0; i < mx->nshards; i++)
        free(mx->shards[i].session);
    for (size_t i = 0; i < mx->nparams; i++)
        free(mx->params[i].writes);
    free(mx->shards);
    free(mx->params);
    free(mx);
}

void mini_exec_add_shard(mini_exec_t *mx, const char *session, uint64_t addr,
                         const void *buf, uint64_t nbytes)
{
    if (mx->nshards == mx->cap_shards) {
        mx->cap_shards = mx->cap_shards ? 2 * mx->cap_shards : 16;
        mx->shards = realloc(mx->shards, mx->cap_shards * sizeof(mx_shard_t));
        if (mx->shards == NULL)
            abort();
    }
    mx_shard_t *s = &mx->shards[mx->nshards++];
    s->session = strdup(session);
    s->addr = addr;
    s->nbytes = nbytes;
    s->buf = buf;
}

void mini_exec_set_param(mini_exec_t *mx, size_t param, void *buf)
{
    rs_param_info_t info;
    if (param >= mx->nparams)
        abort();
    rs_capture_param(mx->capture, param, &info);
    mx->params[param].buf = buf;
    mx->params[param].nbytes = info.nbytes;
    free(mx->params[param].writes);
    mx->params[param].writes = calloc(info.nbytes + 1, 1);
}

const uint8_t *mini_exec_param_writes(mini_exec_t *mx, size_t param)
{
    return param < mx->nparams ? mx->params[param].writes : NULL;
}

uint64_t mini_exec_skipped_elements(mini_exec_t *mx)
{
    return mx->skipped;
}

/* The registered buffer of session holding byte addr, or NULL. */
static const mx_shard_t *find_shard(mini_exec_t *mx, const char *session,
                                    uint64_t addr)
{
    for (size_t i = 0; i < mx->nshards; i++) {
        const mx_shard_t *s = &mx->shards[i];
        if (strcmp(s->session, session) == 0 && addr >= s->addr
            && addr - s->addr < s->nbytes)
            return s;
    }
    return NULL;
}

/* Copies [addr, addr+nbytes) of session into out. A read may span shards
 * that are adjacent in the session's address space (coalesced fused
 * tensors), but every byte must lie in a registered shard. */
static int read_source(mini_exec_t *mx, const char *session, uint64_t addr,
                       uint64_t nbytes, uint8_t *out)
{
    while (nbytes > 0) {
        const mx_shard_t *s = find_shard(mx, session, addr);
        if (s == NULL)
            return 0;
        uint64_t take = s->nbytes - (addr - s->addr);
        take = take < nbytes ? take : nbytes;
        memcpy(out, s->buf + (addr - s->addr), take);
        out += take;
        addr += take;
        nbytes -= take;
    }
    return 1;
}

static void count_writes(mx_target_t *t, uint64_t at, uint64_t n)
{
    for (uint64_t b = at; b < at + n; b++) {
        if (t->writes[b] < 255)
            t->writes[b]++;
    }
}

/* Reads one segment into target at seg->dst_byte. */
static int run_segment(mini_exec_t *mx, const rs_segment_t *seg,
                       mx_target_t *t)
{
    const char *session = rs_plan_session_name(mx->plan, seg->session);
    if (session == NULL)
        return fail(mx, "segment names unknown session %u", seg->session);
    if (seg->nbytes == 0 || seg->dst_byte > t->nbytes
        || seg->nbytes > t->nbytes - seg->dst_byte)
        return fail(mx, "write of %llu bytes at %s byte %llu outside its %llu "
                    "bytes", (unsigned long long)seg->nbytes, t->what,
                    (unsigned long long)seg->dst_byte,
                    (unsigned long long)t->nbytes);
    if (!read_source(mx, session, seg->src_addr, seg->nbytes,
                     t->buf + seg->dst_byte))
        return fail(mx, "read of %llu bytes at %s:0x%llx lies outside every "
                    "registered shard", (unsigned long long)seg->nbytes,
                    session, (unsigned long long)seg->src_addr);
    count_writes(t, seg->dst_byte, seg->nbytes);
    return 0;
}

static int run_exact(mini_exec_t *mx)
{
    size_t n;
    const rs_segment_t *segs = rs_plan_segments(mx->plan, &n);
    for (size_t i = 0; i < n; i++) {
        if (segs[i].param >= mx->nparams || mx->params[segs[i].param].buf == NULL)
            return fail(mx, "segment %zu targets unregistered param %u", i,
                        segs[i].param);
        mx_param_t *p = &mx->params[segs[i].param];
        mx_target_t t = {p->buf, p->writes, p->nbytes, "param"};
        if (run_segment(mx, &segs[i], &t) != 0)
            return -1;
    }
    return 0;
}

static int numel_of(int ndim, const int64_t *shape, uint64_t *out)
{
    uint64_t p = 1;
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 0 || __builtin_mul_overflow(p, (uint64_t)shape[k], &p))
            return 0;
    }
    *out = p;
    return 1;
}

/* Fills a fresh staging buffer from segments; every byte at most once. */
static int fill_staging(mini_exec_t *mx, const rs_segment_t *segs, size_t n,
                        uint64_t nbytes, mx_target_t *t)
{
    t->buf = malloc(nbytes + 1);
    t->writes = calloc(nbytes + 1, 1);
    t->nbytes = nbytes;
    t->what = "staging";
    if (t->buf == NULL || t->writes == NULL)
        abort();
    memset(t->buf, 0xA5, nbytes);
    for (size_t i = 0; i < n; i++) {
        if (run_segment(mx, &segs[i], t) != 0)
            return -1;
    }
    for (uint64_t b = 0; b < nbytes; b++) {
        if (t->writes[b] > 1)
            return fail(mx, "staging byte %llu written %u times",
                        (unsigned long long)b, t->writes[b]);
    }
    return 0;
}

static void free_target(mx_target_t *t)
{
    free(t->buf);
    free(t->writes);
}

/* Casts one element into param p at element index e (bounds-checked). */
static int write_element(mini_exec_t *mx, size_t param, int64_t e,
                         rs_dtype_t from, const uint8_t *src, rs_dtype_t to)
{
    mx_param_t *p = &mx->params[param];
    uint64_t es = rs_dtype_size(to);
    if (p->buf == NULL)
        return fail(mx, "param %zu is not registered", param);
    if (e < 0 || (uint64_t)e >= p->nbytes / es)
        return fail(mx, "element %lld outside param %zu", (long long)e, param);
    if (!mini_exec_cast(from, src, to, p->buf + (uint64_t)e * es))
        return fail(mx, "unsupported cast %s -> %s", rs_dtype_name(from),
                    rs_dtype_name(to));
    mx_target_t t = {p->buf, p->writes, p->nbytes, "param"};
    count_writes(&t, (uint64_t)e * es, es);
    return 0;
}

/* Destination element of the j-th row-major element of the copy's region. */
static int64_t dest_element(const rs_copy_desc_t *c, int64_t j)
{
    int64_t m[RS_MAX_DIMS], e = c->dest_offset;
    gt_unravel(j, c->ndim, c->dest_shape, m);
    for (int k = 0; k < c->ndim; k++)
        e += m[k] * c->dest_stride[k];
    return e;
}

/* The staged box of a read (the whole source when the plan gives none). */
static const int64_t *box_shape_of(const rs_staged_read_t *fp)
{
    return fp->box_shape != NULL ? fp->box_shape : fp->global_shape;
}

/* Where global element g of the source lies in the staging of fp's box;
 * -1 when outside the box. */
static int64_t staged_index(const rs_staged_read_t *fp, int64_t g)
{
    int64_t m[RS_MAX_DIMS], at = 0;
    const int64_t *shape = box_shape_of(fp);
    gt_unravel(g, fp->ndim, fp->global_shape, m);
    for (int d = 0; d < fp->ndim; d++) {
        int64_t lo = fp->box_lo != NULL ? fp->box_lo[d] : 0;
        if (m[d] < lo || m[d] >= lo + shape[d])
            return -1;
        at = at * shape[d] + (m[d] - lo);
    }
    return at;
}

/* Replays one captured copy from the staging of a staged read. */
static int replay_copy(mini_exec_t *mx, const rs_staged_read_t *fp, size_t ci,
                       const mx_target_t *st)
{
    rs_copy_desc_t c;
    gt_tensor_t g;
    char why[256];
    uint64_t n, es = rs_dtype_size(fp->dtype);
    rs_capture_copy(mx->capture, ci, &c);
    if (gt_replay(fp->ndim, fp->global_shape, c.ops, c.nops, &g, why,
                  sizeof(why)) != GT_OK)
        return fail(mx, "staged read of %s lists copy %zu whose ops fail: %s",
                    fp->src, ci, why);
    long param = rs_capture_find_param(mx->capture, c.param);
    int rc = 0;
    if (param < 0 || !numel_of(c.ndim, c.dest_shape, &n) || n != (uint64_t)g.numel)
        rc = fail(mx, "copy %zu: destination does not match its ops", ci);
    for (int64_t j = 0; j < g.numel && rc == 0; j++) {
        int64_t at = staged_index(fp, g.idx[j]);
        if (at < 0)
            rc = fail(mx, "copy %zu reads element %lld of %s outside its "
                      "staged box", ci, (long long)g.idx[j], fp->src);
        else
            rc = write_element(mx, (size_t)param, dest_element(&c, j),
                               fp->dtype, st->buf + (uint64_t)at * es,
                               c.dest_dtype);
    }
    gt_free(&g);
    return rc;
}

static int run_full_pulls(mini_exec_t *mx)
{
    size_t n;
    const rs_staged_read_t *fps = rs_plan_staged_reads(mx->plan, &n);
    for (size_t i = 0; i < n; i++) {
        const rs_staged_read_t *fp = &fps[i];
        uint64_t numel;
        mx_target_t st;
        if (!numel_of(fp->ndim, box_shape_of(fp), &numel)
            || numel * rs_dtype_size(fp->dtype) != fp->staging_bytes)
            return fail(mx, "staged read of %s: staging_bytes %llu does not "
                        "match its box", fp->src,
                        (unsigned long long)fp->staging_bytes);
        int rc = fill_staging(mx, fp->segments, fp->nsegments, fp->staging_bytes,
                              &st);
        for (uint64_t b = 0; b < fp->staging_bytes && rc == 0; b++) {
            if (st.writes[b] != 1)
                rc = fail(mx, "staged read of %s leaves staging byte %llu "
                          "unwritten", fp->src, (unsigned long long)b);
        }
        for (size_t k = 0; k < fp->ncopies && rc == 0; k++)
            rc = replay_copy(mx, fp, fp->copies[k], &st);
        free_target(&st);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Casts the written elements of a convert's staging into its region. */
static int cast_convert(mini_exec_t *mx, const rs_convert_t *cv,
                        const rs_copy_desc_t *c, const mx_target_t *st)
{
    uint64_t es = rs_dtype_size(cv->src_dtype), numel = st->nbytes / es;
    for (uint64_t j = 0; j < numel; j++) {
        int whole = 1;
        for (uint64_t b = j * es; b < (j + 1) * es; b++)
            whole &= st->writes[b] == 1;
        if (!whole) {
            mx->skipped++;
            continue;
        }
        if (write_element(mx, cv->param, dest_element(c, (int64_t)j),
                          cv->src_dtype, st->buf + j * es, cv->dest_dtype) != 0)
            return -1;
    }
    return 0;
}

static int run_converts(mini_exec_t *mx)
{
    size_t n;
    const rs_convert_t *cvs = rs_plan_converts(mx->plan, &n);
    for (size_t i = 0; i < n; i++) {
        const rs_convert_t *cv = &cvs[i];
        rs_copy_desc_t c;
        uint64_t numel;
        mx_target_t st;
        if (cv->copy >= rs_capture_num_copies(mx->capture))
            return fail(mx, "convert %zu names copy %zu", i, cv->copy);
        rs_capture_copy(mx->capture, cv->copy, &c);
        if (!numel_of(c.ndim, c.dest_shape, &numel)
            || numel * rs_dtype_size(cv->src_dtype) != cv->staging_bytes)
            return fail(mx, "convert of copy %zu: staging_bytes %llu does not "
                        "match dest_shape", cv->copy,
                        (unsigned long long)cv->staging_bytes);
        if (rs_capture_find_param(mx->capture, c.param) != (long)cv->param)
            return fail(mx, "convert of copy %zu names param %u", cv->copy,
                        cv->param);
        int rc = fill_staging(mx, cv->segments, cv->nsegments, cv->staging_bytes,
                              &st);
        if (rc == 0)
            rc = cast_convert(mx, cv, &c, &st);
        free_target(&st);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int mini_exec_run(mini_exec_t *mx, char *err, size_t errlen)
{
    mx->err = err;
    mx->errlen = errlen;
    mx->skipped = 0;
    if (run_exact(mx) != 0 || run_full_pulls(mx) != 0 || run_converts(mx) != 0)
        return -1;
    return 0;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu, bits;
    float f;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        /* Subnormal or zero: man * 2^-24 is exact in f32. */
        f = (float)man / 16777216.0f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t f32_to_bf16(uint32_t bits)
{
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu) != 0)
        return (uint16_t)((bits >> 16) | 0x40u); /* keep NaN quiet */
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

int mini_exec_cast(rs_dtype_t from, const void *src, rs_dtype_t to, void *dst)
{
    uint16_t h;
    uint32_t w;
    float f;
    if (from == to) {
        memcpy(dst, src, rs_dtype_size(from));
        return 1;
    }
    if (from == RS_DTYPE_BF16 && to == RS_DTYPE_F32) {
        memcpy(&h, src, 2);
        w = (uint32_t)h << 16;
        memcpy(dst, &w, 4);
        return 1;
    }
    if (from == RS_DTYPE_F16 && to == RS_DTYPE_F32) {
        memcpy(&h, src, 2);
        f = f16_to_f32(h);
        memcpy(dst, &f, 4);
        return 1;
    }
    if (from == RS_DTYPE_F32 && to == RS_DTYPE_BF16) {
        memcpy(&w, src, 4);
        h = f32_to_bf16(w);
        memcpy(dst, &h, 2);
        return 1;
    }
    return 0;
}
