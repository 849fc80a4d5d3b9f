/* The merged-sources model: tensors by name, their shards, the sessions that
 * publish them, and the tables' metadata. Validates every shard on entry so
 * the planner can trust boxes and address ranges. Lookups are indexed
 * (tensor, session and agent by hash, shard by position) so a caller that
 * walks every shard pays O(shards), not O(shards x tensors). */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "model/grid.h"
#include "model/sources_impl.h"
#include "reshard/quant.h"

rs_status_t rs_sources_create(rs_sources_h *sources_p)
{
    if (sources_p == NULL)
        return RS_ERR_INVALID_ARG;
    rs_sources_h s = calloc(1, sizeof(*s));
    if (s == NULL)
        return RS_ERR_NO_MEMORY;
    rs__arena_init(&s->arena);
    rs__strmap_init(&s->tensor_index);
    rs__strmap_init(&s->session_index);
    pthread_mutex_init(&s->grid_lock, NULL);
    rs__strmap_init(&s->table_index);
    s->flat_valid = 1; /* the empty order */
    *sources_p = s;
    return RS_OK;
}

void rs_sources_destroy(rs_sources_h s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->tensors_len; i++) {
        free(s->tensors[i].shards);
        rs__grid_destroy(s->tensors[i].grid);
    }
    free(s->tensors);
    free(s->sessions);
    free(s->tables);
    free(s->flat_tensor);
    free(s->flat_shard);
    free(s->undo);
    free(s->poslog);
    rs__strmap_free(&s->tensor_index);
    rs__strmap_free(&s->session_index);
    rs__strmap_free(&s->table_index);
    rs__arena_free(&s->arena);
    pthread_mutex_destroy(&s->grid_lock);
    free(s);
}

rs__source_tensor_t *rs__sources_find(rs_sources_h s, const char *name)
{
    uint32_t idx;
    return rs__strmap_get(&s->tensor_index, name, &idx) ? &s->tensors[idx] : NULL;
}

rs__source_tensor_t *rs__sources_find_hashed(rs_sources_h s, const char *name,
                                         uint64_t hash)
{
    uint32_t idx;
    return rs__strmap_get_hashed(&s->tensor_index, name, hash, &idx)
               ? &s->tensors[idx] : NULL;
}

void rs__sources_prefetch(rs_sources_h s, uint64_t hash, int step)
{
    const rs__strmap_t *m = &s->tensor_index;
    if (m->cap == 0)
        return;
    const rs__strmap_slot_t *sl = &m->slots[(size_t)hash & (m->cap - 1)];
    if (step == 0) {
        __builtin_prefetch(sl);
        return;
    }
    if (sl->key == NULL || sl->tag != (uint32_t)(hash >> 32))
        return; /* a probe past the first slot is left to the lookup */
    __builtin_prefetch(sl->key);
    __builtin_prefetch(&s->tensors[sl->value]);
}

static rs_status_t intern_session(rs_sources_h s, const char *name,
                                  uint32_t *id_p)
{
    uint32_t id;
    if (rs__strmap_get(&s->session_index, name, &id)) {
        *id_p = id;
        return RS_OK;
    }
    const char *copy = rs__arena_strdup(&s->arena, name);
    id = (uint32_t)s->sessions_len;
    if (copy == NULL || !RS_VEC_PUSH(s, sessions, copy) ||
        !rs__strmap_put(&s->session_index, copy, id))
        return RS_ERR_NO_MEMORY;
    *id_p = id;
    return RS_OK;
}

int rs__sources_may_derive(rs_sources_h s) { return s->named_derived; }

int rs__sources_sole_whole(const rs__source_tensor_t *t)
{
    return t->shards_len == 1 && t->shards[0].numel != 0 &&
           rs__shard_is_whole(t, &t->shards[0]);
}

static int same_dims(const int64_t *a, const int64_t *b, int n)
{
    return n == 0 || memcmp(a, b, (size_t)n * sizeof(int64_t)) == 0;
}

