/* The receiver's side of deltas (docs/delta.md, "Receivers"): the deltas
 * each slot's table lists beside its shards (docs/formats.md, "Deltas"),
 * read from the tables as they are parsed, handed before each run to the
 * delta reads of the receiver's transport (exec/delta_read.h) in the
 * plan's session numbering, and the run's figures into the pull's result.
 * A delta entry that does not read as the format says is left out: the
 * shard is then read whole, as from a publisher without deltas. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "core/strmap.h"
#include "core/vec.h"
#include "exec/delta_read.h"
#include "refit/receiver_impl.h"
#include "reshard/digest.h"
#include "reshard/memory.h"
#include "reshard/plan.h"
#include "reshard/sources.h"

/* One shard with deltas, as its table names it. */
typedef struct rs__rx_delta_shard {
    char *session;
    uint64_t addr, nbytes;
    size_t first, count; /* in r->dref */
} rs__rx_delta_shard_t;

void rs__receiver_deltas_clear(rs_receiver_h r)
{
    for (size_t i = 0; i < r->dshard_len; i++)
        free(r->dshard[i].session);
    r->dshard_len = 0;
    r->dref_len = 0;
}

void rs__receiver_deltas_free(rs_receiver_h r)
{
    rs__receiver_deltas_clear(r);
    free(r->dshard);
    free(r->dref);
    r->dshard = NULL;
    r->dref = NULL;
    r->dshard_cap = r->dref_cap = 0;
}

static int get_u64(const json_t *o, const char *key, uint64_t *v)
{
    const json_t *x = json_object_get(o, key);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return 0;
    *v = (uint64_t)json_integer_value(x);
    return 1;
}

/* One listed delta, or 0 when it does not read as the format says. */
static int read_ref(const json_t *o, rs__delta_ref_t *d)
{
    uint64_t base, version, esize, chunk;
    const char *text = json_string_value(json_object_get(o, "digest"));
    if (!json_is_object(o) || !get_u64(o, "base", &base) ||
        !get_u64(o, "version", &version) || !get_u64(o, "addr", &d->addr) ||
        !get_u64(o, "bytes", &d->bytes) || !get_u64(o, "esize", &esize) ||
        !get_u64(o, "chunk", &chunk) || text == NULL ||
        rs_digest_parse(text, &d->digest) != RS_OK || version <= base ||
        version > INT64_MAX || (esize != 1 && esize != 2 && esize != 4) ||
        chunk < 8 || chunk > 65536 || d->bytes == 0)
        return 0;
    d->base = (int64_t)base;
    d->version = (int64_t)version;
    d->esize = (uint32_t)esize;
    d->chunk = (uint32_t)chunk;
    return 1;
}

/* Appends the listed deltas to r->dref; 0 (none kept) when one does not
 * read as the format says: the shard is then read whole. */
static rs_status_t read_refs(rs_receiver_h r, const json_t *deltas,
                             size_t *first_p, size_t *count_p)
{
    size_t first = r->dref_len;
    for (size_t k = 0; k < json_array_size(deltas); k++) {
        rs__delta_ref_t d;
        if (!read_ref(json_array_get(deltas, k), &d)) {
            r->dref_len = first;
            break;
        }
        if (!RS_VEC_PUSH(r, dref, d))
            return RS_ERR_NO_MEMORY;
    }
    *first_p = first;
    *count_p = r->dref_len - first;
    return RS_OK;
}

static rs_status_t add_shard(rs_receiver_h r, const char *session,
                             uint64_t addr, uint64_t nbytes,
                             const json_t *deltas)
{
    rs__rx_delta_shard_t s = {strdup(session), addr, nbytes, 0, 0};
    rs_status_t st = s.session != NULL
                         ? read_refs(r, deltas, &s.first, &s.count)
                         : RS_ERR_NO_MEMORY;
    if (st != RS_OK || !RS_VEC_PUSH(r, dshard, s)) {
        free(s.session);
        return RS_ERR_NO_MEMORY;
    }
    return RS_OK;
}

