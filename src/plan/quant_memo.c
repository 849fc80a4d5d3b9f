/* The quantized-copy analysis's answers kept with the sources, across
 * plans (quant_memo.h says why): an open-addressing table of keys, each a
 * run of words in one pool, with the receiver path's reasons in an arena.
 * The sources hold it as an opaque pointer and free it with themselves;
 * `gen` of the sources counts every change of their shards, and answers
 * kept at another count are dropped before the next lookup. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "model/sources_impl.h"
#include "plan/quant_memo.h"

typedef struct memo_entry {
    uint64_t hash;
    size_t at; /* its key's first word in the pool */
    int n;
    rs__quant_answer_t a;
} memo_entry_t;

typedef struct rs__quant_memo {
    pthread_mutex_t lock;
    uint64_t gen;         /* the sources' count of changes it holds for */
    memo_entry_t *v;
    size_t len, cap;
    uint32_t *slots;      /* entry index + 1, 0 empty */
    size_t nslots;        /* a power of two, or 0 */
    int64_t *words;
    size_t words_len, words_cap;
    rs__arena_t arena;    /* the reasons */
} rs__quant_memo_t;

static void memo_free(void *p)
{
    rs__quant_memo_t *m = p;
    if (m == NULL)
        return;
    free(m->v);
    free(m->slots);
    free(m->words);
    rs__arena_free(&m->arena);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* The sources' memo, made on first use (NULL on exhaustion, when the plan
 * simply analyzes every copy). Two plans starting together make it once:
 * under the sources' lock, published with a release store. */
