/* The capture model: parameters, declared sources, copies and unsupported
 * sources, built by the JSON loader or by callers directly. Deep-copies
 * everything into an arena. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "model/capture_impl.h"
#include "reshard/quant.h"

rs_status_t rs_capture_create(rs_capture_h *capture_p)
{
    if (capture_p == NULL)
        return RS_ERR_INVALID_ARG;
    rs_capture_h c = calloc(1, sizeof(*c));
    if (c == NULL)
        return RS_ERR_NO_MEMORY;
    rs__arena_init(&c->arena);
    rs__strmap_init(&c->param_index);
    rs__strmap_init(&c->unsupported_index);
    rs__strmap_init(&c->name_index);
    *capture_p = c;
    return RS_OK;
}

void rs_capture_destroy(rs_capture_h capture)
{
    if (capture == NULL)
        return;
    rs__strmap_free(&capture->param_index);
    rs__strmap_free(&capture->unsupported_index);
    rs__strmap_free(&capture->name_index);
    free(capture->names);
    free(capture->params);
    free(capture->sources);
    free(capture->copies);
    free(capture->unsupported);
    rs__capture_geom_free(capture);
    rs__arena_free(&capture->arena);
    free(capture);
}

/* The id of a source name, interned on first use; 0 on exhaustion.
 * `owned`: name already lives as long as the capture (its arena), and
 * becomes the interned name itself when new. */
static int intern_as(rs_capture_h capture, const char *name, uint64_t hash,
                     int owned, uint32_t *id_p)
{
    rs__capture_name_t n = {NULL, -1, hash};
    if (rs__strmap_get_hashed(&capture->name_index, name, n.hash, id_p))
        return 1;
    n.name = owned ? name : rs__arena_strdup(&capture->arena, name);
    if (n.name == NULL || capture->names_len >= UINT32_MAX ||
        !rs__strmap_put_hashed(&capture->name_index, n.name, n.hash,
                               (uint32_t)capture->names_len) ||
        !RS_VEC_PUSH(capture, names, n))
        return 0;
    capture->named_derived |= strchr(n.name, RS_QUANT_NAME_SEP) != NULL;
    *id_p = (uint32_t)capture->names_len - 1;
    return 1;
}

int rs__capture_add_name_unindexed(rs_capture_h capture, const char *name,
                                   uint32_t *id_p)
{
    if (capture->names_len >= UINT32_MAX ||
        !rs__vec_reserve((void **)&capture->names, &capture->names_cap,
                         capture->names_len + 1, sizeof(*capture->names)))
        return 0;
    /* written in place (a name built on the stack and pushed was reloaded
     * in wider loads than it was just stored with) */
    rs__capture_name_t *n = &capture->names[capture->names_len++];
    n->name = name;
    n->decl = -1;
    n->hash = 0;
    *id_p = (uint32_t)capture->names_len - 1;
    return 1;
}

int rs__capture_named_derived(rs_capture_h capture)
{
    return capture->named_derived;
}

static int intern_name(rs_capture_h capture, const char *name, uint32_t *id_p)
{
    return intern_as(capture, name, rs__hash_str(name), 0, id_p);
}

int rs__capture_intern_owned(rs_capture_h capture, const char *name,
                             uint64_t hash, uint32_t *id_p)
{
    return intern_as(capture, name, hash, 1, id_p);
}

static int64_t *dup_dims(rs__arena_t *a, const int64_t *dims, int n)
{
    return rs__arena_memdup(a, dims, (size_t)(n > 0 ? n : 1) * sizeof(int64_t));
}

/* The checks a declared parameter and a declared source share: a name, a
 * rank within RS_MAX_DIMS, a valid dtype and a shape whose element count
 * and size in bytes fit int64. `kind` names the declaration in errors. */
