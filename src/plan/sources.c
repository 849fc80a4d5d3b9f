/* The merged-sources model: tensors by name, their shards, the sessions that
 * publish them, and the tables' metadata. Validates every shard on entry so
 * the planner can trust boxes and address ranges. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "plan/grid.h"
#include "plan/sources_impl.h"

rs_status_t rs_sources_create(rs_sources_h *sources_p)
{
    if (sources_p == NULL)
        return RS_ERR_INVALID_ARG;
    rs_sources_h s = calloc(1, sizeof(*s));
    if (s == NULL)
        return RS_ERR_NO_MEMORY;
    rs_arena_init(&s->arena);
    rs_strmap_init(&s->tensor_index);
    rs_strmap_init(&s->session_index);
    *sources_p = s;
    return RS_OK;
}

void rs_sources_destroy(rs_sources_h s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->tensors_len; i++) {
        free(s->tensors[i].shards);
        rs_grid_destroy(s->tensors[i].grid);
    }
    free(s->tensors);
    free(s->sessions);
    free(s->tables);
    rs_strmap_free(&s->tensor_index);
    rs_strmap_free(&s->session_index);
    rs_arena_free(&s->arena);
    free(s);
}

rs_src_tensor_t *rs__sources_find(rs_sources_h s, const char *name)
{
    uint32_t idx;
    return rs_strmap_get(&s->tensor_index, name, &idx) ? &s->tensors[idx] : NULL;
}

static rs_status_t intern_session(rs_sources_h s, const char *name,
                                  uint32_t *id_p)
{
    uint32_t id;
    if (rs_strmap_get(&s->session_index, name, &id)) {
        *id_p = id;
        return RS_OK;
    }
    const char *copy = rs_arena_strdup(&s->arena, name);
    id = (uint32_t)s->sessions_len;
    if (copy == NULL || !RS_VEC_PUSH(s, sessions, copy) ||
        !rs_strmap_put(&s->session_index, copy, id))
        return RS_ERR_NO_MEMORY;
    *id_p = id;
    return RS_OK;
}

static int same_dims(const int64_t *a, const int64_t *b, int n)
{
    return n == 0 || memcmp(a, b, (size_t)n * sizeof(int64_t)) == 0;
}

/* Finds or creates the tensor a shard belongs to; checks agreement. */
static rs_status_t tensor_for(rs_sources_h s, const rs_shard_desc_t *d,
                              rs_diag_t *diag, rs_src_tensor_t **t_p)
{
    rs_src_tensor_t *t = rs__sources_find(s, d->tensor);
    if (t != NULL) {
        if (t->ndim != d->ndim || !same_dims(t->shape, d->full_shape, d->ndim))
            return rs__diag_set(diag, RS_ERR_INPUT,
                                "tensor '%s': full_shape disagrees with an "
                                "earlier table", d->tensor);
        if (t->dtype != d->dtype || t->elsize != d->elsize)
            return rs__diag_set(diag, RS_ERR_INPUT,
                                "tensor '%s': dtype or elsize disagrees with an "
                                "earlier table", d->tensor);
        *t_p = t;
        return RS_OK;
    }
    rs_src_tensor_t nt = {0};
    nt.name = rs_arena_strdup(&s->arena, d->tensor);
    nt.dtype = d->dtype;
    nt.elsize = d->elsize;
    nt.ndim = d->ndim;
    nt.shape = rs_arena_memdup(&s->arena, d->full_shape,
                               (size_t)(d->ndim ? d->ndim : 1) * sizeof(int64_t));
    if (nt.name == NULL || nt.shape == NULL ||
        !rs_strmap_put(&s->tensor_index, nt.name, (uint32_t)s->tensors_len) ||
        !RS_VEC_PUSH(s, tensors, nt))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    *t_p = &s->tensors[s->tensors_len - 1];
    return RS_OK;
}