void rs__receiver_deltas_renew_start(rs_receiver_h r)
{
    r->dref_len = 0;
    for (size_t i = 0; i < r->dshard_len; i++)
        r->dshard[i].count = 0;
}

rs_status_t rs__receiver_deltas_renew(rs_receiver_h r, size_t k,
                                      const char *text, size_t len)
{
    if (!rs__receiver_takes_deltas(r) || k >= r->dshard_len)
        return RS_OK;
    json_error_t err;
    json_t *deltas = json_loadb(text, len, 0, &err);
    rs_status_t st = RS_OK;
    if (json_is_array(deltas))
        st = read_refs(r, deltas, &r->dshard[k].first, &r->dshard[k].count);
    json_decref(deltas);
    return st;
}

/* The shard's bytes: its shape's product times the element size; 0 when
 * it does not read. */
static uint64_t shard_bytes(const json_t *shard, uint64_t elsize)
{
    const json_t *shape = json_object_get(shard, "shape");
    uint64_t n = elsize;
    if (!json_is_array(shape))
        return 0;
    for (size_t d = 0; d < json_array_size(shape); d++) {
        const json_t *x = json_array_get(shape, d);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return 0;
        uint64_t e = (uint64_t)json_integer_value(x);
        if (e != 0 && n > UINT64_MAX / e)
            return 0;
        n *= e;
    }
    return n;
}

static rs_status_t scan_blob(rs_receiver_h r, const json_t *blob)
{
    const char *agent = json_string_value(json_object_get(blob, "agent_name"));
    const json_t *tensors = json_object_get(blob, "tensors");
    rs_status_t st = RS_OK;
    for (size_t t = 0; st == RS_OK && t < json_array_size(tensors); t++) {
        const json_t *tensor = json_array_get(tensors, t);
        const json_t *shards = json_object_get(tensor, "shards");
        uint64_t elsize;
        if (!get_u64(tensor, "elsize", &elsize))
            continue;
        for (size_t i = 0; st == RS_OK && i < json_array_size(shards); i++) {
            const json_t *sh = json_array_get(shards, i);
            const json_t *deltas = json_object_get(sh, "deltas");
            const char *session =
                json_string_value(json_object_get(sh, "agent_name"));
            uint64_t addr, nbytes = shard_bytes(sh, elsize);
            if (session == NULL)
                session = agent;
            if (!json_is_array(deltas))
                continue;
            if (session == NULL || !get_u64(sh, "addr", &addr)) {
                session = ""; /* kept in order, never matched */
                addr = 0;
            }
            st = add_shard(r, session, addr, nbytes, deltas);
        }
    }
    return st;
}

rs_status_t rs__receiver_deltas_scan(rs_receiver_h r, const char *table,
                                     size_t len, rs_diag_t *diag)
{
    static const char key[] = "\"deltas\": [";
    if (!rs__receiver_takes_deltas(r) ||
        memmem(table, len, key, sizeof(key) - 1) == NULL)
        return RS_OK; /* none listed: nothing to parse again */
    json_error_t err;
    json_t *root = json_loadb(table, len, 0, &err);
    if (root == NULL)
        return RS_OK; /* the sources loader parsed it: cannot happen */
    rs_status_t st = RS_OK;
    if (json_is_array(root))
        for (size_t i = 0; st == RS_OK && i < json_array_size(root); i++)
            st = scan_blob(r, json_array_get(root, i));
    else
        st = scan_blob(r, root);
    json_decref(root);
    return st == RS_OK ? RS_OK
                       : rs__diag_set(diag, st, "out of memory");
}