/* Finds or creates the tensor a shard belongs to; checks agreement. */
static rs_status_t tensor_for(rs_sources_h s, const rs_shard_desc_t *d,
                              rs_diag_t *diag, rs__source_tensor_t **t_p)
{
    const uint64_t hash = rs__hash_str(d->tensor);
    rs__source_tensor_t *t = rs__sources_find_hashed(s, d->tensor, hash);
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
    rs__source_tensor_t nt = {0};
    s->named_derived |= strchr(d->tensor, RS_QUANT_NAME_SEP) != NULL;
    nt.name = rs__arena_strdup(&s->arena, d->tensor);
    nt.hash = hash;
    nt.dtype = d->dtype;
    nt.elsize = d->elsize;
    nt.ndim = d->ndim;
    nt.shape = rs__arena_memdup(&s->arena, d->full_shape,
                               (size_t)(d->ndim ? d->ndim : 1) * sizeof(int64_t));
    if (nt.name == NULL || nt.shape == NULL ||
        !rs__strmap_put_hashed(&s->tensor_index, nt.name, hash,
                               (uint32_t)s->tensors_len) ||
        !RS_VEC_PUSH(s, tensors, nt))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    *t_p = &s->tensors[s->tensors_len - 1];
    return RS_OK;
}

rs_status_t rs__sources_check_shard(const rs_shard_desc_t *d,
                                    rs_diag_t *diag, int64_t *numel_p)
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
    if (!rs__numel(d->full_shape, d->ndim, &full_numel) ||
        !rs__mul_i64(full_numel, (int64_t)d->elsize, &nbytes))
        return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': full_shape is "
                            "negative or overflows", d->tensor);
    for (int i = 0; i < d->ndim; i++) {
        int64_t end_i;
        if (d->offset[i] < 0 || d->shape[i] < 0 ||
            !rs__add_i64(d->offset[i], d->shape[i], &end_i) ||
            end_i > d->full_shape[i])
            return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': shard of "
                                "session '%s' leaves the full shape in dim %d "
                                "(offset %lld, shape %lld, full %lld)",
                                d->tensor, d->session, i,
                                (long long)d->offset[i], (long long)d->shape[i],
                                (long long)d->full_shape[i]);
    }
    if (!rs__numel(d->shape, d->ndim, &numel) ||
        !rs__mul_i64(numel, (int64_t)d->elsize, &nbytes) ||
        !rs__add_u64(d->addr, (uint64_t)nbytes, &end))
        return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': shard of session "
                            "'%s' at addr %llu overflows the address space",
                            d->tensor, d->session,
                            (unsigned long long)d->addr);
    *numel_p = numel;
    return RS_OK;
}

static int log_undo(rs_sources_h s, rs__source_tensor_t *t);

static int grow_flat(rs_sources_h s, size_t need)
{
    if (need <= s->flat_cap)
        return 1;
    size_t cap = s->flat_cap ? s->flat_cap * 2 : 256;
    while (cap < need)
        cap *= 2;
    uint32_t *t = realloc(s->flat_tensor, cap * sizeof(uint32_t));
    if (t != NULL)
        s->flat_tensor = t;
    uint32_t *k = realloc(s->flat_shard, cap * sizeof(uint32_t));
    if (k != NULL)
        s->flat_shard = k;
    if (t == NULL || k == NULL)
        return 0;
    s->flat_cap = cap;
    return 1;
}

/* A shard just appended to tensor t: it is also last in the global order
 * when t is the last tensor, so the position index extends; otherwise every
 * later position moves and the index is dropped until the next lookup. */
static void note_flat(rs_sources_h s, const rs__source_tensor_t *t)
{
    size_t ti = (size_t)(t - s->tensors);
    if (!s->flat_valid || ti + 1 != s->tensors_len ||
        !grow_flat(s, s->flat_len + 1)) {
        s->flat_valid = 0;
        return;
    }
    s->flat_tensor[s->flat_len] = (uint32_t)ti;
    s->flat_shard[s->flat_len] = (uint32_t)(t->shards_len - 1);
    s->flat_len++;
}

