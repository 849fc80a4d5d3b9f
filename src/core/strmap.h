/* String -> index map (open addressing). Keys are borrowed: the caller keeps
 * them alive (usually in an arena) for the life of the map. */
#ifndef RS_CORE_STRMAP_H
#define RS_CORE_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct rs_strmap {
    const char **keys;
    uint32_t *values;
    size_t cap;  /* power of two, or 0 */
    size_t len;
} rs_strmap_t;

void rs__strmap_init(rs_strmap_t *map);
void rs__strmap_free(rs_strmap_t *map);
/* Looks a key up; returns 1 and sets *value_p when present. */
int rs__strmap_get(const rs_strmap_t *map, const char *key, uint32_t *value_p);
/* Inserts or replaces; 0 on exhaustion. */
int rs__strmap_put(rs_strmap_t *map, const char *key, uint32_t value);
uint64_t rs__hash_str(const char *s);

#endif
