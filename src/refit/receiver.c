/* The receiver's lifecycle and its handle: create (defaults, holder name,
 * directory), bind the parameters (with their staging), announce the cuts
 * its capture reads, cancel, destroy. A pull's steps are in
 * receiver_stage.c (stage, apply, pull), receiver_plan.c (the plan cache
 * and connecting) and receiver_deadline.c (its deadline and lease); the
 * state they share is receiver_impl.h. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/diag.h"
#include "core/memory.h"
#include "core/pages.h"
#include "core/params.h"
#include "exec/backend.h"
#include "model/capture_check.h"
#include "refit/receiver_impl.h"
#include "reshard/cuts.h"
#include "reshard/plan.h"

#define HOLDER_MAX 128 /* a directory name's limit */

/* Receivers created by this process, numbering the default holders. */
static _Atomic unsigned long receivers_made;

/* "receiver-<salt>-<host>-<pid>", and ".<n>" from the process's second
 * receiver on: unique per receiver, since the directory refuses a lease
 * under a name another live lease holds. */
static char *default_holder(uint64_t salt)
{
    unsigned long n = ++receivers_made;
    char host[64] = "";
    char *name = malloc(HOLDER_MAX);
    if (name == NULL)
        return NULL;
    if (gethostname(host, sizeof(host) - 1) != 0)
        host[0] = '\0';
    for (char *c = host; *c != '\0'; c++) {
        int ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
                 (*c >= '0' && *c <= '9') || *c == '.' || *c == '_';
        *c = ok ? *c : '-';
    }
    int len = snprintf(name, HOLDER_MAX, "receiver-%llu-%s-%ld",
                       (unsigned long long)salt, host[0] ? host : "host",
                       (long)getpid());
    if (n > 1 && len > 0 && len < HOLDER_MAX)
        snprintf(name + len, (size_t)(HOLDER_MAX - len), ".%lu", n);
    return name;
}

static void receiver_defaults(rs_receiver_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->backend = "ucx";
    p->discover_timeout_s = 60;
    p->lease_ttl_s = 60;
    p->shadow = 1;
    p->timeout_s = RS_EXEC_DEFAULT_TIMEOUT_S;
    p->coverage_floor = RS_EXEC_DEFAULT_COVERAGE_FLOOR;
    p->verify_digests = 1;
    p->announce_cuts = 1;
    p->nic_gbps = RS_PLAN_DEFAULT_NIC_GBPS;
    p->descriptor_ns = RS_PLAN_DEFAULT_DESCRIPTOR_NS;
    p->group_rank = -1;
    p->group_timeout_s = 60;
    p->stall_s = RS_RECEIVER_DEFAULT_STALL_S;
    p->delta = 1;
    p->delta_budget = RS_RECEIVER_DEFAULT_DELTA_BUDGET;
}

RS__PARAMS_DEFINE(receiver, receiver_defaults, notice_ctx)

/* A receiver never creates a file: directory (a mistyped path fails with
 * "no such directory"), and a server unreachable at start is waited for
 * by discovery, within its deadline. */
rs_status_t rs__receiver_open_dir(rs_receiver_h r, const rs_cancel_t *cancel,
                                  rs_diag_t *diag, rs_dir_h *dir_p)
{
    rs_dir_params_t dp;
    rs_dir_params_init(&dp);
    dp.create = 0;
    dp.connect_later = 1;
    dp.notice = r->params.notice;
    dp.notice_ctx = r->params.notice_ctx;
    dp.cancel = cancel;
    return rs_dir_open_params(r->directory, &dp, diag, dir_p);
}

