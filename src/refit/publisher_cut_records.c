/* The publisher's copy of the receivers' cuts records (cut-aligned
 * staging): each holder's generation and its record parsed and cut down to
 * the tensors this publisher registered. Before a version is staged the
 * copy is brought up to date from the directory's listing of generations
 * (rs_dir_list_cuts): only records that are new or whose generation
 * changed are read and parsed, dropped holders leave. A record's requests
 * for quantized copies of registered tensors are kept with its cuts
 * (publisher-side quantization with quantize_wanted reads them). Records
 * that cannot be used are kept as unusable with the reason, told once per
 * (holder, generation) when the union is built, so they are neither read
 * nor parsed again until they change. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "core/strmap.h"
#include "refit/publisher_impl.h"
#include "reshard/cuts.h"

/* Whether (holder, generation) was told already; records it otherwise. */
static int told_before(rs_publisher_h p, const char *holder, uint64_t gen)
{
    for (size_t i = 0; i < p->told_len; i++)
        if (p->told[i].digest == gen && strcmp(p->told[i].holder, holder) == 0)
            return 1;
    rs__publish_told_t t;
    snprintf(t.holder, sizeof(t.holder), "%s", holder);
    t.digest = gen;
    RS_VEC_PUSH(p, told, t); /* out of memory: told again next time */
    return 0;
}

void rs__publisher_tell_record(rs_publisher_h p, const char *holder,
                               uint64_t generation, const char *why)
{
    char line[RS_DIAG_MSG_MAX + 512];
    if (told_before(p, holder, generation))
        return;
    snprintf(line, sizeof(line), "publisher rank %lld: ignoring the cuts "
             "record of holder '%s' for '%s': %s; its cuts are left out "
             "(told once while the record stays the same)",
             (long long)p->params.rank, holder, p->model, why);
    rs__publisher_notify(p, line);
}

static void tell_unreadable(rs_publisher_h p, const char *what,
                            const char *msg)
{
    char line[RS_DIAG_MSG_MAX + 512];
    snprintf(line, sizeof(line), "publisher rank %lld: cannot read %s of "
             "'%s' (%s); staging with the records read before",
             (long long)p->params.rank, what, p->model, msg);
    rs__publisher_notify(p, line);
}

/* Adds tensor `name`'s shape and cuts from `from` to `to` (when `from`
 * holds it). */
static rs_status_t copy_tensor(rs_cuts_h to, rs_cuts_h from, const char *name,
                               rs_diag_t *diag)
{
    int ndim = -1;
    const int64_t *shape = rs_cuts_shape(from, name, &ndim);
    if (shape == NULL || ndim <= 0)
        return RS_OK;
    rs_status_t st = rs_cuts_add(to, name, ndim, shape, 0, 0, diag);
    for (int d = 0; st == RS_OK && d < ndim; d++) {
        size_t n = 0;
        const int64_t *at = rs_cuts_get(from, name, d, &n);
        for (size_t i = 0; st == RS_OK && i < n; i++)
            st = rs_cuts_add(to, name, ndim, shape, d, at[i], diag);
    }
    return st;
}

/* Adds the quantized-copy requests of `from` whose source is registered
 * (publisher-side quantization serves only those). */
static rs_status_t copy_quants(rs_publisher_h p, rs_cuts_h to, rs_cuts_h from,
                               rs_diag_t *diag)
{
    const char *src, *spec;
    rs__strmap_t names;
    uint32_t ignored;
    int ok = 1;
    if (rs_cuts_num_quants(from) == 0)
        return RS_OK;
    rs__strmap_init(&names);
    for (size_t i = 0; ok && i < p->shards_len; i++)
        ok = rs__strmap_put(&names, p->shards[i].tensor, (uint32_t)i);
    rs_status_t st = ok ? RS_OK
                        : rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of "
                                       "memory");
    for (size_t i = 0; st == RS_OK && rs_cuts_quant(from, i, &src, &spec);
         i++)
        if (rs__strmap_get(&names, src, &ignored))
            st = rs_cuts_add_quant(to, src, spec, diag);
    rs__strmap_free(&names);
    return st;
}

/* The part of a parsed record about the registered tensors (with its
 * model): what the union needs, at a fraction of a whole record's memory
 * (a DeepSeek-V3 record names 45,395 tensors, a trainer rank holds about
 * a hundred), and the requests for quantized copies of them. */
