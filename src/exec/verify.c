/* Digest verification: every published shard whose bytes a run reassembled
 * completely (in parameters or staging) is re-digested in shard order from
 * where its pieces landed and compared with the digest its table published.
 * Optionally, shards read only in part are pulled whole to be checked.
 * Strict: before any byte moves, every shard to be verified must have
 * been published with a well-formed digest. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "core/strmap.h"
#include "exec/exec_impl.h"
#include "reshard/digest.h"

/* The shard holding [addr, addr + nbytes) of a session, or -1. */
static long find_shard(const rs_shard_ref_t *sh, size_t n, uint32_t session,
                       uint64_t addr, uint64_t nbytes)
{
    size_t lo = 0, hi = n;
    while (lo < hi) { /* first shard after (session, addr) */
        size_t mid = (lo + hi) / 2;
        if (sh[mid].session < session ||
            (sh[mid].session == session && sh[mid].addr <= addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    const rs_shard_ref_t *s = &sh[lo - 1];
    if (s->session != session || addr - s->addr > s->nbytes ||
        nbytes > s->nbytes - (addr - s->addr))
        return -1;
    return (long)(lo - 1);
}

static int cmp_piece(const void *a, const void *b)
{
    const rs_piece_t *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Bytes of the shard covered by pieces [i, end) (sorted by offset). */
static uint64_t covered(const rs_piece_t *p, size_t i, size_t end)
{
    uint64_t reach = 0, total = 0;
    for (; i < end; i++) {
        uint64_t e = p[i].offset + p[i].nbytes;
        if (e > reach) {
            total += e - (p[i].offset > reach ? p[i].offset : reach);
            reach = e;
        }
    }
    return total;
}

static size_t group_end(const rs_piece_t *p, size_t n, size_t i)
{
    size_t e = i;
    while (e < n && p[e].shard == p[i].shard)
        e++;
    return e;
}

/* Cuts one read into pieces, one per shard it runs through (a session may
 * publish shards back to back and one read may span them). */
static rs_status_t add_pieces(rs_exec_h x, const rs_shard_ref_t *sh, size_t ns,
                              const rs_read_t *r, rs_diag_t *diag)
{
    uint64_t addr = r->src_addr, left = r->nbytes;
    const unsigned char *at = r->dst;
    while (left > 0) {
        long s = find_shard(sh, ns, r->session, addr, 1);
        if (s < 0)
            return RS_OK;
        uint64_t room = sh[s].addr + sh[s].nbytes - addr;
        uint64_t take = left < room ? left : room;
        rs_piece_t p = {(size_t)s, addr - sh[s].addr, take, at};
        if (!RS_VEC_PUSH(x, pieces, p))
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
        addr += take;
        at += take;
        left -= take;
    }
    return RS_OK;
}

rs_status_t rs__exec_prepare_pieces(rs_exec_h x, rs_diag_t *diag)
{
    size_t ns;
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    for (size_t i = 0; i < x->nreads; i++) {
        rs_status_t st = add_pieces(x, sh, ns, &x->reads[i], diag);
        if (st != RS_OK)
            return st;
    }
    if (x->pieces_len > 1)
        qsort(x->pieces, x->pieces_len, sizeof(rs_piece_t), cmp_piece);
    for (size_t i = 0; i < x->pieces_len; i = group_end(x->pieces, x->pieces_len, i)) {
        size_t s = x->pieces[i].shard;
        size_t end = group_end(x->pieces, x->pieces_len, i);
        if (covered(x->pieces, i, end) == sh[s].nbytes || !x->params.verify_partial)
            continue;
        if (!RS_VEC_PUSH(x, partial, s))
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
        if (sh[s].nbytes > x->verify_buf_len)
            x->verify_buf_len = sh[s].nbytes;
    }
    if (x->partial_len > 0 &&
        (x->verify_buf = malloc((size_t)x->verify_buf_len)) == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    return RS_OK;
}

/* The digest a shard is checked against: the latest one handed to
 * rs_exec_set_digests, else the plan's. */
static const char *digest_of(rs_exec_h x, size_t shard)
{
    size_t ns;
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    if (x->digests != NULL)
        return x->digests[shard];
    return sh[shard].digest;
}

/* The digest a shard to be verified was published with: a shard without
 * one cannot be verified, which fails the run rather than passing it
 * unchecked. */
static rs_status_t check_digest(rs_exec_h x, size_t shard, uint64_t *want_p,
                                rs_diag_t *diag)
{
    size_t ns;
    const rs_shard_ref_t *s = &rs_plan_shards(x->plan, &ns)[shard];
    const char *digest = digest_of(x, shard);
    if (digest == NULL || digest[0] == '\0')
        return rs__diag_set(diag, RS_ERR_VERIFY, "tensor '%s': shard of "
                            "session '%s' at addr %llu was published without "
                            "a digest, so it cannot be verified (turn "
                            "verification off to accept it)", s->tensor,
                            rs_plan_session_name(x->plan, s->session),
                            (unsigned long long)s->addr);
    if (rs_digest_parse(digest, want_p) != RS_OK)
        return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': shard of "
                            "session '%s' at addr %llu has a malformed digest "
                            "'%s'", s->tensor,
                            rs_plan_session_name(x->plan, s->session),
                            (unsigned long long)s->addr, digest);
    return RS_OK;
}

static rs_status_t compare(rs_exec_h x, size_t shard, uint64_t got,
                           rs_diag_t *diag)
{
    size_t ns;
    const rs_shard_ref_t *s = &rs_plan_shards(x->plan, &ns)[shard];
    uint64_t want;
    char want_s[RS_DIGEST_STR_LEN + 1], got_s[RS_DIGEST_STR_LEN + 1];
    rs_status_t st = check_digest(x, shard, &want, diag);
    if (st != RS_OK)
        return st;
    x->stats.shards_verified++;
    if (want == got)
        return RS_OK;
    rs_digest_format(want, want_s);
    rs_digest_format(got, got_s);
    return rs__diag_set(diag, RS_ERR_VERIFY, "digest mismatch: tensor '%s', "
                        "shard of session '%s' at addr %llu: published %s, "
                        "received %s", s->tensor,
                        rs_plan_session_name(x->plan, s->session),
                        (unsigned long long)s->addr, want_s, got_s);
}

/* Digests a fully covered shard from its pieces, in shard order; a byte
 * read twice is taken from the first piece holding it. */
static uint64_t digest_pieces(const rs_piece_t *p, size_t i, size_t end)
{
    rs_digest_t d;
    uint64_t pos = 0;
    rs_digest_init(&d);
    for (; i < end; i++) {
        uint64_t e = p[i].offset + p[i].nbytes;
        if (e <= pos)
            continue;
        uint64_t skip = pos - p[i].offset;
        rs_digest_update(&d, p[i].at + skip, (size_t)(p[i].nbytes - skip));
        pos = e;
    }
    return rs_digest_final(&d);
}

static rs_status_t verify_partial(rs_exec_h x, const rs_shard_ref_t *sh,
                                  rs_diag_t *diag)
{
    for (size_t i = 0; i < x->partial_len; i++) {
        const rs_shard_ref_t *s = &sh[x->partial[i]];
        rs_read_t r = {s->session, s->addr, x->verify_buf, s->nbytes};
        rs_status_t st = rs_transport_post(x->t, &r, 1, diag);
        if (st == RS_OK)
            st = rs__exec_wait(x, "verify", diag);
        if (st == RS_OK)
            st = compare(x, x->partial[i],
                         rs_digest(x->verify_buf, (size_t)s->nbytes),
                         diag);
        if (st != RS_OK)
            return st;
    }
    return RS_OK;
}

rs_status_t rs__exec_check_digests(rs_exec_h x, rs_diag_t *diag)
{
    size_t ns;
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    const rs_piece_t *p = x->pieces;
    uint64_t want;
    rs_status_t st = RS_OK;
    for (size_t i = 0; i < x->pieces_len && st == RS_OK;) {
        size_t end = group_end(p, x->pieces_len, i);
        if (covered(p, i, end) == sh[p[i].shard].nbytes)
            st = check_digest(x, p[i].shard, &want, diag);
        i = end;
    }
    for (size_t i = 0; i < x->partial_len && st == RS_OK; i++)
        st = check_digest(x, x->partial[i], &want, diag);
    if (st != RS_OK)
        x->failure = "digest";
    return st;
}

rs_status_t rs__exec_verify(rs_exec_h x, rs_diag_t *diag)
{
    size_t ns;
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    const rs_piece_t *p = x->pieces;
    for (size_t i = 0; i < x->pieces_len;) {
        size_t end = group_end(p, x->pieces_len, i);
        const rs_shard_ref_t *s = &sh[p[i].shard];
        if (covered(p, i, end) == s->nbytes) {
            rs_status_t st = compare(x, p[i].shard, digest_pieces(p, i, end),
                                     diag);
            if (st != RS_OK) {
                x->failure = "digest";
                return st;
            }
        }
        i = end;
    }
    rs_status_t st = verify_partial(x, sh, diag);
    if (st != RS_OK)
        x->failure = "digest";
    return st;
}

/* First plan shard at or after (session, addr) in the (session, addr)
 * order of rs_plan_shards. */
static size_t lower_bound(const rs_shard_ref_t *sh, size_t n, uint32_t session,
                          uint64_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sh[mid].session < session ||
            (sh[mid].session == session && sh[mid].addr < addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The plan's sessions by name, so each published shard finds its plan
 * session by one hash instead of a scan. */
static int session_map(rs_plan_h plan, rs_strmap_t *map)
{
    for (uint32_t k = 0; k < rs_plan_num_sessions(plan); k++) {
        const char *name = rs_plan_session_name(plan, k);
        uint32_t seen;
        if (name != NULL && !rs_strmap_get(map, name, &seen) &&
            !rs_strmap_put(map, name, k))
            return 0;
    }
    return 1;
}

/* Gives one published shard's digest to the plan shards it is (same
 * session name, address and tensor); the first published match wins. */
static void match_shard(const rs_shard_ref_t *sh, size_t ns, uint32_t session,
                        const rs_shard_desc_t *d, const char **digests,
                        unsigned char *done)
{
    for (size_t j = lower_bound(sh, ns, session, d->addr);
         j < ns && sh[j].session == session && sh[j].addr == d->addr; j++) {
        if (!done[j] && strcmp(sh[j].tensor, d->tensor) == 0) {
            digests[j] = d->digest;
            done[j] = 1;
        }
    }
}

/* O(shards x log(plan shards)): one pass over the published shards, each
 * placed by hash and binary search. */
rs_status_t rs_exec_set_digests(rs_exec_h x, rs_sources_h sources,
                                rs_diag_t *diag)
{
    size_t ns;
    rs_strmap_t map;
    if (x == NULL || sources == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    rs_strmap_init(&map);
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    const char **d = calloc(ns + 1, sizeof(char *));
    unsigned char *done = calloc(ns + 1, 1);
    int ok = d != NULL && done != NULL && session_map(x->plan, &map);
    for (size_t i = 0; ok && i < rs_sources_num_shards(sources); i++) {
        rs_shard_desc_t desc;
        uint32_t k;
        rs_sources_shard(sources, i, &desc);
        if (rs_strmap_get(&map, desc.session, &k))
            match_shard(sh, ns, k, &desc, d, done);
    }
    rs_strmap_free(&map);
    free(done);
    if (!ok) {
        free(d);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    free(x->digests);
    x->digests = d;
    return RS_OK;
}
