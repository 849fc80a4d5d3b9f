/* The boxes a plan has resolved, by geometry: copies of a model repeat a few
 * geometries (every expert's slice, every layer's projections) thousands of
 * times, and replaying the ops and mapping the view costs more than the
 * walk of a one-run copy. The capture numbers its copies' geometries
 * (capture_geom.c), so a key is an id and the source's shape. */
#ifndef RS_PLAN_BOX_MEMO_H
#define RS_PLAN_BOX_MEMO_H

#include <stddef.h>
#include <stdint.h>

#include "geom/box.h"

/* A geometry: the source's full shape and the capture's geometry id of the
 * copy (its op chain and the destination's shape and strides; the dest
 * offset does not change the box). The shape is borrowed from the sources
 * for the life of one build. */
typedef struct rs__geom_key {
    uint32_t geom;
    int src_ndim;
    const int64_t *src_shape;
} rs__geom_key_t;

typedef struct rs__box_memo rs__box_memo_t;

/* What the planner learnt of a geometry's destination view: `span`, the
 * elements past its first that it reaches (the sum of (shape - 1) * stride),
 * once a copy found it in bounds and writing no element twice (a property of
 * the shape and strides alone). */
typedef struct rs__dest_fact {
    int known;
    int64_t span;
    /* And of its box walked in a buffer that is the whole source (the
     * source's shape is part of the key), once a walk found it: whether
     * the box is one run there (rs__walk_one_run), and where it starts. */
    int run_known, one_run;
    int64_t run_src;
} rs__dest_fact_t;

/* A remembered box and its destination fact. */
typedef struct rs__memo_entry {
    rs__box_t *box; /* NULL: the slot is empty */
    rs__dest_fact_t dest;
} rs__memo_entry_t;

/* NULL on exhaustion. */
rs__box_memo_t *rs__box_memo_create(void);
void rs__box_memo_destroy(rs__box_memo_t *memo);

/* The box remembered for an equal geometry, or NULL; *fact_p is then its
 * destination fact, which the caller may fill. *hash_p receives the key's
 * hash for a following rs__box_memo_put. Cost: a compare of the id and the
 * source's dims, and a hash of them when the two slots hit last differ. */
const rs__box_t *rs__box_memo_find(rs__box_memo_t *memo, const rs__geom_key_t *key,
                                  uint64_t *hash_p, rs__dest_fact_t **fact_p);

/* The memo's layout is here so that a hit on the two slots hit last, a
 * model's common case, is inline in the caller's loop (box_memo.c says
 * why those two). */
typedef struct rs__memo_slot {
    rs__memo_entry_t e;
    uint64_t hash;
    rs__geom_key_t key;
} rs__memo_slot_t;

#define RS_MEMO_SLOTS 256 /* a power of two; models repeat a few dozen geometries */

struct rs__box_memo {
    rs__memo_slot_t *recent[2]; /* set only to slots holding a box */
    rs__memo_slot_t slots[RS_MEMO_SLOTS];
};

/* Whether key k is this geometry: the capture's id stands for the op
 * chain and destination dims, so only the source's shape is compared (two
 * or three dims: a loop, not memcmp). */
static inline int rs__geom_key_is(const rs__geom_key_t *k, uint32_t geom,
                                  int src_ndim, const int64_t *src_shape)
{
    if (k->geom != geom || k->src_ndim != src_ndim)
        return 0;
    if (k->src_shape == src_shape)
        return 1;
    for (int i = 0; i < src_ndim; i++) {
        if (k->src_shape[i] != src_shape[i])
            return 0;
    }
    return 1;
}

static inline int rs__memo_slot_is(const rs__memo_slot_t *s, uint32_t geom,
                                   int src_ndim, const int64_t *src_shape)
{
    return s != NULL && rs__geom_key_is(&s->key, geom, src_ndim, src_shape);
}

/* rs__box_memo_find's common case, the key by value: the entry of one of
 * the two slots hit last when it holds an equal geometry, else NULL (the
 * key may still be in the table: rs__box_memo_find looks there too). No
 * call, so a caller's fast path around it needs no frame. Its box is the
 * memo's own; the caller may fill its fact. */
static inline rs__memo_entry_t *rs__box_memo_recent(rs__box_memo_t *memo,
                                                   uint32_t geom, int src_ndim,
                                                   const int64_t *src_shape)
{
    rs__memo_slot_t *s = memo->recent[0];
    if (rs__memo_slot_is(s, geom, src_ndim, src_shape))
        return &s->e;
    s = memo->recent[1];
    if (rs__memo_slot_is(s, geom, src_ndim, src_shape)) {
        memo->recent[1] = memo->recent[0];
        memo->recent[0] = s;
        return &s->e;
    }
    return NULL;
}

/* Remembers `box` for the key (replacing what shared its slot) and returns
 * the slot's (cleared) destination fact; NULL on exhaustion, which only
 * costs later copies a resolve. */
rs__dest_fact_t *rs__box_memo_put(rs__box_memo_t *memo, const rs__geom_key_t *key,
                                 uint64_t hash, const rs__box_t *box);

#endif
