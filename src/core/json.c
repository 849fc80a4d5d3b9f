/* JSON reading helpers over jansson: file reading with a size cap, parsing
 * that rejects duplicate keys, and typed accessors that report errors as
 * "<origin>: <json path>: <what is wrong>". */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/checked.h"
#include "core/diag.h"
#include "core/env.h"
#include "core/json.h"

rs_status_t rs__json_max_bytes(rs_diag_t *diag, size_t *max_p)
{
    uint64_t v;
    rs_status_t st = rs__env_count("RESHARD_JSON_MAX_BYTES", RS_JSON_MAX_BYTES,
                                   SIZE_MAX, diag, &v);
    if (st == RS_OK)
        *max_p = (size_t)v;
    return st;
}

void rs__json_ctx_init(rs__json_ctx_t *c, const char *origin, rs_diag_t *diag)
{
    c->origin = origin != NULL ? origin : "<json>";
    c->diag = diag != NULL ? diag : &c->own_diag;
    rs_diag_clear(&c->own_diag);
    c->path[0] = '\0';
    c->len = 0;
}

/* Appends formatted text to the path; on overflow the path ends in "...". */
static size_t path_append(rs__json_ctx_t *c, const char *fmt, ...)
    RS_PRINTF(2, 3);

static size_t path_append(rs__json_ctx_t *c, const char *fmt, ...)
{
    size_t mark = c->len;
    size_t room = sizeof(c->path) - c->len;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(c->path + c->len, room, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < room) {
        c->len += (size_t)n;
    } else {
        c->len = sizeof(c->path) - 1;
        memcpy(c->path + c->len - 3, "...", 4);
    }
    return mark;
}

static int is_identifier(const char *s)
{
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
        return 0;
    for (s++; *s != '\0'; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_'))
            return 0;
    }
    return 1;
}

/* Keys that are not identifiers (parameter names like "layers.0.w") are
 * written as ["..."] so the path stays unambiguous. */
/* Appends n bytes of text when they fit, else falls back to path_append
 * (which truncates with "..."): the common case of every key and index of
 * every loaded record without a vsnprintf. */
static size_t path_put(rs__json_ctx_t *c, const char *text, size_t n)
{
    size_t mark = c->len;
    if (n < sizeof(c->path) - c->len) {
        memcpy(c->path + c->len, text, n);
        c->len += n;
        c->path[c->len] = '\0';
        return mark;
    }
    return path_append(c, "%.*s", (int)n, text);
}

size_t rs__json_push_key(rs__json_ctx_t *c, const char *key)
{
    char quoted[RS_JSON_PATH_MAX];
    size_t q = 0;

    if (is_identifier(key)) {
        size_t n = strlen(key);
        if (c->len == 0 || n + 1 >= sizeof(quoted))
            return c->len == 0 ? path_put(c, key, n)
                               : path_append(c, ".%s", key);
        quoted[0] = '.';
        memcpy(quoted + 1, key, n);
        return path_put(c, quoted, n + 1);
    }
    for (const char *p = key; *p != '\0' && q + 3 < sizeof(quoted); p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\')
            quoted[q++] = '\\';
        quoted[q++] = ch < 0x20 ? '?' : (char)ch;
    }
    quoted[q] = '\0';
    return path_append(c, "[\"%s\"]", quoted);
}

size_t rs__json_push_index(rs__json_ctx_t *c, size_t index)
{
    char text[32], *p = text + sizeof(text);
    *--p = ']';
    do {
        *--p = (char)('0' + index % 10);
        index /= 10;
    } while (index > 0);
    *--p = '[';
    return path_put(c, p, (size_t)(text + sizeof(text) - p));
}

void rs__json_pop(rs__json_ctx_t *c, size_t mark)
{
    c->len = mark;
    c->path[mark] = '\0';
}

const char *rs__json_path(const rs__json_ctx_t *c)
{
    return c->len > 0 ? c->path : "(root)";
}

