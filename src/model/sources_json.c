/* Loader for mx.reshard.shard_table.v1 JSON (one blob or an array of blobs,
 * as ModelExpress publishers emit them). A file is merged all-or-nothing:
 * any error rolls the sources back to where they were before it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/json.h"
#include "model/sources_impl.h"

#define SHARD_TABLE_SCHEMA "mx.reshard.shard_table.v1"

/* What a tensor entry declares, shared by its shards. */
typedef struct tensor_decl {
    const char *name;
    rs_dtype_t dtype;
    size_t elsize;
    int ndim;
    int64_t full_shape[RS_MAX_DIMS];
} tensor_decl_t;

/* shard_offset and shape must have the rank of full_shape. */
static rs_status_t shard_dims(rs__json_ctx_t *c, const json_t *obj,
                              const char *key, int ndim, int64_t *dims)
{
    int n = 0;
    rs_status_t st = rs__json_field_dims(c, obj, key, dims, &n);
    if (st != RS_OK || n == ndim)
        return st;
    size_t mark = rs__json_push_key(c, key);
    st = rs__json_fail(c, "rank %d differs from full_shape rank %d", n, ndim);
    rs__json_pop(c, mark);
    return st;
}

/* Addresses are carried as int64 in plans, so a shard's last byte must lie
 * below 2^63 (a u64 sum of two JSON integers could never overflow). Shapes
 * that are out of bounds are left to rs_sources_add_shard to report. */
static rs_status_t check_addr_range(rs__json_ctx_t *c, const tensor_decl_t *t,
                                    int64_t addr, const int64_t *shape)
{
    int64_t numel, nbytes, end;
    if (!rs__numel(shape, t->ndim, &numel) ||
        !rs__mul_i64(numel, (int64_t)t->elsize, &nbytes) ||
        rs__add_i64(addr, nbytes, &end))
        return RS_OK;
    size_t mark = rs__json_push_key(c, "addr");
    rs_status_t st = rs__json_fail(c, "tensor '%s': shard at addr %lld with "
                                  "%lld bytes overflows the address space "
                                  "(ends past 2^63-1)", t->name,
                                  (long long)addr, (long long)nbytes);
    rs__json_pop(c, mark);
    return st;
}

static rs_status_t load_shard(rs__json_ctx_t *c, rs_sources_h s,
                              const tensor_decl_t *t, const char *agent,
                              const json_t *obj)
{
    int64_t offset[RS_MAX_DIMS], shape[RS_MAX_DIMS], addr = 0;
    rs_shard_desc_t d = {0};
    rs_status_t st;

    d.session = agent;
    if ((st = rs__json_expect(c, obj, JSON_OBJECT)) != RS_OK ||
        (st = rs__json_field_string(c, obj, "agent_name", 0, &d.session)) !=
            RS_OK ||
        (st = rs__json_field_int(c, obj, "device_id", 0, 0, &d.device_id)) !=
            RS_OK ||
        (st = rs__json_field_int(c, obj, "addr", 1, 0, &addr)) != RS_OK ||
        (st = shard_dims(c, obj, "shard_offset", t->ndim, offset)) != RS_OK ||
        (st = shard_dims(c, obj, "shape", t->ndim, shape)) != RS_OK ||
        (st = rs__json_field_string(c, obj, "digest", 0, &d.digest)) != RS_OK ||
        (st = check_addr_range(c, t, addr, shape)) != RS_OK)
        return st;
    d.tensor = t->name;
    d.dtype = t->dtype;
    d.elsize = t->elsize;
    d.ndim = t->ndim;
    d.full_shape = t->full_shape;
    d.addr = (uint64_t)addr;
    d.offset = offset;
    d.shape = shape;
    if (rs_sources_add_shard(s, &d, c->diag) != RS_OK)
        return rs__json_prefix(c);
    return RS_OK;
}

/* A tensor seen in an earlier blob (or file) must be declared the same way;
 * checked here too so tensors without shards are held to it and the error
 * names the disagreeing key. */
static rs_status_t check_agreement(rs__json_ctx_t *c, rs_sources_h s,
                                   const tensor_decl_t *t)
{
    const rs__source_tensor_t *old = rs__sources_find(s, t->name);
    char a[256], b[256];
    rs_status_t st = RS_OK;
    size_t mark;

    if (old == NULL)
        return RS_OK;
    if (old->ndim != t->ndim ||
        (t->ndim > 0 && memcmp(old->shape, t->full_shape,
                               (size_t)t->ndim * sizeof(int64_t)) != 0)) {
        rs__format_dims(a, sizeof(a), t->full_shape, t->ndim);
        rs__format_dims(b, sizeof(b), old->shape, old->ndim);
        mark = rs__json_push_key(c, "full_shape");
        st = rs__json_fail(c, "tensor '%s': full_shape %s disagrees with %s "
                          "from an earlier table", t->name, a, b);
    } else if (old->dtype != t->dtype) {
        mark = rs__json_push_key(c, "dtype");
        st = rs__json_fail(c, "tensor '%s': dtype %s disagrees with %s from an "
                          "earlier table", t->name, rs_dtype_name(t->dtype),
                          rs_dtype_name(old->dtype));
    } else {
        return RS_OK;
    }
    rs__json_pop(c, mark);
    return st;
}

