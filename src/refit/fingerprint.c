/* The topology fingerprint that decides whether a cached plan still holds.
 * One pass over tables and shards through the O(1) accessors: O(tables +
 * shards) per pull. */
#include <string.h>

#include "refit/refit_impl.h"
#include "reshard/digest.h"
#include "reshard/view.h"

static void feed_str(rs_digest_t *d, const char *s)
{
    uint64_t n = s ? strlen(s) : UINT64_MAX;
    rs_digest_update(d, &n, sizeof(n));
    if (s != NULL)
        rs_digest_update(d, s, (size_t)n);
}

static void feed_i64(rs_digest_t *d, const int64_t *v, int n)
{
    rs_digest_update(d, v, (size_t)n * sizeof(int64_t));
}

uint64_t rs__topology_fingerprint(rs_sources_h sources)
{
    rs_digest_t d;
    rs_digest_init(&d);
    size_t ntables = rs_sources_num_tables(sources);
    size_t nshards = rs_sources_num_shards(sources);
    for (size_t i = 0; i < ntables; i++) {
        rs_table_info_t t;
        rs_sources_table(sources, i, &t);
        feed_str(&d, t.agent_name);
        feed_str(&d, t.agent_meta_b64);
    }
    const char *tensor = NULL;
    for (size_t i = 0; i < nshards; i++) {
        rs_shard_desc_t s;
        rs_sources_shard(sources, i, &s);
        /* Shards come tensor by tensor and share their tensor's name
         * string: the tensor's own fields are fed once, where it starts. */
        uint8_t starts = s.tensor != tensor;
        rs_digest_update(&d, &starts, 1);
        if (starts) {
            int64_t t[2] = {s.dtype, s.ndim};
            feed_str(&d, s.tensor);
            feed_i64(&d, t, 2);
            feed_i64(&d, s.full_shape, s.ndim);
            tensor = s.tensor;
        }
        /* One update per shard: its session, address, device, box. */
        int64_t rec[3 + 2 * RS_MAX_DIMS];
        size_t n = strlen(s.session), k = 0;
        rec[k++] = (int64_t)n;
        rec[k++] = (int64_t)s.addr;
        rec[k++] = s.device_id;
        memcpy(&rec[k], s.offset, (size_t)s.ndim * sizeof(int64_t));
        k += (size_t)s.ndim;
        memcpy(&rec[k], s.shape, (size_t)s.ndim * sizeof(int64_t));
        k += (size_t)s.ndim;
        rs_digest_update(&d, rec, k * sizeof(int64_t));
        rs_digest_update(&d, s.session, n);
    }
    return rs_digest_final(&d);
}