static rs__quant_memo_t *memo_of(rs_sources_h s)
{
    rs__quant_memo_t *m = __atomic_load_n((rs__quant_memo_t **)&s->plan_memo,
                                          __ATOMIC_ACQUIRE);
    if (m != NULL)
        return m;
    pthread_mutex_lock(&s->grid_lock);
    m = s->plan_memo;
    if (m == NULL && (m = calloc(1, sizeof(*m))) != NULL) {
        pthread_mutex_init(&m->lock, NULL);
        rs__arena_init(&m->arena);
        m->gen = s->gen;
        s->plan_memo_free = memo_free;
        __atomic_store_n((rs__quant_memo_t **)&s->plan_memo, m,
                         __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->grid_lock);
    return m;
}

/* Drops every answer kept before the sources last changed (the caller
 * holds the memo's lock; the sources do not change while plans of them
 * are built). */
static void refresh(rs__quant_memo_t *m, const rs_sources_h s)
{
    if (m->gen == s->gen)
        return;
    m->len = 0;
    m->words_len = 0;
    if (m->nslots > 0)
        memset(m->slots, 0, m->nslots * sizeof(uint32_t));
    rs__arena_free(&m->arena);
    m->gen = s->gen;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    return (h + v) * 0x9e3779b97f4a7c15ull;
}

static void put_word(rs__quant_memo_key_t *k, int64_t v)
{
    k->w[k->n++] = v;
}

static void put_dims(rs__quant_memo_key_t *k, const int64_t *v, int n)
{
    for (int i = 0; i < n; i++)
        k->w[k->n++] = v[i];
}

static int64_t double_bits(double d)
{
    int64_t v;
    memcpy(&v, &d, sizeof(v));
    return v;
}

void rs__quant_memo_key(rs__quant_memo_key_t *k, uint32_t src,
                        const rs_quant_desc_t *q, int ndim,
                        const int64_t *shape, rs_dtype_t src_dtype,
                        const int64_t *block, const int64_t *vlo,
                        const int64_t *vhi, const rs_plan_params_t *params)
{
    int bn = q->block_ndim > 0 && q->block_ndim <= RS_MAX_DIMS ? q->block_ndim
                                                                : 0;
    k->n = 0;
    put_word(k, src);
    put_word(k, q->scheme);
    put_word(k, q->format);
    put_word(k, q->block_ndim); /* one out of range keys no block */
    put_dims(k, q->block, bn);
    put_word(k, ndim);
    put_word(k, src_dtype);
    put_dims(k, shape, ndim);
    put_dims(k, block, ndim);
    put_dims(k, vlo, ndim);
    put_dims(k, vhi, ndim);
    put_word(k, double_bits(params->nic_gbps));
    put_word(k, double_bits(params->descriptor_ns));
    uint64_t h = 0;
    for (int i = 0; i < k->n; i++)
        h = mix(h, (uint64_t)k->w[i]);
    k->hash = h ^ (h >> 29);
}

static int same_key(const rs__quant_memo_t *m, const memo_entry_t *e,
                    const rs__quant_memo_key_t *k)
{
    return e->hash == k->hash && e->n == k->n &&
           memcmp(m->words + e->at, k->w, (size_t)k->n * sizeof(int64_t)) == 0;
}

/* The entry of key k, or NULL; *slot_p is where it is or would go. */
static memo_entry_t *find(rs__quant_memo_t *m, const rs__quant_memo_key_t *k,
                          size_t *slot_p)
{
    if (m->nslots == 0)
        return NULL;
    size_t mask = m->nslots - 1;
    for (size_t i = (size_t)k->hash & mask;; i = (i + 1) & mask) {
        uint32_t e = m->slots[i];
        *slot_p = i;
        if (e == 0)
            return NULL;
        if (same_key(m, &m->v[e - 1], k))
            return &m->v[e - 1];
    }
}

int rs__quant_memo_get(rs_sources_h sources, const rs__quant_memo_key_t *k,
                       rs__quant_answer_t *a)
{
    rs__quant_memo_t *m = memo_of(sources);
    size_t slot;
    if (m == NULL)
        return 0;
    pthread_mutex_lock(&m->lock);
    refresh(m, sources);
    const memo_entry_t *e = find(m, k, &slot);
    if (e != NULL)
        *a = e->a;
    pthread_mutex_unlock(&m->lock);
    return e != NULL;
}

/* Room for one more entry and its key's words, the table kept at most
 * half full; 0 on exhaustion. */
static int make_room(rs__quant_memo_t *m, int words)
{
    if (m->len == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 256;
        memo_entry_t *v = realloc(m->v, cap * sizeof(*v));
        if (v == NULL)
            return 0;
        m->v = v;
        m->cap = cap;
    }
    if (m->words_len + (size_t)words > m->words_cap) {
        size_t cap = m->words_cap ? 2 * m->words_cap : 4096;
        while (cap < m->words_len + (size_t)words)
            cap *= 2;
        int64_t *w = realloc(m->words, cap * sizeof(*w));
        if (w == NULL)
            return 0;
        m->words = w;
        m->words_cap = cap;
    }
    if (2 * (m->len + 1) <= m->nslots)
        return 1;
    size_t n = m->nslots ? 2 * m->nslots : 1024;
    uint32_t *slots = calloc(n, sizeof(uint32_t));
    if (slots == NULL)
        return 0;
    for (size_t i = 0; i < m->len; i++) {
        size_t j = (size_t)m->v[i].hash & (n - 1);
        while (slots[j] != 0)
            j = (j + 1) & (n - 1);
        slots[j] = (uint32_t)(i + 1);
    }
    free(m->slots);
    m->slots = slots;
    m->nslots = n;
    return 1;
}

void rs__quant_memo_put(rs_sources_h sources, const rs__quant_memo_key_t *k,
                        const rs__quant_answer_t *a)
{
    rs__quant_memo_t *m = memo_of(sources);
    size_t slot;
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    refresh(m, sources);
    if (m->len < RS_QUANT_MEMO_MAX && find(m, k, &slot) == NULL &&
        make_room(m, k->n)) {
        memo_entry_t e = {k->hash, m->words_len, k->n, *a};
        if (a->why == NULL ||
            (e.a.why = rs__arena_strdup(&m->arena, a->why)) != NULL) {
            memcpy(m->words + m->words_len, k->w,
                   (size_t)k->n * sizeof(int64_t));
            m->words_len += (size_t)k->n;
            m->v[m->len++] = e;
            find(m, k, &slot); /* the table may have grown */
            m->slots[slot] = (uint32_t)m->len;
        }
    }
    pthread_mutex_unlock(&m->lock);
}

size_t rs__quant_memo_size(rs_sources_h sources)
{
    rs__quant_memo_t *m = __atomic_load_n(
        (rs__quant_memo_t **)&sources->plan_memo, __ATOMIC_ACQUIRE);
    size_t n = 0;
    if (m == NULL)
        return 0;
    pthread_mutex_lock(&m->lock);
    if (m->gen == sources->gen)
        n = m->len;
    pthread_mutex_unlock(&m->lock);
    return n;
}
