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
    const rs__piece_t *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

uint64_t rs__pieces_covered(const rs__piece_t *p, size_t i, size_t end)
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

size_t rs__piece_group_end(const rs__piece_t *p, size_t n, size_t i)
{
    size_t e = i;
    while (e < n && p[e].shard == p[i].shard)
        e++;
    return e;
}

/* Cuts one read into pieces, one per shard it runs through (a session may
 * publish shards back to back and one read may span them). */
static rs_status_t add_pieces(rs_exec_h x, const rs_shard_ref_t *sh, size_t ns,
                              const rs_read_t *r, uint32_t wave, uint8_t late,
                              rs_diag_t *diag)
{
    uint64_t addr = r->src_addr, left = r->nbytes;
    const unsigned char *at = r->dst;
    while (left > 0) {
        long s = find_shard(sh, ns, r->session, addr, 1);
        if (s < 0)
            return RS_OK;
        uint64_t room = sh[s].addr + sh[s].nbytes - addr;
        uint64_t take = left < room ? left : room;
        rs__piece_t p = {(size_t)s, addr - sh[s].addr, take, at, wave, late};
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
    /* a pipelined run's pieces know their wave */
    const rs_read_t *reads = x->nwaves > 0 ? x->wave_reads : x->reads;
    uint32_t w = 0;
    for (size_t i = 0; i < x->nreads; i++) {
        while (x->nwaves > 0 && i >= x->waves[w].reads_end)
            w++;
        uint8_t late = x->nwaves > 0 && x->wave_late[i];
        rs_status_t st = add_pieces(x, sh, ns, &reads[i], w, late, diag);
        if (st != RS_OK)
            return st;
    }
    if (x->pieces_len > 1)
        qsort(x->pieces, x->pieces_len, sizeof(rs__piece_t), cmp_piece);
    for (size_t i = 0; i < x->pieces_len; i = rs__piece_group_end(x->pieces, x->pieces_len, i)) {
        size_t s = x->pieces[i].shard;
        size_t end = rs__piece_group_end(x->pieces, x->pieces_len, i);
        if (rs__pieces_covered(x->pieces, i, end) == sh[s].nbytes || !x->params.verify_partial)
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
static uint64_t digest_pieces(const rs__piece_t *p, size_t i, size_t end)
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
        x->stats.shards_verified++;
    }
    return RS_OK;
}

rs_status_t rs__exec_check_digests(rs_exec_h x, rs_diag_t *diag)
{
    size_t ns;
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    const rs__piece_t *p = x->pieces;
    uint64_t want;
    rs_status_t st = RS_OK;
    for (size_t i = 0; i < x->pieces_len && st == RS_OK;) {
        size_t end = rs__piece_group_end(p, x->pieces_len, i);
        if (rs__pieces_covered(p, i, end) == sh[p[i].shard].nbytes)
            st = check_digest(x, p[i].shard, &want, diag);
        i = end;
    }
    for (size_t i = 0; i < x->partial_len && st == RS_OK; i++)
        st = check_digest(x, x->partial[i], &want, diag);
    if (st != RS_OK)
        x->failure = "digest";
    return st;
}

rs_status_t rs__exec_verify_group(rs_exec_h x, size_t i, rs_diag_t *diag)
{
    const rs__piece_t *p = x->pieces;
    size_t end = rs__piece_group_end(p, x->pieces_len, i);
    uint64_t got;
    if (!rs__exec_fused_digest(x, i, &got)) /* else a pass over them */
        got = digest_pieces(p, i, end);
    return compare(x, p[i].shard, got, diag);
}

static rs_status_t verify_one(rs_exec_h x, size_t group, rs_diag_t *diag)
{
    rs_status_t st = rs__exec_verify_group(x, group, diag);
    if (st == RS_OK)
        x->stats.shards_verified++;
    return st;
}

/* A serial run: every fully read group; a pipelined run: the groups left
 * for its end (verify_at past the last wave's end). */
static rs_status_t verify_groups(rs_exec_h x, rs_diag_t *diag)
{
    size_t ns;
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    const rs__piece_t *p = x->pieces;
    rs_status_t st = RS_OK;
    if (x->nwaves > 0) {
        for (size_t k = x->waves[x->nwaves - 1].verify_end;
             st == RS_OK && k < x->nverify; k++)
            st = verify_one(x, x->verify_at[k], diag);
        return st;
    }
    for (size_t i = 0; st == RS_OK && i < x->pieces_len;) {
        size_t end = rs__piece_group_end(p, x->pieces_len, i);
        if (rs__pieces_covered(p, i, end) == sh[p[i].shard].nbytes)
            st = verify_one(x, i, diag);
        i = end;
    }
    return st;
}

rs_status_t rs__exec_verify(rs_exec_h x, rs_diag_t *diag)
{
    size_t ns;
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    rs_status_t st = verify_groups(x, diag);
    if (st == RS_OK)
        st = verify_partial(x, sh, diag);
    if (st != RS_OK)
        x->failure = "digest";
    return st;
}

/* Placing published shards among the plan's: plan sessions by name (with
 * a small cache keyed by the name's address, since sources intern their
 * session names), and each plan session's range of rs_plan_shards (sorted
 * by session, then address). */
#define NAME_CACHE 256

typedef struct digest_ctx {
    const rs_shard_ref_t *sh;
    size_t ns;
    size_t *first;    /* per plan session: its first plan shard; then ns */
    rs__strmap_t map;  /* plan session by name */
    struct {
        const char *name;
        uint32_t k;
        int found;
    } cache[NAME_CACHE];
    const char **digests;
    unsigned char *done;
} digest_ctx_t;

static int digest_ctx_init(digest_ctx_t *c, rs_plan_h plan)
{
    size_t nsess = rs_plan_num_sessions(plan);
    memset(c, 0, sizeof(*c));
    rs__strmap_init(&c->map);
    c->sh = rs_plan_shards(plan, &c->ns);
    c->digests = calloc(c->ns + 1, sizeof(char *));
    c->done = calloc(c->ns + 1, 1);
    c->first = malloc((nsess + 1) * sizeof(size_t));
    if (c->digests == NULL || c->done == NULL || c->first == NULL)
        return 0;
    for (size_t k = 0, j = 0; k <= nsess; k++) {
        while (j < c->ns && c->sh[j].session < k)
            j++;
        c->first[k] = j;
    }
    for (uint32_t k = 0; k < nsess; k++) {
        const char *name = rs_plan_session_name(plan, k);
        uint32_t seen;
        if (name != NULL && !rs__strmap_get(&c->map, name, &seen) &&
            !rs__strmap_put(&c->map, name, k))
            return 0;
    }
    return 1;
}

/* Keeps the digests (on success), frees the rest. */
static void digest_ctx_free(digest_ctx_t *c, int keep)
{
    rs__strmap_free(&c->map);
    free(c->first);
    free(c->done);
    if (!keep)
        free(c->digests);
}

static int plan_session(digest_ctx_t *c, const char *name, uint32_t *k_p)
{
    size_t h = ((uintptr_t)name >> 3) % NAME_CACHE;
    if (c->cache[h].name != name) {
        c->cache[h].name = name;
        c->cache[h].found = rs__strmap_get(&c->map, name, &c->cache[h].k);
    }
    *k_p = c->cache[h].k;
    return c->cache[h].found;
}

/* Gives one published shard's digest to the plan shards it is (same
 * session name, address and tensor); the first published match wins. */
static void match_shard(digest_ctx_t *c, uint32_t k, const rs_shard_desc_t *d)
{
    size_t lo = c->first[k], hi = c->first[k + 1];
    while (lo < hi) { /* first plan shard of session k at or after addr */
        size_t mid = lo + (hi - lo) / 2;
        if (c->sh[mid].addr < d->addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t j = lo; j < c->first[k + 1] && c->sh[j].addr == d->addr; j++) {
        if (!c->done[j] && strcmp(c->sh[j].tensor, d->tensor) == 0) {
            c->digests[j] = d->digest;
            c->done[j] = 1;
        }
    }
}

/* O(S log(P / sessions) + P) for S published and P plan shards: one pass
 * over the published shards, each placed by its session (cached by name
 * address, else hashed) and a binary search inside that session's range. */
rs_status_t rs_exec_set_digests(rs_exec_h x, rs_sources_h sources,
                                rs_diag_t *diag)
{
    digest_ctx_t *c;
    if (x == NULL || sources == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    if ((c = malloc(sizeof(*c))) == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    int ok = digest_ctx_init(c, x->plan);
    size_t n = rs_sources_num_shards(sources);
    for (size_t i = 0; ok && i < n; i++) {
        rs_shard_desc_t desc;
        uint32_t k;
        rs_sources_shard(sources, i, &desc);
        if (plan_session(c, desc.session, &k))
            match_shard(c, k, &desc);
    }
    if (ok) {
        free(x->digests);
        x->digests = c->digests;
    }
    digest_ctx_free(c, ok);
    free(c);
    return ok ? RS_OK : rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
}
