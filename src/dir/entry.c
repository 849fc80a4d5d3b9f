/* The stored form of one publisher's table in a slot: a header line with
 * the rsd64 digest of the table's bytes and the slot's geometry key, then
 * the table. Both backends keep it as one value (one file, one hash
 * field), so digest and table are replaced together; the reading side
 * checks the digest before anyone parses the table. A split entry
 * (dir_split.c) has a header line of its own, which earlier readers
 * refuse. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/dir_impl.h"
#include "dir/split.h"
#include "reshard/digest.h"

/* "rsd64:" and 16 hex digits (RS_DIGEST_STR_LEN counts one more) */
#define DIGEST_TEXT 22

void rs__dir_geometry_hex(uint64_t geometry, char out[17])
{
    snprintf(out, 17, "%016" PRIx64, geometry);
}

rs_status_t rs__dir_entry_encode(uint64_t geometry, const void *table,
                                 size_t len, rs_diag_t *diag, char **out_p)
{
    char digest[RS_DIGEST_STR_LEN + 1], geo[17];
    char *out = malloc(RS_DIR_ENTRY_HEADER + len + 1);
    if (out == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of "
                            "memory for a %zu-byte table", len);
    rs_digest_format(rs_digest(table, len), digest);
    rs__dir_geometry_hex(geometry, geo);
    memcpy(out, digest, DIGEST_TEXT);
    out[DIGEST_TEXT] = ' ';
    memcpy(out + DIGEST_TEXT + 1, geo, 16);
    out[RS_DIR_ENTRY_HEADER - 1] = '\n';
    if (len > 0)
        memcpy(out + RS_DIR_ENTRY_HEADER, table, len);
    out[RS_DIR_ENTRY_HEADER + len] = '\0';
    *out_p = out;
    return RS_OK;
}

static int parse_hex16(const char *s, uint64_t *v_p)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return 0;
        v = v << 4 | (uint64_t)d;
    }
    *v_p = v;
    return 1;
}

static rs_status_t corrupted(const rs__dir_request_t *req, const rs_dir_entry_t *e,
                             const char *why, rs_diag_t *diag)
{
    return rs__diag_set(diag, RS_ERR_VERIFY, "table of publisher '%s' of "
                        "slot %lld of version %lld of '%s' is corrupted: %s; "
                        "refusing it before parsing", e->publisher,
                        (long long)req->slot, (long long)req->version,
                        req->model, why);
}

/* Checks the digest line at the start of e (its digest and geometry key,
 * then `header` bytes in all) against the bytes after it; `what` names
 * those bytes in the message. */
static rs_status_t check_header(const rs__dir_request_t *req,
                                const rs_dir_entry_t *e, size_t header,
                                const char *what, uint64_t *geometry_p,
                                rs_diag_t *diag)
{
    char stored[RS_DIGEST_STR_LEN + 1], got[RS_DIGEST_STR_LEN + 1];
    char why[160];
    uint64_t want = 0;
    const char *h = e->table;
    memcpy(stored, h, DIGEST_TEXT);
    stored[DIGEST_TEXT] = '\0';
    if (h[DIGEST_TEXT] != ' ' || rs_digest_parse(stored, &want) != RS_OK ||
        !parse_hex16(h + DIGEST_TEXT + 1, geometry_p))
        return corrupted(req, e, "its digest record is malformed", diag);
    size_t len = e->len - header;
    uint64_t have = rs_digest(h + header, len);
    if (have != want) {
        rs_digest_format(have, got);
        snprintf(why, sizeof(why), "its %zu bytes%s digest to %s, the stored "
                 "digest is %s", len, what, got, stored);
        return corrupted(req, e, why, diag);
    }
    return RS_OK;
}

/* Leaves only the bytes from `from` on in e. */
static void keep_tail(rs_dir_entry_t *e, const char *from)
{
    size_t len = (size_t)(e->table + e->len - from);
    memmove(e->table, from, len);
    e->table[len] = '\0';
    e->len = len;
}

rs_status_t rs__dir_entry_decode(const rs__dir_request_t *req, rs_dir_entry_t *e,
                                 rs_diag_t *diag)
{
    uint64_t geometry = 0;
    if (e->len < RS_DIR_ENTRY_HEADER || e->table[DIGEST_TEXT] != ' ' ||
        e->table[RS_DIR_ENTRY_HEADER - 1] != '\n')
        return corrupted(req, e, "its digest record (\"rsd64:<hex> "
                         "<geometry>\" line) is missing or malformed", diag);
    rs_status_t st = check_header(req, e, RS_DIR_ENTRY_HEADER, "", &geometry,
                                  diag);
    if (st != RS_OK)
        return st;
    keep_tail(e, e->table + RS_DIR_ENTRY_HEADER);
    e->geometry = geometry;
    return RS_OK;
}

int rs__dir_entry_is_split(const rs_dir_entry_t *e)
{
    return e->len >= RS_DIR_SPLIT_HEADER &&
           memcmp(e->table + RS_DIR_ENTRY_HEADER - 1, " split\n", 7) == 0;
}

/* "rsd64:<16 hex> <decimal>\n" at line: the geometry document's digest
 * and size; the bytes after it in *end_p. */
static int parse_doc_line(const char *line, const char *end, uint64_t *doc_p,
                          size_t *len_p, const char **end_p)
{
    char text[DIGEST_TEXT + 1];
    if (end - line < DIGEST_TEXT + 3 || line[DIGEST_TEXT] != ' ')
        return 0;
    memcpy(text, line, DIGEST_TEXT);
    text[DIGEST_TEXT] = '\0';
    if (rs_digest_parse(text, doc_p) != RS_OK)
        return 0;
    uint64_t n = 0;
    const char *p = line + DIGEST_TEXT + 1;
    for (; p < end && *p >= '0' && *p <= '9' && n < ((uint64_t)1 << 40); p++)
        n = n * 10 + (uint64_t)(*p - '0');
    if (p == line + DIGEST_TEXT + 1 || p >= end || *p != '\n')
        return 0;
    *len_p = (size_t)n;
    *end_p = p + 1;
    return 1;
}

rs_status_t rs__dir_split_decode(const rs__dir_request_t *req,
                                 rs_dir_entry_t *e, rs__dir_split_t *split,
                                 rs_diag_t *diag)
{
    uint64_t geometry = 0;
    const char *rest = NULL;
    rs_status_t st = check_header(req, e, RS_DIR_SPLIT_HEADER,
                                  " of per-version values", &geometry, diag);
    if (st != RS_OK)
        return st;
    if (!parse_doc_line(e->table + RS_DIR_SPLIT_HEADER, e->table + e->len,
                        &split->doc, &split->doc_len, &rest))
        return corrupted(req, e, "the line naming its geometry document "
                         "(\"rsd64:<hex> <size>\") is malformed", diag);
    split->split = 1;
    keep_tail(e, rest);
    e->geometry = geometry;
    return RS_OK;
}
