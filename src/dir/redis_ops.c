/* The directory operations of the redis:// backend: each passes its
 * arguments to one script (redis_lua.c) and turns the reply into the
 * request's outputs. Replies that do not have the shape our scripts return
 * are refused, naming the server. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/redis_impl.h"

typedef struct num {
    char text[32];
} num_t;

static const char *num(num_t *n, int64_t v)
{
    snprintf(n->text, sizeof(n->text), "%lld", (long long)v);
    return n->text;
}

/* A script run with text arguments whose reply is not needed. */
static rs_status_t run(rs_dir_h dir, rs__redis_script_t id, rs__dir_request_t *req,
                       const char **args, int nargs, rs_diag_t *diag)
{
    size_t lens[4] = {0, 0, 0, 0};
    for (int i = 0; i < nargs; i++)
        lens[i] = strlen(args[i]);
    return rs__redis_dir_run(dir, id, req, args, lens, nargs, NULL, diag);
}

/* An integer from a bulk string or an integer reply. */
static int get_i64(const redisReply *e, int64_t *out)
{
    if (e->type == REDIS_REPLY_INTEGER) {
        *out = e->integer;
        return 1;
    }
    if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len > 20)
        return 0;
    char *end;
    long long v = strtoll(e->str, &end, 10);
    if (end != e->str + e->len)
        return 0;
    *out = v;
    return 1;
}

static rs_version_state_t get_state(const redisReply *e)
{
    static const rs_version_state_t states[] = {
        RS_VERSION_PENDING, RS_VERSION_READY, RS_VERSION_RELEASED};
    for (size_t i = 0; e->type == REDIS_REPLY_STRING && i < 3; i++)
        if (strcmp(e->str, rs__dir_state_name(states[i])) == 0)
            return states[i];
    return 0;
}

/* {slots, state, published} at e[0..2] into info. */
static int get_info(redisReply *const *e, int64_t version,
                    rs_version_info_t *info)
{
    info->version = version;
    info->state = get_state(e[1]);
    return get_i64(e[0], &info->slots) && info->slots >= 1 &&
           info->state != 0 && get_i64(e[2], &info->published);
}

rs_status_t rs__redis_dir_create(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    num_t s, v;
    const char *args[] = {num(&s, req->slots), num(&v, req->version)};
    return run(dir, RS_RLUA_CREATE, req, args, 2, diag);
}

rs_status_t rs__redis_dir_publish(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    num_t s;
    const char *args[] = {num(&s, req->slot), req->publisher, req->geometry,
                          (const char *)req->table};
    size_t lens[] = {strlen(s.text), strlen(req->publisher),
                     strlen(req->geometry), req->len};
    return rs__redis_dir_run(dir, RS_RLUA_PUBLISH, req, args, lens, 4, NULL, diag);
}

rs_status_t rs__redis_dir_heartbeat(rs_dir_h dir, rs__dir_request_t *req,
                               rs_diag_t *diag)
{
    num_t s;
    const char *args[] = {num(&s, req->slot), req->publisher};
    return run(dir, RS_RLUA_HEARTBEAT, req, args, 2, diag);
}

/* The lookup script's reply: the version's record (none: state 0) and
 * who released it. */
static rs_status_t fill_info(rs_dir_h dir, const redisReply *rep,
                             rs__dir_request_t *req, rs_diag_t *diag)
{
    rs_version_info_t info = {.version = req->version};
    int ok = rep->type == REDIS_REPLY_ARRAY &&
             (rep->elements == 0 ||
              (rep->elements >= 3 && rep->elements <= 4 &&
               get_info(rep->element, req->version, &info)));
    req->released_by[0] = '\0';
    if (ok && rep->elements == 4 &&
        rep->element[3]->type == REDIS_REPLY_STRING &&
        rep->element[3]->len <= RS_DIR_NAME_MAX)
        snprintf(req->released_by, sizeof(req->released_by), "%s",
                 rep->element[3]->str);
    if (!ok)
        return rs__redis_dir_bad_reply(dir, "the lookup script", diag);
    req->info = info;
    return RS_OK;
}

rs_status_t rs__redis_dir_lookup(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    return rs__redis_dir_run(dir, RS_RLUA_LOOKUP, req, NULL, NULL, 0, fill_info,
                        diag);
}

