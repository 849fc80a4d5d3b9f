/* Internal layout of merged shard tables, shared by the sources model, its
 * JSON loader and the planner. */
#ifndef RS_PLAN_SOURCES_IMPL_H
#define RS_PLAN_SOURCES_IMPL_H

#include <pthread.h>

#include "core/arena.h"
#include "core/strmap.h"
#include "core/vec.h"
#include "reshard/sources.h"

typedef struct rs__source_shard {
    uint32_t session;
    int64_t device_id;
    uint64_t addr;
    int64_t *offset;
    int64_t *shape;
    int64_t numel;
    const char *digest;
} rs__source_shard_t;

struct rs__grid; /* the planner's disjoint cell index, see model/grid.h */

/* A shard's place: tensor index, shard index in the tensor. */
typedef struct rs__shard_pos {
    uint32_t tensor, shard;
} rs__shard_pos_t;

typedef struct rs__source_tensor {
    const char *name;
    rs_dtype_t dtype;
    size_t elsize;
    int ndim;
    int64_t *shape;
    RS_VEC(rs__source_shard_t, shards);
    struct rs__grid *grid; /* built on demand, dropped when shards change */
    /* One shard, holding the whole tensor (no dim empty): kept with the
     * shards so that a plan walks such a tensor without a grid. */
    int sole_whole;
    uint64_t undo_gen;    /* the mark whose undo log holds its shard count */
    uint64_t hash;        /* rs__hash_str(name), as the index holds it */
} rs__source_tensor_t;

/* A rollback point: counts at the time of the mark. The shard counts of
 * tensors that existed then are logged by add_shard on their first change
 * after the mark, so marking and rolling back cost what changed, not the
 * number of tensors. One mark at a time. */
typedef struct rs__sources_mark {
    rs_sources_h sources;
    size_t tensors, tables, sessions, nshards;
} rs__sources_mark_t;

typedef struct rs__source_undo {
    size_t tensor;
    size_t shards_len; /* before the mark's first change */
} rs__source_undo_t;

struct rs_sources {
    rs__arena_t arena;
    RS_VEC(rs__source_tensor_t, tensors);
    rs__strmap_t tensor_index;
    RS_VEC(const char *, sessions);
    rs__strmap_t session_index;
    RS_VEC(rs_table_info_t, tables);
    /* Plans built concurrently against these sources build each tensor's
     * grid once, under this lock (rs__planner_walk), and so do readers of
     * the position index below (locate in sources.c). */
    pthread_mutex_t grid_lock;
    rs__strmap_t table_index;  /* agent name -> first table of that agent */
    size_t nshards;           /* kept by add_shard and rollback */
    /* Global shard order (tensor by tensor) as (tensor, shard) pairs, so
     * rs_sources_shard is O(1). Extended while shards arrive in that order,
     * dropped otherwise and rebuilt in O(shards) by the next lookup. */
    uint32_t *flat_tensor, *flat_shard;
    size_t flat_len, flat_cap;
    int flat_valid;
    /* Where each added shard went, in the order added, while logging
     * (sources_log.c): what lets a caller find a table's shards again in
     * the order its document lists them. */
    int poslog_on;
    RS_VEC(struct rs__shard_pos, poslog);
    /* the mark in force (undo_gen != 0): tensors it covers, its log */
    uint64_t undo_gen, undo_next;
    size_t undo_tensors;
    RS_VEC(rs__source_undo_t, undo);
    /* Some tensor ever added has a name with RS_QUANT_NAME_SEP (kept
     * through rollbacks): while 0, no quantized copy's "<src>#<spec>" or
     * scales can be published, and the planner looks none up
     * (rs__sources_may_derive). */
    int named_derived;
};

/* Loaders use these to make a whole file all-or-nothing. */
rs_status_t rs__sources_mark(rs_sources_h s, rs__sources_mark_t *mark);
void rs__sources_rollback(rs_sources_h s, rs__sources_mark_t *mark);
void rs__sources_mark_free(rs__sources_mark_t *mark);

/* Tensor by name, or NULL. */
rs__source_tensor_t *rs__sources_find(rs_sources_h s, const char *name);
/* 1 when shard s of t starts at 0 and has t's shape in every dim. */
static inline int rs__shard_is_whole(const rs__source_tensor_t *t,
                                     const rs__source_shard_t *s)
{
    for (int d = 0; d < t->ndim; d++)
        if (s->offset[d] != 0 || s->shape[d] != t->shape[d])
            return 0;
    return 1;
}
/* 1 when the tensor has exactly one shard and it holds all of it (no dim
 * empty); what rs__source_tensor_t.sole_whole caches. O(ndim). */
int rs__sources_sole_whole(const rs__source_tensor_t *t);
/* Readies the lookup of a name by its rs__hash_str: `step` 0 asks for
 * the table slot it hashes to, 1 (that slot read, so best some lookups
 * after step 0) for the first candidate's key and tensor record. Only
 * prefetches: a caller about to look up many names in a large table has
 * their cache misses overlap instead of taking them one after another.
 * O(1), no effect on any result. */
void rs__sources_prefetch(rs_sources_h s, uint64_t hash, int step);
/* 0 when no tensor these sources ever held has RS_QUANT_NAME_SEP in its
 * name: a name with one is then not published, and its lookup (a hash
 * and a probe of a table of some 200,000 tensors that misses) can be
 * skipped. 1 otherwise. O(1). */
int rs__sources_may_derive(rs_sources_h s);
/* rs__sources_find with rs__hash_str(name) already known. */
rs__source_tensor_t *rs__sources_find_hashed(rs_sources_h s, const char *name,
                                         uint64_t hash);

/* Rank, bounds and address-range checks of one shard that need no other
 * shard (a box inside its full shape, dim by dim): RS_ERR_INPUT naming the
 * tensor, session, dim and values; *numel_p its elements. Also what a
 * publisher checks of a box it is asked to register. */
rs_status_t rs__sources_check_shard(const rs_shard_desc_t *d,
                                    rs_diag_t *diag, int64_t *numel_p);

#endif