/* Rank, bounds and address-range checks that need no other shard. */
static rs_status_t check_shard(const rs_shard_desc_t *d, rs_diag_t *diag,
                               int64_t *numel_p)
{
    int64_t full_numel, numel, nbytes;
    uint64_t end;

    if (d->ndim < 0 || d->ndim > RS_MAX_DIMS)
        return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': rank %d outside "
                            "0..%d", d->tensor, d->ndim, RS_MAX_DIMS);
    if (rs_dtype_size(d->dtype) == 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': invalid dtype",
                            d->tensor);
    if (d->elsize != rs_dtype_size(d->dtype))
        return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': elsize %zu "
                            "disagrees with dtype %s (%zu bytes)", d->tensor,
                            d->elsize, rs_dtype_name(d->dtype),
                            rs_dtype_size(d->dtype));
    if (!rs_numel(d->full_shape, d->ndim, &full_numel) ||
        !rs_mul_i64(full_numel, (int64_t)d->elsize, &nbytes))
        return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': full_shape is "
                            "negative or overflows", d->tensor);
    for (int i = 0; i < d->ndim; i++) {
        int64_t end_i;
        if (d->offset[i] < 0 || d->shape[i] < 0 ||
            !rs_add_i64(d->offset[i], d->shape[i], &end_i) ||
            end_i > d->full_shape[i])
            return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': shard of "
                                "session '%s' leaves the full shape in dim %d "
                                "(offset %lld, shape %lld, full %lld)",
                                d->tensor, d->session, i,
                                (long long)d->offset[i], (long long)d->shape[i],
                                (long long)d->full_shape[i]);
    }
    if (!rs_numel(d->shape, d->ndim, &numel) ||
        !rs_mul_i64(numel, (int64_t)d->elsize, &nbytes) ||
        !rs_add_u64(d->addr, (uint64_t)nbytes, &end))
        return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': shard of session "
                            "'%s' at addr %llu overflows the address space",
                            d->tensor, d->session,
                            (unsigned long long)d->addr);
    *numel_p = numel;
    return RS_OK;
}

rs_status_t rs_sources_add_shard(rs_sources_h s, const rs_shard_desc_t *d,
                                 rs_diag_t *diag)
{
    rs_src_tensor_t *t = NULL;
    rs_src_shard_t sh = {0};
    rs_status_t st;

    if (s == NULL || d == NULL || d->tensor == NULL || d->session == NULL ||
        (d->ndim > 0 && (d->full_shape == NULL || d->offset == NULL ||
                         d->shape == NULL)))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    if ((st = check_shard(d, diag, &sh.numel)) != RS_OK ||
        (st = tensor_for(s, d, diag, &t)) != RS_OK)
        return st;
    if (intern_session(s, d->session, &sh.session) != RS_OK)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    size_t dims = (size_t)(d->ndim ? d->ndim : 1) * sizeof(int64_t);
    sh.device_id = d->device_id;
    sh.addr = d->addr;
    sh.offset = rs_arena_memdup(&s->arena, d->offset, dims);
    sh.shape = rs_arena_memdup(&s->arena, d->shape, dims);
    sh.digest = d->digest ? rs_arena_strdup(&s->arena, d->digest) : NULL;
    if (sh.offset == NULL || sh.shape == NULL || (d->digest && !sh.digest) ||
        !RS_VEC_PUSH(t, shards, sh))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    rs_grid_destroy(t->grid);
    t->grid = NULL;
    return RS_OK;
}

static const char *dup_opt(rs_arena_t *a, const char *s)
{
    return s != NULL ? rs_arena_strdup(a, s) : NULL;
}

rs_status_t rs_sources_add_table(rs_sources_h s, const rs_table_info_t *table,
                                 rs_diag_t *diag)
{
    rs_table_info_t t;
    if (s == NULL || table == NULL || table->agent_name == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    t.agent_name = rs_arena_strdup(&s->arena, table->agent_name);
    t.metadata_endpoint = dup_opt(&s->arena, table->metadata_endpoint);
    t.agent_meta_b64 = dup_opt(&s->arena, table->agent_meta_b64);
    t.publisher_step = table->publisher_step;
    if (t.agent_name == NULL || !RS_VEC_PUSH(s, tables, t))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    return RS_OK;
}

size_t rs_sources_num_tensors(rs_sources_h s) { return s->tensors_len; }

size_t rs_sources_num_shards(rs_sources_h s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->tensors_len; i++)
        n += s->tensors[i].shards_len;
    return n;
}