/* Rebuilds the position index in O(shards); 0 on exhaustion. */
static int build_flat(rs_sources_h s)
{
    if (!grow_flat(s, s->nshards + 1))
        return 0;
    size_t n = 0;
    for (size_t t = 0; t < s->tensors_len; t++) {
        for (size_t k = 0; k < s->tensors[t].shards_len; k++, n++) {
            s->flat_tensor[n] = (uint32_t)t;
            s->flat_shard[n] = (uint32_t)k;
        }
    }
    s->flat_len = n;
    __atomic_store_n(&s->flat_valid, 1, __ATOMIC_RELEASE);
    return 1;
}

rs_status_t rs_sources_add_shard(rs_sources_h s, const rs_shard_desc_t *d,
                                 rs_diag_t *diag)
{
    rs__source_tensor_t *t = NULL;
    rs__source_shard_t sh = {0};
    rs_status_t st;

    if (s == NULL || d == NULL || d->tensor == NULL || d->session == NULL ||
        (d->ndim > 0 && (d->full_shape == NULL || d->offset == NULL ||
                         d->shape == NULL)))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    if ((st = rs__sources_check_shard(d, diag, &sh.numel)) != RS_OK ||
        (st = tensor_for(s, d, diag, &t)) != RS_OK)
        return st;
    if (intern_session(s, d->session, &sh.session) != RS_OK)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    size_t dims = (size_t)(d->ndim ? d->ndim : 1) * sizeof(int64_t);
    sh.device_id = d->device_id;
    sh.addr = d->addr;
    sh.offset = rs__arena_memdup(&s->arena, d->offset, dims);
    sh.shape = rs__arena_memdup(&s->arena, d->shape, dims);
    sh.digest = d->digest ? rs__arena_strdup(&s->arena, d->digest) : NULL;
    if (t->shards_len >= UINT32_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': more than %u "
                            "shards", d->tensor, (unsigned)UINT32_MAX);
    if (!log_undo(s, t) || sh.offset == NULL || sh.shape == NULL || (d->digest && !sh.digest) ||
        !RS_VEC_PUSH(t, shards, sh))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    s->nshards++;
    if (s->poslog_on &&
        !RS_VEC_PUSH(s, poslog, ((rs__shard_pos_t){
                                    (uint32_t)(t - s->tensors),
                                    (uint32_t)(t->shards_len - 1)})))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    note_flat(s, t);
    rs__grid_destroy(t->grid);
    t->grid = NULL;
    t->sole_whole = rs__sources_sole_whole(t);
    return RS_OK;
}

static const char *dup_opt(rs__arena_t *a, const char *s)
{
    return s != NULL ? rs__arena_strdup(a, s) : NULL;
}

rs_status_t rs_sources_add_table(rs_sources_h s, const rs_table_info_t *table,
                                 rs_diag_t *diag)
{
    rs_table_info_t t;
    if (s == NULL || table == NULL || table->agent_name == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    t.agent_name = rs__arena_strdup(&s->arena, table->agent_name);
    t.metadata_endpoint = dup_opt(&s->arena, table->metadata_endpoint);
    t.agent_meta_b64 = dup_opt(&s->arena, table->agent_meta_b64);
    t.publisher_step = table->publisher_step;
    uint32_t first;
    if (t.agent_name == NULL || !RS_VEC_PUSH(s, tables, t) ||
        (!rs__strmap_get(&s->table_index, t.agent_name, &first) &&
         !rs__strmap_put(&s->table_index, t.agent_name,
                        (uint32_t)(s->tables_len - 1))))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    return RS_OK;
}

long rs_sources_find_table(rs_sources_h s, const char *agent_name)
{
    uint32_t idx;
    if (s == NULL || agent_name == NULL ||
        !rs__strmap_get(&s->table_index, agent_name, &idx))
        return -1;
    return (long)idx;
}

size_t rs_sources_num_tensors(rs_sources_h s) { return s->tensors_len; }

size_t rs_sources_num_shards(rs_sources_h s) { return s->nshards; }

/* Position -> (tensor, shard): the index, or a walk when it cannot be
 * built for want of memory. Built sources are read from several threads at
 * once, so the index is rebuilt under the sources' lock. */
static void locate(rs_sources_h s, size_t index, size_t *t_p, size_t *k_p)
{
    if (!__atomic_load_n(&s->flat_valid, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&s->grid_lock);
        if (!s->flat_valid)
            build_flat(s);
        pthread_mutex_unlock(&s->grid_lock);
    }
    if (__atomic_load_n(&s->flat_valid, __ATOMIC_ACQUIRE)) {
        *t_p = s->flat_tensor[index];
        *k_p = s->flat_shard[index];
        return;
    }
    size_t t = 0;
    while (index >= s->tensors[t].shards_len) {
        index -= s->tensors[t].shards_len;
        t++;
    }
    *t_p = t;
    *k_p = index;
}

static void shard_desc(rs_sources_h s, const rs__source_tensor_t *tensor,
                       const rs__source_shard_t *sh, rs_shard_desc_t *shard_p)
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
    size_t t, k;
    locate(s, index, &t, &k);
    shard_desc(s, &s->tensors[t], &s->tensors[t].shards[k], shard_p);
}

