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

void rs__strmap_init(rs_strmap_t *map) { memset(map, 0, sizeof(*map)); }

void rs__strmap_free(rs_strmap_t *map)
{
    free(map->keys);
    free(map->values);
    rs__strmap_init(map);
}

static size_t strmap_slot(const rs_strmap_t *map, const char *key)
{
    size_t mask = map->cap - 1;
    size_t i = (size_t)rs__hash_str(key) & mask;
    while (map->keys[i] != NULL && strcmp(map->keys[i], key) != 0)
        i = (i + 1) & mask;
    return i;
}

int rs__strmap_get(const rs_strmap_t *map, const char *key, uint32_t *value_p)
{
    if (map->cap == 0)
        return 0;
    size_t i = strmap_slot(map, key);
    if (map->keys[i] == NULL)
        return 0;
    *value_p = map->values[i];
    return 1;
}

static int strmap_grow(rs_strmap_t *map)
{
    size_t ncap = map->cap ? map->cap * 2 : 16;
    rs_strmap_t bigger = {calloc(ncap, sizeof(char *)),
                          calloc(ncap, sizeof(uint32_t)), ncap, 0};
    if (bigger.keys == NULL || bigger.values == NULL) {
        free(bigger.keys);
        free(bigger.values);
        return 0;
    }
    for (size_t i = 0; i < map->cap; i++) {
        if (map->keys[i] != NULL) {
            size_t j = strmap_slot(&bigger, map->keys[i]);
            bigger.keys[j] = map->keys[i];
            bigger.values[j] = map->values[i];
            bigger.len++;
        }
    }
    /* Field by field rather than `*map = bigger`: clang's analyzer (LLVM 14)
     * loses track of the struct copy and reports the old arrays as live. */
    free(map->keys);
    free(map->values);
    map->keys = bigger.keys;
    map->values = bigger.values;
    map->cap = bigger.cap;
    map->len = bigger.len;
    return 1;
}

int rs__strmap_put(rs_strmap_t *map, const char *key, uint32_t value)
{
    if ((map->len + 1) * 2 > map->cap && !strmap_grow(map))
        return 0;
    size_t i = strmap_slot(map, key);
    if (map->keys[i] == NULL) {
        map->keys[i] = key;
        map->len++;
    }
    map->values[i] = value;
    return 1;
}