static void shard_desc(rs_sources_h s, const rs_src_tensor_t *tensor,
                       const rs_src_shard_t *sh, rs_shard_desc_t *shard_p)
{
    shard_p->tensor = tensor->name;
    shard_p->dtype = tensor->dtype;
    shard_p->elsize = tensor->elsize;
    shard_p->ndim = tensor->ndim;
    shard_p->full_shape = tensor->shape;
    shard_p->session = s->sessions[sh->session];
    shard_p->device_id = sh->device_id;
    shard_p->addr = sh->addr;
    shard_p->offset = sh->offset;
    shard_p->shape = sh->shape;
    shard_p->digest = sh->digest;
}

void rs_sources_shard(rs_sources_h s, size_t index, rs_shard_desc_t *shard_p)
{
    size_t t = 0;
    while (index >= s->tensors[t].shards_len) {
        index -= s->tensors[t].shards_len;
        t++;
    }
    shard_desc(s, &s->tensors[t], &s->tensors[t].shards[index], shard_p);
}

size_t rs_sources_num_tables(rs_sources_h s) { return s->tables_len; }

void rs_sources_table(rs_sources_h s, size_t index, rs_table_info_t *table_p)
{
    *table_p = s->tables[index];
}

rs_status_t rs__sources_mark(rs_sources_h s, rs_sources_mark_t *mark)
{
    mark->tensors = s->tensors_len;
    mark->tables = s->tables_len;
    mark->sessions = s->sessions_len;
    mark->shard_counts = malloc((s->tensors_len + 1) * sizeof(size_t));
    if (mark->shard_counts == NULL)
        return RS_ERR_NO_MEMORY;
    for (size_t i = 0; i < s->tensors_len; i++)
        mark->shard_counts[i] = s->tensors[i].shards_len;
    return RS_OK;
}

/* Drops everything added since the mark. Arena memory stays allocated (it is
 * freed with the sources); indexes are rebuilt from what remains. */
void rs__sources_rollback(rs_sources_h s, rs_sources_mark_t *mark)
{
    for (size_t i = 0; i < s->tensors_len; i++) {
        if (i >= mark->tensors) {
            free(s->tensors[i].shards);
        } else if (s->tensors[i].shards_len != mark->shard_counts[i]) {
            s->tensors[i].shards_len = mark->shard_counts[i];
        }
        rs_grid_destroy(s->tensors[i].grid);
        s->tensors[i].grid = NULL;
    }
    s->tensors_len = mark->tensors;
    s->tables_len = mark->tables;
    s->sessions_len = mark->sessions;
    rs_strmap_free(&s->tensor_index);
    rs_strmap_free(&s->session_index);
    for (size_t i = 0; i < s->tensors_len; i++)
        rs_strmap_put(&s->tensor_index, s->tensors[i].name, (uint32_t)i);
    for (size_t i = 0; i < s->sessions_len; i++)
        rs_strmap_put(&s->session_index, s->sessions[i], (uint32_t)i);
}

void rs__sources_mark_free(rs_sources_mark_t *mark)
{
    free(mark->shard_counts);
    mark->shard_counts = NULL;
}

/* Sessions first, in `from`'s order, so session ids come out as if the
 * shards had been added here directly. */
static rs_status_t merge_all(rs_sources_h s, rs_sources_h from,
                             rs_diag_t *diag)
{
    rs_status_t st = RS_OK;
    uint32_t id;

    for (size_t i = 0; i < from->sessions_len; i++)
        if (intern_session(s, from->sessions[i], &id) != RS_OK)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    for (size_t t = 0; st == RS_OK && t < from->tensors_len; t++) {
        const rs_src_tensor_t *tensor = &from->tensors[t];
        for (size_t j = 0; st == RS_OK && j < tensor->shards_len; j++) {
            rs_shard_desc_t d;
            shard_desc(from, tensor, &tensor->shards[j], &d);
            st = rs_sources_add_shard(s, &d, diag);
        }
    }
    for (size_t i = 0; st == RS_OK && i < from->tables_len; i++)
        st = rs_sources_add_table(s, &from->tables[i], diag);
    return st;
}

rs_status_t rs_sources_merge(rs_sources_h s, rs_sources_h from,
                             rs_diag_t *diag)
{
    rs_sources_mark_t mark;
    rs_status_t st;

    if (s == NULL || from == NULL || s == from)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "rs_sources_merge: NULL or identical sources");
    if (rs__sources_mark(s, &mark) != RS_OK)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    st = merge_all(s, from, diag);
    if (st != RS_OK)
        rs__sources_rollback(s, &mark);
    rs__sources_mark_free(&mark);
    return st;
}
