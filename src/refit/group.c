/* Group commit of a receiver's apply (group.h). Every wait is bounded by
 * the group's timeout; a wait that runs out aborts the attempt in the
 * directory, and the rank then follows whatever the record decided (its
 * own abort, or a commit that the last rank made first), so no two ranks
 * act on different outcomes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/diag.h"
#include "refit/group.h"

/* Polling the record: quick at first (ranks of one replica stage within
 * moments of each other), then no more often than this. */
#define POLL_FIRST_S 0.005
#define POLL_MAX_S 0.1
/* Test hook (docs/refit.md, "Group commit"): "fail:R" or "exit:R" makes
 * rank R fail its install (or _exit) once every other rank applied, so a
 * test rolls its peers back deterministically. */
#define FAULT_ENV "RESHARD_TEST_GROUP_FAULT"

struct rs__group {
    char *name;
    char *holder;
    int64_t size, rank;
    double timeout_s;
};

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > RS_DIR_NAME_MAX || strcmp(s, ".") == 0 ||
        strcmp(s, "..") == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

rs_status_t rs__group_create(const rs_receiver_params_t *p,
                             const char *holder, rs_diag_t *diag,
                             rs__group_t **group_p)
{
    *group_p = NULL;
    if (p->group == NULL)
        return RS_OK;
    if (!name_ok(p->group))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: group "
                            "'%s': a group name is 1 to %d characters of "
                            "[A-Za-z0-9._-]", p->group, RS_DIR_NAME_MAX);
    if (p->group_size < 1 || p->group_size > RS_DIR_GROUP_MAX)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: group "
                            "'%s': group_size %lld (expected 1 to %d)",
                            p->group, (long long)p->group_size,
                            RS_DIR_GROUP_MAX);
    if (p->group_rank < 0 || p->group_rank >= p->group_size)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: group "
                            "'%s': group_rank %lld is not in [0, %lld)",
                            p->group, (long long)p->group_rank,
                            (long long)p->group_size);
    if (!(p->group_timeout_s > 0 && p->group_timeout_s <= 1e6))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: group "
                            "'%s': group_timeout_s %g (expected more than 0, "
                            "at most 1e6)", p->group, p->group_timeout_s);
    if (!p->shadow)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: group "
                            "'%s' needs shadow = 1 (a rank rolls back to the "
                            "bytes its staging keeps)", p->group);
    rs__group_t *g = calloc(1, sizeof(*g));
    if (g == NULL || (g->name = strdup(p->group)) == NULL ||
        (g->holder = strdup(holder)) == NULL) {
        rs__group_destroy(g);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    g->size = p->group_size;
    g->rank = p->group_rank;
    g->timeout_s = p->group_timeout_s;
    *group_p = g;
    return RS_OK;
}

void rs__group_destroy(rs__group_t *g)
{
    if (g == NULL)
        return;
    free(g->name);
    free(g->holder);
    free(g);
}

void rs__group_swap(void *a, void *b, size_t n)
{
    unsigned char tmp[4096];
    unsigned char *x = a, *y = b;
    while (n > 0) {
        size_t k = n < sizeof(tmp) ? n : sizeof(tmp);
        memcpy(tmp, x, k);
        memcpy(x, y, k);
        memcpy(y, tmp, k);
        x += k;
        y += k;
        n -= k;
    }
}

/* One apply's view of the group. */
typedef struct gctx {
    const rs__group_t *g;
    rs_dir_h dir;
    const char *model;
    int64_t version;
    int64_t attempt;
} gctx_t;

/* "1, 3" for the ranks whose state is in `which` (ranks[i]). */
static void ranks_in(const char *ranks, const char *which, char *out,
                     size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; ranks[i] != '\0' && used + 24 < cap; i++)
        if (strchr(which, ranks[i]) != NULL)
            used += (size_t)snprintf(out + used, cap - used, "%s%zu",
                                     used ? ", " : "", i);
}

static int all_in(const char *ranks, const char *which)
{
    for (size_t i = 0; ranks[i] != '\0'; i++)
        if (strchr(which, ranks[i]) == NULL)
            return 0;
    return 1;
}