size_t rs_sources_num_tables(rs_sources_h s) { return s->tables_len; }

void rs_sources_table(rs_sources_h s, size_t index, rs_table_info_t *table_p)
{
    *table_p = s->tables[index];
}

rs_status_t rs__sources_mark(rs_sources_h s, rs__sources_mark_t *mark)
{
    mark->sources = s;
    mark->tensors = s->tensors_len;
    mark->tables = s->tables_len;
    mark->sessions = s->sessions_len;
    mark->nshards = s->nshards;
    s->undo_gen = ++s->undo_next;
    s->undo_tensors = s->tensors_len;
    s->undo_len = 0;
    return RS_OK;
}

/* Before tensor t changes under a mark: logs its shard count once. */
static int log_undo(rs_sources_h s, rs__source_tensor_t *t)
{
    size_t ti = (size_t)(t - s->tensors);
    if (s->undo_gen == 0 || ti >= s->undo_tensors || t->undo_gen == s->undo_gen)
        return 1;
    rs__source_undo_t u = {ti, t->shards_len};
    if (!RS_VEC_PUSH(s, undo, u))
        return 0;
    t->undo_gen = s->undo_gen;
    return 1;
}

static void rebuild_indexes(rs_sources_h s)
{
    rs__strmap_free(&s->tensor_index);
    rs__strmap_free(&s->session_index);
    rs__strmap_free(&s->table_index);
    for (size_t i = 0; i < s->tensors_len; i++)
        rs__strmap_put_hashed(&s->tensor_index, s->tensors[i].name,
                              s->tensors[i].hash, (uint32_t)i);
    for (size_t i = 0; i < s->sessions_len; i++)
        rs__strmap_put(&s->session_index, s->sessions[i], (uint32_t)i);
    for (size_t i = s->tables_len; i-- > 0;)
        rs__strmap_put(&s->table_index, s->tables[i].agent_name, (uint32_t)i);
}

/* Drops everything added since the mark: tensors created since are freed,
 * tensors that grew get their logged counts back. Arena memory stays
 * allocated (it is freed with the sources); the name indexes are rebuilt
 * from what remains. */
void rs__sources_rollback(rs_sources_h s, rs__sources_mark_t *mark)
{
    for (size_t i = mark->tensors; i < s->tensors_len; i++) {
        free(s->tensors[i].shards);
        rs__grid_destroy(s->tensors[i].grid);
    }
    for (size_t k = 0; k < s->undo_len; k++) {
        rs__source_tensor_t *t = &s->tensors[s->undo[k].tensor];
        t->shards_len = s->undo[k].shards_len;
        rs__grid_destroy(t->grid);
        t->grid = NULL;
        t->sole_whole = rs__sources_sole_whole(t);
    }
    s->undo_len = 0;
    s->tensors_len = mark->tensors;
    s->tables_len = mark->tables;
    s->sessions_len = mark->sessions;
    s->nshards = mark->nshards;
    s->flat_valid = 0;
    rebuild_indexes(s);
}

void rs__sources_mark_free(rs__sources_mark_t *mark)
{
    if (mark->sources == NULL)
        return;
    mark->sources->undo_gen = 0;
    mark->sources->undo_len = 0;
    mark->sources = NULL;
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
        const rs__source_tensor_t *tensor = &from->tensors[t];
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
    rs__sources_mark_t mark;
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
