/* The tables step of a pull: every slot's chosen table, merged into the
 * sources the plan is made from, and what the receiver keeps of them.
 *
 * A publisher stores its table as a split entry (dir/split.h): a geometry
 * document, rewritten only when the geometry changes, and per version the
 * values that change (every shard's digest, the step) as insertions into
 * it. The first pull reads each document, splices the version's values in,
 * parses the table and notes, per slot, which shard each insertion is the
 * digest of (checked against the parse: the insertion sits in an empty
 * "digest" string of the document and equals the shard's parsed digest).
 * A later version whose every chosen entry names the same document with
 * its insertions at the same offsets differs from the parsed tables only
 * in those values, so the receiver writes the new digests into the parsed
 * sources instead of reading and parsing the tables again; a shard's
 * `deltas` array is such a value too (one per shard listing the key, in
 * order), read into the receiver's deltas when it takes them, else
 * skipped. Anything else
 * (another document, another publisher, offsets that moved, an entry of
 * the earlier layout, a value that could change the document's structure)
 * reads and parses every table whole. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/diag.h"
#include "model/sources_log.h"
#include "refit/receiver_impl.h"
#include "reshard/digest.h"

#define STEP_KEY "\"publisher_step\": "
#define DIGEST_KEY "\"digest\": \""
#define DELTAS_KEY "\"deltas\": "

static void memo_free(rs__table_memo_t *m, int64_t n)
{
    for (int64_t i = 0; m != NULL && i < n; i++)
        free(m[i].shard_of);
    free(m);
}

void rs__receiver_forget_tables(rs_receiver_h r)
{
    memo_free(r->memo, r->nmemo);
    r->memo = NULL;
    r->nmemo = 0;
    r->memo_for = NULL;
}

void rs__receiver_sources_drop(rs_receiver_h r, rs_sources_h sources)
{
    if (sources != r->sources) {
        if (sources == r->memo_for)
            rs__receiver_forget_tables(r);
        rs_sources_destroy(sources);
    }
}

uint64_t rs__receiver_fingerprint(rs_receiver_h r, rs_sources_h sources)
{
    if (r->cached && sources == r->sources)
        return r->fingerprint;
    return rs__topology_fingerprint(sources);
}

/* Records that the tables of `s` from index r->ntable_slot on came from
 * `slot`. */
static rs_status_t note_slot(rs_receiver_h r, rs_sources_h s, int64_t slot,
                             rs_diag_t *diag)
{
    size_t n = rs_sources_num_tables(s);
    int64_t *v = realloc(r->table_slot, (n + 1) * sizeof(*v));
    if (v == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    for (size_t i = r->ntable_slot; i < n; i++)
        v[i] = slot;
    r->table_slot = v;
    r->ntable_slot = n;
    return RS_OK;
}

/* A value that keeps the document's structure wherever it is inserted
 * into a string or a number: a digest's characters, or digits. */
static int plain_value(const char *t, size_t n, int digits)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        int ok = (c >= '0' && c <= '9') ||
                 (!digits && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                              c == ':' || c == '-' || c == '_' || c == '.' ||
                              c == '+' || c == '/' || c == '='));
        if (!ok)
            return 0;
    }
    return 1;
}

/* A `deltas` insertion: one JSON array on one line, holding no nested
 * brackets (docs/formats.md, "Deltas"), so it cannot change the
 * document's structure around it. */
static int deltas_value(const char *t, size_t n)
{
    if (n < 2 || t[0] != '[' || t[n - 1] != ']')
        return 0;
    for (size_t i = 1; i + 1 < n; i++)
        if (t[i] == '[' || t[i] == ']' || t[i] == '\n')
            return 0;
    return 1;
}

static int after(const char *doc, uint64_t off, const char *key)
{
    size_t n = strlen(key);
    return off >= n && memcmp(doc + off - n, key, n) == 0;
}

/* The next logged shard from *k on that has a digest; 0 when none. */
static int next_digest(rs_sources_h s, size_t end, size_t *k)
{
    while (*k < end && rs__sources_logged_digest(s, *k) == NULL)
        (*k)++;
    return *k < end;
}

/* Notes which logged shard (first .. end) each insertion of a split
 * entry is the digest of, or which one is the step; m->reusable stays 0
 * unless every insertion is one of these and every digest has one. */
