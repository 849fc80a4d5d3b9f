/* reshard.plan.v2 writer (v2 since staged reads became boxes of their
 * source: docs/formats.md, "Schema names"). Plans can hold millions of
 * segments, so the JSON is streamed through core's JSON writer straight to
 * the FILE* instead of building a document tree; names are escaped once up
 * front and reused per record. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "core/json_write.h"
#include "plan/plan_quant.h"
#include "reshard/plan.h"

/* The stream's buffer: large, so a plan of millions of segments reaches the
 * FILE* in a few thousand writes. */
#define PLAN_JSON_BUF 65536

/* A name already escaped and quoted, ready to paste. */
typedef struct qname {
    char *text;
    size_t len;
} qname_t;

static int qname_make(qname_t *q, const char *s)
{
    q->len = rs__json_quoted_len(s);
    q->text = malloc(q->len);
    if (q->text == NULL)
        return 0;
    rs__json_quote(q->text, s);
    return 1;
}

static void put_qname(rs__json_out_t *w, const qname_t *q)
{
    rs__json_out_raw(w, q->text, q->len);
}

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
    rs__json_out_t *w;
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
        put_qname(o->w, &o->sessions[session]);
    else
        rs__json_out_lit(o->w, "null");
}

static void put_param(plan_out_t *o, uint32_t param)
{
    if (param < o->nparams)
        put_qname(o->w, &o->params[param]);
    else
        rs__json_out_lit(o->w, "null");
}

/* One segment; with_param = 0 for staging segments, which have no param. */
static void put_segment(plan_out_t *o, const rs_segment_t *s, int with_param,
                        const char *indent, size_t indent_len)
{
    rs__json_out_t *w = o->w;
    rs__json_out_raw(w, indent, indent_len);
    rs__json_out_lit(w, "{\"session\": ");
    put_session(o, s->session);
    rs__json_out_lit(w, ", \"src_addr\": ");
    rs__json_out_uint(w, s->src_addr);
    if (with_param) {
        rs__json_out_lit(w, ", \"param\": ");
        put_param(o, s->param);
    }
    rs__json_out_lit(w, ", \"dst_byte\": ");
    rs__json_out_uint(w, s->dst_byte);
    rs__json_out_lit(w, ", \"nbytes\": ");
    rs__json_out_uint(w, s->nbytes);
    rs__json_out_lit(w, "}");
}

static void put_segments(plan_out_t *o, const rs_segment_t *segs, size_t n,
                         int with_param, const char *indent)
{
    size_t ilen = strlen(indent);
    rs__json_out_lit(o->w, "[");
    for (size_t i = 0; i < n; i++) {
        rs__json_out_raw(o->w, i ? ",\n" : "\n", i ? 2 : 1);
        put_segment(o, &segs[i], with_param, indent, ilen);
    }
    rs__json_out_lit(o->w, "]");
}

static void write_exact(plan_out_t *o)
{
    size_t n;
    const rs_segment_t *segs = rs_plan_segments(o->plan, &n);
    rs__json_out_lit(o->w, ",\n \"segments\": ");
    put_segments(o, segs, n, 1, "  ");
}

/* The last key of a list item, its segments, and the item's end. */
static int put_item_end(plan_out_t *o, const rs_segment_t *segs, size_t n)
{
    rs__json_out_lit(o->w, ",\n   \"segments\": ");
    put_segments(o, segs, n, 0, "    ");
    rs__json_out_lit(o->w, "}");
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
    rs__json_out_cstr(o->w, open);
    for (size_t i = 0; i < n; i++) {
        rs__json_out_raw(o->w, i ? ",\n" : "\n", i ? 2 : 1);
        if (!put(o, items, i, diag))
            return 0;
    }
    rs__json_out_lit(o->w, "]");
    return 1;
}

