/* Cuts records of the redis:// backend: two hashes per model,
 * rs:{M}:cuts (holder -> record) and rs:{M}:cutgen (holder -> the
 * record's generation, 16 hex digits), written together in one script
 * (redis_lua.c); listing returns generations and sizes only, and a record
 * above the cap comes back as its size only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/redis_impl.h"
#include "reshard/digest.h"

rs_status_t rs__redis_dir_put_cuts(rs_dir_h dir, rs__dir_request_t *req,
                              rs_diag_t *diag)
{
    char gen[RS_DIGEST_STR_LEN + 1];
    rs_digest_format(req->generation, gen);
    const char *args[] = {req->holder, req->table, gen + 6};
    size_t lens[] = {strlen(req->holder), req->len, strlen(gen + 6)};
    return rs__redis_dir_run(dir, RS_RLUA_PUT_CUTS, req, args, lens, 3, NULL, diag);
}

rs_status_t rs__redis_dir_drop_cuts(rs_dir_h dir, rs__dir_request_t *req,
                               rs_diag_t *diag)
{
    const char *args[] = {req->holder};
    size_t lens[] = {strlen(req->holder)};
    return rs__redis_dir_run(dir, RS_RLUA_DROP_CUTS, req, args, lens, 1, NULL,
                        diag);
}

/* A generation as the scripts return it: 16 hex digits (a stamp: the
 * record's digest, *stamped_p = 1) or "sha1:" and 40 (the first 16 taken).
 * 0 for anything else. */
static int get_generation(const redisReply *r, uint64_t *gen_p,
                          int *stamped_p)
{
    char text[RS_DIGEST_STR_LEN + 1] = "rsd64:";
    if (r->type != REDIS_REPLY_STRING)
        return 0;
    *stamped_p = r->len == 16;
    if (!*stamped_p && (r->len != 45 || strncmp(r->str, "sha1:", 5) != 0))
        return 0;
    memcpy(text + 6, r->str + (*stamped_p ? 0 : 5), 16);
    text[6 + 16] = '\0';
    return rs_digest_parse(text, gen_p) == RS_OK;
}

static int get_holder(const redisReply *r, char out[RS_DIR_NAME_MAX + 1])
{
    if (r->type != REDIS_REPLY_STRING || r->len == 0 ||
        r->len > RS_DIR_NAME_MAX)
        return 0;
    memcpy(out, r->str, r->len);
    out[r->len] = '\0';
    return 1;
}

/* One (holder, generation, record or size) triple into rec; 0 for a
 * reply our script does not give. */
static int get_record(redisReply *const *r, rs_dir_cuts_record_t *rec,
                      int *stamped_p)
{
    rec->json = NULL;
    if (!get_holder(r[0], rec->holder) ||
        !get_generation(r[1], &rec->generation, stamped_p))
        return 0;
    if (r[2]->type == REDIS_REPLY_INTEGER) { /* above the cap */
        rec->len = r[2]->integer > 0 ? (size_t)r[2]->integer : 0;
        *stamped_p = 0;
        return 1;
    }
    if (r[2]->type != REDIS_REPLY_STRING ||
        (rec->json = malloc(r[2]->len + 1)) == NULL)
        return 0;
    memcpy(rec->json, r[2]->str, r[2]->len);
    rec->json[r[2]->len] = '\0';
    rec->len = r[2]->len;
    return 1;
}

/* Makes room for the n triples of an array reply in *items. */
static rs_status_t triples(rs_dir_h dir, const redisReply *rep, void **items,
                           size_t size, const char *model, rs_diag_t *diag,
                           size_t *n_p)
{
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 3 != 0)
        return rs__redis_dir_bad_reply(dir, "the cuts scripts", diag);
    size_t n = rep->elements / 3;
    *items = calloc(n > 0 ? n : 1, size);
    if (*items == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts records of '%s': "
                            "out of memory", model);
    *n_p = n;
    return RS_OK;
}

/* One (holder, generation, size) triple of a listing into st; 0 for a
 * reply our script does not give. */
static int get_stamp(redisReply *const *r, rs_dir_cuts_stamp_t *st)
{
    int stamped = 0;
    if (!get_holder(r[0], st->holder) ||
        !get_generation(r[1], &st->generation, &stamped) ||
        r[2]->type != REDIS_REPLY_INTEGER || r[2]->integer < 0)
        return 0;
    st->len = (size_t)r[2]->integer;
    return 1;
}

/* The cuts scripts' replies, triples: records (the read script; a
 * record stamped with its digest is checked against it) or stamps (the
 * list script). What was filled is freed by the caller, also on error. */
static rs_status_t fill_triples(rs_dir_h dir, const redisReply *rep,
                                rs__dir_request_t *req, int stamps,
                                rs_diag_t *diag)
{
    size_t n = 0;
    rs_status_t st = stamps
        ? triples(dir, rep, (void **)&req->stamps, sizeof(*req->stamps),
                  req->model, diag, &n)
        : triples(dir, rep, (void **)&req->cuts, sizeof(*req->cuts),
                  req->model, diag, &n);
    for (size_t i = 0; st == RS_OK && i < n; i++) {
        redisReply *const *r = rep->element + 3 * i;
        int stamped = 0;
        *(stamps ? &req->nstamps : &req->ncuts) = i + 1;
        if (stamps ? !get_stamp(r, &req->stamps[i])
                   : !get_record(r, &req->cuts[i], &stamped))
            return rs__redis_dir_bad_reply(dir, stamps ? "the cuts list script"
                                                  : "the cuts read script",
                                      diag);
        if (stamped)
            st = rs__dir_cuts_check(req, &req->cuts[i], diag);
    }
    return st;
}

static rs_status_t fill_records(rs_dir_h dir, const redisReply *rep,
                                rs__dir_request_t *req, rs_diag_t *diag)
{
    return fill_triples(dir, rep, req, 0, diag);
}

static rs_status_t fill_stamps(rs_dir_h dir, const redisReply *rep,
                               rs__dir_request_t *req, rs_diag_t *diag)
{
    return fill_triples(dir, rep, req, 1, diag);
}

rs_status_t rs__redis_dir_read_cuts(rs_dir_h dir, rs__dir_request_t *req,
                               rs_diag_t *diag)
{
    char cap[32];
    snprintf(cap, sizeof(cap), "%zu", RS_DIR_CUTS_MAX);
    const char *args[] = {cap, req->holder};
    size_t lens[] = {strlen(cap), req->holder ? strlen(req->holder) : 0};
    return rs__redis_dir_run(dir, RS_RLUA_READ_CUTS, req, args, lens,
                        req->holder ? 2 : 1, fill_records, diag);
}

rs_status_t rs__redis_dir_list_cuts(rs_dir_h dir, rs__dir_request_t *req,
                               rs_diag_t *diag)
{
    return rs__redis_dir_run(dir, RS_RLUA_LIST_CUTS, req, NULL, NULL, 0,
                        fill_stamps, diag);
}
