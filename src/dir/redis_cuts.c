/* Cuts records of the redis:// backend: one hash per model,
 * rs:{M}:cuts, holder -> record. Each call is one script (redis_lua.c);
 * a record above the cap comes back as its size only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/redis_impl.h"

static rs_status_t run_cuts(rs_dir_h dir, rs_rlua_t id, rs_dir_req_t *req,
                            const char **args, const size_t *lens, int nargs,
                            rs_diag_t *diag)
{
    redisReply *rep = NULL;
    rs_status_t st = rs__rdir_eval(dir, id, req, args, lens, nargs, diag,
                                   &rep);
    if (rep != NULL)
        freeReplyObject(rep);
    return st;
}

rs_status_t rs__rdir_put_cuts(rs_dir_h dir, rs_dir_req_t *req,
                              rs_diag_t *diag)
{
    const char *args[] = {req->holder, req->table};
    size_t lens[] = {strlen(req->holder), req->len};
    return run_cuts(dir, RS_RLUA_PUT_CUTS, req, args, lens, 2, diag);
}

rs_status_t rs__rdir_drop_cuts(rs_dir_h dir, rs_dir_req_t *req,
                               rs_diag_t *diag)
{
    const char *args[] = {req->holder};
    size_t lens[] = {strlen(req->holder)};
    return run_cuts(dir, RS_RLUA_DROP_CUTS, req, args, lens, 1, diag);
}

/* One (holder, record or size) pair into rec; 0 for a reply our script
 * does not give. */
static int get_record(redisReply *const *r, rs_dir_cuts_record_t *rec)
{
    if (r[0]->type != REDIS_REPLY_STRING || r[0]->len == 0 ||
        r[0]->len > RS_DIR_NAME_MAX)
        return 0;
    memcpy(rec->holder, r[0]->str, r[0]->len);
    rec->holder[r[0]->len] = '\0';
    rec->json = NULL;
    if (r[1]->type == REDIS_REPLY_INTEGER) { /* above the cap */
        rec->len = r[1]->integer > 0 ? (size_t)r[1]->integer : 0;
        return 1;
    }
    if (r[1]->type != REDIS_REPLY_STRING ||
        (rec->json = malloc(r[1]->len + 1)) == NULL)
        return 0;
    memcpy(rec->json, r[1]->str, r[1]->len);
    rec->json[r[1]->len] = '\0';
    rec->len = r[1]->len;
    return 1;
}

static rs_status_t fill_records(rs_dir_h dir, const redisReply *rep,
                                rs_dir_req_t *req, rs_diag_t *diag)
{
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 2 != 0)
        return rs__rdir_bad_reply(dir, "the cuts read script", diag);
    size_t n = rep->elements / 2;
    req->cuts = calloc(n > 0 ? n : 1, sizeof(*req->cuts));
    if (req->cuts == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts records of '%s': "
                            "out of memory", req->model);
    for (size_t i = 0; i < n; i++) {
        req->ncuts = i + 1; /* freed by the caller, also on error */
        if (!get_record(rep->element + 2 * i, &req->cuts[i]))
            return rs__rdir_bad_reply(dir, "the cuts read script", diag);
    }
    return RS_OK;
}

rs_status_t rs__rdir_read_cuts(rs_dir_h dir, rs_dir_req_t *req,
                               rs_diag_t *diag)
{
    char cap[32];
    snprintf(cap, sizeof(cap), "%zu", RS_DIR_CUTS_MAX);
    const char *args[] = {cap};
    size_t lens[] = {strlen(cap)};
    redisReply *rep = NULL;
    rs_status_t st = rs__rdir_eval(dir, RS_RLUA_READ_CUTS, req, args, lens, 1,
                                   diag, &rep);
    if (st != RS_OK)
        return st;
    st = fill_records(dir, rep, req, diag);
    freeReplyObject(rep);
    return st;
}
