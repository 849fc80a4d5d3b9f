/* Split entries (split.h): publishing one (the geometry document when the
 * directory's differs, then the version's entry), reading the parts, a
 * geometry document, and the whole table spliced back together for
 * rs_dir_read_slot. The directory never parses a table: a document is
 * bytes with a digest, the per-version values are byte insertions. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/dir_impl.h"
#include "dir/split.h"
#include "reshard/digest.h"

/* The checks rs_dir_publish_as and rs_dir_read_slot make of their slot
 * and publisher (dir.c keeps its own copies static). */
static rs_status_t slot_start(rs_dir_h dir, const char *model,
                              int64_t version, int64_t slot,
                              const char *publisher, rs_diag_t *diag,
                              rs__dir_request_t *req)
{
    rs_status_t st = rs__dir_start(dir, model, version, diag, req);
    if (st == RS_OK && slot < 0)
        st = rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s': slot "
                          "%lld is negative", (long long)version, model,
                          (long long)slot);
    if (st == RS_OK && publisher != NULL)
        st = rs__dir_check_name("publisher", publisher, diag);
    req->slot = slot;
    req->publisher = publisher;
    return st;
}

int rs__dir_insert_next(const char *lines, size_t len, size_t *at,
                        uint64_t *offset_p, const char **text_p,
                        size_t *text_len_p)
{
    size_t i = *at;
    if (i >= len)
        return 0;
    uint64_t off = 0;
    size_t start = i;
    for (; i < len && lines[i] >= '0' && lines[i] <= '9'; i++) {
        if (off > (UINT64_MAX - 9) / 10)
            return -1;
        off = off * 10 + (uint64_t)(lines[i] - '0');
    }
    if (i == start || i >= len || lines[i] != ' ')
        return -1;
    const char *text = lines + i + 1;
    const char *nl = memchr(text, '\n', len - (i + 1));
    if (nl == NULL)
        return -1;
    *offset_p = off;
    *text_p = text;
    *text_len_p = (size_t)(nl - text);
    *at = (size_t)(nl - lines) + 1;
    return 1;
}

/* The size of the spliced table; 0 (with `why`) when the insertions are
 * malformed, out of order or past the document. */
static int splice_size(size_t doc_len, const char *lines, size_t len,
                       char *why, size_t cap, size_t *size_p)
{
    size_t at = 0, size = doc_len, tlen, n = 0;
    uint64_t off, last = 0;
    const char *text;
    int r;
    while ((r = rs__dir_insert_next(lines, len, &at, &off, &text, &tlen)) > 0) {
        if (off < last || off > doc_len) {
            snprintf(why, cap, "insertion %zu at byte %" PRIu64 " is %s", n,
                     off, off > doc_len ? "past the geometry document"
                                        : "out of order");
            return 0;
        }
        last = off;
        size += tlen;
        n++;
    }
    if (r < 0) {
        snprintf(why, cap, "insertion %zu is not \"<offset> <text>\"", n);
        return 0;
    }
    *size_p = size;
    return 1;
}

rs_status_t rs__dir_splice(const char *doc, size_t doc_len,
                           const char *lines, size_t lines_len,
                           const char *who, rs_diag_t *diag, char **out_p,
                           size_t *len_p)
{
    char why[160];
    size_t size = 0, at = 0, from = 0, tlen;
    uint64_t off;
    const char *text;
    if (!splice_size(doc_len, lines, lines_len, why, sizeof(why), &size))
        return rs__diag_set(diag, RS_ERR_VERIFY, "%s: %s", who, why);
    char *out = malloc(size + 1), *w = out;
    if (out == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "%s: out of memory", who);
    while (rs__dir_insert_next(lines, lines_len, &at, &off, &text, &tlen) > 0) {
        memcpy(w, doc + from, (size_t)off - from);
        w += (size_t)off - from;
        memcpy(w, text, tlen);
        w += tlen;
        from = (size_t)off;
    }
    memcpy(w, doc + from, doc_len - from);
    out[size] = '\0';
    *out_p = out;
    *len_p = size;
    return RS_OK;
}

/* Stores (slot, publisher)'s document unless the directory has it: asks
 * first without the bytes, so an unchanged geometry costs one small
 * request and writes nothing. */