/* Polls the attempt until `done` holds of its ranks (done NULL: until it
 * is decided) or it is decided; *info_p the last answer. After timeout_s
 * the attempt is aborted with a note naming the ranks not in `done` (the
 * record may answer COMMITTED instead: the last rank applied first). A
 * directory error is retried until the timeout; past it, the last one is
 * returned. */
static rs_status_t wait_for(const gctx_t *c, const char *done,
                            const char *waiting_for, rs_diag_t *diag,
                            rs_dir_group_info_t *info, int *timed_out_p)
{
    *timed_out_p = 0;
    double until = rs__now_s() + c->g->timeout_s, pause = POLL_FIRST_S;
    rs_diag_t d;
    for (;;) {
        rs_diag_clear(&d);
        rs_status_t st = rs_dir_group_info(c->dir, c->model, c->version,
                                           c->g->name, c->attempt, &d, info);
        if (st == RS_OK && (info->decision != RS_GROUP_OPEN ||
                            (done != NULL && all_in(info->ranks, done))))
            return RS_OK;
        if (rs__now_s() >= until) {
            char missing[256], note[RS_DIR_GROUP_NOTE_MAX];
            if (st != RS_OK)
                snprintf(missing, sizeof(missing), "(unknown: %.200s)",
                         d.msg);
            else
                ranks_in(info->ranks, done != NULL ? "-" : "-S", missing,
                         sizeof(missing));
            snprintf(note, sizeof(note), "rank %lld ('%.128s') waited %g s "
                     "for rank(s) %.200s to %s", (long long)c->g->rank,
                     c->g->holder, c->g->timeout_s, missing, waiting_for);
            rs_diag_clear(&d);
            st = rs_dir_group_abort(c->dir, c->model, c->version, c->g->name,
                                    c->attempt, note, &d, info);
            if (st != RS_OK)
                return rs__diag_set(diag, st, "group '%s' of version %lld "
                                    "of '%s': %s, and the attempt could not "
                                    "be aborted: %s", c->g->name,
                                    (long long)c->version, c->model, note,
                                    d.msg);
            *timed_out_p = 1;
            return RS_OK;
        }
        rs__sleep_s(pause);
        pause = pause * 2 < POLL_MAX_S ? pause * 2 : POLL_MAX_S;
    }
}

/* The test hook: this rank fails (or exits) once its peers applied. */
static int fault_here(const gctx_t *c)
{
    const char *f = getenv(FAULT_ENV);
    char mode[8];
    long long rank;
    if (f == NULL || sscanf(f, "%7[a-z]:%lld", mode, &rank) != 2 ||
        rank != c->g->rank)
        return 0;
    /* every other rank APPLIED: this one is the last, still '-' or 'S' */
    rs_dir_group_info_t info;
    double until = rs__now_s() + c->g->timeout_s;
    while (rs__now_s() < until) {
        if (rs_dir_group_info(c->dir, c->model, c->version, c->g->name,
                              c->attempt, NULL, &info) == RS_OK) {
            int64_t behind = 0;
            for (int64_t i = 0; i < c->g->size; i++)
                behind += i != c->g->rank &&
                          info.ranks[i] != RS_GROUP_APPLIED;
            if (info.decision != RS_GROUP_OPEN || behind == 0)
                break;
        }
        rs__sleep_s(POLL_FIRST_S);
    }
    if (strcmp(mode, "exit") == 0)
        _exit(9);
    return strcmp(mode, "fail") == 0;
}

static rs_status_t aborted(const gctx_t *c, const rs_dir_group_info_t *info,
                           rs_status_t st, const char *done, rs_diag_t *diag)
{
    return rs__diag_set(diag, st, "group '%s' (rank %lld of "
                        "%lld) aborted version %lld of '%s' (attempt %lld): "
                        "%s; %s", c->g->name, (long long)c->g->rank,
                        (long long)c->g->size, (long long)c->version,
                        c->model, (long long)c->attempt,
                        info->note[0] ? info->note : "no reason recorded",
                        done);
}

