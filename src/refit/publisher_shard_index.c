/* The publisher's registered shards by tensor name, so that a registration
 * is checked against the other boxes of its tensor only: two shards of one
 * tensor sharing an element would both be served, and a receiver would get
 * the bytes of one of them. Unregister compacts the shards, so the index
 * is rebuilt before the next check. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/diag.h"
#include "refit/publisher_impl.h"

/* "[0:4, 2:8]": the box's block of the full tensor. */
static void box_text(const int64_t *offset, const int64_t *shape, int ndim,
                     char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, "%s%" PRId64 ":%" PRId64,
                              d ? ", " : "", offset[d],
                              offset[d] + shape[d]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

/* The block a and b share (nonzero), written to lo/shape. */
static int shared_block(const rs__publish_shard_t *a, const rs__publish_shard_t *b,
                        int64_t *lo, int64_t *shape)
{
    for (int d = 0; d < a->ndim; d++) {
        int64_t start = a->offset[d] > b->offset[d] ? a->offset[d]
                                                    : b->offset[d];
        int64_t end_a = a->offset[d] + a->shape[d];
        int64_t end_b = b->offset[d] + b->shape[d];
        int64_t end = end_a < end_b ? end_a : end_b;
        if (end <= start)
            return 0;
        lo[d] = start;
        shape[d] = end - start;
    }
    return 1;
}

#define BOX_TEXT_MAX (RS_MAX_DIMS * 44 + 4)

/* The refusal of s, which shares `both` with `had`. */
static rs_status_t refuse(const rs__publish_shard_t *had, const rs__publish_shard_t *s,
                          const int64_t *lo, const int64_t *shape,
                          rs_diag_t *diag)
{
    char mine[BOX_TEXT_MAX], theirs[BOX_TEXT_MAX], both[BOX_TEXT_MAX];
    box_text(s->offset, s->shape, s->ndim, mine, sizeof(mine));
    box_text(had->offset, had->shape, had->ndim, theirs, sizeof(theirs));
    box_text(lo, shape, s->ndim, both, sizeof(both));
    if (strcmp(mine, theirs) == 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: tensor "
                            "'%s': box %s is registered twice on this rank "
                            "(at %p, and at %p before); each element of a "
                            "tensor is published by one box per rank",
                            s->tensor, mine, s->ptr, had->ptr);
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: tensor '%s': "
                        "box %s overlaps box %s registered before on this "
                        "rank (both hold %s); each element of a tensor is "
                        "published by one box per rank", s->tensor, mine,
                        theirs, both);
}

static int rebuild(rs_publisher_h p)
{
    rs__strmap_free(&p->by_name);
    rs__strmap_init(&p->by_name);
    p->by_name_stale = 0;
    for (size_t i = 0; i < p->shards_len; i++)
        if (!rs__publisher_index_add(p, i)) {
            p->by_name_stale = 1;
            return 0;
        }
    return 1;
}

rs_status_t rs__publisher_check_overlap(rs_publisher_h p,
                                        const rs__publish_shard_t *s,
                                        rs_diag_t *diag)
{
    int64_t lo[RS_MAX_DIMS], shape[RS_MAX_DIMS];
    uint32_t at = 0;
    if (p->by_name_stale && !rebuild(p))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (p->shards_len >= UINT32_MAX)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: tensor "
                            "'%s': %zu shards are registered already, the "
                            "most one publisher holds", s->tensor,
                            p->shards_len);
    if (!rs__strmap_get(&p->by_name, s->tensor, &at))
        return RS_OK;
    for (size_t i = at; i > 0; i = p->shards[i - 1].same_prev) {
        const rs__publish_shard_t *had = &p->shards[i - 1];
        if (had->ndim != s->ndim)
            return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: "
                                "tensor '%s': a box of %d dims cannot join "
                                "the box of %d dims registered before",
                                s->tensor, s->ndim, had->ndim);
        if (shared_block(had, s, lo, shape))
            return refuse(had, s, lo, shape, diag);
    }
    return RS_OK;
}

int rs__publisher_index_add(rs_publisher_h p, size_t i)
{
    rs__publish_shard_t *s = &p->shards[i];
    uint32_t at = 0;
    if (p->by_name_stale)
        return rebuild(p); /* indexes shard i too */
    if (!rs__strmap_get(&p->by_name, s->tensor, &at))
        at = 0;
    s->same_prev = at;
    return rs__strmap_put(&p->by_name, s->tensor, (uint32_t)(i + 1));
}
