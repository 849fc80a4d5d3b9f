/* Geometry documents of split entries (dir_split.c) in the redis://
 * backend: two hashes per model, rs:{M}:geometry ("<slot>@<publisher>" ->
 * document) and rs:{M}:geomgen (-> the document's digest, 16 hex),
 * written together by one script and only when the digest changes; the
 * first call of a publish sends the digest alone, so an unchanged
 * geometry never crosses the network again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/redis_impl.h"
#include "reshard/digest.h"

static void field_of(const rs__dir_request_t *req, char *out, size_t cap)
{
    snprintf(out, cap, "%lld@%s", (long long)req->slot, req->publisher);
}

static rs_status_t fill_put(rs_dir_h dir, const redisReply *rep,
                            rs__dir_request_t *req, rs_diag_t *diag)
{
    if (rep->type != REDIS_REPLY_INTEGER || rep->integer < -1 ||
        rep->integer > 1)
        return rs__redis_dir_bad_reply(dir, "the geometry put script", diag);
    req->swapped = (int)rep->integer;
    return RS_OK;
}

rs_status_t rs__redis_dir_geometry_put(rs_dir_h dir, rs__dir_request_t *req,
                                       rs_diag_t *diag)
{
    char field[RS_DIR_NAME_MAX + 32], gen[RS_DIGEST_STR_LEN + 1];
    field_of(req, field, sizeof(field));
    rs_digest_format(req->generation, gen);
    const char *args[] = {field, gen + 6, req->doc};
    size_t lens[] = {strlen(field), strlen(gen + 6), req->doc_len};
    return rs__redis_dir_run(dir, RS_RLUA_GEOMETRY_PUT, req, args, lens,
                             req->doc != NULL ? 3 : 2, fill_put, diag);
}

static rs_status_t fill_get(rs_dir_h dir, const redisReply *rep,
                            rs__dir_request_t *req, rs_diag_t *diag)
{
    char text[RS_DIGEST_STR_LEN + 1] = "rsd64:";
    req->record = NULL;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 0)
        return RS_OK;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[0]->type != REDIS_REPLY_STRING ||
        rep->element[1]->type != REDIS_REPLY_STRING)
        return rs__redis_dir_bad_reply(dir, "the geometry get script", diag);
    const redisReply *g = rep->element[0], *d = rep->element[1];
    if (g->len != 16)
        return rs__diag_set(diag, RS_ERR_VERIFY, "geometry document of "
                            "publisher '%s' of slot %lld of '%s' has no "
                            "digest beside it; refusing it before parsing",
                            req->publisher, (long long)req->slot, req->model);
    memcpy(text + 6, g->str, 16);
    text[22] = '\0';
    if (rs_digest_parse(text, &req->generation) != RS_OK)
        return rs__redis_dir_bad_reply(dir, "the geometry get script", diag);
    if ((req->record = malloc(d->len + 1)) == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    memcpy(req->record, d->str, d->len);
    req->record[d->len] = '\0';
    req->record_len = d->len;
    return RS_OK;
}

rs_status_t rs__redis_dir_geometry_get(rs_dir_h dir, rs__dir_request_t *req,
                                       rs_diag_t *diag)
{
    char field[RS_DIR_NAME_MAX + 32];
    field_of(req, field, sizeof(field));
    const char *args[] = {field};
    size_t lens[] = {strlen(field)};
    return rs__redis_dir_run(dir, RS_RLUA_GEOMETRY_GET, req, args, lens, 1,
                             fill_get, diag);
}
