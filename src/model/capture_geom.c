/* A capture numbers its copies' geometries as they are added: copies with
 * equal op chains and destination shapes and strides share an id and one
 * copy of those arrays. The planner's box memo then tells geometries apart
 * by id and the source's shape (box_memo.c) instead of hashing and
 * comparing the op chain per copy of every plan; numbering costs a hash and
 * one compare per copy, once, and a repeat saves its arena copies. */
#include <stdlib.h>

#include "model/capture_impl.h"

/* Cheap per word (a multiply-add), spread once at the end. Only what tells
 * geometries apart in practice is hashed (a list's or a key list's length,
 * not its values): a hit compares the whole geometry. */
static uint64_t mix(uint64_t h, uint64_t v)
{
    return (h + v) * 0x9e3779b97f4a7c15ull;
}

static uint64_t mix_dims(uint64_t h, const int64_t *v, int n)
{
    for (int i = 0; i < n; i++)
        h = mix(h, (uint64_t)v[i]);
    return h;
}

static uint64_t hash_geom(const rs_copy_desc_t *d)
{
    uint64_t h = mix((uint64_t)d->ndim, d->nops);
    for (size_t i = 0; i < d->nops; i++) {
        const rs_op_t *op = &d->ops[i];
        h = mix(h, (uint64_t)op->kind | (uint64_t)op->has << 8 |
                       (uint64_t)op->nlist << 16 | (uint64_t)op->nkeys << 40);
        h = mix(mix(mix(mix(h, (uint64_t)op->arg[0]), (uint64_t)op->arg[1]),
                    (uint64_t)op->arg[2]), (uint64_t)op->arg[3]);
    }
    h = mix_dims(h, d->dest_shape, d->ndim);
    h = mix_dims(h, d->dest_stride, d->ndim);
    return h ^ (h >> 29);
}

/* A loop, not memcmp: the arrays hold two or three dims. */
static int same_dims(const int64_t *a, const int64_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (a[i] != b[i])
            return 0;
    }
    return 1;
}

/* Every field, used or not: a difference in an unused one only costs a
 * separate id (the planner then resolves the same box twice). */
static int same_key(const rs_key_t *a, const rs_key_t *b)
{
    return a->kind == b->kind && a->index == b->index &&
           a->start == b->start && a->stop == b->stop && a->step == b->step &&
           a->has_start == b->has_start && a->has_stop == b->has_stop &&
           a->has_step == b->has_step;
}

static int same_op(const rs_op_t *a, const rs_op_t *b)
{
    if (a->kind != b->kind || a->has != b->has || a->nlist != b->nlist ||
        a->nkeys != b->nkeys || a->arg[0] != b->arg[0] ||
        a->arg[1] != b->arg[1] || a->arg[2] != b->arg[2] ||
        a->arg[3] != b->arg[3] || !same_dims(a->list, b->list, a->nlist))
        return 0;
    for (size_t i = 0; i < a->nkeys; i++) {
        if (!same_key(&a->keys[i], &b->keys[i]))
            return 0;
    }
    return 1;
}

static int same_geom(const rs_copy_desc_t *d, const rs__capture_copy_t *c)
{
    if (d->nops != c->nops || d->ndim != c->ndim ||
        !same_dims(d->dest_shape, c->dest_shape, (size_t)d->ndim) ||
        !same_dims(d->dest_stride, c->dest_stride, (size_t)d->ndim))
        return 0;
    for (size_t i = 0; i < d->nops; i++) {
        if (!same_op(&d->ops[i], &c->ops[i]))
            return 0;
    }
    return 1;
}

const rs__capture_copy_t *rs__capture_geom_find(rs_capture_h cap,
                                           const rs_copy_desc_t *d,
                                           uint64_t *hash_p)
{
    uint64_t h = hash_geom(d);
    *hash_p = h;
    if (cap->geom_slots_len == 0)
        return NULL;
    size_t mask = cap->geom_slots_len - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t g = cap->geom_slots[i];
        if (g == 0)
            return NULL;
        const rs__capture_geom_t *e = &cap->geoms[g - 1];
        if (e->hash == h && same_geom(d, &cap->copies[e->copy]))
            return &cap->copies[e->copy];
    }
}

static void place(uint32_t *slots, size_t len, uint64_t hash, uint32_t g)
{
    size_t i = hash & (len - 1);
    while (slots[i] != 0)
        i = (i + 1) & (len - 1);
    slots[i] = g;
}

/* Doubles the slots (kept at most half full, so probes stay short). */
static int grow(rs_capture_h cap)
{
    size_t len = cap->geom_slots_len ? cap->geom_slots_len * 2 : 64;
    uint32_t *slots = calloc(len, sizeof(uint32_t));
    if (slots == NULL)
        return 0;
    for (size_t g = 0; g < cap->geoms_len; g++)
        place(slots, len, cap->geoms[g].hash, (uint32_t)g + 1);
    free(cap->geom_slots);
    cap->geom_slots = slots;
    cap->geom_slots_len = len;
    return 1;
}

int rs__capture_geom_add(rs_capture_h cap, size_t copy, uint64_t hash,
                         uint32_t *id_p)
{
    rs__capture_geom_t e = {hash, copy};
    if (cap->geoms_len >= UINT32_MAX - 1 ||
        ((cap->geoms_len + 1) * 2 > cap->geom_slots_len && !grow(cap)) ||
        !RS_VEC_PUSH(cap, geoms, e))
        return 0;
    place(cap->geom_slots, cap->geom_slots_len, hash,
          (uint32_t)cap->geoms_len);
    *id_p = (uint32_t)cap->geoms_len - 1;
    return 1;
}

void rs__capture_geom_free(rs_capture_h cap)
{
    free(cap->geoms);
    free(cap->geom_slots);
}