/* Stage barrier: every rank staged this attempt. */
static rs_status_t join(gctx_t *c, rs_diag_t *diag)
{
    rs_dir_group_info_t info;
    rs_status_t st = rs_dir_group_mark(c->dir, c->model, c->version,
                                       c->g->name, c->g->size, c->g->rank, 0,
                                       RS_GROUP_STAGED, NULL, diag, &info);
    if (st != RS_OK)
        return rs__diag_prefix(diag, "group '%s': nothing installed: ",
                               c->g->name);
    c->attempt = info.attempt;
    int timed_out;
    st = wait_for(c, "SPF", "stage", diag, &info, &timed_out);
    if (st != RS_OK)
        return st;
    if (info.decision == RS_GROUP_ABORTED)
        return aborted(c, &info, timed_out ? RS_ERR_TIMEOUT
                                           : RS_ERR_INCOMPLETE,
                       "nothing was installed", diag);
    return RS_OK;
}

/* After this rank's install: APPLIED, then the group's decision. */
static rs_status_t settle(const gctx_t *c, const rs__group_io_t *io,
                          rs_diag_t *diag)
{
    rs_dir_group_info_t info;
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_status_t st = rs_dir_group_mark(c->dir, c->model, c->version,
                                       c->g->name, c->g->size, c->g->rank,
                                       c->attempt, RS_GROUP_APPLIED, NULL, &d,
                                       &info);
    int timed_out = 0;
    if (st == RS_OK && info.decision == RS_GROUP_OPEN)
        st = wait_for(c, NULL, "apply", &d, &info, &timed_out);
    if (st != RS_OK) {
        /* no decision could be read: the safe side for this rank is the
         * old bytes, and the error says the group's outcome is unknown */
        io->undo(io->ctx);
        return rs__diag_set(diag, st, "group '%s' (rank %lld): the "
                            "decision on version %lld of '%s' (attempt %lld) "
                            "could not be read, this rank rolled back: %s",
                            c->g->name, (long long)c->g->rank,
                            (long long)c->version, c->model,
                            (long long)c->attempt, d.msg);
    }
    if (info.decision == RS_GROUP_COMMITTED) {
        io->keep(io->ctx);
        return RS_OK;
    }
    io->undo(io->ctx);
    return aborted(c, &info, timed_out ? RS_ERR_TIMEOUT : RS_ERR_INCOMPLETE,
                   "this rank's parameters were rolled back to the bytes "
                   "they held", diag);
}

rs_status_t rs__group_apply(const rs__group_t *g, rs_dir_h dir,
                            const char *model, int64_t version,
                            const rs__group_io_t *io, rs_diag_t *diag)
{
    rs_diag_t own;
    if (diag == NULL) { /* the failure's text goes into the record */
        rs_diag_clear(&own);
        diag = &own;
    }
    gctx_t c = {g, dir, model, version, 0};
    rs_status_t st = join(&c, diag);
    if (st != RS_OK)
        return st;
    if (fault_here(&c))
        st = rs__diag_set(diag, RS_ERR_INCOMPLETE, "injected failure (%s)",
                          FAULT_ENV);
    else
        st = io->install(io->ctx, diag);
    if (st == RS_OK)
        return settle(&c, io, diag);
    io->undo(io->ctx);
    /* a caller's install callback may fail without a word in diag (or
     * with an earlier failure's still there): the status is its return */
    if (diag->status != st)
        rs__diag_set(diag, st, "the install callback failed (%s)",
                     rs_status_str(st));
    char note[RS_DIR_GROUP_NOTE_MAX];
    rs_dir_group_info_t info;
    snprintf(note, sizeof(note), "rank %lld ('%.128s') could not install: "
             "%.200s", (long long)g->rank, g->holder, diag->msg);
    rs_dir_group_mark(dir, model, version, g->name, g->size, g->rank,
                      c.attempt, RS_GROUP_FAILED, note, NULL, &info);
    (void)rs__diag_prefix(diag, "group '%s' (rank %lld): the group rolls "
                          "back version %lld: ", g->name, (long long)g->rank,
                          (long long)version);
    return st;
}
