/* Digests fused into the wire's copies. A shard that one read brings whole
 * (its only piece, its destination written by nothing else) gets a tap:
 * a backend that copies with the CPU (local, local-mt, cma, ucx's reads
 * of regions it maps) feeds the shard's rsd64 digest with the bytes as it
 * writes them, so verifying it is a compare, not a second pass over the
 * bytes. Every other shard, and every shard whose bytes someone else
 * wrote (ucx's gets: the NIC or UCX's own copies), is digested from where
 * it landed after the wire, as before. Either way every digest is checked
 * before install. */
#include <stdlib.h>

#include "core/diag.h"
#include "exec/exec_impl.h"

typedef struct tap_key {
    uintptr_t dst;
    uint64_t nbytes;
    size_t group;
} tap_key_t;

static int cmp_key(const void *a, const void *b)
{
    const tap_key_t *x = a, *y = b;
    return (x->dst > y->dst) - (x->dst < y->dst);
}

/* The group at piece i is one piece with the whole shard, and nothing
 * else writes where it lands. */
static int tappable(rs_exec_h x, const rs_shard_ref_t *sh, size_t i,
                    size_t end)
{
    const rs__piece_t *p = &x->pieces[i];
    return end == i + 1 && p->offset == 0 && p->nbytes == sh[p->shard].nbytes &&
           p->nbytes > 0 && !p->late;
}

/* Keeps the keys (sorted by dst) that overlap no other key; returns the
 * count. A key can reach past its neighbour, so each is compared with the
 * furthest end of every key before it, and with the next key's start. */
static size_t drop_overlaps(tap_key_t *k, size_t n)
{
    size_t out = 0;
    uintptr_t reach = 0; /* the furthest end of the keys before j */
    for (size_t j = 0; j < n; j++) {
        const uintptr_t end = k[j].dst + k[j].nbytes;
        int clash = (j > 0 && reach > k[j].dst) ||
                    (j + 1 < n && end > k[j + 1].dst);
        if (end > reach)
            reach = end;
        if (!clash)
            k[out++] = k[j];
    }
    return out;
}

rs_status_t rs__exec_prepare_taps(rs_exec_h x, rs_diag_t *diag)
{
    size_t ns, n = 0;
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    if (!x->t->ops->fuses_digests || x->pieces_len == 0)
        return RS_OK;
    tap_key_t *keys = malloc(x->pieces_len * sizeof(*keys));
    x->group_tap = malloc(x->pieces_len * sizeof(size_t));
    if (keys == NULL || x->group_tap == NULL) {
        free(keys);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < x->pieces_len;) {
        size_t end = rs__piece_group_end(x->pieces, x->pieces_len, i);
        x->group_tap[i] = SIZE_MAX;
        if (tappable(x, sh, i, end))
            keys[n++] = (tap_key_t){(uintptr_t)x->pieces[i].at,
                                    x->pieces[i].nbytes, i};
        i = end;
    }
    qsort(keys, n, sizeof(*keys), cmp_key);
    n = drop_overlaps(keys, n);
    if (n > 0 && (x->taps = calloc(n, sizeof(rs__tap_t))) == NULL) {
        free(keys);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    for (size_t j = 0; j < n; j++) {
        x->taps[j].dst = (const uint8_t *)keys[j].dst;
        x->taps[j].nbytes = keys[j].nbytes;
        x->group_tap[keys[j].group] = j;
    }
    x->ntaps = n;
    free(keys);
    return RS_OK;
}

void rs__exec_release_taps(rs_exec_h x)
{
    free(x->taps);
    free(x->group_tap);
    x->taps = NULL;
    x->group_tap = NULL;
    x->ntaps = 0;
}

void rs__exec_taps_arm(rs_exec_h x, int on)
{
    if (on)
        atomic_store(&x->shards_fused, 0);
    for (size_t j = 0; on && j < x->ntaps; j++)
        rs_digest_init(&x->taps[j].digest);
    rs__transport_set_taps(x->t, on ? x->taps : NULL, on ? x->ntaps : 0);
}

int rs__exec_fused_digest(rs_exec_h x, size_t group, uint64_t *digest_p)
{
    if (x->ntaps == 0 || x->group_tap[group] == SIZE_MAX)
        return 0;
    const rs__tap_t *tap = &x->taps[x->group_tap[group]];
    /* every byte fed exactly once, else the pass decides */
    if (tap->digest.total != tap->nbytes)
        return 0;
    *digest_p = rs_digest_final(&tap->digest);
    atomic_fetch_add(&x->shards_fused, 1);
    return 1;
}