static int put_convert(plan_out_t *o, const void *items, size_t i,
                       rs_diag_t *diag)
{
    const rs_convert_t *c = (const rs_convert_t *)items + i;
    rs__json_out_t *w = o->w;
    (void)diag;
    rs_copy_desc_t copy;

    rs_capture_copy(o->capture, c->copy, &copy);
    rs__json_out_lit(w, "  {\"copy\": ");
    rs__json_out_uint(w, c->copy);
    rs__json_out_lit(w, ", \"param\": ");
    put_param(o, c->param);
    rs__json_out_lit(w, ", \"src_dtype\": ");
    rs__json_out_str(w, rs_dtype_name(c->src_dtype));
    rs__json_out_lit(w, ", \"dest_dtype\": ");
    rs__json_out_str(w, rs_dtype_name(c->dest_dtype));
    rs__json_out_lit(w, ",\n   \"dest_shape\": ");
    rs__json_out_ints(w, copy.dest_shape, (size_t)copy.ndim);
    rs__json_out_lit(w, ", \"dest_stride\": ");
    rs__json_out_ints(w, copy.dest_stride, (size_t)copy.ndim);
    rs__json_out_lit(w, ", \"dest_offset\": ");
    rs__json_out_int(w, copy.dest_offset);
    return put_item_end(o, c->segments, c->nsegments);
}

static const char *staged_kind_name(rs_staged_kind_t k)
{
    return k == RS_STAGED_COALESCED ? "coalesced"
           : k == RS_STAGED_BOUND   ? "bound"
                                    : "full";
}

/* Seconds as a JSON number: %.9g round-trips what the model needs. */
static void put_seconds(rs__json_out_t *w, double v)
{
    char tmp[40];
    int n = snprintf(tmp, sizeof(tmp), "%.9g", v);
    rs__json_out_raw(w, tmp, (size_t)n);
}

static int put_full_pull(plan_out_t *o, const void *items, size_t i,
                         rs_diag_t *diag)
{
    const rs_staged_read_t *f = (const rs_staged_read_t *)items + i;
    rs__json_out_t *w = o->w;
    (void)diag;
    rs__json_out_lit(w, "  {\"src\": ");
    rs__json_out_str(w, f->src);
    rs__json_out_lit(w, ", \"global_shape\": ");
    rs__json_out_ints(w, f->global_shape, (size_t)f->ndim);
    rs__json_out_lit(w, ", \"dtype\": ");
    rs__json_out_str(w, rs_dtype_name(f->dtype));
    rs__json_out_lit(w, ",\n   \"kind\": ");
    rs__json_out_str(w, staged_kind_name(f->kind));
    rs__json_out_lit(w, ", \"box_lo\": ");
    rs__json_out_ints(w, f->box_lo, (size_t)f->ndim);
    rs__json_out_lit(w, ", \"box_shape\": ");
    rs__json_out_ints(w, f->box_shape, (size_t)f->ndim);
    rs__json_out_lit(w, ", \"staging_bytes\": ");
    rs__json_out_uint(w, f->staging_bytes);
    rs__json_out_lit(w, ",\n   \"copies\": [");
    for (size_t k = 0; k < f->ncopies; k++) {
        if (k > 0)
            rs__json_out_lit(w, ", ");
        rs__json_out_uint(w, f->copies[k]);
    }
    rs__json_out_lit(w, "]");
    return put_item_end(o, f->segments, f->nsegments);
}

/* A derived copy's definition, as the capture format writes copies (it is
 * in no capture file); 0 on an unknown op (diag set). */
static int put_derived(plan_out_t *o, size_t ci, rs_diag_t *diag)
{
    rs__json_out_lit(o->w, "{\"copy\": ");
    rs__json_out_uint(o->w, ci);
    rs__json_out_lit(o->w, ", \"definition\":\n   ");
    (void)rs__json_out_flush(o->w);
    if (rs__capture_put_copy(o->w->out, o->capture, ci, diag) != RS_OK)
        return 0;
    rs__json_out_lit(o->w, "}");
    return 1;
}

