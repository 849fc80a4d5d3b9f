/* Loader for reshard.capture.v1 JSON: parameters, declared sources (the
 * shape and dtype the loader assumed for each), copies with their op chains
 * converted to rs_op_t, unsupported sources and the unattributed count. Ops
 * we do not know make their source unsupported, not the file bad. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "model/capture_impl.h"
#include "model/capture_quant_json.h"

#define CAPTURE_SCHEMA "reshard.capture.v1"

/* What an op parser reads from: the op array and scratch for its lists. */
typedef struct op_in {
    rs__json_ctx_t *c;
    const json_t *arr;   /* ["name", args...] */
    rs__arena_t *scratch; /* lists and keys live here until the copy is added */
} op_in_t;

typedef rs_status_t (*op_parse_fn)(op_in_t *in, rs_op_t *op);

typedef struct op_spec {
    const char *name;
    rs_op_kind_t kind;
    int min_args, max_args;
    const char *usage;
    op_parse_fn parse;
} op_spec_t;

/* Argument i (1-based in the op array) as an integer >= min. */
static rs_status_t arg_int(op_in_t *in, size_t i, int64_t min, int64_t *out)
{
    size_t mark = rs__json_push_index(in->c, i);
    rs_status_t st = rs__json_as_int(in->c, json_array_get(in->arr, i), min, out);
    rs__json_pop(in->c, mark);
    return st;
}

/* Argument i as an integer or null; *given_p says which. */
static rs_status_t arg_opt_int(op_in_t *in, size_t i, int64_t *out,
                               int *given_p)
{
    const json_t *v = json_array_get(in->arr, i);
    *given_p = !json_is_null(v);
    if (!*given_p)
        return RS_OK;
    return arg_int(in, i, INT64_MIN, out);
}

