/* Group commit records (include/reshard/dir.h, docs/formats.md
 * "reshard.group.v1"). The state machine lives here, once, for every
 * backend: a backend only stores the record and swaps it atomically when
 * it is still the one read (ops->group). An update reads the record,
 * computes the next one and swaps it in, again from a fresh read when
 * another rank swapped first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/dir_impl.h"

#define GROUP_FORMAT "reshard.group.v1"
/* Attempts one record keeps the outcome of (each one character). */
#define GROUP_ATTEMPTS_MAX 4096
/* Swaps lost to other ranks before giving up: each loss means another
 * rank's update went in, so this bounds contention, not time. */
#define GROUP_SWAPS_MAX 1000

typedef struct grec {
    int64_t size;
    char history[GROUP_ATTEMPTS_MAX + 1]; /* 'C' / 'A' per decided attempt */
    char ranks[RS_DIR_GROUP_MAX + 1];     /* the open attempt's states */
    char note[RS_DIR_GROUP_NOTE_MAX + 1];
} grec_t;

static int valid_states(const char *s, int64_t n)
{
    if ((int64_t)strlen(s) != n)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (strchr("-SPF", s[i]) == NULL)
            return 0;
    return 1;
}

static int valid_history(const char *s)
{
    for (; *s != '\0'; s++)
        if (*s != 'C' && *s != 'A')
            return 0;
    return 1;
}

/* Parses the four lines of a record; 0 when it is not one. */
static int parse(const char *text, grec_t *g)
{
    char fmt[32], hist[GROUP_ATTEMPTS_MAX + 2], ranks[RS_DIR_GROUP_MAX + 2];
    long long size = 0;
    int used = 0;
    memset(g, 0, sizeof(*g));
    if (sscanf(text, "%31s size %lld history %4097s ranks %1025s%n", fmt,
               &size, hist, ranks, &used) != 4 ||
        strcmp(fmt, GROUP_FORMAT) != 0 || size < 1 ||
        size > RS_DIR_GROUP_MAX)
        return 0;
    g->size = size;
    if (strcmp(hist, "-") != 0) {
        size_t n = strlen(hist);
        if (n > GROUP_ATTEMPTS_MAX || !valid_history(hist))
            return 0;
        memcpy(g->history, hist, n + 1); /* fits: n <= GROUP_ATTEMPTS_MAX */
    }
    if (!valid_states(ranks, g->size))
        return 0;
    memcpy(g->ranks, ranks, (size_t)g->size + 1);
    const char *note = strstr(text + used, "note ");
    if (note != NULL) {
        note += 5;
        size_t n = strcspn(note, "\n");
        n = n < RS_DIR_GROUP_NOTE_MAX ? n : RS_DIR_GROUP_NOTE_MAX;
        memcpy(g->note, note, n);
        g->note[n] = '\0';
    }
    return 1;
}

static char *format(const grec_t *g)
{
    size_t cap = sizeof(*g) + 128;
    char *out = malloc(cap);
    if (out != NULL)
        snprintf(out, cap, GROUP_FORMAT "\nsize %lld\nhistory %s\nranks "
                 "%s\nnote %s\n", (long long)g->size,
                 g->history[0] ? g->history : "-", g->ranks, g->note);
    return out;
}