static rs_status_t classify(rs_receiver_h r, rs_sources_h s, size_t first,
                            size_t dfirst, const char *doc, size_t doc_len,
                            const rs_dir_entry_t *e, const rs__dir_split_t *sp,
                            rs__table_memo_t *m, rs_diag_t *diag)
{
    size_t end = rs__sources_logged(s), at = 0, tlen, k = first, i = 0;
    size_t ndeltas = 0;
    uint64_t off;
    const char *text;
    rs_digest_t offsets;
    rs_digest_init(&offsets);
    snprintf(m->publisher, sizeof(m->publisher), "%s", e->publisher);
    m->doc = sp->doc;
    m->step = SIZE_MAX;
    m->reusable = 0;
    size_t cap = 16;
    m->shard_of = malloc(cap * sizeof(*m->shard_of));
    if (m->shard_of == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    for (; rs__dir_insert_next(e->table, e->len, &at, &off, &text, &tlen) > 0;
         i++) {
        if (i == cap) {
            size_t *grown = realloc(m->shard_of, 2 * cap * sizeof(*grown));
            if (grown == NULL)
                return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
            m->shard_of = grown;
            cap *= 2;
        }
        rs_digest_update(&offsets, &off, sizeof(off));
        if (after(doc, off, DELTAS_KEY) && deltas_value(text, tlen)) {
            m->shard_of[i] = RS__MEMO_DELTAS; /* a shard's deltas */
            ndeltas++;
            continue;
        }
        if (m->step == SIZE_MAX && after(doc, off, STEP_KEY) &&
            plain_value(text, tlen, 1)) {
            m->step = i;
            m->shard_of[i] = SIZE_MAX;
            continue;
        }
        const char *d = next_digest(s, end, &k) ? rs__sources_logged_digest(s, k)
                                                : NULL;
        if (d == NULL || !after(doc, off, DIGEST_KEY) || off >= doc_len ||
            doc[off] != '"' || !plain_value(text, tlen, 0) ||
            strlen(d) != tlen || memcmp(d, text, tlen) != 0)
            return RS_OK; /* parsed, but not reusable */
        m->shard_of[i] = k++;
    }
    m->ninserts = i;
    m->offsets = rs_digest_final(&offsets);
    m->dfirst = dfirst;
    /* with deltas taken, the j-th deltas insertion is the slot's j-th
     * scanned shard (receiver_deltas.c) */
    m->reusable = !next_digest(s, end, &k) &&
                  (!rs__receiver_takes_deltas(r) || ndeltas == r->dshard_len - dfirst);
    return RS_OK;
}

/* Reads slot's split entry's document and loads the spliced table. */
static rs_status_t load_split(rs_receiver_h r, rs_sources_h s,
                              const rs_version_info_t *v, int64_t slot,
                              const rs_dir_entry_t *e,
                              const rs__dir_split_t *sp, const char *origin,
                              rs__table_memo_t *m, rs__tables_figures_t *fig,
                              rs_diag_t *diag)
{
    char *doc = NULL, *table = NULL;
    size_t doc_len = 0, len = 0, first = rs__sources_logged(s);
    size_t dfirst = r->dshard_len;
    rs_status_t st = rs__dir_read_geometry(r->dir, r->model, v->version, slot,
                                           e->publisher, sp->doc, diag, &doc,
                                           &doc_len);
    if (st == RS_OK) {
        fig->bytes += doc_len;
        st = rs__dir_splice(doc, doc_len, e->table, e->len, origin, diag,
                            &table, &len);
    }
    if (st == RS_OK)
        st = rs_sources_load_string(s, table, len, origin, diag);
    if (st == RS_OK)
        st = rs__receiver_deltas_scan(r, table, len, diag);
    if (st == RS_OK)
        st = classify(r, s, first, dfirst, doc, doc_len, e, sp, m, diag);
    free(table);
    free(doc);
    return st;
}

/* A restarted publisher writes its new geometry document before its new
 * entry: a pull that read the old entry finds the old document replaced,
 * and reads the entry again (its replacement follows within moments). */
#define RENEW_TRIES 5
#define RENEW_NAP_NS 20000000L

/* load_split of slot's chosen entry, read again from the directory while
 * its geometry document is found replaced by another. */
static rs_status_t load_split_fresh(rs_receiver_h r, rs_sources_h s,
                                    const rs_version_info_t *v, int64_t slot,
                                    const char *origin, rs__table_memo_t *m,
                                    rs__tables_figures_t *fig,
                                    rs_diag_t *diag)
{
    rs_status_t st = RS_ERR_INCOMPLETE;
    for (int k = 0; st == RS_ERR_INCOMPLETE && k < RENEW_TRIES; k++) {
        if (k > 0 && !rs__replicas_renew_chosen(&r->replicas, slot)) {
            struct timespec nap = {0, RENEW_NAP_NS};
            nanosleep(&nap, NULL);
            continue;
        }
        st = load_split(r, s, v, slot, rs__replicas_chosen(&r->replicas, slot),
                        rs__replicas_chosen_split(&r->replicas, slot), origin,
                        m, fig, diag);
    }
    return st;
}

/* Every slot's chosen table read whole and parsed into new sources. */
static rs_status_t parse_all(rs_receiver_h r, const rs_version_info_t *v,
                             rs_diag_t *diag, rs_sources_h *sources_p,
                             rs__tables_figures_t *fig)
{
    rs_sources_h s = NULL;
    rs__table_memo_t *memo = calloc((size_t)v->slots, sizeof(*memo));
    rs_status_t st = memo != NULL ? rs_sources_create(&s)
                                  : rs__diag_set(diag, RS_ERR_NO_MEMORY,
                                                 "out of memory");
    if (st == RS_OK)
        rs__sources_log_start(s);
    r->ntable_slot = 0;
    rs__receiver_deltas_clear(r);
    for (int64_t slot = 0; st == RS_OK && slot < v->slots; slot++) {
        const rs_dir_entry_t *e = rs__replicas_chosen(&r->replicas, slot);
        const rs__dir_split_t *sp = rs__replicas_chosen_split(&r->replicas,
                                                              slot);
        char origin[RS_DIR_NAME_MAX * 2 + 96];
        snprintf(origin, sizeof(origin), "%s version %lld slot %lld "
                 "publisher %s", r->model, (long long)v->version,
                 (long long)slot, e->publisher);
        st = sp->split ? load_split_fresh(r, s, v, slot, origin, &memo[slot],
                                          fig, diag)
                       : rs_sources_load_string(s, e->table, e->len, origin,
                                                diag);
        if (st == RS_OK && !sp->split)
            st = rs__receiver_deltas_scan(r, e->table, e->len, diag);
        fig->parsed++;
        if (st == RS_OK)
            st = note_slot(r, s, slot, diag);
    }
    if (st != RS_OK) {
        memo_free(memo, v->slots);
        rs_sources_destroy(s);
        return st;
    }
    memo_free(r->memo, r->nmemo);
    r->memo = memo;
    r->nmemo = v->slots;
    r->memo_for = s;
    *sources_p = s;
    return RS_OK;
}

/* Whether slot's chosen entry brings only new values for the memo: same
 * publisher and document, as many insertions at the same offsets, each a
 * plain value. */
static int same_geometry(const rs__table_memo_t *m, const rs_dir_entry_t *e,
                         const rs__dir_split_t *sp)
{
    size_t at = 0, tlen, i = 0;
    uint64_t off;
    const char *text;
    int got;
    if (!m->reusable || !sp->split || sp->doc != m->doc ||
        strcmp(m->publisher, e->publisher) != 0)
        return 0;
    rs_digest_t offsets;
    rs_digest_init(&offsets);
    while ((got = rs__dir_insert_next(e->table, e->len, &at, &off, &text,
                                      &tlen)) > 0) {
        if (i >= m->ninserts ||
            !(m->shard_of[i] == RS__MEMO_DELTAS
                  ? deltas_value(text, tlen)
                  : plain_value(text, tlen, i == m->step)))
            return 0;
        rs_digest_update(&offsets, &off, sizeof(off));
        i++;
    }
    return got == 0 && i == m->ninserts &&
           rs_digest_final(&offsets) == m->offsets;
}

/* Places the chosen entries' digests into the cached sources, and their
 * deltas into the receiver's list. */
static rs_status_t renew(rs_receiver_h r, const rs_version_info_t *v,
                         rs_diag_t *diag)
{
    rs__receiver_deltas_renew_start(r);
    for (int64_t slot = 0; slot < v->slots; slot++) {
        const rs_dir_entry_t *e = rs__replicas_chosen(&r->replicas, slot);
        const rs__table_memo_t *m = &r->memo[slot];
        size_t at = 0, tlen, j = 0;
        uint64_t off;
        const char *text;
        for (size_t i = 0;
             rs__dir_insert_next(e->table, e->len, &at, &off, &text, &tlen) > 0;
             i++) {
            int ok = 1;
            if (m->shard_of[i] == RS__MEMO_DELTAS)
                ok = rs__receiver_deltas_renew(r, m->dfirst + j++, text,
                                               tlen) == RS_OK;
            else if (i != m->step)
                ok = rs__sources_set_logged_digest(r->sources, m->shard_of[i],
                                                   text, tlen);
            if (!ok)
                return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
        }
    }
    return RS_OK;
}

/* Whether the cached sources hold every chosen entry's geometry. */
static int reusable(rs_receiver_h r, const rs_version_info_t *v)
{
    if (!r->cached || r->sources == NULL || r->memo_for != r->sources ||
        r->nmemo != v->slots)
        return 0;
    for (int64_t slot = 0; slot < v->slots; slot++)
        if (!same_geometry(&r->memo[slot],
                           rs__replicas_chosen(&r->replicas, slot),
                           rs__replicas_chosen_split(&r->replicas, slot)))
            return 0;
    return 1;
}

rs_status_t rs__receiver_read_tables(rs_receiver_h r,
                                     const rs_version_info_t *v,
                                     rs_diag_t *diag, rs_sources_h *sources_p,
                                     rs__tables_figures_t *fig)
{
    rs__tables_figures_t f = {0, 0, 0};
    rs_status_t st = rs__replicas_load(&r->replicas, r->dir, r->model, v,
                                       r->params.salt, r->params.stale_s,
                                       diag);
    if (st != RS_OK)
        return st;
    f.bytes = r->replicas.bytes;
    if (reusable(r, v)) {
        st = renew(r, v, diag);
        if (st != RS_OK) { /* the sources hold a mix: parse afresh */
            rs__receiver_drop_cache(r);
            return st;
        }
        f.reused = (uint32_t)v->slots;
        *sources_p = r->sources;
    } else {
        st = parse_all(r, v, diag, sources_p, &f);
    }
    if (st == RS_OK && fig != NULL)
        *fig = f;
    return st;
}
