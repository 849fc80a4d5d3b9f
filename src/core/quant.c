/* The quantization spec: its validation, the block extent it gives each dim
 * of a source, and its canonical text ("fp8_block:128x128:f8e4m3") with the
 * one parser of that text. The text is part of published tensor names, so
 * the parser accepts only the canonical spelling: parse then format gives
 * the text back byte for byte. */
#include <stdio.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "reshard/quant.h"

#define FIELD "quant."

static const char *scheme_name(rs_quant_scheme_t scheme)
{
    switch (scheme) {
    case RS_QUANT_FP8_BLOCK: return "fp8_block";
    case RS_QUANT_FP8_CHANNEL: return "fp8_channel";
    case RS_QUANT_FP8_TENSOR: return "fp8_tensor";
    default: return NULL;
    }
}

/* Scheme, format and block of a spec, whatever the source. */
static rs_status_t check_desc(const rs_quant_desc_t *q, rs_diag_t *diag)
{
    if (q == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "quant: no spec given");
    if (scheme_name(q->scheme) == NULL)
        return rs__diag_set(diag, RS_ERR_INPUT, FIELD "scheme: %d is not "
                            "fp8_block, fp8_channel or fp8_tensor",
                            (int)q->scheme);
    if (q->format != RS_DTYPE_F8E4M3 && q->format != RS_DTYPE_F8E5M2)
        return rs__diag_set(diag, RS_ERR_INPUT, FIELD "format: %s is not "
                            "f8e4m3 or f8e5m2", rs_dtype_name(q->format));
    if (q->scheme != RS_QUANT_FP8_BLOCK) {
        if (q->block_ndim != 0)
            return rs__diag_set(diag, RS_ERR_INPUT, FIELD "block_ndim: %s "
                                "takes no block, got %d dims",
                                scheme_name(q->scheme), q->block_ndim);
        return RS_OK;
    }
    if (q->block_ndim < 1 || q->block_ndim > RS_MAX_DIMS)
        return rs__diag_set(diag, RS_ERR_INPUT, FIELD "block_ndim: %d is "
                            "outside 1..%d", q->block_ndim, RS_MAX_DIMS);
    if (q->block == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, FIELD "block: NULL "
                            "with block_ndim %d", q->block_ndim);
    for (int d = 0; d < q->block_ndim; d++) {
        if (q->block[d] <= 0)
            return rs__diag_set(diag, RS_ERR_INPUT, FIELD "block[%d]: %lld "
                                "is not a positive extent", d,
                                (long long)q->block[d]);
    }
    return RS_OK;
}

rs_status_t rs_quant_block_shape(const rs_quant_desc_t *q, int ndim,
                                 const int64_t *shape, rs_diag_t *diag,
                                 int64_t *block_out)
{
    rs_status_t st = check_desc(q, diag);
    if (st != RS_OK)
        return st;
    if (ndim < 0 || ndim > RS_MAX_DIMS || (ndim > 0 && shape == NULL) ||
        (ndim > 0 && block_out == NULL))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "quant: source rank "
                            "%d outside 0..%d or NULL shape/output", ndim,
                            RS_MAX_DIMS);
    if (q->scheme == RS_QUANT_FP8_BLOCK && q->block_ndim > ndim)
        return rs__diag_set(diag, RS_ERR_INPUT, FIELD "block: %d dims for a "
                            "source of %d", q->block_ndim, ndim);
    if (q->scheme == RS_QUANT_FP8_CHANNEL && ndim < 1)
        return rs__diag_set(diag, RS_ERR_INPUT, FIELD "scheme: fp8_channel "
                            "needs a source of at least 1 dim");
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return rs__diag_set(diag, RS_ERR_INPUT, "quant: source shape[%d] "
                                "is %lld", d, (long long)shape[d]);
    }
    const int lead = q->scheme == RS_QUANT_FP8_BLOCK ? ndim - q->block_ndim : 0;
    for (int d = 0; d < ndim; d++) {
        int64_t b = shape[d] > 0 ? shape[d] : 1;
        if (q->scheme == RS_QUANT_FP8_BLOCK)
            b = d < lead ? 1 : q->block[d - lead];
        else if (q->scheme == RS_QUANT_FP8_CHANNEL && d == 0)
            b = 1;
        block_out[d] = b;
    }
    return RS_OK;
}

