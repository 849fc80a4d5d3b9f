/* The geometry key a publisher brings to its directory slot: a digest of
 * what its table says about the shards it serves, minus what differs
 * between data-parallel replicas and between a rank and its restarted self
 * (session name, addresses, transport keys, digests). Two publishers with
 * the same key may stand in for each other. */
#include <string.h>

#include "refit/refit_impl.h"
#include "reshard/digest.h"

static void feed_i64(rs_digest_t *d, const int64_t *v, int n)
{
    rs_digest_update(d, v, (size_t)n * sizeof(int64_t));
}

uint64_t rs__publisher_geometry(rs_publisher_h p)
{
    rs_digest_t d;
    rs_digest_init(&d);
    for (size_t i = 0; i < p->shards_len; i++) {
        const rs_pub_shard_t *s = &p->shards[i];
        if (s->nbytes == 0) /* left out of the table too */
            continue;
        uint64_t n = strlen(s->tensor);
        int64_t head[2] = {s->dtype, s->ndim};
        rs_digest_update(&d, &n, sizeof(n));
        rs_digest_update(&d, s->tensor, (size_t)n);
        feed_i64(&d, head, 2);
        feed_i64(&d, s->full_shape, s->ndim);
        feed_i64(&d, s->offset, s->ndim);
        feed_i64(&d, s->shape, s->ndim);
    }
    return rs_digest_final(&d);
}