static rs_status_t check_declared(const char *kind, const char *name,
                                  int ndim, const int64_t *shape,
                                  rs_dtype_t dtype, rs_diag_t *diag,
                                  int64_t *numel_p, int64_t *bytes_p)
{
    int64_t numel, bytes;

    if (name == NULL || (ndim > 0 && shape == NULL))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    if (ndim < 0 || ndim > RS_MAX_DIMS)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s '%s': rank %d outside "
                            "0..%d", kind, name, ndim, RS_MAX_DIMS);
    if (rs_dtype_size(dtype) == 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s '%s': invalid dtype",
                            kind, name);
    if (!rs__numel(shape, ndim, &numel) ||
        !rs__mul_i64(numel, (int64_t)rs_dtype_size(dtype), &bytes))
        return rs__diag_set(diag, RS_ERR_INPUT, "%s '%s': shape is negative "
                            "or overflows", kind, name);
    *numel_p = numel;
    *bytes_p = bytes;
    return RS_OK;
}

rs_status_t rs_capture_add_param(rs_capture_h capture, const char *name,
                                 int ndim, const int64_t *shape,
                                 rs_dtype_t dtype, rs_diag_t *diag)
{
    rs__capture_param_t p = {0};
    uint32_t ignored;
    int64_t bytes = 0; /* set on RS_OK; gcc -O3 cannot tell */

    if (capture == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    rs_status_t st = check_declared("param", name, ndim, shape, dtype, diag,
                                    &p.numel, &bytes);
    if (st != RS_OK)
        return st;
    if (rs__strmap_get(&capture->param_index, name, &ignored))
        return rs__diag_set(diag, RS_ERR_INPUT, "param '%s' declared twice",
                            name);
    p.name = rs__arena_strdup(&capture->arena, name);
    p.ndim = ndim;
    p.shape = dup_dims(&capture->arena, shape, ndim);
    p.dtype = dtype;
    p.nbytes = (uint64_t)bytes;
    if (p.name == NULL || p.shape == NULL ||
        !rs__strmap_put(&capture->param_index, p.name,
                       (uint32_t)capture->params_len) ||
        !RS_VEC_PUSH(capture, params, p))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    return RS_OK;
}

static int same_source(const rs__capture_source_t *s, int ndim,
                       const int64_t *shape, rs_dtype_t dtype)
{
    if (s->ndim != ndim || s->dtype != dtype)
        return 0;
    for (int i = 0; i < ndim; i++) {
        if (s->shape[i] != shape[i])
            return 0;
    }
    return 1;
}

/* A second declaration must say the same; it then adds nothing. */
static rs_status_t redeclared(const rs__capture_source_t *s, int ndim,
                              const int64_t *shape, rs_dtype_t dtype,
                              rs_diag_t *diag)
{
    char was[160], now[160];
    if (same_source(s, ndim, shape, dtype))
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_INPUT, "source '%s' declared twice: %s "
                        "%s, then %s %s", s->name,
                        rs__format_dims(was, sizeof(was), s->shape, s->ndim),
                        rs_dtype_name(s->dtype),
                        rs__format_dims(now, sizeof(now), shape, ndim),
                        rs_dtype_name(dtype));
}

