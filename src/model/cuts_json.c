/* Reader of reshard.cuts.v1 JSON (docs/formats.md): one document is one cut
 * set, in its one spelling (tensors sorted by name and unique, each dim's
 * cuts strictly increasing inside the dim), so that what a receiver
 * announces and what a publisher reads compare byte for byte. The optional
 * "quantize" list (quantized copies the receiver wants) is read the same
 * way: sorted by (src, spec), unique, each spec canonical. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "core/json.h"
#include "model/cuts_impl.h"

#define CUTS_SCHEMA "reshard.cuts.v1"

/* One cut: an integer strictly between the previous cut (0 at first) and
 * the dim's size. */
static rs_status_t load_cut(rs__json_ctx_t *c, rs__cut_tensor_t *t, int d,
                            const json_t *v, int64_t prev)
{
    int64_t at = 0;
    rs_status_t st = rs__json_as_int(c, v, 0, &at);
    if (st != RS_OK)
        return st;
    if (at <= prev || at >= t->shape[d])
        return rs__json_fail(c, "tensor '%s': cut %lld of dim %d must lie "
                             "strictly between %lld and the dim's size %lld "
                             "(cuts increase and stay inside the dim)",
                             t->name, (long long)at, d, (long long)prev,
                             (long long)t->shape[d]);
    if (!rs__cuts_insert(t, d, at))
        return rs__diag_set(c->diag, RS_ERR_NO_MEMORY, "%s: out of memory",
                            c->origin);
    return RS_OK;
}

static rs_status_t load_dim(rs__json_ctx_t *c, rs__cut_tensor_t *t, int d,
                            const json_t *arr)
{
    rs_status_t st = rs__json_expect(c, arr, JSON_ARRAY);
    int64_t prev = 0;
    for (size_t i = 0; st == RS_OK && i < json_array_size(arr); i++) {
        size_t mark = rs__json_push_index(c, i);
        st = load_cut(c, t, d, json_array_get(arr, i), prev);
        rs__json_pop(c, mark);
        prev = st == RS_OK ? t->dims[d].at[t->dims[d].at_len - 1] : prev;
    }
    return st;
}

static rs_status_t load_cuts(rs__json_ctx_t *c, rs__cut_tensor_t *t,
                             const json_t *obj)
{
    json_t *dims = NULL;
    rs_status_t st = rs__json_field(c, obj, "cuts", 1, JSON_ARRAY, &dims);
    if (st != RS_OK)
        return st;
    size_t mark = rs__json_push_key(c, "cuts");
    if (json_array_size(dims) != (size_t)t->ndim)
        st = rs__json_fail(c, "tensor '%s': %zu dims of cuts, the shape has "
                           "rank %d", t->name, json_array_size(dims), t->ndim);
    for (int d = 0; st == RS_OK && d < t->ndim; d++) {
        size_t dmark = rs__json_push_index(c, (size_t)d);
        st = load_dim(c, t, d, json_array_get(dims, (size_t)d));
        rs__json_pop(c, dmark);
    }
    rs__json_pop(c, mark);
    return st;
}

/* Name order is the document's order: each name follows the previous. */
static rs_status_t check_order(rs__json_ctx_t *c, const char *prev,
                               const char *name)
{
    if (prev == NULL || strcmp(prev, name) < 0)
        return RS_OK;
    size_t mark = rs__json_push_key(c, "name");
    rs_status_t st = rs__json_fail(c, "tensor '%s' follows '%s': tensors must "
                                   "be sorted by name, each named once", name,
                                   prev);
    rs__json_pop(c, mark);
    return st;
}

static rs_status_t load_tensor(rs__json_ctx_t *c, rs_cuts_h cuts,
                               const json_t *obj, const char **name_p)
{
    const char *name = NULL;
    int64_t shape[RS_MAX_DIMS];
    int ndim = 0;
    rs__cut_tensor_t *t;
    rs_status_t st;

    if ((st = rs__json_expect(c, obj, JSON_OBJECT)) != RS_OK ||
        (st = rs__json_field_string(c, obj, "name", 1, &name)) != RS_OK ||
        (st = check_order(c, *name_p, name)) != RS_OK ||
        (st = rs__json_field_dims(c, obj, "shape", shape, &ndim)) != RS_OK)
        return st;
    size_t mark = rs__json_push_key(c, "shape");
    st = rs__json_check_numel(c, shape, ndim, 1);
    rs__json_pop(c, mark);
    if (st != RS_OK)
        return st;
    if (rs__cuts_tensor_for(cuts, name, ndim, shape, c->diag, &t) != RS_OK)
        return rs__json_prefix(c);
    *name_p = name;
    return load_cuts(c, t, obj);
}