static void put_quant_spec(plan_out_t *o, size_t copy)
{
    rs_quant_desc_t q;
    char spec[128];
    if (!rs_capture_copy_quant(o->capture, copy, &q) ||
        rs_quant_spec_format(&q, spec, sizeof(spec)) >= sizeof(spec))
        snprintf(spec, sizeof(spec), "invalid");
    rs__json_out_str(o->w, spec);
}

static int put_quantized(plan_out_t *o, const void *items, size_t i,
                         rs_diag_t *diag)
{
    const rs_quantized_t *q = (const rs_quantized_t *)items + i;
    rs__json_out_t *w = o->w;
    int planned = q->weight_copy != SIZE_MAX;
    rs__json_out_lit(w, "  {\"copy\": ");
    rs__json_out_uint(w, q->copy);
    rs__json_out_lit(w, ", \"spec\": ");
    put_quant_spec(o, q->copy);
    rs__json_out_lit(w, ", \"path\": ");
    rs__json_out_str(w, q->path == RS_QUANT_PATH_PUBLISHER ? "publisher" : "receiver");
    rs__json_out_lit(w, ", \"planned\": ");
    rs__json_out_cstr(w, planned ? "true" : "false");
    rs__json_out_lit(w, ",\n   \"why\": ");
    rs__json_out_str(w, q->why);
    rs__json_out_lit(w, ",\n   \"src\": ");
    rs__json_out_str(w, q->src);
    rs__json_out_lit(w, ", \"src_dtype\": ");
    rs__json_out_str(w, rs_dtype_name(q->src_dtype));
    rs__json_out_lit(w, ", \"global_shape\": ");
    rs__json_out_ints(w, q->global_shape, (size_t)q->ndim);
    rs__json_out_lit(w, ", \"box_lo\": ");
    rs__json_out_ints(w, q->box_lo, (size_t)q->ndim);
    rs__json_out_lit(w, ", \"box_shape\": ");
    rs__json_out_ints(w, q->box_shape, (size_t)q->ndim);
    rs__json_out_lit(w, ", \"staging_bytes\": ");
    rs__json_out_uint(w, q->staging_bytes);
    if (planned) {
        rs__json_out_lit(w, ",\n   \"weight_copy\": ");
        rs__json_out_uint(w, q->weight_copy);
        rs__json_out_lit(w, ", \"scale_copy\": ");
        rs__json_out_uint(w, q->scale_copy);
        rs__json_out_lit(w, ",\n   \"derived\": [");
        if (!put_derived(o, q->weight_copy, diag))
            return 0;
        rs__json_out_lit(w, ",\n    ");
        if (!put_derived(o, q->scale_copy, diag))
            return 0;
        rs__json_out_lit(w, "]");
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
    rs__json_out_t *w = o->w;
    size_t n = rs_plan_num_fallback(o->plan);
    const char *src, *reason;

    rs__json_out_lit(w, ",\n \"fallback\": [");
    for (size_t i = 0; i < n; i++) {
        rs_plan_fallback(o->plan, i, &src, &reason);
        rs__json_out_cstr(w, i ? ",\n  " : "\n  ");
        rs__json_out_str(w, src);
    }
    rs__json_out_lit(w, "],\n \"fallback_reasons\": {");
    for (size_t i = 0; i < n; i++) {
        rs_plan_fallback(o->plan, i, &src, &reason);
        rs__json_out_cstr(w, i ? ",\n  " : "\n  ");
        rs__json_out_str(w, src);
        rs__json_out_lit(w, ": ");
        rs__json_out_str(w, reason ? reason : "");
    }
    rs__json_out_lit(w, "}");
}

static void write_unbounded(plan_out_t *o)
{
    size_t n = rs_plan_num_unbounded(o->plan);
    rs__json_out_lit(o->w, ",\n \"unbounded_sources\": [");
    for (size_t i = 0; i < n; i++) {
        rs__json_out_cstr(o->w, i ? ",\n  " : "\n  ");
        rs__json_out_str(o->w, rs_plan_unbounded(o->plan, i));
    }
    rs__json_out_lit(o->w, "]");
}

static void write_uncovered(plan_out_t *o)
{
    rs__json_out_t *w = o->w;
    size_t n;
    const rs_uncovered_t *u = rs_plan_uncovered(o->plan, &n);

    rs__json_out_lit(w, ",\n \"uncovered\": [");
    for (size_t i = 0; i < n; i++) {
        rs__json_out_cstr(w, i ? ",\n  {\"copy\": " : "\n  {\"copy\": ");
        rs__json_out_uint(w, u[i].copy);
        rs__json_out_lit(w, ", \"src\": ");
        rs__json_out_str(w, u[i].src);
        rs__json_out_lit(w, ", \"param\": ");
        rs__json_out_str(w, u[i].param);
        rs__json_out_lit(w, ", \"missing_elements\": ");
        rs__json_out_uint(w, u[i].missing_elements);
        rs__json_out_lit(w, "}");
    }
    rs__json_out_lit(w, "]");
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
        rs__json_out_lit((w), ",\n  \"" key "\": "); \
        rs__json_out_uint((w), (value));              \
    } while (0)

static int write_stats(plan_out_t *o)
{
    rs__json_out_t *w = o->w;
    rs_plan_stats_t st;
    size_t n;
    used_session_t *used = sorted_used_sessions(o->plan, &n);

    if (used == NULL)
        return 0;
    rs_plan_stats(o->plan, &st);
    rs__json_out_lit(w, ",\n \"stats\": {\n  \"bytes_planned\": ");
    rs__json_out_uint(w, st.bytes_planned);
    PUT_STAT(w, "descriptor_count", st.descriptor_count);
    PUT_STAT(w, "exact_descriptor_count", st.exact_descriptor_count);
    PUT_STAT(w, "exact_bytes", st.exact_bytes);
    PUT_STAT(w, "descriptor_savings", st.descriptor_savings);
    PUT_STAT(w, "extra_wire_bytes", st.extra_wire_bytes);
    PUT_STAT(w, "needed_bytes", st.needed_bytes);
    rs__json_out_lit(w, ",\n  \"est_seconds\": ");
    put_seconds(w, st.est_seconds);
    rs__json_out_lit(w, ",\n  \"exact_est_seconds\": ");
    put_seconds(w, st.exact_est_seconds);
    rs__json_out_lit(w, ",\n  \"sessions\": [");
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            rs__json_out_lit(w, ", ");
        put_session(o, used[i].index);
    }
    rs__json_out_lit(w, "],\n  \"session_bytes\": {");
    for (size_t i = 0; i < n; i++) {
        rs__json_out_cstr(w, i ? ", " : "");
        put_session(o, used[i].index);
        rs__json_out_lit(w, ": ");
        rs__json_out_uint(w, rs_plan_session_bytes(o->plan, used[i].index));
    }
    rs__json_out_lit(w, "}}");
    free(used);
    return 1;
}

static rs_status_t write_document(plan_out_t *o, rs_diag_t *diag)
{
    rs__json_out_lit(o->w, "{\"schema\": \"reshard.plan.v2\"");
    write_exact(o);
    size_t n;
    const rs_convert_t *cv = rs_plan_converts(o->plan, &n);
    write_list(o, ",\n \"converts\": [", cv, n, put_convert, NULL);
    const rs_staged_read_t *fp = rs_plan_staged_reads(o->plan, &n);
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
    rs__json_out_lit(o->w, "}\n");
    if (rs__json_out_flush(o->w) != 0 || fflush(o->w->out) != 0)
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
    char *buf = malloc(PLAN_JSON_BUF);
    if (buf == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    rs__json_out_t w;
    rs__json_out_init(&w, out, buf, PLAN_JSON_BUF);
    o.w = &w;
    if (!names_init(&o))
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    else
        st = write_document(&o, diag);
    qnames_free(o.params, o.nparams);
    qnames_free(o.sessions, o.nsessions);
    free(buf);
    return st;
}