rs_status_t rs_capture_declare_source(rs_capture_h capture, const char *src,
                                      int ndim, const int64_t *shape,
                                      rs_dtype_t dtype, rs_diag_t *diag)
{
    rs__capture_source_t s = {0};
    uint32_t name_id;
    int64_t numel, bytes;

    if (capture == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    rs_status_t st = check_declared("source", src, ndim, shape, dtype, diag,
                                    &numel, &bytes);
    if (st != RS_OK)
        return st;
    if (!intern_name(capture, src, &name_id))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (capture->names[name_id].decl >= 0)
        return redeclared(&capture->sources[capture->names[name_id].decl],
                          ndim, shape, dtype, diag);
    s.name = capture->names[name_id].name;
    s.ndim = ndim;
    s.shape = dup_dims(&capture->arena, shape, ndim);
    s.dtype = dtype;
    if (s.shape == NULL || !RS_VEC_PUSH(capture, sources, s))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    capture->names[name_id].decl = (long)capture->sources_len - 1;
    return RS_OK;
}

/* Copies the variable-length parts of an op into the arena. */
static int dup_op(rs__arena_t *a, const rs_op_t *in, rs_op_t *out)
{
    *out = *in;
    out->list = NULL;
    out->keys = NULL;
    if (in->nlist > 0) {
        out->list = rs__arena_memdup(a, in->list, in->nlist * sizeof(int64_t));
        if (out->list == NULL)
            return 0;
    }
    if (in->nkeys > 0) {
        out->keys = rs__arena_memdup(a, in->keys, in->nkeys * sizeof(rs_key_t));
        if (out->keys == NULL)
            return 0;
    }
    return 1;
}

static rs_status_t check_copy_shape(const rs_copy_desc_t *c, rs_diag_t *diag)
{
    int64_t numel;
    if (c->ndim < 0 || c->ndim > RS_MAX_DIMS)
        return rs__diag_set(diag, RS_ERR_INPUT,
                            "copy of '%s' into '%s': rank %d outside 0..%d",
                            c->src, c->param, c->ndim, RS_MAX_DIMS);
    if (c->ndim > 0 && (c->dest_shape == NULL || c->dest_stride == NULL))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL dest shape");
    if (!rs__numel(c->dest_shape, c->ndim, &numel))
        return rs__diag_set(diag, RS_ERR_INPUT,
                            "copy of '%s' into '%s': dest_shape is negative "
                            "or overflows", c->src, c->param);
    for (int i = 0; i < c->ndim; i++) {
        if (c->dest_stride[i] < 0)
            return rs__diag_set(diag, RS_ERR_INPUT,
                                "copy of '%s' into '%s': dest_stride[%d] is "
                                "negative", c->src, c->param, i);
    }
    if (c->dest_offset < 0)
        return rs__diag_set(diag, RS_ERR_INPUT,
                            "copy of '%s' into '%s': dest_offset is negative",
                            c->src, c->param);
    return RS_OK;
}

/* The copy's op chain and destination dims, into the arena: the first copy
 * of a geometry (later ones share its arrays). */
static rs_status_t dup_geometry(rs__arena_t *a, const rs_copy_desc_t *copy,
                                rs__capture_copy_t *c)
{
    c->ops = rs__arena_alloc(a, (copy->nops ? copy->nops : 1) * sizeof(rs_op_t));
    c->dest_shape = dup_dims(a, copy->dest_shape, copy->ndim);
    c->dest_stride = dup_dims(a, copy->dest_stride, copy->ndim);
    if (c->ops == NULL || c->dest_shape == NULL || c->dest_stride == NULL)
        return RS_ERR_NO_MEMORY;
    for (size_t i = 0; i < copy->nops; i++) {
        if (!dup_op(a, &copy->ops[i], &c->ops[i]))
            return RS_ERR_NO_MEMORY;
    }
    return RS_OK;
}

/* Appends a copy whose descriptor passed check_copy_shape, its source
 * interned as src_id. */
static rs_status_t add_checked(rs_capture_h capture, const rs_copy_desc_t *copy,
                               uint32_t src_id, rs_diag_t *diag)
{
    rs__capture_copy_t c = {0};
    rs__arena_t *a = &capture->arena;
    rs_status_t st;
    c.src_id = src_id;
    c.src = capture->names[c.src_id].name;
    if (!rs__strmap_get(&capture->param_index, copy->param, &c.param_id))
        c.param_id = UINT32_MAX;
    c.param = c.param_id != UINT32_MAX ? capture->params[c.param_id].name
                                       : rs__arena_strdup(a, copy->param);
    c.nops = copy->nops;
    c.dest_offset = copy->dest_offset;
    c.ndim = copy->ndim;
    c.dest_dtype = copy->dest_dtype;
    if (c.param == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    uint64_t hash;
    const rs__capture_copy_t *same = rs__capture_geom_find(capture, copy, &hash);
    if (same != NULL) {
        c.ops = same->ops;
        c.dest_shape = same->dest_shape;
        c.dest_stride = same->dest_stride;
        c.geom = same->geom;
    } else if ((st = dup_geometry(a, copy, &c)) != RS_OK) {
        return rs__diag_set(diag, st, "out of memory");
    }
    if (!RS_VEC_PUSH(capture, copies, c))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (same == NULL &&
        !rs__capture_geom_add(capture, capture->copies_len - 1, hash,
                              &capture->copies[capture->copies_len - 1].geom)) {
        capture->copies_len--;
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    return RS_OK;
}

rs_status_t rs_capture_add_copy(rs_capture_h capture, const rs_copy_desc_t *copy,
                                rs_diag_t *diag)
{
    uint32_t src_id;
    if (capture == NULL || copy == NULL || copy->src == NULL ||
        copy->param == NULL || (copy->nops > 0 && copy->ops == NULL))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    rs_status_t st = check_copy_shape(copy, diag);
    if (st != RS_OK)
        return st;
    if (!intern_name(capture, copy->src, &src_id))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    return add_checked(capture, copy, src_id, diag);
}

rs_status_t rs__capture_add_copy_id(rs_capture_h capture,
                                    const rs_copy_desc_t *copy,
                                    uint32_t src_id, rs_diag_t *diag)
{
    rs_status_t st = check_copy_shape(copy, diag);
    return st != RS_OK ? st : add_checked(capture, copy, src_id, diag);
}

rs_status_t rs_capture_add_unsupported(rs_capture_h capture, const char *src,
                                       const char *reason, rs_diag_t *diag)
{
    rs__capture_unsupported_t u;
    uint32_t ignored;

    if (capture == NULL || src == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    if (rs__strmap_get(&capture->unsupported_index, src, &ignored))
        return RS_OK;
    if (!intern_name(capture, src, &u.src_id))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    u.src = capture->names[u.src_id].name;
    u.reason = rs__arena_strdup(&capture->arena, reason ? reason : "unsupported");
    if (u.reason == NULL ||
        !rs__strmap_put(&capture->unsupported_index, u.src,
                       (uint32_t)capture->unsupported_len) ||
        !RS_VEC_PUSH(capture, unsupported, u))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    return RS_OK;
}

void rs__capture_set_unattributed(rs_capture_h capture, int64_t count)
{
    capture->unattributed = count;
}

size_t rs_capture_num_params(rs_capture_h capture) { return capture->params_len; }

void rs_capture_param(rs_capture_h capture, size_t index, rs_param_info_t *info_p)
{
    const rs__capture_param_t *p = &capture->params[index];
    info_p->name = p->name;
    info_p->ndim = p->ndim;
    info_p->shape = p->shape;
    info_p->dtype = p->dtype;
    info_p->nbytes = p->nbytes;
}

long rs_capture_find_param(rs_capture_h capture, const char *name)
{
    uint32_t idx;
    return rs__strmap_get(&capture->param_index, name, &idx) ? (long)idx : -1;
}

size_t rs_capture_num_copies(rs_capture_h capture) { return capture->copies_len; }

void rs_capture_copy(rs_capture_h capture, size_t index, rs_copy_desc_t *copy_p)
{
    const rs__capture_copy_t *c = &capture->copies[index];
    copy_p->src = c->src;
    copy_p->param = c->param;
    copy_p->ops = c->ops;
    copy_p->nops = c->nops;
    copy_p->dest_offset = c->dest_offset;
    copy_p->ndim = c->ndim;
    copy_p->dest_shape = c->dest_shape;
    copy_p->dest_stride = c->dest_stride;
    copy_p->dest_dtype = c->dest_dtype;
}

const rs__capture_source_t *rs__capture_find_source(rs_capture_h capture,
                                               const char *name)
{
    long i = rs_capture_find_source(capture, name);
    return i >= 0 ? &capture->sources[i] : NULL;
}

size_t rs_capture_num_sources(rs_capture_h capture)
{
    return capture->sources_len;
}

void rs_capture_source(rs_capture_h capture, size_t index,
                       rs_source_info_t *info_p)
{
    const rs__capture_source_t *s = &capture->sources[index];
    info_p->name = s->name;
    info_p->ndim = s->ndim;
    info_p->shape = s->shape;
    info_p->dtype = s->dtype;
}

long rs_capture_find_source(rs_capture_h capture, const char *name)
{
    uint32_t id;
    return rs__strmap_get(&capture->name_index, name, &id)
               ? capture->names[id].decl : -1;
}

size_t rs_capture_num_unsupported(rs_capture_h capture)
{
    return capture->unsupported_len;
}

void rs_capture_unsupported(rs_capture_h capture, size_t index,
                            const char **src_p, const char **reason_p)
{
    *src_p = capture->unsupported[index].src;
    *reason_p = capture->unsupported[index].reason;
}

int64_t rs_capture_unattributed(rs_capture_h capture)
{
    return capture->unattributed;
}
