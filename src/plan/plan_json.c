/* reshard.plan.v2 writer (v2 since staged reads became boxes of their
 * source: docs/formats.md, "Schema names"). Plans can hold millions of
 * segments, so the JSON is streamed through a small buffer straight to the
 * FILE* instead of building a document tree; names are escaped once up
 * front and reused per record. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "core/json.h"
#include "plan/plan_quant.h"
#include "reshard/plan.h"

#define JW_BUF 65536

typedef struct jw {
    FILE *out;
    size_t len;
    int failed;
    char buf[JW_BUF];
} jw_t;

/* A name already escaped and quoted, ready to paste. */
typedef struct qname {
    char *text;
    size_t len;
} qname_t;

static void jw_flush(jw_t *w)
{
    if (w->len > 0 && fwrite(w->buf, 1, w->len, w->out) != w->len)
        w->failed = 1;
    w->len = 0;
}

static void jw_raw(jw_t *w, const char *s, size_t n)
{
    if (n > JW_BUF - w->len)
        jw_flush(w);
    if (n > JW_BUF) {
        if (fwrite(s, 1, n, w->out) != n)
            w->failed = 1;
        return;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

/* String literals only: the "" pasting rejects pointers, whose sizeof would
 * silently be the pointer's size. */
#define jw_lit(w, s) jw_raw((w), "" s "", sizeof("" s "") - 1)

static void jw_cstr(jw_t *w, const char *s) { jw_raw(w, s, strlen(s)); }

static void jw_u64(jw_t *w, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    jw_raw(w, tmp + i, sizeof(tmp) - i);
}

static void jw_i64(jw_t *w, int64_t v)
{
    if (v < 0) {
        jw_lit(w, "-");
        /* Negate in unsigned arithmetic so INT64_MIN survives. */
        jw_u64(w, (uint64_t)0 - (uint64_t)v);
        return;
    }
    jw_u64(w, (uint64_t)v);
}

static int qname_make(qname_t *q, const char *s)
{
    q->len = rs__json_quoted_len(s);
    q->text = malloc(q->len);
    if (q->text == NULL)
        return 0;
    rs__json_quote(q->text, s);
    return 1;
}

static void jw_str(jw_t *w, const char *s)
{
    qname_t q;
    size_t need = rs__json_quoted_len(s);
    if (need <= JW_BUF) {
        if (need > JW_BUF - w->len)
            jw_flush(w);
        rs__json_quote(w->buf + w->len, s);
        w->len += need;
        return;
    }
    if (!qname_make(&q, s)) {
        w->failed = 1;
        return;
    }
    jw_raw(w, q.text, q.len);
    free(q.text);
}

static void jw_q(jw_t *w, const qname_t *q) { jw_raw(w, q->text, q->len); }

static void qnames_free(qname_t *names, size_t n)
{
    if (names == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(names[i].text);
    free(names);
}

/* Everything the record writers share: the stream and the escaped names. */
typedef struct plan_out {
    jw_t *w;
    rs_plan_h plan;
    rs_capture_h capture;
    qname_t *sessions;
    size_t nsessions;
    qname_t *params;
    size_t nparams;
} plan_out_t;

static int names_init(plan_out_t *o)
{
    o->nsessions = rs_plan_num_sessions(o->plan);
    o->nparams = rs_capture_num_params(o->capture);
    o->sessions = calloc(o->nsessions ? o->nsessions : 1, sizeof(qname_t));
    o->params = calloc(o->nparams ? o->nparams : 1, sizeof(qname_t));
    if (o->sessions == NULL || o->params == NULL)
        return 0;
    for (size_t i = 0; i < o->nsessions; i++) {
        if (!qname_make(&o->sessions[i],
                        rs_plan_session_name(o->plan, (uint32_t)i)))
            return 0;
    }
    for (size_t i = 0; i < o->nparams; i++) {
        rs_param_info_t info;
        rs_capture_param(o->capture, i, &info);
        if (!qname_make(&o->params[i], info.name))
            return 0;
    }
    return 1;
}

static void put_session(plan_out_t *o, uint32_t session)
{
    if (session < o->nsessions)
        jw_q(o->w, &o->sessions[session]);
    else
        jw_lit(o->w, "null");
}

static void put_param(plan_out_t *o, uint32_t param)
{
    if (param < o->nparams)
        jw_q(o->w, &o->params[param]);
    else
        jw_lit(o->w, "null");
}

static void put_dims(jw_t *w, const int64_t *dims, int n)
{
    jw_lit(w, "[");
    for (int i = 0; i < n; i++) {
        if (i > 0)
            jw_lit(w, ", ");
        jw_i64(w, dims[i]);
    }
    jw_lit(w, "]");
}

/* One segment; with_param = 0 for staging segments, which have no param. */
static void put_segment(plan_out_t *o, const rs_segment_t *s, int with_param,
                        const char *indent, size_t indent_len)
{
    jw_t *w = o->w;
    jw_raw(w, indent, indent_len);
    jw_lit(w, "{\"session\": ");
    put_session(o, s->session);
    jw_lit(w, ", \"src_addr\": ");
    jw_u64(w, s->src_addr);
    if (with_param) {
        jw_lit(w, ", \"param\": ");
        put_param(o, s->param);
    }
    jw_lit(w, ", \"dst_byte\": ");
    jw_u64(w, s->dst_byte);
    jw_lit(w, ", \"nbytes\": ");
    jw_u64(w, s->nbytes);
    jw_lit(w, "}");
}

static void put_segments(plan_out_t *o, const rs_segment_t *segs, size_t n,
                         int with_param, const char *indent)
{
    size_t ilen = strlen(indent);
    jw_lit(o->w, "[");
    for (size_t i = 0; i < n; i++) {
        jw_raw(o->w, i ? ",\n" : "\n", i ? 2 : 1);
        put_segment(o, &segs[i], with_param, indent, ilen);
    }
    jw_lit(o->w, "]");
}

static void write_exact(plan_out_t *o)
{
    size_t n;
    const rs_segment_t *segs = rs_plan_segments(o->plan, &n);
    jw_lit(o->w, ",\n \"segments\": ");
    put_segments(o, segs, n, 1, "  ");
}

/* The last key of a list item, its segments, and the item's end. */
static int put_item_end(plan_out_t *o, const rs_segment_t *segs, size_t n)
{
    jw_lit(o->w, ",\n   \"segments\": ");
    put_segments(o, segs, n, 0, "    ");
    jw_lit(o->w, "}");
    return 1;
}

/* Writes item i of a plan-level list; 0 when it fails (diag set). */
typedef int (*put_item_fn)(plan_out_t *o, const void *items, size_t i,
                           rs_diag_t *diag);

/* A plan-level list: `open` (",\n \"<key>\": ["), then the n items, one a
 * line, and "]"; 0 as soon as an item fails. */
static int write_list(plan_out_t *o, const char *open, const void *items,
                      size_t n, put_item_fn put, rs_diag_t *diag)
{
    jw_cstr(o->w, open);
    for (size_t i = 0; i < n; i++) {
        jw_raw(o->w, i ? ",\n" : "\n", i ? 2 : 1);
        if (!put(o, items, i, diag))
            return 0;
    }
    jw_lit(o->w, "]");
    return 1;
}

static int put_convert(plan_out_t *o, const void *items, size_t i,
                       rs_diag_t *diag)
{
    const rs_convert_t *c = (const rs_convert_t *)items + i;
    jw_t *w = o->w;
    (void)diag;
    rs_copy_desc_t copy;

    rs_capture_copy(o->capture, c->copy, &copy);
    jw_lit(w, "  {\"copy\": ");
    jw_u64(w, c->copy);
    jw_lit(w, ", \"param\": ");
    put_param(o, c->param);
    jw_lit(w, ", \"src_dtype\": ");
    jw_str(w, rs_dtype_name(c->src_dtype));
    jw_lit(w, ", \"dest_dtype\": ");
    jw_str(w, rs_dtype_name(c->dest_dtype));
    jw_lit(w, ",\n   \"dest_shape\": ");
    put_dims(w, copy.dest_shape, copy.ndim);
    jw_lit(w, ", \"dest_stride\": ");
    put_dims(w, copy.dest_stride, copy.ndim);
    jw_lit(w, ", \"dest_offset\": ");
    jw_i64(w, copy.dest_offset);
    return put_item_end(o, c->segments, c->nsegments);
}

static const char *staged_kind_name(rs_staged_kind_t k)
{
    return k == RS_STAGED_COALESCED ? "coalesced"
           : k == RS_STAGED_BOUND   ? "bound"
                                    : "full";
}

/* Seconds as a JSON number: %.9g round-trips what the model needs. */
static void jw_seconds(jw_t *w, double v)
{
    char tmp[40];
    int n = snprintf(tmp, sizeof(tmp), "%.9g", v);
    jw_raw(w, tmp, (size_t)n);
}

static int put_full_pull(plan_out_t *o, const void *items, size_t i,
                         rs_diag_t *diag)
{
    const rs_full_pull_t *f = (const rs_full_pull_t *)items + i;
    jw_t *w = o->w;
    (void)diag;
    jw_lit(w, "  {\"src\": ");
    jw_str(w, f->src);
    jw_lit(w, ", \"global_shape\": ");
    put_dims(w, f->global_shape, f->ndim);
    jw_lit(w, ", \"dtype\": ");
    jw_str(w, rs_dtype_name(f->dtype));
    jw_lit(w, ",\n   \"kind\": ");
    jw_str(w, staged_kind_name(f->kind));
    jw_lit(w, ", \"box_lo\": ");
    put_dims(w, f->box_lo, f->ndim);
    jw_lit(w, ", \"box_shape\": ");
    put_dims(w, f->box_shape, f->ndim);
    jw_lit(w, ", \"staging_bytes\": ");
    jw_u64(w, f->staging_bytes);
    jw_lit(w, ",\n   \"copies\": [");
    for (size_t k = 0; k < f->ncopies; k++) {
        if (k > 0)
            jw_lit(w, ", ");
        jw_u64(w, f->copies[k]);
    }
    jw_lit(w, "]");
    return put_item_end(o, f->segments, f->nsegments);
}

/* A derived copy's definition, as the capture format writes copies (it is
 * in no capture file); 0 on an unknown op (diag set). */
static int put_derived(plan_out_t *o, size_t ci, rs_diag_t *diag)
{
    jw_lit(o->w, "{\"copy\": ");
    jw_u64(o->w, ci);
    jw_lit(o->w, ", \"definition\":\n   ");
    jw_flush(o->w);
    if (rs__capture_put_copy(o->w->out, o->capture, ci, diag) != RS_OK)
        return 0;
    jw_lit(o->w, "}");
    return 1;
}

static void put_quant_spec(plan_out_t *o, size_t copy)
{
    rs_quant_desc_t q;
    char spec[128];
    if (!rs_capture_copy_quant(o->capture, copy, &q) ||
        rs_quant_spec_format(&q, spec, sizeof(spec)) >= sizeof(spec))
        snprintf(spec, sizeof(spec), "invalid");
    jw_str(o->w, spec);
}

static int put_quantized(plan_out_t *o, const void *items, size_t i,
                         rs_diag_t *diag)
{
    const rs_quantized_t *q = (const rs_quantized_t *)items + i;
    jw_t *w = o->w;
    int planned = q->weight_copy != SIZE_MAX;
    jw_lit(w, "  {\"copy\": ");
    jw_u64(w, q->copy);
    jw_lit(w, ", \"spec\": ");
    put_quant_spec(o, q->copy);
    jw_lit(w, ", \"path\": ");
    jw_str(w, q->path == RS_QUANT_PATH_PUBLISHER ? "publisher" : "receiver");
    jw_lit(w, ", \"planned\": ");
    jw_cstr(w, planned ? "true" : "false");
    jw_lit(w, ",\n   \"why\": ");
    jw_str(w, q->why);
    jw_lit(w, ",\n   \"src\": ");
    jw_str(w, q->src);
    jw_lit(w, ", \"src_dtype\": ");
    jw_str(w, rs_dtype_name(q->src_dtype));
    jw_lit(w, ", \"global_shape\": ");
    put_dims(w, q->global_shape, q->ndim);
    jw_lit(w, ", \"box_lo\": ");
    put_dims(w, q->box_lo, q->ndim);
    jw_lit(w, ", \"box_shape\": ");
    put_dims(w, q->box_shape, q->ndim);
    jw_lit(w, ", \"staging_bytes\": ");
    jw_u64(w, q->staging_bytes);
    if (planned) {
        jw_lit(w, ",\n   \"weight_copy\": ");
        jw_u64(w, q->weight_copy);
        jw_lit(w, ", \"scale_copy\": ");
        jw_u64(w, q->scale_copy);
        jw_lit(w, ",\n   \"derived\": [");
        if (!put_derived(o, q->weight_copy, diag))
            return 0;
        jw_lit(w, ",\n    ");
        if (!put_derived(o, q->scale_copy, diag))
            return 0;
        jw_lit(w, "]");
    }
    return put_item_end(o, q->segments, q->nsegments);
}

static int write_quantized(plan_out_t *o, rs_diag_t *diag)
{
    size_t n;
    const rs_quantized_t *q = rs_plan_quantized(o->plan, &n);
    if (n == 0) /* plans without quantized copies keep their key set */
        return 1;
    return write_list(o, ",\n \"quantized\": [", q, n, put_quantized, diag);
}

static void write_fallback(plan_out_t *o)
{
    jw_t *w = o->w;
    size_t n = rs_plan_num_fallback(o->plan);
    const char *src, *reason;

    jw_lit(w, ",\n \"fallback\": [");
    for (size_t i = 0; i < n; i++) {
        rs_plan_fallback(o->plan, i, &src, &reason);
        jw_cstr(w, i ? ",\n  " : "\n  ");
        jw_str(w, src);
    }
    jw_lit(w, "],\n \"fallback_reasons\": {");
    for (size_t i = 0; i < n; i++) {
        rs_plan_fallback(o->plan, i, &src, &reason);
        jw_cstr(w, i ? ",\n  " : "\n  ");
        jw_str(w, src);
        jw_lit(w, ": ");
        jw_str(w, reason ? reason : "");
    }
    jw_lit(w, "}");
}

static void write_unbounded(plan_out_t *o)
{
    size_t n = rs_plan_num_unbounded(o->plan);
    jw_lit(o->w, ",\n \"unbounded_sources\": [");
    for (size_t i = 0; i < n; i++) {
        jw_cstr(o->w, i ? ",\n  " : "\n  ");
        jw_str(o->w, rs_plan_unbounded(o->plan, i));
    }
    jw_lit(o->w, "]");
}

static void write_uncovered(plan_out_t *o)
{
    jw_t *w = o->w;
    size_t n;
    const rs_uncovered_t *u = rs_plan_uncovered(o->plan, &n);

    jw_lit(w, ",\n \"uncovered\": [");
    for (size_t i = 0; i < n; i++) {
        jw_cstr(w, i ? ",\n  {\"copy\": " : "\n  {\"copy\": ");
        jw_u64(w, u[i].copy);
        jw_lit(w, ", \"src\": ");
        jw_str(w, u[i].src);
        jw_lit(w, ", \"param\": ");
        jw_str(w, u[i].param);
        jw_lit(w, ", \"missing_elements\": ");
        jw_u64(w, u[i].missing_elements);
        jw_lit(w, "}");
    }
    jw_lit(w, "]");
}

typedef struct used_session {
    const char *name;
    uint32_t index;
} used_session_t;

static int cmp_used(const void *a, const void *b)
{
    return strcmp(((const used_session_t *)a)->name,
                  ((const used_session_t *)b)->name);
}

/* Sessions the plan reads from (bytes > 0), sorted by name; caller frees. */
static used_session_t *sorted_used_sessions(rs_plan_h plan, size_t *count_p)
{
    size_t total = rs_plan_num_sessions(plan), n = 0;
    used_session_t *used = malloc((total ? total : 1) * sizeof(*used));
    if (used == NULL)
        return NULL;
    for (uint32_t i = 0; i < total; i++) {
        if (rs_plan_session_bytes(plan, i) > 0) {
            used[n].name = rs_plan_session_name(plan, i);
            used[n++].index = i;
        }
    }
    qsort(used, n, sizeof(*used), cmp_used);
    *count_p = n;
    return used;
}

#define PUT_STAT(w, key, value)            \
    do {                                   \
        jw_lit((w), ",\n  \"" key "\": "); \
        jw_u64((w), (value));              \
    } while (0)

static int write_stats(plan_out_t *o)
{
    jw_t *w = o->w;
    rs_plan_stats_t st;
    size_t n;
    used_session_t *used = sorted_used_sessions(o->plan, &n);

    if (used == NULL)
        return 0;
    rs_plan_stats(o->plan, &st);
    jw_lit(w, ",\n \"stats\": {\n  \"bytes_planned\": ");
    jw_u64(w, st.bytes_planned);
    PUT_STAT(w, "descriptor_count", st.descriptor_count);
    PUT_STAT(w, "exact_descriptor_count", st.exact_descriptor_count);
    PUT_STAT(w, "exact_bytes", st.exact_bytes);
    PUT_STAT(w, "descriptor_savings", st.descriptor_savings);
    PUT_STAT(w, "extra_wire_bytes", st.extra_wire_bytes);
    PUT_STAT(w, "needed_bytes", st.needed_bytes);
    jw_lit(w, ",\n  \"est_seconds\": ");
    jw_seconds(w, st.est_seconds);
    jw_lit(w, ",\n  \"exact_est_seconds\": ");
    jw_seconds(w, st.exact_est_seconds);
    jw_lit(w, ",\n  \"sessions\": [");
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            jw_lit(w, ", ");
        put_session(o, used[i].index);
    }
    jw_lit(w, "],\n  \"session_bytes\": {");
    for (size_t i = 0; i < n; i++) {
        jw_cstr(w, i ? ", " : "");
        put_session(o, used[i].index);
        jw_lit(w, ": ");
        jw_u64(w, rs_plan_session_bytes(o->plan, used[i].index));
    }
    jw_lit(w, "}}");
    free(used);
    return 1;
}

static rs_status_t write_document(plan_out_t *o, rs_diag_t *diag)
{
    jw_lit(o->w, "{\"schema\": \"reshard.plan.v2\"");
    write_exact(o);
    size_t n;
    const rs_convert_t *cv = rs_plan_converts(o->plan, &n);
    write_list(o, ",\n \"converts\": [", cv, n, put_convert, NULL);
    const rs_full_pull_t *fp = rs_plan_full_pulls(o->plan, &n);
    write_list(o, ",\n \"full_pulls\": [", fp, n, put_full_pull, NULL);
    rs_diag_t qd = {RS_OK, ""};
    if (!write_quantized(o, &qd)) {
        if (diag != NULL)
            *diag = qd;
        return qd.status;
    }
    write_fallback(o);
    write_unbounded(o);
    write_uncovered(o);
    if (!write_stats(o))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    jw_lit(o->w, "}\n");
    jw_flush(o->w);
    if (o->w->failed || fflush(o->w->out) != 0)
        return rs__diag_set(diag, RS_ERR_IO, "writing the plan failed");
    return RS_OK;
}

rs_status_t rs_plan_write_json(rs_plan_h plan, FILE *out, rs_diag_t *diag)
{
    plan_out_t o = {0};
    rs_status_t st;

    if (plan == NULL || out == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    o.plan = plan;
    o.capture = rs_plan_capture(plan);
    if (o.capture == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "plan has no capture");
    o.w = malloc(sizeof(*o.w));
    if (o.w == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    o.w->out = out;
    o.w->len = 0;
    o.w->failed = 0;
    if (!names_init(&o))
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    else
        st = write_document(&o, diag);
    qnames_free(o.params, o.nparams);
    qnames_free(o.sessions, o.nsessions);
    free(o.w);
    return st;
}