static rs_status_t load_tensor_decl(rs__json_ctx_t *c, const json_t *obj,
                                    tensor_decl_t *t)
{
    int64_t elsize = 0;
    size_t mark;
    rs_status_t st;

    if ((st = rs__json_expect(c, obj, JSON_OBJECT)) != RS_OK ||
        (st = rs__json_field_string(c, obj, "name", 1, &t->name)) != RS_OK ||
        (st = rs__json_field_dtype(c, obj, "dtype", &t->dtype)) != RS_OK ||
        (st = rs__json_field_int(c, obj, "elsize", 1, 0, &elsize)) != RS_OK)
        return st;
    t->elsize = rs_dtype_size(t->dtype);
    if ((uint64_t)elsize != t->elsize) {
        mark = rs__json_push_key(c, "elsize");
        st = rs__json_fail(c, "tensor '%s': elsize %lld disagrees with dtype %s "
                          "(%zu bytes)", t->name, (long long)elsize,
                          rs_dtype_name(t->dtype), t->elsize);
        rs__json_pop(c, mark);
        return st;
    }
    if ((st = rs__json_field_dims(c, obj, "full_shape", t->full_shape,
                                 &t->ndim)) != RS_OK)
        return st;
    mark = rs__json_push_key(c, "full_shape");
    st = rs__json_check_numel(c, t->full_shape, t->ndim, t->elsize);
    rs__json_pop(c, mark);
    return st;
}

static rs_status_t load_tensor(rs__json_ctx_t *c, rs_sources_h s,
                               const char *agent, const json_t *obj)
{
    tensor_decl_t t;
    json_t *shards = NULL;
    rs_status_t st;

    if ((st = load_tensor_decl(c, obj, &t)) != RS_OK ||
        (st = check_agreement(c, s, &t)) != RS_OK ||
        (st = rs__json_field(c, obj, "shards", 1, JSON_ARRAY, &shards)) != RS_OK)
        return st;
    size_t mark = rs__json_push_key(c, "shards");
    for (size_t i = 0; st == RS_OK && i < json_array_size(shards); i++) {
        size_t imark = rs__json_push_index(c, i);
        st = load_shard(c, s, &t, agent, json_array_get(shards, i));
        rs__json_pop(c, imark);
    }
    rs__json_pop(c, mark);
    return st;
}

static rs_status_t load_blob(rs__json_ctx_t *c, rs_sources_h s,
                             const json_t *blob)
{
    rs_table_info_t info = {0};
    json_t *tensors = NULL;
    rs_status_t st;

    info.publisher_step = -1;
    if ((st = rs__json_check_schema(c, blob, SHARD_TABLE_SCHEMA)) != RS_OK ||
        (st = rs__json_field_string(c, blob, "agent_name", 1,
                                   &info.agent_name)) != RS_OK ||
        (st = rs__json_field_string(c, blob, "metadata_endpoint", 0,
                                   &info.metadata_endpoint)) != RS_OK ||
        (st = rs__json_field_string(c, blob, "agent_meta_b64", 0,
                                   &info.agent_meta_b64)) != RS_OK ||
        (st = rs__json_field_int(c, blob, "publisher_step", 0, 0,
                                &info.publisher_step)) != RS_OK ||
        (st = rs__json_field(c, blob, "tensors", 1, JSON_ARRAY, &tensors)) !=
            RS_OK)
        return st;
    size_t mark = rs__json_push_key(c, "tensors");
    for (size_t i = 0; st == RS_OK && i < json_array_size(tensors); i++) {
        size_t imark = rs__json_push_index(c, i);
        st = load_tensor(c, s, info.agent_name, json_array_get(tensors, i));
        rs__json_pop(c, imark);
    }
    rs__json_pop(c, mark);
    if (st == RS_OK && rs_sources_add_table(s, &info, c->diag) != RS_OK)
        st = rs__json_prefix(c);
    return st;
}

static rs_status_t load_root(rs__json_ctx_t *c, rs_sources_h s,
                             const json_t *root)
{
    rs_status_t st = RS_OK;

    if (!json_is_array(root))
        return load_blob(c, s, root);
    for (size_t i = 0; st == RS_OK && i < json_array_size(root); i++) {
        size_t mark = rs__json_push_index(c, i);
        st = load_blob(c, s, json_array_get(root, i));
        rs__json_pop(c, mark);
    }
    return st;
}

/* rs__json_root_fn: the document's blobs into the sources *arg, all or
 * none of them. */
static rs_status_t load_doc(rs__json_ctx_t *c, json_t *root, void *arg)
{
    rs_sources_h s = arg;
    rs__sources_mark_t mark;

    if (rs__sources_mark(s, &mark) != RS_OK)
        return rs__diag_set(c->diag, RS_ERR_NO_MEMORY, "%s: out of memory",
                            c->origin);
    rs_status_t st = load_root(c, s, root);
    if (st != RS_OK)
        rs__sources_rollback(s, &mark);
    rs__sources_mark_free(&mark);
    return st;
}

rs_status_t rs_sources_load_string(rs_sources_h s, const char *json,
                                   size_t len, const char *origin,
                                   rs_diag_t *diag)
{
    if (s == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL sources");
    return rs__json_load_text(json, len, origin, RS_JSON_LIMIT_CONFIGURED,
                              diag, load_doc, s);
}

rs_status_t rs_sources_load_file(rs_sources_h s, const char *path,
                                 rs_diag_t *diag)
{
    if (s == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL sources");
    return rs__json_load_file(path, RS_JSON_LIMIT_CONFIGURED, diag, load_doc,
                              s);
}