static int by_session_addr(const void *a, const void *b)
{
    const rs__delta_src_t *x = a, *y = b;
    if (x->session != y->session)
        return x->session < y->session ? -1 : 1;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Every shard of the sources, in the plan's sessions, sorted; *n_p of
 * them (shards of sessions the plan does not know are left out). */
static rs__delta_src_t *all_shards(rs_receiver_h r, size_t *n_p)
{
    rs__strmap_t names;
    rs__strmap_init(&names);
    uint32_t nsess = (uint32_t)rs_plan_num_sessions(r->plan);
    size_t nsh = rs_sources_num_shards(r->sources), n = 0;
    int ok = 1;
    for (uint32_t k = 0; ok && k < nsess; k++)
        ok = rs__strmap_put(&names, rs_plan_session_name(r->plan, k), k);
    rs__delta_src_t *srcs = ok ? malloc((nsh + 1) * sizeof(*srcs)) : NULL;
    for (size_t i = 0; srcs != NULL && i < nsh; i++) {
        rs_shard_desc_t d;
        uint32_t k;
        rs_sources_shard(r->sources, i, &d);
        uint64_t nbytes = d.elsize;
        for (int j = 0; j < d.ndim; j++)
            nbytes *= (uint64_t)d.shape[j];
        if (nbytes > 0 && rs__strmap_get(&names, d.session, &k))
            srcs[n++] = (rs__delta_src_t){k, d.addr, nbytes, 0, 0, 0};
    }
    rs__strmap_free(&names);
    if (srcs != NULL)
        qsort(srcs, n, sizeof(*srcs), by_session_addr);
    *n_p = n;
    return srcs;
}

/* Gives each listed shard its deltas: the source with its session,
 * address and size (a table naming a shard differently is left out). */
static void attach_deltas(rs_receiver_h r, rs__delta_src_t *srcs, size_t n)
{
    rs__strmap_t names;
    rs__strmap_init(&names);
    uint32_t nsess = (uint32_t)rs_plan_num_sessions(r->plan);
    int ok = 1;
    for (uint32_t k = 0; ok && k < nsess; k++)
        ok = rs__strmap_put(&names, rs_plan_session_name(r->plan, k), k);
    for (size_t i = 0; ok && i < r->dshard_len; i++) {
        const rs__rx_delta_shard_t *d = &r->dshard[i];
        rs__delta_src_t key = {0, d->addr, d->nbytes, 0, 0, 0};
        if (!rs__strmap_get(&names, d->session, &key.session))
            continue;
        rs__delta_src_t *hit = bsearch(&key, srcs, n, sizeof(*srcs),
                                       by_session_addr);
        if (hit != NULL && hit->nbytes == d->nbytes) {
            hit->first = d->first;
            hit->count = d->count;
            hit->serves = 1;
        }
    }
    rs__strmap_free(&names);
}

/* The shadows are patched in place (docs/delta.md, "Receivers"): the
 * receiver owns them, they keep what the last pull read until the next
 * one (install only reads them; a rebind or a group rollback, which write
 * them, raise shadow_epoch), and only the pull's reads write them. Never
 * the bound parameters (shadow = 0): no span then. */
static rs_status_t arm_in_place(rs_receiver_h r, rs_diag_t *diag)
{
    rs__delta_span_t *v = malloc((r->nparams + 1) * sizeof(*v));
    size_t n = 0;
    if (v == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    for (size_t p = 0; r->params.shadow && p < r->nparams; p++)
        if (r->binds[p].shadow != NULL && r->binds[p].nbytes > 0)
            v[n++] = (rs__delta_span_t){r->binds[p].shadow,
                                        r->binds[p].nbytes};
    rs_status_t st = rs__delta_reads_in_place(r->transport, v, n,
                                              r->shadow_epoch, diag);
    free(v);
    return st;
}

/* Asks once per plan whether its staging takes one round and holds any
 * staged read (O(staged reads); kept with the plan). */
static void ask_staging(rs_receiver_h r)
{
    rs_exec_params_t ep;
    rs_staging_need_t need;
    rs_diag_t d;
    if (r->staging_asked)
        return;
    rs__receiver_exec_params(r, &ep);
    int ok = rs_exec_staging_need(r->plan, &ep, &d, &need) == RS_OK;
    r->staging_one_round = ok && need.rounds <= 1;
    r->staging_any = ok && need.bytes > 0;
    r->staging_asked = 1;
}

/* The reads that land in place, which the budget's copies leave out: the
 * exact segments in the shadows (shadow = 1), the staged reads in the
 * executor's staging when it takes one round (the executor hands it to
 * the delta reads then, exec.c). Looked at only when the budget keeps
 * copies. */
static unsigned in_place_reads(rs_receiver_h r)
{
    unsigned f = r->params.shadow ? RS__DELTA_IN_PLACE_EXACT : 0;
    if (r->params.delta_budget == 0)
        return f;
    ask_staging(r);
    return r->staging_one_round ? f | RS__DELTA_IN_PLACE_STAGED : f;
}

rs_status_t rs__receiver_deltas_arm(rs_receiver_h r, int64_t version,
                                    rs_diag_t *diag)
{
    if (r->transport == NULL || !rs__delta_reads_is(r->transport))
        return RS_OK;
    size_t n = 0;
    rs__delta_src_t *srcs = all_shards(r, &n);
    if (srcs == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    attach_deltas(r, srcs, n);
    rs_status_t st = rs__delta_reads_set(r->transport,
                                         r->params.verify_digests ? version
                                                                  : -1,
                                         srcs, n, r->dref, r->dref_len, diag);
    free(srcs);
    if (st == RS_OK)
        st = arm_in_place(r, diag);
    if (st == RS_OK)
        st = rs__delta_reads_keep(r->transport, r->plan,
                                  r->params.delta_budget, in_place_reads(r),
                                  diag);
    return st;
}

int rs__receiver_takes_deltas(rs_receiver_h r)
{
    return r->params.delta && r->params.verify_digests;
}

int rs__receiver_patches_deltas(rs_receiver_h r)
{
    if (!rs__receiver_takes_deltas(r) || r->plan == NULL)
        return 0;
    if (r->params.shadow || r->params.delta_budget > 0)
        return 1;
    ask_staging(r);
    return r->staging_one_round && r->staging_any;
}

/* Copies that did not fit the memory available: the pull goes on, their
 * reads whole, and the caller hears of it. */
static void tell_no_memory(rs_receiver_h r, const rs__delta_stats_t *s)
{
    char line[256];
    uint64_t have = 0;
    const char *source = "unknown";
    if (rs_memory_available(&have, &source) != RS_OK)
        source = "unreadable";
    snprintf(line, sizeof(line), "receiver %s: %llu delta copies (%llu "
             "bytes) not kept: they do not fit the memory available (%llu "
             "bytes, %s); those reads stay whole", r->holder,
             (unsigned long long)s->no_memory_runs,
             (unsigned long long)s->no_memory_bytes,
             (unsigned long long)have, source);
    if (r->params.notice != NULL)
        r->params.notice(r->params.notice_ctx, line);
    else
        rs_dir_notice(NULL, "%s", line);
}

void rs__receiver_deltas_done(rs_receiver_h r, int ok, rs_pull_result_t *res)
{
    if (r->transport == NULL || !rs__delta_reads_is(r->transport))
        return;
    rs__delta_stats_t s;
    rs__delta_reads_stats(r->transport, &s);
    rs__delta_reads_done(r->transport, ok);
    res->delta_runs += s.delta_runs;
    res->delta_bytes += s.delta_bytes;
    res->delta_full_bytes += s.delta_full;
    res->whole_runs += s.whole_runs;
    res->whole_bytes += s.whole_bytes;
    res->delta_refused += s.refused;
    res->delta_held_runs = s.held_runs;
    res->delta_held_bytes = s.held_bytes;
    res->delta_over_budget_runs = s.over_budget_runs;
    res->delta_over_budget_bytes = s.over_budget_bytes;
    res->delta_no_memory_runs += s.no_memory_runs;
    res->delta_no_memory_bytes += s.no_memory_bytes;
    res->delta_in_place_runs += s.in_place_runs;
    res->delta_in_place_bytes += s.in_place_bytes;
    if (s.no_memory_runs > 0)
        tell_no_memory(r, &s);
}