rs_status_t (rs__json_fail)(rs__json_ctx_t *c, const char *fmt, ...)
{
    char msg[RS_DIAG_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return rs__diag_set(c->diag, RS_ERR_INPUT, "%s: %s: %s", c->origin,
                        rs__json_path(c), msg);
}

rs_status_t rs__json_prefix(rs__json_ctx_t *c)
{
    return rs__diag_prefix(c->diag, "%s: %s: ", c->origin, rs__json_path(c));
}

static const char *type_desc(json_type t)
{
    switch (t) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown value";
}

const char *rs__json_type_name(const json_t *v)
{
    return v == NULL ? "nothing" : type_desc(json_typeof(v));
}

/* Reads until EOF, refusing more than limit bytes even when the size was
 * not known up front (pipes, /proc files). */
static rs_status_t read_all(FILE *f, const char *path, size_t limit,
                            size_t hint, rs_diag_t *diag, char **data_p,
                            size_t *len_p)
{
    size_t cap = hint + 1 > 4096 ? hint + 1 : 4096, len = 0;
    char *buf = malloc(cap);

    for (;;) {
        if (buf != NULL && len + 1 == cap) {
            /* One byte past the limit is enough to know it is too large. */
            size_t ncap = cap > (limit + 2) / 2 ? limit + 2 : cap * 2;
            char *nbuf = realloc(buf, ncap);
            if (nbuf == NULL)
                free(buf);
            buf = nbuf;
            cap = ncap;
        }
        if (buf == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "%s: out of memory "
                                "reading the file", path);
        size_t got = fread(buf + len, 1, cap - 1 - len, f);
        len += got;
        if (len > limit) {
            free(buf);
            return rs__diag_set(diag, RS_ERR_INPUT, "%s: file is larger than "
                                "the %zu-byte limit for JSON documents", path,
                                limit);
        }
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        int err = errno;
        free(buf);
        return rs__diag_set(diag, RS_ERR_IO, "%s: cannot read file: %s", path,
                            strerror(err));
    }
    buf[len] = '\0';
    *data_p = buf;
    *len_p = len;
    return RS_OK;
}

rs_status_t rs__json_read_file(const char *path, size_t limit, rs_diag_t *diag,
                              char **data_p, size_t *len_p)
{
    struct stat st;
    size_t hint = 0;
    rs_status_t status;

    if (path == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL file path");
    if (limit == RS_JSON_LIMIT_CONFIGURED &&
        (status = rs__json_max_bytes(diag, &limit)) != RS_OK)
        return status;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return rs__diag_set(diag, RS_ERR_IO, "%s: cannot open file: %s", path,
                            strerror(errno));
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
        if ((uint64_t)st.st_size > (uint64_t)limit) {
            fclose(f);
            return rs__diag_set(diag, RS_ERR_INPUT, "%s: file is %lld bytes, "
                                "more than the %zu-byte limit for JSON "
                                "documents", path, (long long)st.st_size,
                                limit);
        }
        hint = (size_t)st.st_size;
    }
    status = read_all(f, path, limit, hint, diag, data_p, len_p);
    fclose(f);
    return status;
}

rs_status_t rs__json_parse(rs__json_ctx_t *c, const char *data, size_t len,
                          size_t limit, json_t **root_p)
{
    json_error_t err;
    json_t *root;
    rs_status_t st;

    if (limit == RS_JSON_LIMIT_CONFIGURED &&
        (st = rs__json_max_bytes(c->diag, &limit)) != RS_OK)
        return st;
    if (data == NULL && len > 0)
        return rs__diag_set(c->diag, RS_ERR_INVALID_ARG, "%s: NULL JSON text",
                            c->origin);
    if (len > limit)
        return rs__diag_set(c->diag, RS_ERR_INPUT, "%s: document is %zu bytes, "
                            "more than the %zu-byte limit for JSON documents",
                            c->origin, len, limit);
    root = json_loadb(data != NULL ? data : "", len, JSON_REJECT_DUPLICATES,
                      &err);
    if (root == NULL) {
        if (err.line < 0)
            return rs__diag_set(c->diag, RS_ERR_INPUT, "%s: malformed JSON: %s",
                                c->origin, err.text);
        return rs__diag_set(c->diag, RS_ERR_INPUT, "%s: line %d, column %d "
                            "(byte %d): malformed JSON: %s", c->origin,
                            err.line, err.column, err.position, err.text);
    }
    *root_p = root;
    return RS_OK;
}

rs_status_t rs__json_load_text(const char *text, size_t len,
                               const char *origin, size_t limit,
                               rs_diag_t *diag, rs__json_root_fn fn,
                               void *arg)
{
    rs__json_ctx_t c;
    json_t *root = NULL;

    rs__json_ctx_init(&c, origin, diag);
    rs_status_t st = rs__json_parse(&c, text, len, limit, &root);
    if (st != RS_OK)
        return st;
    st = fn(&c, root, arg);
    json_decref(root);
    return st;
}

rs_status_t rs__json_load_file(const char *path, size_t limit,
                               rs_diag_t *diag, rs__json_root_fn fn,
                               void *arg)
{
    char *text = NULL;
    size_t len = 0;
    rs_status_t st = rs__json_read_file(path, limit, diag, &text, &len);
    if (st != RS_OK)
        return st;
    st = rs__json_load_text(text, len, path, limit, diag, fn, arg);
    free(text);
    return st;
}

rs_status_t rs__json_expect(rs__json_ctx_t *c, const json_t *v, json_type type)
{
    if (v != NULL && json_typeof(v) == type)
        return RS_OK;
    return rs__json_fail(c, "expected %s, got %s", type_desc(type),
                        rs__json_type_name(v));
}

rs_status_t rs__json_as_int(rs__json_ctx_t *c, const json_t *v, int64_t min,
                           int64_t *out_p)
{
    if (v == NULL || !json_is_integer(v))
        return rs__json_fail(c, "expected %s, got %s",
                            min == 0 ? "a non-negative integer" : "an integer",
                            rs__json_type_name(v));
    int64_t x = (int64_t)json_integer_value(v);
    if (x < min) {
        if (min == 0)
            return rs__json_fail(c, "expected a non-negative integer, got %lld",
                                (long long)x);
        return rs__json_fail(c, "must be at least %lld, got %lld",
                            (long long)min, (long long)x);
    }
    *out_p = x;
    return RS_OK;
}

rs_status_t rs__json_as_string(rs__json_ctx_t *c, const json_t *v,
                              const char **out_p)
{
    rs_status_t st = rs__json_expect(c, v, JSON_STRING);
    if (st == RS_OK)
        *out_p = json_string_value(v);
    return st;
}

rs_status_t rs__json_as_ints(rs__json_ctx_t *c, const json_t *v, int64_t min,
                            size_t max, int64_t *out, size_t *n_p)
{
    rs_status_t st = rs__json_expect(c, v, JSON_ARRAY);
    if (st != RS_OK)
        return st;
    size_t n = json_array_size(v);
    if (n > max)
        return rs__json_fail(c, "has %zu elements, more than the limit of %zu",
                            n, max);
    for (size_t i = 0; i < n; i++) {
        size_t mark = rs__json_push_index(c, i);
        st = rs__json_as_int(c, json_array_get(v, i), min, &out[i]);
        rs__json_pop(c, mark);
        if (st != RS_OK)
            return st;
    }
    *n_p = n;
    return RS_OK;
}

rs_status_t rs__json_check_numel(rs__json_ctx_t *c, const int64_t *dims, int n,
                                size_t elsize)
{
    int64_t numel, bytes;
    char text[RS_JSON_PATH_MAX];

    if (rs__numel(dims, n, &numel) && rs__mul_i64(numel, (int64_t)elsize, &bytes))
        return RS_OK;
    rs__format_dims(text, sizeof(text), dims, n);
    if (elsize > 1)
        return rs__json_fail(c, "shape %s overflows: its size in bytes (%zu "
                            "per element) exceeds 2^63-1", text, elsize);
    return rs__json_fail(c, "shape %s overflows: its element count exceeds "
                        "2^63-1", text);
}

/* The lookup every rs__json_field_* shares: *v_p is the key's value, or
 * NULL when the key is absent or null and not required. */
static rs_status_t field_value(rs__json_ctx_t *c, const json_t *obj,
                               const char *key, int required, json_t **v_p)
{
    json_t *v = json_object_get(obj, key);
    rs_status_t st = RS_OK;

    if (v == NULL || json_is_null(v)) {
        size_t mark = rs__json_push_key(c, key);
        if (required)
            st = rs__json_fail(c, v == NULL ? "required key is missing"
                                           : "required key is null");
        rs__json_pop(c, mark);
        v = NULL;
    }
    *v_p = v;
    return st;
}

rs_status_t rs__json_field(rs__json_ctx_t *c, const json_t *obj, const char *key,
                          int required, json_type type, json_t **v_p)
{
    json_t *v = NULL;
    rs_status_t st = field_value(c, obj, key, required, &v);
    if (st != RS_OK || v == NULL)
        return st;
    size_t mark = rs__json_push_key(c, key);
    st = rs__json_expect(c, v, type);
    rs__json_pop(c, mark);
    if (st == RS_OK)
        *v_p = v;
    return st;
}

rs_status_t rs__json_field_int(rs__json_ctx_t *c, const json_t *obj,
                              const char *key, int required, int64_t min,
                              int64_t *out_p)
{
    json_t *v = NULL;
    rs_status_t st = field_value(c, obj, key, required, &v);
    if (st != RS_OK || v == NULL)
        return st;
    size_t mark = rs__json_push_key(c, key);
    st = rs__json_as_int(c, v, min, out_p);
    rs__json_pop(c, mark);
    return st;
}

rs_status_t rs__json_field_string(rs__json_ctx_t *c, const json_t *obj,
                                 const char *key, int required,
                                 const char **out_p)
{
    json_t *v = NULL;
    rs_status_t st = rs__json_field(c, obj, key, required, JSON_STRING, &v);
    if (st == RS_OK && v != NULL)
        *out_p = json_string_value(v);
    return st;
}

rs_status_t rs__json_field_dims(rs__json_ctx_t *c, const json_t *obj,
                               const char *key, int64_t *dims, int *ndim_p)
{
    json_t *v = NULL;
    size_t n = 0;
    rs_status_t st = rs__json_field(c, obj, key, 1, JSON_ARRAY, &v);
    if (st != RS_OK)
        return st;
    size_t mark = rs__json_push_key(c, key);
    st = rs__json_as_ints(c, v, 0, RS_MAX_DIMS, dims, &n);
    rs__json_pop(c, mark);
    if (st == RS_OK)
        *ndim_p = (int)n;
    return st;
}

rs_status_t rs__json_field_dtype(rs__json_ctx_t *c, const json_t *obj,
                                const char *key, rs_dtype_t *out_p)
{
    const char *name = NULL;
    rs_status_t st = rs__json_field_string(c, obj, key, 1, &name);
    if (st != RS_OK)
        return st;
    rs_dtype_t dtype = rs_dtype_parse(name);
    if (dtype != RS_DTYPE_INVALID) {
        *out_p = dtype;
        return RS_OK;
    }
    size_t mark = rs__json_push_key(c, key);
    st = rs__json_fail(c, "unknown dtype \"%s\" (accepted: f32, bf16, f16, "
                      "f8e4m3, f8e5m2, f64, i8, u8, i16, i32, i64, bool, or "
                      "their long and torch. spellings)", name);
    rs__json_pop(c, mark);
    return st;
}

rs_status_t rs__json_check_schema(rs__json_ctx_t *c, const json_t *obj,
                                 const char *schema)
{
    const char *got = NULL;
    rs_status_t st = rs__json_expect(c, obj, JSON_OBJECT);
    if (st == RS_OK)
        st = rs__json_field_string(c, obj, "schema", 1, &got);
    if (st != RS_OK || strcmp(got, schema) == 0)
        return st;
    size_t mark = rs__json_push_key(c, "schema");
    st = rs__json_fail(c, "expected \"%s\", got \"%s\"", schema, got);
    rs__json_pop(c, mark);
    return st;
}
