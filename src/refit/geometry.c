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

/* One shard's part of the key. */
static uint64_t shard_key(const rs_pub_shard_t *s)
{
    rs_digest_t d;
    uint64_t n = strlen(s->tensor);
    int64_t head[2] = {s->dtype, s->ndim};
    rs_digest_init(&d);
    rs_digest_update(&d, &n, sizeof(n));
    rs_digest_update(&d, s->tensor, (size_t)n);
    feed_i64(&d, head, 2);
    feed_i64(&d, s->full_shape, s->ndim);
    feed_i64(&d, s->offset, s->ndim);
    feed_i64(&d, s->shape, s->ndim);
    return rs_digest_final(&d);
}

/* A sum of the shards' keys, so replicas that register the same shards in
 * another order agree (and a shard registered twice is not cancelled, as
 * it would be by xor). */
uint64_t rs__publisher_geometry(rs_publisher_h p)
{
    uint64_t sum = 0, count = 0;
    for (size_t i = 0; i < p->shards_len; i++) {
        if (p->shards[i].nbytes == 0) /* left out of the table too */
            continue;
        sum += shard_key(&p->shards[i]);
        count++;
    }
    uint64_t parts[2] = {sum, count};
    return rs_digest(parts, sizeof(parts));
}