/* Marks the published slots (HKEYS of the tables). */
static int mark_present(const redisReply *keys, rs__dir_request_t *req)
{
    for (size_t i = 0; i < keys->elements; i++) {
        int64_t slot;
        if (!get_i64(keys->element[i], &slot))
            return 0;
        if (slot >= 0 && slot < req->info.slots)
            req->present[slot] = 1;
    }
    return 1;
}

/* The slot of a "<slot>@<publisher>" field. */
static int field_slot(const redisReply *e, int64_t *slot_p)
{
    if (e->type != REDIS_REPLY_STRING)
        return 0;
    const char *at = memchr(e->str, '@', e->len);
    if (at == NULL || at == e->str || at - e->str > 20)
        return 0;
    char *end;
    long long v = strtoll(e->str, &end, 10);
    if (end != at)
        return 0;
    *slot_p = v;
    return 1;
}

static int get_time(const redisReply *sec, const redisReply *usec,
                    double *t_p)
{
    int64_t s, u;
    if (!get_i64(sec, &s) || !get_i64(usec, &u))
        return 0;
    *t_p = (double)s + (double)u * 1e-6;
    return 1;
}

/* Ages from the heartbeat hash (HGETALL: slot@publisher, time, ...) and
 * TIME: a slot is as fresh as its freshest publisher. */
static int fill_ages(const redisReply *rep, rs__dir_request_t *req)
{
    const redisReply *hb = rep->element[3];
    double now;
    if (!get_time(rep->element[0], rep->element[1], &now))
        return 0;
    for (int64_t i = 0; i < req->info.slots; i++)
        req->age[i] = -1.0;
    for (size_t i = 0; i + 1 < hb->elements; i += 2) {
        int64_t slot;
        const redisReply *t = hb->element[i + 1];
        if (!field_slot(hb->element[i], &slot) || t->type != REDIS_REPLY_STRING)
            return 0;
        double at = strtod(t->str, NULL), age = now > at ? now - at : 0.0;
        if (slot >= 0 && slot < req->info.slots &&
            (req->age[slot] < 0 || age < req->age[slot]))
            req->age[slot] = age;
    }
    return 1;
}

static rs_status_t fill_slots(rs_dir_h dir, const redisReply *rep,
                              rs__dir_request_t *req, rs_diag_t *diag)
{
    int ok = rep->type == REDIS_REPLY_ARRAY && rep->elements == 4 &&
             rep->element[2]->type == REDIS_REPLY_ARRAY &&
             rep->element[3]->type == REDIS_REPLY_ARRAY &&
             mark_present(rep->element[2], req) && fill_ages(rep, req);
    return ok ? RS_OK : rs__redis_dir_bad_reply(dir, "the slot status script",
                                           diag);
}

rs_status_t rs__redis_dir_slot_status(rs_dir_h dir, rs__dir_request_t *req,
                                 rs_diag_t *diag)
{
    return rs__redis_dir_run(dir, RS_RLUA_SLOT_STATUS, req, NULL, NULL, 0,
                        fill_slots, diag);
}

/* One publisher's (name, entry, heartbeat or nil) into e; the entry is
 * checked by dir.c. */
static int get_entry(redisReply *const *r, double now, rs_dir_entry_t *e)
{
    if (r[0]->type != REDIS_REPLY_STRING || r[0]->len == 0 ||
        r[0]->len > RS_DIR_NAME_MAX || r[1]->type != REDIS_REPLY_STRING)
        return 0;
    memcpy(e->publisher, r[0]->str, r[0]->len);
    e->publisher[r[0]->len] = '\0';
    e->age_s = -1.0;
    if (r[2]->type == REDIS_REPLY_STRING) {
        double at = strtod(r[2]->str, NULL);
        e->age_s = now > at ? now - at : 0.0;
    }
    e->table = malloc(r[1]->len + 1);
    if (e->table == NULL)
        return 0;
    memcpy(e->table, r[1]->str, r[1]->len);
    e->table[r[1]->len] = '\0';
    e->len = r[1]->len;
    return 1;
}

