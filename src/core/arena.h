/* Arena allocator for the many small records a capture or a plan makes:
 * everything is freed at once with the owner. */
#ifndef RS_CORE_ARENA_H
#define RS_CORE_ARENA_H

#include <stddef.h>

typedef struct rs__arena_chunk rs__arena_chunk_t;

typedef struct rs__arena {
    rs__arena_chunk_t *head;
    size_t used;  /* bytes used in head */
    size_t cap;   /* capacity of head */
} rs__arena_t;

void rs__arena_init(rs__arena_t *arena);
void rs__arena_free(rs__arena_t *arena);
/* 16-byte aligned, zeroed memory; NULL on exhaustion or overflow. */
void *rs__arena_alloc(rs__arena_t *arena, size_t size);
void *rs__arena_memdup(rs__arena_t *arena, const void *src, size_t size);
char *rs__arena_strdup(rs__arena_t *arena, const char *s);

#endif