static rs_status_t keep_registered(rs_publisher_h p, rs_cuts_h whole,
                                   rs_diag_t *diag, rs_cuts_h *kept_p)
{
    rs_cuts_h kept = NULL;
    rs_status_t st = rs_cuts_create(diag, &kept);
    if (st == RS_OK)
        st = rs_cuts_set_model(kept, rs_cuts_model(whole), diag);
    for (size_t i = 0; st == RS_OK && i < p->shards_len; i++)
        st = copy_tensor(kept, whole, p->shards[i].tensor, diag);
    if (st == RS_OK)
        st = copy_quants(p, kept, whole, diag);
    if (st != RS_OK) {
        rs_cuts_destroy(kept);
        return st;
    }
    *kept_p = kept;
    return RS_OK;
}

/* Empties rec (its cuts and why). */
static void clear_record(rs__publish_record_t *rec)
{
    rs_cuts_destroy(rec->cuts);
    free(rec->why);
    rec->cuts = NULL;
    rec->why = NULL;
}

/* Records why rec cannot be used. */
static rs_status_t set_why(rs__publish_record_t *rec, const char *why,
                           rs_diag_t *diag)
{
    if ((rec->why = strdup(why)) == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "publisher: out of "
                            "memory reading the cuts record of '%s'",
                            rec->holder);
    return RS_OK;
}

/* Parses a record just read into rec->cuts, or says why it cannot be
 * used in rec->why (rec->cuts stays NULL). Only RS_ERR_NO_MEMORY is an
 * error. */
static rs_status_t parse_record(rs_publisher_h p, const rs_dir_cuts_record_t *r,
                                rs__publish_record_t *rec, rs_diag_t *diag)
{
    char origin[RS_DIR_NAME_MAX + 64], why[RS_DIAG_MSG_MAX + 64];
    rs_cuts_h whole = NULL;
    rs_diag_t d;
    rs_diag_clear(&d);
    if (r->json == NULL) {
        snprintf(why, sizeof(why), "%zu bytes, more than the %zu-byte limit",
                 r->len, RS_DIR_CUTS_MAX);
        return set_why(rec, why, diag);
    }
    p->records_parsed++;
    snprintf(origin, sizeof(origin), "cuts record '%s'", r->holder);
    rs_status_t st = rs_cuts_read_json(r->json, r->len, origin, &d, &whole);
    if (st == RS_OK)
        st = keep_registered(p, whole, &d, &rec->cuts);
    rs_cuts_destroy(whole);
    if (st == RS_ERR_NO_MEMORY)
        return rs__diag_set(diag, st, "publisher: out of memory parsing the "
                            "cuts record of '%s'", r->holder);
    if (st != RS_OK)
        return set_why(rec, d.msg[0] ? d.msg : rs_status_str(st), diag);
    return RS_OK;
}

/* Reads holder s's record into *rec (its cuts, or NULL when unusable),
 * *read_p = 1 then; *keep_p = 0: the holder has no record any more. A
 * read that fails for another reason than a corrupted record is told and
 * leaves *rec as it was (*read_p = 0), to be read at the next staging. */
static rs_status_t read_one(rs_publisher_h p, const rs_dir_cuts_stamp_t *s,
                            rs__publish_record_t *rec, int *read_p, int *keep_p,
                            rs_diag_t *diag)
{
    rs_dir_cuts_record_t *got = NULL;
    size_t n = 0;
    const char *holder = s->holder;
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_status_t st = rs_dir_read_cuts_of(p->dir, p->model, &holder, 1, &d,
                                         &got, &n);
    if (st != RS_OK && st != RS_ERR_VERIFY) {
        tell_unreadable(p, "a cuts record", d.msg);
        return RS_OK;
    }
    clear_record(rec);
    *read_p = 1;
    if (st == RS_ERR_VERIFY) { /* unusable until it changes */
        rec->generation = s->generation;
        return set_why(rec, d.msg, diag);
    }
    *keep_p = n > 0;
    if (n > 0) {
        rec->generation = got[0].generation;
        st = parse_record(p, &got[0], rec, diag);
    }
    rs_dir_cuts_free(got, n);
    return st;
}