static rs_status_t fill_entries(rs_dir_h dir, const redisReply *rep,
                                rs__dir_request_t *req, rs_diag_t *diag)
{
    double now;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2 ||
        (rep->elements - 2) % 3 != 0 ||
        !get_time(rep->element[0], rep->element[1], &now))
        return rs__redis_dir_bad_reply(dir, "the read script", diag);
    size_t n = (rep->elements - 2) / 3;
    req->entries = calloc(n > 0 ? n : 1, sizeof(*req->entries));
    if (req->entries == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "slot %lld tables: out of "
                            "memory", (long long)req->slot);
    for (size_t i = 0; i < n; i++) {
        req->nentries = i + 1; /* freed by the caller, also on error */
        if (!get_entry(rep->element + 2 + 3 * i, now, &req->entries[i]))
            return rs__redis_dir_bad_reply(dir, "the read script", diag);
    }
    return RS_OK;
}

rs_status_t rs__redis_dir_read(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    num_t s;
    const char *args[] = {num(&s, req->slot)};
    size_t lens[] = {strlen(s.text)};
    return rs__redis_dir_run(dir, RS_RLUA_READ, req, args, lens, 1, fill_entries,
                        diag);
}

static int cmp_info(const void *a, const void *b)
{
    int64_t x = ((const rs_version_info_t *)a)->version;
    int64_t y = ((const rs_version_info_t *)b)->version;
    return (x > y) - (x < y);
}

/* Flat {version, slots, state, published, ...} into req->infos, sorted
 * here: sorted-set scores are doubles, exact only up to 2^53. */
static rs_status_t fill_list(rs_dir_h dir, const redisReply *rep,
                             rs__dir_request_t *req, rs_diag_t *diag)
{
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 4 != 0)
        return rs__redis_dir_bad_reply(dir, "the list script", diag);
    size_t n = rep->elements / 4;
    rs_version_info_t *infos = calloc(n > 0 ? n : 1, sizeof(*infos));
    if (infos == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of "
                            "memory");
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (!get_i64(rep->element[4 * i], &v) || v < 0 ||
            !get_info(rep->element + 4 * i + 1, v, &infos[i])) {
            free(infos);
            return rs__redis_dir_bad_reply(dir, "the list script", diag);
        }
    }
    qsort(infos, n, sizeof(*infos), cmp_info);
    req->infos = infos;
    req->count = n;
    return RS_OK;
}

rs_status_t rs__redis_dir_list(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    char prefix[RS_DIR_NAME_MAX + 16];
    snprintf(prefix, sizeof(prefix), "rs:{%s}:", req->model);
    const char *args[] = {prefix};
    size_t lens[] = {strlen(prefix)};
    return rs__redis_dir_run(dir, RS_RLUA_LIST, req, args, lens, 1, fill_list,
                        diag);
}

/* The lease script's reply: the epoch taken or renewed. */
static rs_status_t fill_epoch(rs_dir_h dir, const redisReply *rep,
                              rs__dir_request_t *req, rs_diag_t *diag)
{
    int64_t got = 0;
    if (!get_i64(rep, &got) || got < 1 || (uint64_t)got > RS_DIR_EPOCH_MAX)
        return rs__redis_dir_bad_reply(dir, "the lease script", diag);
    req->epoch = (uint64_t)got;
    return RS_OK;
}

rs_status_t rs__redis_dir_lease(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    char ttl[40], epoch[24];
    snprintf(ttl, sizeof(ttl), "%.17g", req->ttl_s);
    snprintf(epoch, sizeof(epoch), "%llu", (unsigned long long)req->epoch);
    const char *args[] = {req->holder, ttl, epoch};
    size_t lens[] = {strlen(req->holder), strlen(ttl), strlen(epoch)};
    return rs__redis_dir_run(dir, RS_RLUA_LEASE, req, args, lens, 3, fill_epoch,
                        diag);
}

rs_status_t rs__redis_dir_unlease(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    const char *args[] = {req->holder};
    return run(dir, RS_RLUA_UNLEASE, req, args, 1, diag);
}

/* The release script's reply: how many leases it dropped. */
static rs_status_t fill_dropped(rs_dir_h dir, const redisReply *rep,
                                rs__dir_request_t *req, rs_diag_t *diag)
{
    int64_t dropped = 0;
    if (!get_i64(rep, &dropped) || dropped < 0)
        return rs__redis_dir_bad_reply(dir, "the release script", diag);
    req->count = (size_t)dropped;
    return RS_OK;
}

