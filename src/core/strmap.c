/* Open-addressing hash map keyed by strings, linear probing, load <= 1/2. */
#include <stdlib.h>
#include <string.h>

#include "core/strmap.h"

/* Eight bytes per multiply (names of tensors run to 60 bytes and are hashed
 * several times per shard while tables load), mixed so the low bits the
 * table indexes by depend on every byte. */
uint64_t rs__hash_str(const char *s)
{
    size_t n = strlen(s);
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 29);
}

void rs__strmap_init(rs__strmap_t *map) { memset(map, 0, sizeof(*map)); }

void rs__strmap_free(rs__strmap_t *map)
{
    free(map->slots);
    rs__strmap_init(map);
}

int rs__strmap_copy(rs__strmap_t *to, const rs__strmap_t *from)
{
    rs__strmap_init(to);
    if (from->cap == 0)
        return 1;
    to->slots = malloc(from->cap * sizeof(rs__strmap_slot_t));
    if (to->slots == NULL)
        return 0;
    memcpy(to->slots, from->slots, from->cap * sizeof(rs__strmap_slot_t));
    to->cap = from->cap;
    to->len = from->len;
    return 1;
}

static uint32_t tag_of(uint64_t hash) { return (uint32_t)(hash >> 32); }

/* The key's slot, or the empty slot where it would go. */
static size_t strmap_slot(const rs__strmap_t *map, const char *key,
                          uint64_t hash)
{
    size_t mask = map->cap - 1;
    size_t i = (size_t)hash & mask;
    uint32_t tag = tag_of(hash);
    for (;; i = (i + 1) & mask) {
        const rs__strmap_slot_t *s = &map->slots[i];
        if (s->key == NULL ||
            (s->tag == tag && strcmp(s->key, key) == 0))
            return i;
    }
}

int rs__strmap_get_hashed(const rs__strmap_t *map, const char *key,
                          uint64_t hash, uint32_t *value_p)
{
    if (map->cap == 0)
        return 0;
    const rs__strmap_slot_t *s = &map->slots[strmap_slot(map, key, hash)];
    if (s->key == NULL)
        return 0;
    *value_p = s->value;
    return 1;
}

int rs__strmap_get(const rs__strmap_t *map, const char *key, uint32_t *value_p)
{
    return map->cap != 0 &&
           rs__strmap_get_hashed(map, key, rs__hash_str(key), value_p);
}

static int strmap_grow(rs__strmap_t *map)
{
    size_t ncap = map->cap ? map->cap * 2 : 16;
    rs__strmap_slot_t *slots = calloc(ncap, sizeof(rs__strmap_slot_t));
    if (slots == NULL)
        return 0;
    for (size_t i = 0; i < map->cap; i++) {
        const rs__strmap_slot_t *s = &map->slots[i];
        if (s->key == NULL)
            continue;
        /* keys are distinct: the first empty slot from the hash is theirs */
        size_t j = (size_t)rs__hash_str(s->key) & (ncap - 1);
        while (slots[j].key != NULL)
            j = (j + 1) & (ncap - 1);
        slots[j] = *s;
    }
    free(map->slots);
    map->slots = slots;
    map->cap = ncap;
    return 1;
}

int rs__strmap_put(rs__strmap_t *map, const char *key, uint32_t value)
{
    return rs__strmap_put_hashed(map, key, rs__hash_str(key), value);
}

int rs__strmap_put_hashed(rs__strmap_t *map, const char *key, uint64_t hash,
                          uint32_t value)
{
    if ((map->len + 1) * 2 > map->cap && !strmap_grow(map))
        return 0;
    rs__strmap_slot_t *s = &map->slots[strmap_slot(map, key, hash)];
    if (s->key == NULL) {
        s->key = key;
        s->tag = tag_of(hash);
        map->len++;
    }
    s->value = value;
    return 1;
}
