/* A publisher's table split for the directory (dir/split.h): the geometry
 * document is the table with the values a version changes cut out (every
 * shard's digest, the step), and the insertion lines put them back. Only
 * tables this library's writer wrote are split, so the values are found
 * by their keys: inside a JSON string a quote is escaped, so `"digest":
 * "`, `"publisher_step": ` and `"deltas": ` occur only as the keys
 * themselves. A shard's deltas (publisher_delta.c: base, address, length,
 * digest; every version's own) are cut whole, from `[` to `]` (their
 * objects hold no brackets and no newline), so the digests inside them are
 * not cut again. Whatever is cut, splicing gives back the very bytes of
 * the table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "refit/publisher_impl.h"

#define STEP_KEY "\"publisher_step\": "
#define DIGEST_KEY "\"digest\": \""
#define DELTAS_KEY "\"deltas\": "

/* The first occurrence of `key` at or after `from`, or NULL. */
static const char *find_key(const char *t, size_t len, size_t from,
                            const char *key)
{
    return memmem(t + from, len - from, key, strlen(key));
}

/* The next value to cut at or after `from`: its start and end. */
static int next_value(const char *t, size_t len, size_t from, size_t *start_p,
                      size_t *end_p)
{
    const char *d = find_key(t, len, from, DIGEST_KEY);
    const char *s = find_key(t, len, from, STEP_KEY);
    const char *x = find_key(t, len, from, DELTAS_KEY);
    const char *first = d;
    if (s != NULL && (first == NULL || s < first))
        first = s;
    if (x != NULL && (first == NULL || x < first))
        first = x;
    if (first == NULL)
        return 0;
    size_t start, end;
    if (first == x) { /* the whole array, brackets included */
        start = (size_t)(x + strlen(DELTAS_KEY) - t);
        end = start;
        while (end < len && t[end] != ']' && t[end] != '\n')
            end++;
        if (end < len && t[end] == ']')
            end++;
    } else {
        int step = first == s;
        start = (size_t)((step ? s + sizeof(STEP_KEY)
                               : d + sizeof(DIGEST_KEY)) - 1 - t);
        end = start;
        while (end < len && (step ? t[end] >= '0' && t[end] <= '9'
                                  : t[end] != '"' && t[end] != '\\' &&
                                    t[end] != '\n'))
            end++;
    }
    *start_p = start;
    *end_p = end;
    return 1;
}

rs_status_t rs__publisher_split(const char *table, size_t len, char **doc_p,
                                size_t *doc_len_p, char **ins_p,
                                size_t *ins_len_p, rs_diag_t *diag)
{
    char *doc = malloc(len + 1), *ins = NULL;
    size_t doc_len = 0, ins_len = 0, at = 0, start, end;
    FILE *out = open_memstream(&ins, &ins_len);
    if (doc == NULL || out == NULL) {
        free(doc);
        if (out != NULL)
            fclose(out);
        free(ins);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    while (next_value(table, len, at, &start, &end)) {
        memcpy(doc + doc_len, table + at, start - at);
        doc_len += start - at;
        if (end > start)
            fprintf(out, "%zu %.*s\n", doc_len, (int)(end - start),
                    table + start);
        at = end;
    }
    memcpy(doc + doc_len, table + at, len - at);
    doc_len += len - at;
    doc[doc_len] = '\0';
    int bad = ferror(out);
    if (fclose(out) != 0 || bad) {
        free(doc);
        free(ins);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    *doc_p = doc;
    *doc_len_p = doc_len;
    *ins_p = ins;
    *ins_len_p = ins_len;
    return RS_OK;
}