static rs_status_t put_geometry(rs_dir_h dir, rs__dir_request_t *req,
                                const void *doc, size_t doc_len,
                                rs_diag_t *diag, int *written_p)
{
    req->generation = rs_digest(doc, doc_len);
    req->doc = NULL;
    req->swapped = 0;
    rs_status_t st = rs__dir_call(dir, dir->ops->geometry_put, req, diag);
    if (st == RS_OK && req->swapped < 0) {
        req->doc = doc;
        req->doc_len = doc_len;
        st = rs__dir_call(dir, dir->ops->geometry_put, req, diag);
    }
    *written_p = st == RS_OK && req->swapped > 0;
    req->doc = NULL;
    return st;
}

/* The version's entry: header, document line, insertions. */
static rs_status_t encode(uint64_t geometry, uint64_t doc, size_t doc_len,
                          const char *inserts, size_t len, rs_diag_t *diag,
                          char **out_p, size_t *out_len_p)
{
    char digest[RS_DIGEST_STR_LEN + 1], docd[RS_DIGEST_STR_LEN + 1], geo[17];
    char line[64];
    rs_digest_format(doc, docd);
    int n = snprintf(line, sizeof(line), "%s %zu\n", docd, doc_len);
    size_t body = (size_t)n + len;
    char *out = malloc(RS_DIR_SPLIT_HEADER + body + 1);
    if (out == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of "
                            "memory for a %zu-byte entry", body);
    memcpy(out + RS_DIR_SPLIT_HEADER, line, (size_t)n);
    if (len > 0)
        memcpy(out + RS_DIR_SPLIT_HEADER + n, inserts, len);
    rs_digest_format(rs_digest(out + RS_DIR_SPLIT_HEADER, body), digest);
    rs__dir_geometry_hex(geometry, geo);
    char head[RS_DIR_SPLIT_HEADER + 16];
    snprintf(head, sizeof(head), "%s %s split\n", digest, geo);
    memcpy(out, head, RS_DIR_SPLIT_HEADER);
    out[RS_DIR_SPLIT_HEADER + body] = '\0';
    *out_p = out;
    *out_len_p = RS_DIR_SPLIT_HEADER + body;
    return RS_OK;
}

rs_status_t rs__dir_publish_split(rs_dir_h dir, const char *model,
                                  int64_t version, int64_t slot,
                                  const char *publisher, uint64_t geometry,
                                  const void *doc, size_t doc_len,
                                  const char *inserts, size_t inserts_len,
                                  rs_diag_t *diag, int *written_p)
{
    rs__dir_request_t req;
    char why[160];
    size_t size = 0;
    int written = 0;
    rs_status_t st = slot_start(dir, model, version, slot, publisher, diag,
                                &req);
    if (st != RS_OK)
        return st;
    if ((doc == NULL && doc_len > 0) || (inserts == NULL && inserts_len > 0))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs__dir_publish_split: "
                            "NULL document or insertions");
    if (!splice_size(doc_len, inserts, inserts_len, why, sizeof(why), &size))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "version %lld of '%s': "
                            "slot %lld: %s", (long long)version, model,
                            (long long)slot, why);
    if (size > RS_DIR_TABLE_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "version %lld of '%s': slot "
                            "%lld table is %zu bytes, more than the %zu-byte "
                            "limit", (long long)version, model,
                            (long long)slot, size, RS_DIR_TABLE_MAX);
    if (dir->ops->geometry_put == NULL || dir->ops->geometry_get == NULL)
        return rs__dir_unsupported(dir, &req, diag);
    st = put_geometry(dir, &req, doc, doc_len, diag, &written);
    char *entry = NULL;
    if (st == RS_OK)
        st = encode(geometry, req.generation, doc_len, inserts, inserts_len,
                    diag, &entry, &req.len);
    if (st == RS_OK) {
        rs__dir_geometry_hex(geometry, req.geometry);
        req.table = entry;
        st = rs__dir_call(dir, dir->ops->publish, &req, diag);
    }
    free(entry);
    if (st == RS_OK && written_p != NULL)
        *written_p = written;
    return st;
}