/* Argument i as an array of integers >= min, copied into scratch. */
static rs_status_t arg_list(op_in_t *in, size_t i, int64_t min, size_t max,
                            const int64_t **list_p, size_t *n_p)
{
    const json_t *v = json_array_get(in->arr, i);
    size_t mark = rs__json_push_index(in->c, i);
    rs_status_t st = rs__json_expect(in->c, v, JSON_ARRAY);
    int64_t *list = NULL;

    if (st == RS_OK) {
        list = rs__arena_alloc(in->scratch,
                              (json_array_size(v) + 1) * sizeof(int64_t));
        if (list == NULL)
            st = rs__diag_set(in->c->diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    if (st == RS_OK)
        st = rs__json_as_ints(in->c, v, min, max, list, n_p);
    rs__json_pop(in->c, mark);
    if (st == RS_OK)
        *list_p = list;
    return st;
}

/* Ops whose arguments are all integers, stored in order in arg[]. */
static rs_status_t parse_ints(op_in_t *in, rs_op_t *op)
{
    size_t nargs = json_array_size(in->arr) - 1;
    for (size_t i = 0; i < nargs; i++) {
        rs_status_t st = arg_int(in, i + 1, INT64_MIN, &op->arg[i]);
        if (st != RS_OK)
            return st;
        op->has |= 1u << i;
    }
    return RS_OK;
}

static rs_status_t parse_slice(op_in_t *in, rs_op_t *op)
{
    rs_status_t st;
    int given;

    if ((st = arg_int(in, 1, INT64_MIN, &op->arg[0])) != RS_OK)
        return st;
    op->has = 1u;
    for (size_t i = 1; i <= 2; i++) {
        if ((st = arg_opt_int(in, i + 1, &op->arg[i], &given)) != RS_OK)
            return st;
        op->has |= given ? 1u << i : 0u;
    }
    op->arg[3] = 1;
    if (json_array_size(in->arr) == 5 &&
        !json_is_null(json_array_get(in->arr, 4))) {
        if ((st = arg_int(in, 4, 1, &op->arg[3])) != RS_OK)
            return st;
        op->has |= 1u << 3;
    }
    return RS_OK;
}

/* One getitem slice key: [start|null, stop|null, step|null]. */
static rs_status_t parse_slice_key(rs__json_ctx_t *c, const json_t *v,
                                   rs_key_t *k)
{
    int64_t *fields[3] = {&k->start, &k->stop, &k->step};
    uint8_t *given[3] = {&k->has_start, &k->has_stop, &k->has_step};
    rs_status_t st = RS_OK;

    if (json_array_size(v) != 3)
        return rs__json_fail(c, "a slice key is [start|null, stop|null, "
                            "step|null], got %zu elements", json_array_size(v));
    k->kind = RS_KEY_SLICE;
    k->step = 1;
    for (size_t j = 0; j < 3 && st == RS_OK; j++) {
        const json_t *e = json_array_get(v, j);
        *given[j] = !json_is_null(e);
        if (!*given[j])
            continue;
        size_t mark = rs__json_push_index(c, j);
        st = rs__json_as_int(c, e, j == 2 ? 1 : INT64_MIN, fields[j]);
        rs__json_pop(c, mark);
    }
    return st;
}

static rs_status_t parse_key(rs__json_ctx_t *c, const json_t *v, rs_key_t *k)
{
    memset(k, 0, sizeof(*k));
    if (json_is_null(v)) {
        k->kind = RS_KEY_FULL;
        return RS_OK;
    }
    if (json_is_array(v))
        return parse_slice_key(c, v, k);
    if (!json_is_integer(v))
        return rs__json_fail(c, "a getitem key is an integer, null or "
                            "[start, stop, step], got %s",
                            rs__json_type_name(v));
    k->kind = RS_KEY_INDEX;
    k->index = (int64_t)json_integer_value(v);
    return RS_OK;
}

static rs_status_t parse_getitem(op_in_t *in, rs_op_t *op)
{
    const json_t *keys = json_array_get(in->arr, 1);
    size_t mark = rs__json_push_index(in->c, 1);
    rs_status_t st = rs__json_expect(in->c, keys, JSON_ARRAY);
    size_t n = json_array_size(keys);
    rs_key_t *out = NULL;

    if (st == RS_OK && n > RS_MAX_DIMS)
        st = rs__json_fail(in->c, "%zu keys, more than the rank limit of %d",
                          n, RS_MAX_DIMS);
    if (st == RS_OK && (out = rs__arena_alloc(in->scratch, (n + 1) *
                                             sizeof(rs_key_t))) == NULL)
        st = rs__diag_set(in->c->diag, RS_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n && st == RS_OK; i++) {
        size_t kmark = rs__json_push_index(in->c, i);
        st = parse_key(in->c, json_array_get(keys, i), &out[i]);
        rs__json_pop(in->c, kmark);
    }
    rs__json_pop(in->c, mark);
    if (st == RS_OK) {
        op->keys = out;
        op->nkeys = n;
    }
    return st;
}

/* permute, view, reshape: one list of at most RS_MAX_DIMS integers. */
static rs_status_t parse_dims_list(op_in_t *in, rs_op_t *op)
{
    return arg_list(in, 1, INT64_MIN, RS_MAX_DIMS, &op->list, &op->nlist);
}

static rs_status_t parse_unflatten(op_in_t *in, rs_op_t *op)
{
    rs_status_t st = arg_int(in, 1, INT64_MIN, &op->arg[0]);
    if (st != RS_OK)
        return st;
    op->has = 1u;
    return arg_list(in, 2, INT64_MIN, RS_MAX_DIMS, &op->list, &op->nlist);
}

/* ["split", size, dim, i] or ["split", [sizes], dim, i]. */
static rs_status_t parse_split(op_in_t *in, rs_op_t *op)
{
    rs_status_t st;
    if (json_is_array(json_array_get(in->arr, 1))) {
        st = arg_list(in, 1, 0, SIZE_MAX, &op->list, &op->nlist);
        if (st == RS_OK && op->nlist == 0) {
            size_t mark = rs__json_push_index(in->c, 1);
            st = rs__json_fail(in->c, "split sizes must not be empty");
            rs__json_pop(in->c, mark);
        }
    } else {
        st = arg_int(in, 1, INT64_MIN, &op->arg[0]);
        op->has = 1u;
    }
    for (size_t i = 2; i <= 3 && st == RS_OK; i++) {
        st = arg_int(in, i, INT64_MIN, &op->arg[i - 1]);
        op->has |= 1u << (i - 1);
    }
    return st;
}

static const op_spec_t op_specs[] = {
    {"narrow", RS_OP_NARROW, 3, 3, "[\"narrow\", dim, start, length]",
     parse_ints},
    {"slice", RS_OP_SLICE, 3, 4,
     "[\"slice\", dim, start|null, stop|null[, step]]", parse_slice},
    {"select", RS_OP_SELECT, 2, 2, "[\"select\", dim, index]", parse_ints},
    {"getitem", RS_OP_GETITEM, 1, 1, "[\"getitem\", [keys...]]",
     parse_getitem},
    {"transpose", RS_OP_TRANSPOSE, 2, 2, "[\"transpose\", d0, d1]",
     parse_ints},
    {"t", RS_OP_T, 0, 0, "[\"t\"]", parse_ints},
    {"permute", RS_OP_PERMUTE, 1, 1, "[\"permute\", [dims...]]",
     parse_dims_list},
    {"view", RS_OP_VIEW, 1, 1, "[\"view\", [sizes...]]", parse_dims_list},
    {"reshape", RS_OP_RESHAPE, 1, 1, "[\"reshape\", [sizes...]]",
     parse_dims_list},
    {"flatten", RS_OP_FLATTEN, 0, 2, "[\"flatten\", start_dim, end_dim]",
     parse_ints},
    {"unflatten", RS_OP_UNFLATTEN, 2, 2, "[\"unflatten\", dim, [sizes...]]",
     parse_unflatten},
    {"unsqueeze", RS_OP_UNSQUEEZE, 1, 1, "[\"unsqueeze\", dim]", parse_ints},
    {"squeeze", RS_OP_SQUEEZE, 0, 1, "[\"squeeze\"] or [\"squeeze\", dim]",
     parse_ints},
    {"chunk", RS_OP_CHUNK, 3, 3, "[\"chunk\", chunks, dim, i]", parse_ints},
    {"split", RS_OP_SPLIT, 3, 3, "[\"split\", size or [sizes], dim, i]",
     parse_split},
    {"unbind", RS_OP_UNBIND, 2, 2, "[\"unbind\", dim, i]", parse_ints},
    {"contiguous", RS_OP_CONTIGUOUS, 0, 0, "[\"contiguous\"]", parse_ints},
};

static const op_spec_t *find_op(const char *name)
{
    for (size_t i = 0; i < sizeof(op_specs) / sizeof(op_specs[0]); i++) {
        if (strcmp(op_specs[i].name, name) == 0)
            return &op_specs[i];
    }
    return NULL;
}

/* Parses one op at the current path. An op name we do not know is left in
 * *unknown_p (the copy's source becomes unsupported) rather than failing. */
static rs_status_t parse_op(rs__json_ctx_t *c, rs__arena_t *scratch,
                            const json_t *arr, rs_op_t *op,
                            const char **unknown_p)
{
    op_in_t in = {c, arr, scratch};
    const char *name = NULL;
    rs_status_t st = rs__json_expect(c, arr, JSON_ARRAY);

    if (st != RS_OK)
        return st;
    if (json_array_size(arr) == 0)
        return rs__json_fail(c, "an op is [\"name\", args...], got an empty "
                            "array");
    size_t mark = rs__json_push_index(c, 0);
    st = rs__json_as_string(c, json_array_get(arr, 0), &name);
    rs__json_pop(c, mark);
    if (st != RS_OK)
        return st;
    const op_spec_t *spec = find_op(name);
    if (spec == NULL) {
        if (*unknown_p == NULL)
            *unknown_p = name;
        return RS_OK;
    }
    int nargs = (int)json_array_size(arr) - 1;
    if (nargs < spec->min_args || nargs > spec->max_args)
        return rs__json_fail(c, "op '%s' takes %s, got %d argument%s", name,
                            spec->usage, nargs, nargs == 1 ? "" : "s");
    memset(op, 0, sizeof(*op));
    op->kind = spec->kind;
    return spec->parse(&in, op);
}

static rs_status_t parse_ops(rs__json_ctx_t *c, rs__arena_t *scratch,
                             const json_t *ops, rs_copy_desc_t *d,
                             const char **unknown_p)
{
    size_t n = json_array_size(ops);
    rs_op_t *out = rs__arena_alloc(scratch, (n + 1) * sizeof(rs_op_t));
    rs_status_t st = RS_OK;
    size_t mark = rs__json_push_key(c, "ops");

    if (out == NULL)
        st = rs__diag_set(c->diag, RS_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n && st == RS_OK; i++) {
        size_t imark = rs__json_push_index(c, i);
        st = parse_op(c, scratch, json_array_get(ops, i), &out[i], unknown_p);
        rs__json_pop(c, imark);
    }
    rs__json_pop(c, mark);
    d->ops = out;
    d->nops = n;
    return st;
}

/* The destination fields of a copy: offset, shape, stride (same rank), dtype. */
static rs_status_t parse_dest(rs__json_ctx_t *c, const json_t *obj,
                              rs_copy_desc_t *d, int64_t *shape,
                              int64_t *stride)
{
    rs_status_t st;
    json_t *v = NULL;
    size_t nstride = 0;
    int ndim = 0;

    if ((st = rs__json_field_int(c, obj, "dest_offset", 1, 0,
                                &d->dest_offset)) != RS_OK ||
        (st = rs__json_field_dims(c, obj, "dest_shape", shape, &ndim)) != RS_OK ||
        (st = rs__json_field(c, obj, "dest_stride", 1, JSON_ARRAY, &v)) != RS_OK)
        return st;
    size_t mark = rs__json_push_key(c, "dest_stride");
    st = rs__json_as_ints(c, v, 0, RS_MAX_DIMS, stride, &nstride);
    if (st == RS_OK && nstride != (size_t)ndim)
        st = rs__json_fail(c, "has %zu entries but dest_shape has %d", nstride,
                          ndim);
    rs__json_pop(c, mark);
    if (st != RS_OK)
        return st;
    mark = rs__json_push_key(c, "dest_shape");
    st = rs__json_check_numel(c, shape, ndim, 1);
    rs__json_pop(c, mark);
    if (st != RS_OK)
        return st;
    d->ndim = ndim;
    d->dest_shape = shape;
    d->dest_stride = stride;
    return rs__json_field_dtype(c, obj, "dest_dtype", &d->dest_dtype);
}

/* The copy's parameter must be declared, with the copy's dtype. */
static rs_status_t check_param(rs__json_ctx_t *c, rs_capture_h cap,
                               const rs_copy_desc_t *d)
{
    long idx = rs_capture_find_param(cap, d->param);
    rs_status_t st = RS_OK;
    size_t mark;

    if (idx < 0) {
        mark = rs__json_push_key(c, "param");
        st = rs__json_fail(c, "parameter '%s' (copy of '%s') is not declared "
                          "in params", d->param, d->src);
        rs__json_pop(c, mark);
        return st;
    }
    rs_param_info_t info;
    rs_capture_param(cap, (size_t)idx, &info);
    if (info.dtype != d->dest_dtype) {
        mark = rs__json_push_key(c, "dest_dtype");
        st = rs__json_fail(c, "%s differs from parameter '%s' dtype %s",
                          rs_dtype_name(d->dest_dtype), d->param,
                          rs_dtype_name(info.dtype));
        rs__json_pop(c, mark);
    }
    return st;
}

static rs_status_t load_copy(rs__json_ctx_t *c, rs_capture_h cap,
                             rs__arena_t *scratch, const json_t *obj)
{
    rs_copy_desc_t d = {0};
    int64_t shape[RS_MAX_DIMS], stride[RS_MAX_DIMS];
    rs__quant_in_t qin;
    rs__quant_field_t field;
    int quantized = 0;
    const char *unknown = NULL;
    json_t *ops = NULL;
    rs_status_t st;

    if ((st = rs__json_expect(c, obj, JSON_OBJECT)) != RS_OK ||
        (st = rs__json_field_string(c, obj, "src", 1, &d.src)) != RS_OK ||
        (st = rs__json_field_string(c, obj, "param", 1, &d.param)) != RS_OK ||
        (st = rs__json_field(c, obj, "ops", 1, JSON_ARRAY, &ops)) != RS_OK ||
        (st = parse_ops(c, scratch, ops, &d, &unknown)) != RS_OK ||
        (st = parse_dest(c, obj, &d, shape, stride)) != RS_OK ||
        (st = check_param(c, cap, &d)) != RS_OK ||
        (st = rs__capture_json_quant(c, obj, &qin, &quantized)) != RS_OK)
        return st;
    if (quantized &&
        rs__capture_check_quant(cap, &d, &qin.q, c->diag, &field) != RS_OK)
        return rs__capture_json_quant_fail(c, &d, field);
    if (unknown != NULL) {
        /* The copy keeps its place (plans refer to copies by index) but no
         * ops: its source is unsupported, so it is never planned. */
        char reason[RS_DIAG_MSG_MAX];
        snprintf(reason, sizeof(reason), "op '%s' is not supported", unknown);
        st = rs_capture_add_unsupported(cap, d.src, reason, c->diag);
        d.nops = 0;
    }
    if (st == RS_OK)
        st = quantized ? rs_capture_add_quant_copy(cap, &d, &qin.q, c->diag)
                       : rs_capture_add_copy(cap, &d, c->diag);
    return st == RS_OK ? RS_OK : rs__json_prefix(c);
}

static rs_status_t load_copies(rs__json_ctx_t *c, rs_capture_h cap,
                               const json_t *root)
{
    json_t *copies = NULL;
    rs_status_t st = rs__json_field(c, root, "copies", 1, JSON_ARRAY, &copies);
    size_t mark = rs__json_push_key(c, "copies");

    for (size_t i = 0; st == RS_OK && i < json_array_size(copies); i++) {
        rs__arena_t scratch; /* per copy, so temporaries do not pile up */
        rs__arena_init(&scratch);
        size_t imark = rs__json_push_index(c, i);
        st = load_copy(c, cap, &scratch, json_array_get(copies, i));
        rs__json_pop(c, imark);
        rs__arena_free(&scratch);
    }
    rs__json_pop(c, mark);
    return st;
}

/* {"shape": [...], "dtype": "..."}, as params and sources hold them. */
static rs_status_t load_shape_dtype(rs__json_ctx_t *c, const json_t *obj,
                                    int64_t *shape, int *ndim_p,
                                    rs_dtype_t *dtype_p)
{
    rs_status_t st;
    if ((st = rs__json_expect(c, obj, JSON_OBJECT)) != RS_OK ||
        (st = rs__json_field_dims(c, obj, "shape", shape, ndim_p)) != RS_OK ||
        (st = rs__json_field_dtype(c, obj, "dtype", dtype_p)) != RS_OK)
        return st;
    size_t mark = rs__json_push_key(c, "shape");
    st = rs__json_check_numel(c, shape, *ndim_p, rs_dtype_size(*dtype_p));
    rs__json_pop(c, mark);
    return st;
}

typedef rs_status_t (*shaped_add_fn)(rs_capture_h cap, const char *name,
                                     int ndim, const int64_t *shape,
                                     rs_dtype_t dtype, rs_diag_t *diag);

/* A "params" or "sources" entry: a shape and dtype handed to `add`. */
static rs_status_t load_shaped(rs__json_ctx_t *c, rs_capture_h cap,
                               const char *name, const json_t *obj,
                               shaped_add_fn add)
{
    int64_t shape[RS_MAX_DIMS];
    int ndim = 0;
    rs_dtype_t dtype = RS_DTYPE_INVALID;
    rs_status_t st = load_shape_dtype(c, obj, shape, &ndim, &dtype);

    if (st != RS_OK)
        return st;
    if (add(cap, name, ndim, shape, dtype, c->diag) != RS_OK)
        return rs__json_prefix(c);
    return RS_OK;
}

static rs_status_t load_param(rs__json_ctx_t *c, rs_capture_h cap,
                              const char *name, const json_t *obj)
{
    return load_shaped(c, cap, name, obj, rs_capture_add_param);
}

/* One "sources" entry: the full shape and dtype the loader assumed. */
static rs_status_t load_source(rs__json_ctx_t *c, rs_capture_h cap,
                               const char *name, const json_t *obj)
{
    return load_shaped(c, cap, name, obj, rs_capture_declare_source);
}

static rs_status_t load_reason(rs__json_ctx_t *c, rs_capture_h cap,
                               const char *src, const json_t *v)
{
    const char *reason = NULL;
    rs_status_t st = rs__json_as_string(c, v, &reason);
    if (st == RS_OK &&
        rs_capture_add_unsupported(cap, src, reason, c->diag) != RS_OK)
        st = rs__json_prefix(c);
    return st;
}

typedef rs_status_t (*entry_fn)(rs__json_ctx_t *c, rs_capture_h cap,
                                const char *name, const json_t *v);

/* Walks the object under `key` (an error when required and absent), one
 * entry at a time with the JSON path pointing at it. */
static rs_status_t load_map(rs__json_ctx_t *c, rs_capture_h cap,
                            const json_t *root, const char *key, int required,
                            entry_fn fn)
{
    json_t *map = NULL, *v;
    const char *name;
    rs_status_t st = rs__json_field(c, root, key, required, JSON_OBJECT, &map);
    size_t mark = rs__json_push_key(c, key);

    if (st == RS_OK && map != NULL) {
        json_object_foreach(map, name, v) {
            size_t kmark = rs__json_push_key(c, name);
            st = fn(c, cap, name, v);
            rs__json_pop(c, kmark);
            if (st != RS_OK)
                break;
        }
    }
    rs__json_pop(c, mark);
    return st;
}

static rs_status_t load_root(rs__json_ctx_t *c, rs_capture_h cap,
                             const json_t *root)
{
    int64_t unattributed = 0;
    rs_status_t st;

    if ((st = rs__json_check_schema(c, root, CAPTURE_SCHEMA)) != RS_OK ||
        (st = load_map(c, cap, root, "params", 1, load_param)) != RS_OK ||
        /* optional: captures written before sources were declared */
        (st = load_map(c, cap, root, "sources", 0, load_source)) != RS_OK ||
        (st = load_map(c, cap, root, "unsupported", 0, load_reason)) !=
            RS_OK ||
        (st = load_copies(c, cap, root)) != RS_OK ||
        (st = rs__json_field_int(c, root, "unattributed", 0, 0,
                                &unattributed)) != RS_OK)
        return st;
    rs__capture_set_unattributed(cap, unattributed);
    return RS_OK;
}

/* rs__json_root_fn: a new capture from the document, into *arg. */
static rs_status_t load_doc(rs__json_ctx_t *c, json_t *root, void *arg)
{
    rs_capture_h *capture_p = arg;
    rs_capture_h cap = NULL;

    if (rs_capture_create(&cap) != RS_OK)
        return rs__diag_set(c->diag, RS_ERR_NO_MEMORY, "%s: out of memory",
                            c->origin);
    rs_status_t st = load_root(c, cap, root);
    if (st != RS_OK) {
        rs_capture_destroy(cap);
        return st;
    }
    *capture_p = cap;
    return RS_OK;
}

rs_status_t rs_capture_load_string(const char *json, size_t len,
                                   const char *origin, rs_diag_t *diag,
                                   rs_capture_h *capture_p)
{
    if (capture_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL capture_p");
    return rs__json_load_text(json, len, origin, RS_JSON_LIMIT_CONFIGURED,
                              diag, load_doc, capture_p);
}

rs_status_t rs_capture_load_file(const char *path, rs_diag_t *diag,
                                 rs_capture_h *capture_p)
{
    if (capture_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL capture_p");
    return rs__json_load_file(path, RS_JSON_LIMIT_CONFIGURED, diag, load_doc,
                              capture_p);
}