rs_status_t rs__redis_dir_release(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    const char *by = req->by != NULL ? req->by : "";
    const char *args[] = {req->force ? "1" : "0", by};
    size_t lens[] = {1, strlen(by)};
    return rs__redis_dir_run(dir, RS_RLUA_RELEASE, req, args, lens, 2,
                        fill_dropped, diag);
}

rs_status_t rs__redis_dir_group(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    char field[RS_DIR_NAME_MAX + 8];
    snprintf(field, sizeof(field), "group:%s", req->group);
    const char *args[] = {field, req->expect != NULL ? "1" : "0",
                          req->expect != NULL ? req->expect : "",
                          req->table};
    size_t lens[] = {strlen(field), 1, strlen(args[2]),
                     req->table != NULL ? req->len : 0};
    redisReply *rep = NULL;
    rs_status_t st = rs__redis_dir_eval(dir, RS_RLUA_GROUP, req, args, lens,
                                   req->table != NULL ? 4 : 3, diag, &rep);
    if (st != RS_OK)
        return st;
    int64_t swapped = 0;
    int ok = rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
             (rep->element[0]->type == REDIS_REPLY_NIL ||
              rep->element[0]->type == REDIS_REPLY_STRING) &&
             get_i64(rep->element[1], &swapped);
    req->record = NULL;
    if (ok && rep->element[0]->type == REDIS_REPLY_STRING) {
        req->record = strndup(rep->element[0]->str, rep->element[0]->len);
        if (req->record == NULL) {
            freeReplyObject(rep);
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
        }
    }
    freeReplyObject(rep);
    if (!ok)
        return rs__redis_dir_bad_reply(dir, "the group script", diag);
    req->swapped = swapped == 1;
    return RS_OK;
}

/* One "<expiry> <epoch>" lease value, live at time t, into l. */
static int live_lease(const redisReply *holder, const redisReply *value,
                      double t, rs_dir_lease_info_t *l)
{
    char text[64];
    double expiry;
    unsigned long long epoch;
    if (holder->type != REDIS_REPLY_STRING ||
        value->type != REDIS_REPLY_STRING || holder->len > RS_DIR_NAME_MAX ||
        value->len >= sizeof(text))
        return -1;
    memcpy(text, value->str, value->len);
    text[value->len] = '\0';
    if (sscanf(text, "%lf %llu", &expiry, &epoch) != 2)
        return -1;
    if (expiry <= t)
        return 0;
    snprintf(l->holder, sizeof(l->holder), "%s", holder->str);
    l->epoch = epoch;
    l->left_s = expiry - t;
    return 1;
}

/* The leases script's reply: the server's time and every lease; the live
 * ones go to req->leases. */
static rs_status_t fill_leases(rs_dir_h dir, const redisReply *rep,
                               rs__dir_request_t *req, rs_diag_t *diag)
{
    int64_t sec = 0, usec = 0;
    int ok = rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 &&
             get_i64(rep->element[0], &sec) &&
             get_i64(rep->element[1], &usec) &&
             rep->element[2]->type == REDIS_REPLY_ARRAY &&
             rep->element[2]->elements % 2 == 0;
    const redisReply *l = ok ? rep->element[2] : NULL;
    size_t n = ok ? l->elements / 2 : 0;
    req->leases = n > 0 ? calloc(n, sizeof(*req->leases)) : NULL;
    if (n > 0 && req->leases == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    double t = (double)sec + (double)usec / 1e6;
    for (size_t i = 0; ok && i < n; i++) {
        int live = live_lease(l->element[2 * i], l->element[2 * i + 1], t,
                              &req->leases[req->nleases]);
        ok = live >= 0;
        req->nleases += live > 0;
    }
    if (!ok)
        return rs__redis_dir_bad_reply(dir, "the leases script", diag);
    return RS_OK;
}

rs_status_t rs__redis_dir_leases(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    return rs__redis_dir_run(dir, RS_RLUA_LEASES, req, NULL, NULL, 0, fill_leases,
                        diag);
}
