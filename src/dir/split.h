/* Split directory entries (dir_split.c): a publisher's table stored as a
 * geometry document, kept once per (model, slot, publisher) and written
 * only when it changes, and a small per-version entry naming the document
 * by its digest and holding the values a version changes (the shards'
 * digests, the step) as insertions into it. rs_dir_read_slot hands out the
 * whole table (the document with the insertions spliced in); the receiver
 * uses the parts directly, so a version whose geometry it has parsed costs
 * it only the insertions. */
#ifndef RS_DIR_SPLIT_H
#define RS_DIR_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/dir.h"

/* What an entry read by rs__dir_read_parts is. */
typedef struct rs__dir_split {
    int split;        /* 0: the entry's `table` is the whole table */
    uint64_t doc;     /* split: rsd64 of the geometry document */
    size_t doc_len;   /* split: its size */
} rs__dir_split_t;

/* Publishes a split entry: the geometry document (written only when the
 * directory's document of (slot, publisher) has another digest or none;
 * *written_p says whether it was), then the version's entry holding
 * `inserts`, lines "<offset> <text>\n" with offsets ascending and at most
 * doc_len, texts without newlines. The same checks and atomicity as
 * rs_dir_publish_as (geometry key, replicas, READY). */
rs_status_t rs__dir_publish_split(rs_dir_h dir, const char *model,
                                  int64_t version, int64_t slot,
                                  const char *publisher, uint64_t geometry,
                                  const void *doc, size_t doc_len,
                                  const char *inserts, size_t inserts_len,
                                  rs_diag_t *diag, int *written_p);

/* rs_dir_read_slot without fetching geometry documents: a split entry's
 * `table` is its insertion lines, splits[i] naming its document. Every
 * entry's digest is checked. The caller frees both arrays
 * (rs_dir_entries_free, free). */
rs_status_t rs__dir_read_parts(rs_dir_h dir, const char *model,
                               int64_t version, int64_t slot, rs_diag_t *diag,
                               rs_dir_entry_t **entries_p,
                               rs__dir_split_t **splits_p, size_t *count_p);

/* The geometry document of (slot, publisher) with digest `doc`
 * (malloc'd, NUL-terminated). RS_ERR_VERIFY when its bytes do not match
 * the digest stored with it; RS_ERR_INCOMPLETE when the directory holds
 * another document (the publisher published a new geometry since) or
 * none. `version` is for messages. */
rs_status_t rs__dir_read_geometry(rs_dir_h dir, const char *model,
                                  int64_t version, int64_t slot,
                                  const char *publisher, uint64_t doc,
                                  rs_diag_t *diag, char **doc_p,
                                  size_t *len_p);

/* The next insertion of `lines` (from *at, advanced): its offset and text.
 * 0 at the end; -1 when the line is malformed. */
int rs__dir_insert_next(const char *lines, size_t len, size_t *at,
                        uint64_t *offset_p, const char **text_p,
                        size_t *text_len_p);

/* The table: `doc` with the insertions spliced in (malloc'd,
 * NUL-terminated). RS_ERR_VERIFY naming `who` when an insertion is
 * malformed, out of order or past the document. */
rs_status_t rs__dir_splice(const char *doc, size_t doc_len,
                           const char *lines, size_t lines_len,
                           const char *who, rs_diag_t *diag, char **out_p,
                           size_t *len_p);

#endif