rs_status_t rs__dir_read_geometry(rs_dir_h dir, const char *model,
                                  int64_t version, int64_t slot,
                                  const char *publisher, uint64_t doc,
                                  rs_diag_t *diag, char **doc_p,
                                  size_t *len_p)
{
    rs__dir_request_t req;
    char want[RS_DIGEST_STR_LEN + 1], have[RS_DIGEST_STR_LEN + 1];
    rs_status_t st = slot_start(dir, model, version, slot, publisher, diag,
                                &req);
    if (st == RS_OK && dir->ops->geometry_get == NULL)
        st = rs__dir_unsupported(dir, &req, diag);
    if (st == RS_OK)
        st = rs__dir_call(dir, dir->ops->geometry_get, &req, diag);
    if (st != RS_OK)
        return st;
    rs_digest_format(doc, want);
    if (req.record == NULL || req.generation != doc) {
        rs_digest_format(req.generation, have);
        free(req.record);
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s': "
                            "slot %lld: the geometry document %s of publisher "
                            "'%s' is %s%s (the publisher published another "
                            "geometry since)", (long long)version, model,
                            (long long)slot, want, publisher,
                            req.record == NULL ? "missing" : "replaced by ",
                            req.record == NULL ? "" : have);
    }
    uint64_t got = rs_digest(req.record, req.record_len);
    if (got != doc) {
        rs_digest_format(got, have);
        free(req.record);
        return rs__diag_set(diag, RS_ERR_VERIFY, "version %lld of '%s': slot "
                            "%lld: the geometry document of publisher '%s' "
                            "is corrupted: its bytes digest to %s, the stored "
                            "digest is %s; refusing it before parsing",
                            (long long)version, model, (long long)slot,
                            publisher, have, want);
    }
    *doc_p = req.record;
    *len_p = req.record_len;
    return RS_OK;
}

/* Decodes every entry the backend read: v1 entries whole, split ones into
 * their parts (splits NULL: spliced with their documents into whole
 * tables, as rs_dir_read_slot hands them out). */
rs_status_t rs__dir_decode_entries(rs_dir_h dir, rs__dir_request_t *req,
                                   rs__dir_split_t *splits, rs_diag_t *diag)
{
    for (size_t i = 0; i < req->nentries; i++) {
        rs_dir_entry_t *e = &req->entries[i];
        rs__dir_split_t part = {0, 0, 0};
        rs_status_t st = rs__dir_entry_is_split(e)
                             ? rs__dir_split_decode(req, e, &part, diag)
                             : rs__dir_entry_decode(req, e, diag);
        if (st != RS_OK)
            return st;
        if (splits != NULL)
            splits[i] = part;
        if (splits != NULL || !part.split)
            continue;
        char *doc = NULL, *table = NULL, who[RS_DIR_NAME_MAX + 96];
        size_t doc_len = 0, len = 0;
        st = rs__dir_read_geometry(dir, req->model, req->version, req->slot,
                                   e->publisher, part.doc, diag, &doc,
                                   &doc_len);
        snprintf(who, sizeof(who), "table of publisher '%s' of slot %lld of "
                 "version %lld", e->publisher, (long long)req->slot,
                 (long long)req->version);
        if (st == RS_OK)
            st = rs__dir_splice(doc, doc_len, e->table, e->len, who, diag,
                                &table, &len);
        free(doc);
        if (st != RS_OK)
            return st;
        free(e->table);
        e->table = table;
        e->len = len;
    }
    return RS_OK;
}

rs_status_t rs__dir_read_parts(rs_dir_h dir, const char *model,
                               int64_t version, int64_t slot, rs_diag_t *diag,
                               rs_dir_entry_t **entries_p,
                               rs__dir_split_t **splits_p, size_t *count_p)
{
    rs__dir_request_t req;
    rs_status_t st = slot_start(dir, model, version, slot, NULL, diag, &req);
    if (st == RS_OK)
        st = rs__dir_call(dir, dir->ops->read, &req, diag);
    if (st == RS_OK && req.nentries == 0)
        st = rs__diag_set(diag, RS_ERR_INCOMPLETE, "version %lld of '%s': "
                          "slot %lld has no publisher", (long long)version,
                          model, (long long)slot);
    rs__dir_split_t *splits = st == RS_OK
        ? calloc(req.nentries, sizeof(*splits)) : NULL;
    if (st == RS_OK && splits == NULL)
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (st == RS_OK)
        st = rs__dir_decode_entries(dir, &req, splits, diag);
    if (st != RS_OK) {
        free(splits);
        rs_dir_entries_free(req.entries, req.nentries);
        return st;
    }
    *entries_p = req.entries;
    *splits_p = splits;
    *count_p = req.nentries;
    return RS_OK;
}
