/* The position log of merged sources: see sources_log.h. */
#include <string.h>

#include "model/sources_impl.h"
#include "model/sources_log.h"

void rs__sources_log_start(rs_sources_h s)
{
    s->poslog_on = 1;
    s->poslog_len = 0;
}

size_t rs__sources_logged(rs_sources_h s)
{
    return s->poslog_len;
}

static rs__source_shard_t *logged(rs_sources_h s, size_t i)
{
    const rs__shard_pos_t *at = &s->poslog[i];
    return &s->tensors[at->tensor].shards[at->shard];
}

const char *rs__sources_logged_digest(rs_sources_h s, size_t i)
{
    return logged(s, i)->digest;
}

int rs__sources_set_logged_digest(rs_sources_h s, size_t i, const char *text,
                                  size_t len)
{
    rs__source_shard_t *sh = logged(s, i);
    if (text == NULL) {
        sh->digest = NULL;
        return 1;
    }
    /* the arena's own copy, never shared: writing it changes this shard */
    if (sh->digest != NULL && strlen(sh->digest) == len) {
        memcpy((char *)sh->digest, text, len);
        return 1;
    }
    char *copy = rs__arena_alloc(&s->arena, len + 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, text, len);
    copy[len] = '\0';
    sh->digest = copy;
    return 1;
}