/* The cached record of `holder` (p->records is in holder order), or
 * NULL. */
static rs__publish_record_t *cached(rs_publisher_h p, const char *holder)
{
    size_t lo = 0, hi = p->records_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(p->records[mid].holder, holder);
        if (c == 0)
            return &p->records[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Moves holder s's cached record into *out, reading it when it is new or
 * its generation changed; *keep_p as read_one. */
static rs_status_t sync_one(rs_publisher_h p, const rs_dir_cuts_stamp_t *s,
                            rs__publish_record_t *out, int *keep_p,
                            rs_diag_t *diag)
{
    rs__publish_record_t *old = cached(p, s->holder);
    int read = 0;
    *keep_p = 1;
    if (old != NULL) {
        *out = *old;
        old->cuts = NULL; /* moved */
        old->why = NULL;
        old->holder[0] = '\0';
        if (out->generation == s->generation && out->read)
            return RS_OK;
    } else {
        memset(out, 0, sizeof(*out));
        snprintf(out->holder, sizeof(out->holder), "%s", s->holder);
    }
    rs_status_t st = read_one(p, s, out, &read, keep_p, diag);
    if (read) {
        out->read = 1;
        p->records_changed = 1;
    }
    return st;
}

void rs__publisher_forget_records(rs_publisher_h p)
{
    for (size_t i = 0; i < p->records_len; i++)
        clear_record(&p->records[i]);
    p->records_len = 0;
    p->records_changed = 1;
}

/* Replaces p->records with `next` (n entries), freeing what was not
 * moved into it (the records of dropped holders). */
static void take_records(rs_publisher_h p, rs__publish_record_t *next, size_t n,
                         size_t cap)
{
    for (size_t i = 0; i < p->records_len; i++) {
        if (p->records[i].holder[0] != '\0')
            p->records_changed = 1; /* its holder is gone */
        clear_record(&p->records[i]);
    }
    free(p->records);
    p->records = next;
    p->records_len = n;
    p->records_cap = cap;
}

rs_status_t rs__publisher_sync_records(rs_publisher_h p, rs_diag_t *diag)
{
    rs_dir_cuts_stamp_t *stamps = NULL;
    size_t n = 0, kept = 0;
    rs_diag_t d;
    rs_diag_clear(&d);
    if (rs_dir_list_cuts(p->dir, p->model, &d, &stamps, &n) != RS_OK) {
        tell_unreadable(p, "the cuts records", d.msg);
        return RS_OK;
    }
    rs__publish_record_t *next = calloc(n > 0 ? n : 1, sizeof(*next));
    if (next == NULL) {
        free(stamps);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "publisher: out of "
                            "memory reading the cuts records");
    }
    rs_status_t st = RS_OK;
    for (size_t i = 0; st == RS_OK && i < n; i++) {
        int keep = 1;
        st = sync_one(p, &stamps[i], &next[kept], &keep, diag);
        if (keep)
            kept++;
    }
    if (st != RS_OK) {
        for (size_t i = 0; i < n; i++) /* calloc'd: unused ones hold NULL */
            clear_record(&next[i]);
        free(next);
        rs__publisher_forget_records(p);
    } else {
        take_records(p, next, kept, n > 0 ? n : 1);
    }
    free(stamps);
    return st;
}

rs_status_t rs__publisher_merge_records(rs_publisher_h p, rs_cuts_h into,
                                        rs_diag_t *diag)
{
    for (size_t i = 0; i < p->records_len; i++) {
        const rs__publish_record_t *rec = &p->records[i];
        rs_diag_t d;
        rs_diag_clear(&d);
        if (rec->why != NULL)
            rs__publisher_tell_record(p, rec->holder, rec->generation,
                                      rec->why);
        if (rec->cuts == NULL)
            continue; /* unusable (told) or not read yet */
        rs_status_t st = rs_cuts_merge(into, rec->cuts, &d);
        if (st == RS_ERR_NO_MEMORY)
            return rs__diag_set(diag, st, "publisher: out of memory merging "
                                "the cuts record of '%s'", rec->holder);
        if (st != RS_OK)
            rs__publisher_tell_record(p, rec->holder, rec->generation,
                                      d.msg[0] ? d.msg : rs_status_str(st));
    }
    return RS_OK;
}
