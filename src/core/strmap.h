/* String -> index map (open addressing). Keys are borrowed: the caller keeps
 * them alive (usually in an arena) for the life of the map. */
#ifndef RS_CORE_STRMAP_H
#define RS_CORE_STRMAP_H

#include <stddef.h>
#include <stdint.h>

/* One slot: the key, its value and the hash's high half, so that a probe
 * compares strings only on a likely match and one cache line holds four
 * slots (a table of 100 000 tensor names is mostly cache misses). */
typedef struct rs__strmap_slot {
    const char *key; /* NULL: empty */
    uint32_t value;
    uint32_t tag;
} rs__strmap_slot_t;

typedef struct rs__strmap {
    rs__strmap_slot_t *slots;
    size_t cap;  /* power of two, or 0 */
    size_t len;
} rs__strmap_t;

void rs__strmap_init(rs__strmap_t *map);
void rs__strmap_free(rs__strmap_t *map);
/* *to as a copy of `from` (borrowing the same keys), replacing whatever
 * *to held without freeing it; 0 on exhaustion (*to then empty). */
int rs__strmap_copy(rs__strmap_t *to, const rs__strmap_t *from);
/* Looks a key up; returns 1 and sets *value_p when present. */
int rs__strmap_get(const rs__strmap_t *map, const char *key, uint32_t *value_p);
/* The same with the key's rs__hash_str already known (a caller that looks
 * one name up in several maps, or many times). */
int rs__strmap_get_hashed(const rs__strmap_t *map, const char *key,
                          uint64_t hash, uint32_t *value_p);
/* Inserts or replaces; 0 on exhaustion. */
int rs__strmap_put(rs__strmap_t *map, const char *key, uint32_t value);
/* rs__strmap_put with rs__hash_str(key) already known. */
int rs__strmap_put_hashed(rs__strmap_t *map, const char *key, uint64_t hash,
                          uint32_t value);
uint64_t rs__hash_str(const char *s);

#endif