rs_status_t rs_receiver_create(const rs_receiver_params_t *params_in,
                               rs_capture_h capture, rs_diag_t *diag,
                               rs_receiver_h *receiver_p)
{
    rs_receiver_params_t given; /* the caller's fields over the defaults */
    const rs_receiver_params_t *params = NULL;
    if (params_in != NULL) {
        if (rs__receiver_params_take(params_in, diag, &given) != RS_OK)
            return RS_ERR_INVALID_ARG;
        params = &given;
    }
    if (params == NULL || capture == NULL || receiver_p == NULL ||
        params->directory == NULL || params->model == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: directory, "
                            "model and capture are required");
    /* A write the capture could not tie to a source is a byte the plan
     * would never fill: installing without it is a silent wrong weight. */
    rs_status_t refused = rs__capture_check_attributed(capture, diag);
    if (refused != RS_OK)
        return refused;
    /* Told at create, not at the first pull's connect. */
    if (params->backend != NULL && rs__backend_find(params->backend) == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: backend "
                            "'%s' is unknown (ucx, cma, local, local-mt)",
                            params->backend);
    rs_receiver_h r = calloc(1, sizeof(*r));
    if (r == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    r->params = *params;
    r->cap = capture;
    r->model = strdup(params->model);
    r->directory = strdup(params->directory);
    r->backend = strdup(params->backend ? params->backend : "ucx");
    r->holder = params->holder != NULL ? strdup(params->holder)
                                       : default_holder(params->salt);
    r->announce_as = params->announce_as != NULL ? strdup(params->announce_as)
                                                 : r->holder != NULL
                                                 ? strdup(r->holder) : NULL;
    r->params.announce_as = NULL; /* not borrowed: r->announce_as */
    r->nparams = rs_capture_num_params(capture);
    r->binds = calloc(r->nparams + 1, sizeof(rs__receiver_bind_t));
    rs_status_t st = r->model && r->directory && r->backend && r->holder &&
                     r->announce_as && r->binds
                         ? rs__receiver_open_dir(r, &r->cancel, diag, &r->dir)
                              : rs__diag_set(diag, RS_ERR_NO_MEMORY,
                                             "out of memory");
    if (st == RS_OK)
        st = rs__group_create(params, r->holder, diag, &r->group);
    r->params.group = NULL; /* not borrowed: r->group */
    if (st != RS_OK) {
        rs_receiver_destroy(r);
        return st;
    }
    *receiver_p = r;
    return RS_OK;
}

void rs_receiver_destroy(rs_receiver_h r)
{
    if (r == NULL)
        return;
    rs_receiver_discard(r, &r->slot);
    rs__receiver_drop_cache(r);
    rs__receiver_forget_tables(r);
    rs_dir_close(r->dir);
    rs_dir_close(r->lease_dir);
    for (size_t p = 0; r->binds != NULL && p < r->nparams; p++)
        rs__pages_free(r->binds[p].shadow, (size_t)r->binds[p].nbytes);
    free(r->binds);
    free(r->model);
    free(r->directory);
    free(r->backend);
    free(r->holder);
    free(r->announce_as);
    free(r->table_slot);
    rs__receiver_deltas_free(r);
    rs__replicas_reset(&r->replicas);
    rs__group_destroy(r->group);
    free(r);
}

/* Only host memory is bound (bind refuses the rest), so the executor is
 * always handed RS_MEM_HOST. */
static rs_status_t bind_mem_check(rs_receiver_h r, size_t param,
                                  rs_mem_type_t mem, rs_diag_t *diag)
{
    rs_param_info_t info;
    char who[RS_DIAG_MSG_MAX];
    rs_capture_param(r->cap, param, &info);
    snprintf(who, sizeof(who), "receiver: param '%s'", info.name);
    return rs__mem_check(mem, who, diag);
}

rs_status_t rs_receiver_bind(rs_receiver_h r, size_t param, void *base,
                             uint64_t nbytes, rs_mem_type_t mem,
                             rs_diag_t *diag)
{
    if (r == NULL || param >= r->nparams)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: no param %zu",
                            param);
    if (r->slot.active) /* its staging holds the staged bytes */
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: param %zu "
                            "cannot be bound while version %lld is staged "
                            "(apply or discard it first)", param,
                            (long long)r->slot.version);
    rs_status_t st = bind_mem_check(r, param, mem, diag);
    if (st != RS_OK)
        return st; /* before the shadow copy reads base */
    rs__pages_free(r->binds[param].shadow, (size_t)r->binds[param].nbytes);
    r->binds[param] = (rs__receiver_bind_t){base, nbytes, NULL};
    r->shadow_epoch++; /* a new shadow, holding the bound bytes */
    if (r->params.shadow && nbytes > 0) {
        /* whole pages (huge ones when large): reads land page-aligned */
        r->binds[param].shadow = rs__pages_alloc((size_t)nbytes);
        if (r->binds[param].shadow == NULL) {
            /* unbound: a pull must not fall back to the bound storage */
            r->binds[param] = (rs__receiver_bind_t){NULL, 0, NULL};
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "receiver: staging "
                                "of param %zu", param);
        }
        memcpy(r->binds[param].shadow, base, (size_t)nbytes);
    }
    if (r->exec != NULL)
        return rs_exec_bind(r->exec, param, rs__receiver_bind_target(&r->binds[param]),
                            nbytes, RS_MEM_HOST, diag);
    return RS_OK;
}

