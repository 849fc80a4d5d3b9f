/* Unregistering a publisher's shard: the shard leaves the registry and its
 * memory stops being exposed at once, so the caller may free it; the next
 * publish exposes and lists what remains (include/reshard/refit.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "refit/publisher_impl.h"
#include "reshard/expose.h"

static int shard_matches(const rs__publish_shard_t *s, const char *tensor,
                         const int64_t *offset)
{
    if (strcmp(s->tensor, tensor) != 0)
        return 0;
    for (int d = 0; d < s->ndim; d++)
        if (s->offset[d] != offset[d])
            return 0;
    return 1;
}

/* The dims of the tensor's first registered shard (the caller's offset
 * has that many entries), or -1 when the tensor has no shard at all. */
static int registered_ndim(rs_publisher_h p, const char *tensor)
{
    for (size_t i = 0; i < p->shards_len; i++)
        if (strcmp(p->shards[i].tensor, tensor) == 0)
            return p->shards[i].ndim;
    return -1;
}

/* "[2, 0]", for the error message. */
static void offset_text(const int64_t *offset, int ndim, char *out,
                        size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, "%s%" PRId64, d ? ", " : "",
                              offset[d]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

static rs_status_t not_registered(rs_publisher_h p, const char *tensor,
                                  const int64_t *offset, rs_diag_t *diag)
{
    char where[512];
    int ndim = registered_ndim(p, tensor);
    if (ndim < 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: cannot "
                            "unregister tensor '%s': no shard of it is "
                            "registered", tensor);
    offset_text(offset, ndim, where, sizeof(where));
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: cannot "
                        "unregister tensor '%s': no shard of it is "
                        "registered at offset %s", tensor, where);
}

/* Keeps the shards that do not match. */
static void drop_matching(rs_publisher_h p, const char *tensor,
                            const int64_t *offset)
{
    size_t kept = 0, len = p->shards_len;
    for (size_t i = 0; i < len; i++) {
        if (shard_matches(&p->shards[i], tensor, offset)) {
            free(p->shards[i].tensor);
            continue;
        }
        p->shards[kept++] = p->shards[i];
    }
    p->shards_len = kept;
}

rs_status_t rs_publisher_unregister(rs_publisher_h p, const char *tensor,
                                    const int64_t *offset, rs_diag_t *diag)
{
    size_t found = 0;
    if (p == NULL || tensor == NULL || offset == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: unregister "
                            "needs a publisher, a tensor and an offset");
    for (size_t i = 0; i < p->shards_len; i++)
        found += (size_t)shard_matches(&p->shards[i], tensor, offset);
    if (found == 0)
        return not_registered(p, tensor, offset, diag);
    /* The heartbeat may publish the last table again (it names the shard),
     * and the exposer serves its memory: both stop before the memory may
     * go. The next publish starts them again over what remains. */
    rs__publisher_stop_heartbeat(p);
    rs_exposer_reset(p->exposer); /* allocations and the arena stay */
    p->exposed = 0;
    drop_matching(p, tensor, offset);
    p->by_name_stale = 1; /* the shards moved */
    p->dirty = 1;
    return RS_OK;
}