size_t rs_quant_spec_format(const rs_quant_desc_t *q, char *out, size_t cap)
{
    if (check_desc(q, NULL) != RS_OK)
        return 0;
    char buf[32 + RS_MAX_DIMS * 21];
    size_t n = (size_t)snprintf(buf, sizeof(buf), "%s:", scheme_name(q->scheme));
    for (int d = 0; q->scheme == RS_QUANT_FP8_BLOCK && d < q->block_ndim; d++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%lld%s",
                              (long long)q->block[d],
                              d + 1 < q->block_ndim ? "x" : ":");
    n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s",
                          rs_dtype_name(q->format));
    if (out != NULL && cap > 0) {
        const size_t k = n < cap ? n : cap - 1;
        memcpy(out, buf, k);
        out[k] = '\0';
    }
    return n;
}

/* One block extent: canonical decimal (no sign, no leading zero), positive,
 * within int64. Advances *p past the digits. */
static rs_status_t parse_extent(const char **p, int d, const char *text,
                                rs_diag_t *diag, int64_t *v_out)
{
    const char *s = *p;
    int64_t v = 0;
    if (*s < '0' || *s > '9')
        return rs__diag_set(diag, RS_ERR_INPUT, "quant spec '%.80s': block[%d] "
                            "is not a decimal extent", text, d);
    if (*s == '0')
        return rs__diag_set(diag, RS_ERR_INPUT, "quant spec '%.80s': block[%d] "
                            "is zero or has a leading zero", text, d);
    for (; *s >= '0' && *s <= '9'; s++) {
        if (!rs__mul_i64(v, 10, &v) || !rs__add_i64(v, *s - '0', &v))
            return rs__diag_set(diag, RS_ERR_INPUT, "quant spec '%.80s': "
                                "block[%d] overflows int64", text, d);
    }
    *p = s;
    *v_out = v;
    return RS_OK;
}

/* "AxBx...:" into block_store; *p ends past the ':'. */
static rs_status_t parse_block(const char **p, const char *text,
                               int64_t *block_store, rs_diag_t *diag,
                               int *ndim_out)
{
    int n = 0;
    for (;;) {
        if (n == RS_MAX_DIMS)
            return rs__diag_set(diag, RS_ERR_INPUT, "quant spec '%.80s': block "
                                "has more than %d dims", text, RS_MAX_DIMS);
        rs_status_t st = parse_extent(p, n, text, diag, &block_store[n]);
        if (st != RS_OK)
            return st;
        n++;
        if (**p == ':')
            break;
        if (**p != 'x')
            return rs__diag_set(diag, RS_ERR_INPUT, "quant spec '%.80s': "
                                "expected 'x' or ':' after block[%d]", text,
                                n - 1);
        (*p)++;
    }
    (*p)++;
    *ndim_out = n;
    return RS_OK;
}

static rs_status_t parse_scheme(const char **p, const char *text,
                                rs_diag_t *diag, rs_quant_scheme_t *out)
{
    static const rs_quant_scheme_t all[] = {
        RS_QUANT_FP8_BLOCK, RS_QUANT_FP8_CHANNEL, RS_QUANT_FP8_TENSOR};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        const char *name = scheme_name(all[i]);
        const size_t len = strlen(name);
        if (strncmp(*p, name, len) == 0 && (*p)[len] == ':') {
            *p += len + 1;
            *out = all[i];
            return RS_OK;
        }
    }
    return rs__diag_set(diag, RS_ERR_INPUT, "quant spec '%.80s': scheme is not "
                        "fp8_block, fp8_channel or fp8_tensor", text);
}

rs_status_t rs_quant_spec_parse(const char *text, int64_t *block_store,
                                rs_diag_t *diag, rs_quant_desc_t *q_out)
{
    if (text == NULL || block_store == NULL || q_out == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "quant spec: NULL text, block store or output");
    const char *p = text;
    rs_quant_desc_t q;
    memset(&q, 0, sizeof(q));
    int64_t block[RS_MAX_DIMS];
    rs_status_t st = parse_scheme(&p, text, diag, &q.scheme);
    if (st == RS_OK && q.scheme == RS_QUANT_FP8_BLOCK)
        st = parse_block(&p, text, block, diag, &q.block_ndim);
    if (st != RS_OK)
        return st;
    if (strcmp(p, "f8e4m3") == 0)
        q.format = RS_DTYPE_F8E4M3;
    else if (strcmp(p, "f8e5m2") == 0)
        q.format = RS_DTYPE_F8E5M2;
    else
        return rs__diag_set(diag, RS_ERR_INPUT, "quant spec '%.80s': format "
                            "'%.32s' is not f8e4m3 or f8e5m2", text, p);
    memcpy(block_store, block, sizeof(int64_t) * (size_t)q.block_ndim);
    q.block = q.block_ndim > 0 ? block_store : NULL;
    *q_out = q;
    return RS_OK;
}
