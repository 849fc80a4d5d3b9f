/* A direct-mapped table of resolved boxes keyed by a hash of the geometry
 * id and the source's shape; a hit is confirmed by comparing them, so a
 * collision only costs a resolve. Boxes are copied in up to their last factor. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "plan/box_memo.h"

#define MEMO_SLOTS RS_MEMO_SLOTS
typedef rs__memo_slot_t memo_slot_t;

/* The two slots hit last (struct rs__box_memo, box_memo.h) are tried before
 * hashing: a model's copies come in runs of a few alternating geometries
 * (an expert's gate, up and down projections), and a compare that fails
 * does so on the id. */

rs__box_memo_t *rs__box_memo_create(void)
{
    return calloc(1, sizeof(rs__box_memo_t));
}

void rs__box_memo_destroy(rs__box_memo_t *memo)
{
    if (memo == NULL)
        return;
    for (size_t i = 0; i < MEMO_SLOTS; i++)
        free(memo->slots[i].e.box);
    free(memo);
}

/* Cheap per word (a multiply-add); hash_key spreads the bits once at the
 * end. */
static uint64_t mix(uint64_t h, uint64_t v)
{
    return (h + v) * 0x9e3779b97f4a7c15ull;
}

static uint64_t hash_key(const rs__geom_key_t *k)
{
    uint64_t h = mix(k->geom, (uint64_t)k->src_ndim);
    for (int i = 0; i < k->src_ndim; i++)
        h = mix(h, (uint64_t)k->src_shape[i]);
    return h ^ (h >> 29);
}

static int same_geometry(const rs__geom_key_t *a, const rs__geom_key_t *b)
{
    return rs__geom_key_is(a, b->geom, b->src_ndim, b->src_shape);
}

static void note_recent(rs__box_memo_t *memo, memo_slot_t *s)
{
    if (memo->recent[0] != s) {
        memo->recent[1] = memo->recent[0];
        memo->recent[0] = s;
    }
}

/* A recent slot holding an equal geometry (a slot replaced since holds
 * another key, which the compare then refuses), or NULL. */
static memo_slot_t *recent_find(rs__box_memo_t *memo, const rs__geom_key_t *key)
{
    for (int i = 0; i < 2; i++) {
        memo_slot_t *s = memo->recent[i];
        if (s != NULL && s->e.box != NULL && same_geometry(&s->key, key)) {
            note_recent(memo, s);
            return s;
        }
    }
    return NULL;
}

/* The slot holding an equal geometry, or NULL; *hash_p receives the key's
 * hash when it was computed (the recent slots missed). */
static memo_slot_t *slot_find(rs__box_memo_t *memo, const rs__geom_key_t *key,
                              uint64_t *hash_p)
{
    memo_slot_t *s = recent_find(memo, key);
    if (s != NULL) {
        *hash_p = s->hash;
        return s;
    }
    uint64_t h = hash_key(key);
    s = &memo->slots[h & (MEMO_SLOTS - 1)];
    *hash_p = h;
    if (s->e.box == NULL || s->hash != h || !same_geometry(&s->key, key))
        return NULL;
    note_recent(memo, s);
    return s;
}

const rs__box_t *rs__box_memo_find(rs__box_memo_t *memo, const rs__geom_key_t *key,
                                  uint64_t *hash_p, rs__dest_fact_t **fact_p)
{
    memo_slot_t *s = slot_find(memo, key, hash_p);
    if (s == NULL)
        return NULL;
    *fact_p = &s->e.dest;
    return s->e.box;
}

rs__dest_fact_t *rs__box_memo_put(rs__box_memo_t *memo, const rs__geom_key_t *key,
                                 uint64_t hash, const rs__box_t *box)
{
    memo_slot_t *s = &memo->slots[hash & (MEMO_SLOTS - 1)];
    if (s->e.box == NULL && (s->e.box = malloc(sizeof(rs__box_t))) == NULL)
        return NULL;
    memcpy(s->e.box, box, offsetof(rs__box_t, factors) +
                              (size_t)box->nfactors * sizeof(rs__factor_t));
    s->e.box->numel = box->numel;
    s->hash = hash;
    s->key = *key;
    s->e.dest.known = 0;
    s->e.dest.run_known = 0;
    note_recent(memo, s);
    return &s->e.dest;
}