rs_exec_h rs_receiver_exec(rs_receiver_h r) { return r->exec; }

rs_plan_h rs_receiver_plan(rs_receiver_h r)
{
    return r != NULL && r->cached ? r->plan : NULL;
}

/* ---- the cut announcement ----------------------------------------------
 * The cut points of the boxes the capture reads (rs_cuts_add_capture),
 * written as reshard.cuts.v1 into the receiver's cuts record of the model,
 * which cut-aligned publishers read before staging a version
 * (docs/cut-aligned.md, "Announcing"). */

/* The capture's cuts as reshard.cuts.v1 text (the caller frees it). */
static rs_status_t cuts_text(rs_capture_h cap, const char *model,
                             rs_diag_t *diag, char **text_p, size_t *len_p)
{
    rs_cuts_h cuts = NULL;
    char *text = NULL;
    size_t len = 0;
    rs_status_t st = rs_cuts_create(diag, &cuts);
    if (st == RS_OK)
        st = rs_cuts_set_model(cuts, model, diag);
    if (st == RS_OK)
        st = rs_cuts_add_capture(cuts, cap, diag);
    FILE *out = st == RS_OK ? open_memstream(&text, &len) : NULL;
    if (st == RS_OK && out == NULL)
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (out != NULL) {
        st = rs_cuts_write_json(cuts, out, diag);
        if (fclose(out) != 0 && st == RS_OK)
            st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    rs_cuts_destroy(cuts);
    if (st != RS_OK) {
        free(text);
        return st;
    }
    *text_p = text;
    *len_p = len;
    return RS_OK;
}

rs_status_t rs_receiver_announce_cuts(rs_receiver_h r, rs_diag_t *diag)
{
    if (r == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: NULL");
    char *text = NULL;
    size_t len = 0;
    rs_status_t st = cuts_text(r->cap, r->model, diag, &text, &len);
    if (st == RS_OK)
        st = rs_dir_put_cuts(r->dir, r->model, r->announce_as, text, len,
                             diag);
    free(text);
    if (st != RS_OK) {
        rs__diag_prefix(diag, "announcing the cuts of '%s' as '%s': ",
                        r->model, r->announce_as);
        return st;
    }
    r->announced = 1;
    return RS_OK;
}

/* announce_cuts: once, before the first discovery; a failure is a notice
 * (the pull goes on without it, the next one tries again). */
void rs__receiver_announce_once(rs_receiver_h r)
{
    rs_diag_t d;
    char line[RS_DIAG_MSG_MAX + 128];
    if (!r->params.announce_cuts || r->announced)
        return;
    rs_diag_clear(&d);
    if (rs_receiver_announce_cuts(r, &d) == RS_OK)
        return;
    snprintf(line, sizeof(line), "receiver %s: %s; cut-aligned publishers "
             "will not cut for it until an announcement succeeds", r->holder,
             d.msg);
    if (r->params.notice != NULL)
        r->params.notice(r->params.notice_ctx, line);
    else
        rs_dir_notice(NULL, "%s", line);
}

void rs_receiver_cancel(rs_receiver_h r)
{
    if (r != NULL)
        rs_cancel_raise(&r->cancel);
}

void rs_receiver_cancel_clear(rs_receiver_h r)
{
    if (r != NULL)
        rs_cancel_clear(&r->cancel);
}
