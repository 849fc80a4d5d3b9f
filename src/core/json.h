/* Helpers for reading JSON documents with jansson while tracking the JSON
 * path of the value being read, so every error can say
 * "<origin>: <json path>: <what is wrong>" (e.g. copies[3].ops[1][2]). */
#ifndef RS_CORE_JSON_H
#define RS_CORE_JSON_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <jansson.h>

#include "core/diag.h"
#include "reshard/dtype.h"
#include "reshard/limits.h"
#include "reshard/status.h"

/* Documents larger than this are refused before parsing: a JSON tree costs
 * several times its text, and no capture or shard table comes near it. */
#define RS_JSON_MAX_BYTES ((size_t)1 << 30)

/* The limit loaders apply: RESHARD_JSON_MAX_BYTES when set (to raise it,
 * or to lower it in tests), else RS_JSON_MAX_BYTES. A value that is not a
 * positive whole number is RS_ERR_INPUT naming the variable. */
rs_status_t rs__json_max_bytes(rs_diag_t *diag, size_t *max_p);

#define RS_JSON_PATH_MAX 512

/* Where we are in a document: its origin (file path or caller-given name),
 * the path of the current value, and the diag that receives errors. */
typedef struct rs__json_ctx {
    const char *origin;
    rs_diag_t *diag;    /* never NULL: points at own_diag when none given */
    rs_diag_t own_diag;
    char path[RS_JSON_PATH_MAX];
    size_t len;
} rs__json_ctx_t;

void rs__json_ctx_init(rs__json_ctx_t *c, const char *origin, rs_diag_t *diag);

/* Path steps. Each returns the previous length to hand to rs__json_pop. */
size_t rs__json_push_key(rs__json_ctx_t *c, const char *key);
size_t rs__json_push_index(rs__json_ctx_t *c, size_t index);
void rs__json_pop(rs__json_ctx_t *c, size_t mark);

/* The current path as printed in messages ("(root)" when empty). */
const char *rs__json_path(const rs__json_ctx_t *c);

/* Sets RS_ERR_INPUT with "<origin>: <path>: <message>"; returns it. */
rs_status_t rs__json_fail(rs__json_ctx_t *c, const char *fmt, ...)
    RS_PRINTF(2, 3);
#if defined(__clang_analyzer__) /* see diag.h */
#define rs__json_fail(c, ...)                                                 \
    RS__RETURNS(RS_ERR_INPUT, (rs__json_fail)((c), __VA_ARGS__))
#endif

/* Prefixes a message a callee already put in c->diag with origin and path;
 * returns the callee's status. */
rs_status_t rs__json_prefix(rs__json_ctx_t *c);

/* Human name of a value's JSON type ("string", "boolean", ...). */
const char *rs__json_type_name(const json_t *v);

/* As `limit` of the two calls below: the configured limit
 * (rs__json_max_bytes), a RESHARD_JSON_MAX_BYTES that does not parse being
 * RS_ERR_INPUT. */
#define RS_JSON_LIMIT_CONFIGURED ((size_t)0)

/* Reads a whole file of at most `limit` bytes into a malloc'd buffer (NUL
 * terminated, not counted in *len_p). RS_ERR_IO when it cannot be read,
 * RS_ERR_INPUT when it is too large. */
rs_status_t rs__json_read_file(const char *path, size_t limit, rs_diag_t *diag,
                              char **data_p, size_t *len_p);

/* Parses a document (object or array at the top) rejecting duplicate keys;
 * malformed text is reported with line, column and byte position. */
rs_status_t rs__json_parse(rs__json_ctx_t *c, const char *data, size_t len,
                          size_t limit, json_t **root_p);

/* What a loader does with a parsed document: reads `root` (which it does
 * not own) with the context whose origin names the document. */
typedef rs_status_t (*rs__json_root_fn)(rs__json_ctx_t *c, json_t *root,
                                        void *arg);

/* The steps every document loader shares: rs__json_parse of `text` under
 * `limit` (origin names it in errors), then fn on the root, which is freed
 * after fn returns. Returns the parse's error or fn's status. */
rs_status_t rs__json_load_text(const char *text, size_t len,
                               const char *origin, size_t limit,
                               rs_diag_t *diag, rs__json_root_fn fn,
                               void *arg);

/* rs__json_read_file of `path` under `limit`, then rs__json_load_text of
 * its text with the path as origin. */
rs_status_t rs__json_load_file(const char *path, size_t limit,
                               rs_diag_t *diag, rs__json_root_fn fn,
                               void *arg);

/* Checks of the value at the current path. */
rs_status_t rs__json_expect(rs__json_ctx_t *c, const json_t *v, json_type type);
rs_status_t rs__json_as_int(rs__json_ctx_t *c, const json_t *v, int64_t min,
                           int64_t *out_p);
rs_status_t rs__json_as_string(rs__json_ctx_t *c, const json_t *v,
                              const char **out_p);
/* An array of at most `max` integers, each >= min, into out[]. */
rs_status_t rs__json_as_ints(rs__json_ctx_t *c, const json_t *v, int64_t min,
                            size_t max, int64_t *out, size_t *n_p);
/* Checks that prod(dims) * elsize fits int64 (elsize 1 for element counts). */
rs_status_t rs__json_check_numel(rs__json_ctx_t *c, const int64_t *dims, int n,
                                size_t elsize);

/* Members of an object, the key pushed on the path while it is checked.
 * An absent key or a JSON null is "missing": an error when required, else
 * RS_OK with the output untouched (so callers preset defaults). */
rs_status_t rs__json_field(rs__json_ctx_t *c, const json_t *obj, const char *key,
                          int required, json_type type, json_t **v_p);
rs_status_t rs__json_field_int(rs__json_ctx_t *c, const json_t *obj,
                              const char *key, int required, int64_t min,
                              int64_t *out_p);
rs_status_t rs__json_field_string(rs__json_ctx_t *c, const json_t *obj,
                                 const char *key, int required,
                                 const char **out_p);
/* A required shape-like array: at most RS_MAX_DIMS non-negative integers. */
rs_status_t rs__json_field_dims(rs__json_ctx_t *c, const json_t *obj,
                               const char *key, int64_t *dims, int *ndim_p);
/* A required dtype name in any accepted spelling. */
rs_status_t rs__json_field_dtype(rs__json_ctx_t *c, const json_t *obj,
                                const char *key, rs_dtype_t *out_p);
/* A required string that must equal `schema` exactly. */
rs_status_t rs__json_check_schema(rs__json_ctx_t *c, const json_t *obj,
                                 const char *schema);

#endif