/* One {"src", "spec"} of "quantize": after the previous one in (src,
 * spec) order, its spec canonical. */
static rs_status_t load_quant(rs__json_ctx_t *c, rs_cuts_h cuts,
                              const json_t *obj)
{
    const char *src = NULL, *spec = NULL;
    rs_status_t st;
    if ((st = rs__json_expect(c, obj, JSON_OBJECT)) != RS_OK ||
        (st = rs__json_field_string(c, obj, "src", 1, &src)) != RS_OK ||
        (st = rs__json_field_string(c, obj, "spec", 1, &spec)) != RS_OK)
        return st;
    if (!rs__cuts_check_spec(src, spec, c->diag))
        return rs__json_prefix(c);
    size_t n = cuts->quants_len;
    if (n > 0) {
        const rs__cut_quant_t *q = &cuts->quants[n - 1];
        int order = strcmp(q->src, src);
        if (order > 0 || (order == 0 && strcmp(q->spec, spec) >= 0))
            return rs__json_fail(c, "quantized source '%s' spec '%s' follows "
                                 "'%s' spec '%s': entries must be sorted by "
                                 "src then spec, each pair named once", src,
                                 spec, q->src, q->spec);
    }
    if (rs__cuts_append_quant(cuts, src, spec, c->diag) != RS_OK)
        return rs__json_prefix(c);
    return RS_OK;
}

/* The optional "quantize": the quantized copies the receiver wants. */
static rs_status_t load_quants(rs__json_ctx_t *c, rs_cuts_h cuts,
                               const json_t *root)
{
    json_t *arr = NULL;
    rs_status_t st = rs__json_field(c, root, "quantize", 0, JSON_ARRAY, &arr);
    if (st != RS_OK || arr == NULL)
        return st;
    size_t mark = rs__json_push_key(c, "quantize");
    for (size_t i = 0; st == RS_OK && i < json_array_size(arr); i++) {
        size_t imark = rs__json_push_index(c, i);
        st = load_quant(c, cuts, json_array_get(arr, i));
        rs__json_pop(c, imark);
    }
    rs__json_pop(c, mark);
    return st;
}

static rs_status_t load_root(rs__json_ctx_t *c, rs_cuts_h cuts,
                             const json_t *root)
{
    const char *model = NULL, *prev = NULL;
    json_t *tensors = NULL;
    rs_status_t st;

    if ((st = rs__json_expect(c, root, JSON_OBJECT)) != RS_OK ||
        (st = rs__json_check_schema(c, root, CUTS_SCHEMA)) != RS_OK ||
        (st = rs__json_field_string(c, root, "model", 0, &model)) != RS_OK ||
        (st = rs__json_field(c, root, "tensors", 1, JSON_ARRAY, &tensors)) !=
            RS_OK)
        return st;
    if (model != NULL && rs_cuts_set_model(cuts, model, c->diag) != RS_OK)
        return rs__json_prefix(c);
    size_t mark = rs__json_push_key(c, "tensors");
    for (size_t i = 0; st == RS_OK && i < json_array_size(tensors); i++) {
        size_t imark = rs__json_push_index(c, i);
        st = load_tensor(c, cuts, json_array_get(tensors, i), &prev);
        rs__json_pop(c, imark);
    }
    rs__json_pop(c, mark);
    rs__cuts_sort(cuts);
    if (st == RS_OK)
        st = load_quants(c, cuts, root);
    return st;
}

/* rs__json_root_fn: the document into the fresh set *arg. */
static rs_status_t load_doc(rs__json_ctx_t *c, json_t *root, void *arg)
{
    return load_root(c, arg, root);
}

rs_status_t rs_cuts_read_json(const char *text, size_t len,
                              const char *origin, rs_diag_t *diag,
                              rs_cuts_h *cuts_p)
{
    rs_cuts_h cuts = NULL;
    if (text == NULL || cuts_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: NULL text or "
                            "output");
    rs_status_t st = rs_cuts_create(diag, &cuts);
    if (st != RS_OK)
        return st;
    st = rs__json_load_text(text, len, origin ? origin : "cuts",
                            RS_JSON_LIMIT_CONFIGURED, diag, load_doc, cuts);
    if (st != RS_OK) {
        rs_cuts_destroy(cuts);
        return st;
    }
    *cuts_p = cuts;
    return RS_OK;
}
