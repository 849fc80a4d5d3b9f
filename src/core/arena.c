/* Chunked bump allocator; chunks grow geometrically up to a cap. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"

struct rs__arena_chunk {
    rs__arena_chunk_t *next;
    size_t cap;
    _Alignas(16) unsigned char data[];
};

#define ARENA_MIN_CHUNK ((size_t)4096)
#define ARENA_MAX_CHUNK ((size_t)1 << 22)

void rs__arena_init(rs__arena_t *arena)
{
    arena->head = NULL;
    arena->used = 0;
    arena->cap = 0;
}

void rs__arena_free(rs__arena_t *arena)
{
    rs__arena_chunk_t *c = arena->head;
    while (c != NULL) {
        rs__arena_chunk_t *next = c->next;
        free(c);
        c = next;
    }
    rs__arena_init(arena);
}

static int arena_grow(rs__arena_t *arena, size_t need)
{
    size_t cap = arena->cap * 2;
    if (cap < ARENA_MIN_CHUNK)
        cap = ARENA_MIN_CHUNK;
    if (cap > ARENA_MAX_CHUNK)
        cap = ARENA_MAX_CHUNK;
    if (cap < need)
        cap = need;
    if (cap > SIZE_MAX - sizeof(rs__arena_chunk_t))
        return 0;
    rs__arena_chunk_t *c = malloc(sizeof(*c) + cap);
    if (c == NULL)
        return 0;
    c->next = arena->head;
    c->cap = cap;
    arena->head = c;
    arena->used = 0;
    arena->cap = cap;
    return 1;
}

void *rs__arena_alloc(rs__arena_t *arena, size_t size)
{
    if (size > SIZE_MAX - 15)
        return NULL;
    size_t rounded = (size + 15) & ~(size_t)15;
    if (rounded == 0)
        rounded = 16;
    if (arena->head == NULL || arena->cap - arena->used < rounded) {
        if (!arena_grow(arena, rounded))
            return NULL;
    }
    void *p = arena->head->data + arena->used;
    arena->used += rounded;
    memset(p, 0, size);
    return p;
}

void *rs__arena_memdup(rs__arena_t *arena, const void *src, size_t size)
{
    void *p = rs__arena_alloc(arena, size);
    if (p != NULL && size > 0)
        memcpy(p, src, size);
    return p;
}

char *rs__arena_strdup(rs__arena_t *arena, const char *s)
{
    return rs__arena_memdup(arena, s, strlen(s) + 1);
}