/* One line of text for a note: newlines become spaces, cut to the cap. */
static void set_note(grec_t *g, const char *note)
{
    snprintf(g->note, sizeof(g->note), "%s", note != NULL ? note : "");
    for (char *c = g->note; *c != '\0'; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
}

/* What a call wants done to the record. */
typedef struct gcall {
    const char *group;
    int64_t size;     /* 0: unknown (abort, info) */
    int64_t rank;     /* -1: none */
    int64_t attempt;  /* 0: the open one */
    int mark;         /* RS_GROUP_* state, 0: none */
    int abort;        /* abort the attempt when open */
    const char *note;
} gcall_t;

static int state_rank(char s)
{
    switch (s) {
    case 'S': return 1;
    case 'P': return 2;
    case 'F': return 3;
    default: return 0;
    }
}

static void decide(grec_t *g, char decision, rs_dir_group_info_t *info)
{
    size_t n = strlen(g->history);
    snprintf(info->ranks, sizeof(info->ranks), "%s", g->ranks);
    g->history[n] = decision;
    g->history[n + 1] = '\0';
    memset(g->ranks, RS_GROUP_NONE, (size_t)g->size);
    info->decision = decision == 'C' ? RS_GROUP_COMMITTED
                                     : RS_GROUP_ABORTED;
}

/* The next record for call c; *changed_p when it differs from g. */
static rs_status_t step(const rs__dir_request_t *req, const gcall_t *c,
                        grec_t *g, rs_dir_group_info_t *info,
                        int *changed_p, rs_diag_t *diag)
{
    int64_t decided = (int64_t)strlen(g->history);
    int64_t attempt = c->attempt > 0 ? c->attempt : decided + 1;
    *changed_p = 0;
    memset(info, 0, sizeof(*info));
    info->size = g->size;
    info->attempt = attempt;
    info->attempts = decided;
    if (attempt > decided + 1)
        return rs__diag_set(diag, RS_ERR_INPUT, "group '%s' of version %lld "
                            "of '%s': attempt %lld was not started (%lld "
                            "decided)", c->group, (long long)req->version,
                            req->model, (long long)attempt,
                            (long long)decided);
    if (attempt <= decided) { /* decided already: report only */
        info->decision = g->history[attempt - 1] == 'C' ? RS_GROUP_COMMITTED
                                                        : RS_GROUP_ABORTED;
        snprintf(info->note, sizeof(info->note), "%s", g->note);
        return RS_OK;
    }
    if (c->mark != 0) {
        char *s = &g->ranks[c->rank];
        if (state_rank((char)c->mark) > state_rank(*s)) {
            *s = (char)c->mark;
            *changed_p = 1;
        }
    }
    if (decided >= GROUP_ATTEMPTS_MAX && *changed_p)
        return rs__diag_set(diag, RS_ERR_INPUT, "group '%s' of version %lld "
                            "of '%s': %d attempts were made, no more are "
                            "kept", c->group, (long long)req->version,
                            req->model, GROUP_ATTEMPTS_MAX);
    int applied = 0;
    for (int64_t i = 0; i < g->size; i++)
        applied += g->ranks[i] == RS_GROUP_APPLIED;
    if (c->mark == RS_GROUP_FAILED || c->abort) {
        set_note(g, c->note);
        decide(g, RS_GROUP_ABORTED, info);
        *changed_p = 1;
    } else if (applied == g->size) {
        set_note(g, "every rank applied");
        decide(g, RS_GROUP_COMMITTED, info);
        *changed_p = 1;
    } else {
        snprintf(info->ranks, sizeof(info->ranks), "%s", g->ranks);
    }
    snprintf(info->note, sizeof(info->note), "%s", g->note);
    info->attempts = (int64_t)strlen(g->history);
    return RS_OK;
}

/* The record as stored (absent: a new one of c->size ranks, or none). */
static rs_status_t load(const rs__dir_request_t *req, const gcall_t *c,
                        const char *text, grec_t *g, int *none_p,
                        rs_diag_t *diag)
{
    *none_p = 0;
    if (text == NULL) {
        memset(g, 0, sizeof(*g));
        if (c->size <= 0) {
            *none_p = 1;
            return RS_OK;
        }
        g->size = c->size;
        memset(g->ranks, RS_GROUP_NONE, (size_t)c->size);
        return RS_OK;
    }
    if (!parse(text, g))
        return rs__diag_set(diag, RS_ERR_INPUT, "group '%s' of version %lld "
                            "of '%s': the directory's record is not a "
                            GROUP_FORMAT " record", c->group,
                            (long long)req->version, req->model);
    if (c->size > 0 && c->size != g->size)
        return rs__diag_set(diag, RS_ERR_INPUT, "group '%s' of version %lld "
                            "of '%s' has %lld ranks, not %lld (every rank "
                            "of a group must give the same group size)",
                            c->group, (long long)req->version, req->model,
                            (long long)g->size, (long long)c->size);
    if (c->rank >= g->size)
        return rs__diag_set(diag, RS_ERR_INPUT, "group '%s' of version %lld "
                            "of '%s': rank %lld is not below the group's "
                            "size %lld", c->group, (long long)req->version,
                            req->model, (long long)c->rank,
                            (long long)g->size);
    return RS_OK;
}

/* Read, step, swap; again from a fresh read while other ranks swap
 * first. */
static rs_status_t update(rs_dir_h dir, rs__dir_request_t *req, const gcall_t *c,
                          rs_diag_t *diag, rs_dir_group_info_t *info)
{
    char *cur = NULL;
    rs_status_t st = RS_OK;
    int first = 1;
    for (int tries = 0; tries < GROUP_SWAPS_MAX; tries++) {
        grec_t g;
        int none = 0, changed = 0;
        if (first) { /* the first read */
            req->table = NULL;
            req->expect = NULL;
            req->record = NULL;
            st = rs__dir_call(dir, dir->ops->group, req, diag);
            cur = req->record;
            first = 0;
        }
        if (st == RS_OK)
            st = load(req, c, cur, &g, &none, diag);
        if (st == RS_OK && none) {
            memset(info, 0, sizeof(*info));
            break;
        }
        if (st == RS_OK)
            st = step(req, c, &g, info, &changed, diag);
        if (st != RS_OK || !changed)
            break;
        char *next = format(&g);
        if (next == NULL) {
            st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
            break;
        }
        req->table = next;
        req->len = strlen(next);
        req->expect = cur;
        req->record = NULL;
        req->swapped = 0;
        st = rs__dir_call(dir, dir->ops->group, req, diag);
        free(next);
        free(cur);
        cur = req->record;
        if (st != RS_OK || req->swapped)
            break;
        if (tries + 1 == GROUP_SWAPS_MAX)
            st = rs__diag_set(diag, RS_ERR_TIMEOUT, "group '%s' of version "
                              "%lld of '%s': the record changed under %d "
                              "updates in a row", c->group,
                              (long long)req->version, req->model,
                              GROUP_SWAPS_MAX);
    }
    free(cur);
    req->record = NULL;
    return st;
}

static rs_status_t group_call(rs_dir_h dir, const char *model,
                              int64_t version, const gcall_t *c,
                              rs_diag_t *diag, rs_dir_group_info_t *info_p)
{
    rs__dir_request_t req;
    rs_dir_group_info_t info;
    rs_status_t st = rs__dir_start(dir, model, version, diag, &req);
    if (st == RS_OK)
        st = rs__dir_check_name("group", c->group, diag);
    if (st != RS_OK)
        return st;
    if (info_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "group '%s': NULL "
                            "output", c->group);
    if (c->attempt < 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "group '%s' of version %lld "
                            "of '%s': attempt %lld is negative", c->group,
                            (long long)version, model, (long long)c->attempt);
    req.group = c->group;
    st = update(dir, &req, c, diag, &info);
    if (st == RS_OK)
        *info_p = info;
    return st;
}

rs_status_t rs_dir_group_mark(rs_dir_h dir, const char *model,
                              int64_t version, const char *group,
                              int64_t size, int64_t rank, int64_t attempt,
                              int mark, const char *note, rs_diag_t *diag,
                              rs_dir_group_info_t *info_p)
{
    gcall_t c = {group, size, rank, attempt, mark, 0, note};
    if (size < 1 || size > RS_DIR_GROUP_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "group '%s': size %lld "
                            "(expected 1 to %d)", group ? group : "(null)",
                            (long long)size, RS_DIR_GROUP_MAX);
    if (rank < 0 || rank >= size)
        return rs__diag_set(diag, RS_ERR_INPUT, "group '%s': rank %lld is "
                            "not in [0, %lld)", group ? group : "(null)",
                            (long long)rank, (long long)size);
    if (mark != RS_GROUP_STAGED && mark != RS_GROUP_APPLIED &&
        mark != RS_GROUP_FAILED)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "group '%s': state "
                            "%d is not STAGED, APPLIED or FAILED",
                            group ? group : "(null)", mark);
    if (attempt == 0 && mark != RS_GROUP_STAGED)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "group '%s': only "
                            "STAGED joins the open attempt (attempt 0)",
                            group ? group : "(null)");
    return group_call(dir, model, version, &c, diag, info_p);
}

rs_status_t rs_dir_group_abort(rs_dir_h dir, const char *model,
                               int64_t version, const char *group,
                               int64_t attempt, const char *note,
                               rs_diag_t *diag, rs_dir_group_info_t *info_p)
{
    gcall_t c = {group, 0, -1, attempt, 0, 1, note};
    if (attempt < 1)
        return rs__diag_set(diag, RS_ERR_INPUT, "group '%s': abort needs "
                            "the attempt (1 or more), not %lld",
                            group ? group : "(null)", (long long)attempt);
    return group_call(dir, model, version, &c, diag, info_p);
}

rs_status_t rs_dir_group_info(rs_dir_h dir, const char *model,
                              int64_t version, const char *group,
                              int64_t attempt, rs_diag_t *diag,
                              rs_dir_group_info_t *info_p)
{
    gcall_t c = {group, 0, -1, attempt, 0, 0, NULL};
    return group_call(dir, model, version, &c, diag, info_p);
}
