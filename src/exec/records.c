/* The JSON records of a run: the stage record (reshard.stage.v2) and the
 * coverage record (reshard.coverage.v1). Small, so built with jansson. */
#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "exec/exec_impl.h"

#define RS_RECORD_LIST_MAX 8

static const char *const stage_names[RS_STAGE_COUNT_] = {
    [RS_STAGE_PREPARE] = "prepare",     [RS_STAGE_DESCRIPTORS] = "descriptors",
    [RS_STAGE_WIRE] = "wire",           [RS_STAGE_REPLAY] = "replay",
    [RS_STAGE_CONVERT] = "convert",     [RS_STAGE_VERIFY] = "verify",
    [RS_STAGE_INSTALL] = "install",
};

static rs_status_t dump(json_t *root, FILE *out, rs_diag_t *diag)
{
    if (root == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    int rc = json_dumpf(root, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (rc != 0 || fputc('\n', out) == EOF)
        return rs__diag_set(diag, RS_ERR_IO, "cannot write the record");
    return RS_OK;
}

rs_status_t rs_exec_write_stage_json(rs_exec_h x, double plan_seconds,
                                     FILE *out, rs_diag_t *diag)
{
    size_t nfp, ncv;
    json_t *root = json_object(), *stages = json_object();
    rs_plan_full_pulls(x->plan, &nfp);
    rs_plan_converts(x->plan, &ncv);
    json_object_set_new(root, "schema", json_string("reshard.stage.v2"));
    if (plan_seconds >= 0)
        json_object_set_new(stages, "plan", json_real(plan_seconds));
    for (int s = 0; s < RS_STAGE_COUNT_; s++) {
        if (x->stage[s] >= 0)
            json_object_set_new(stages, stage_names[s], json_real(x->stage[s]));
    }
    json_object_set_new(root, "stages_s", stages);
    json_object_set_new(root, "bytes", json_integer((json_int_t)x->stats.bytes));
    json_object_set_new(root, "descriptors",
                        json_integer((json_int_t)x->stats.descriptors));
    json_object_set_new(root, "full_pulls", json_integer((json_int_t)nfp));
    json_object_set_new(root, "converts", json_integer((json_int_t)ncv));
    json_object_set_new(root, "fallback",
                        json_integer((json_int_t)rs_plan_num_fallback(x->plan)));
    json_object_set_new(root, "shards_verified",
                        json_integer((json_int_t)x->stats.shards_verified));
    if (x->stage[RS_STAGE_WIRE] > 0)
        json_object_set_new(root, "wire_GB_per_s",
                            json_real((double)x->stats.bytes /
                                      x->stage[RS_STAGE_WIRE] / 1e9));
    json_object_set_new(root, "ok", json_boolean(x->failure == NULL));
    if (x->failure != NULL)
        json_object_set_new(root, "failure", json_string(x->failure));
    return dump(root, out, diag);
}

/* A fallback reason without its copy prefix and with numbers folded, so
 * that sources refused for the same cause group together. */
static void cause_of(const char *reason, char *out, size_t n)
{
    const char *p = reason;
    if (strncmp(p, "copy ", 5) == 0) {
        const char *q = strstr(p, "': ");
        if (q != NULL)
            p = q + 3;
    }
    size_t k = 0;
    for (; *p && k + 2 < n; p++) {
        if (isdigit((unsigned char)*p)) {
            if (k == 0 || out[k - 1] != 'N')
                out[k++] = 'N';
            while (isdigit((unsigned char)p[1]))
                p++;
        } else {
            out[k++] = *p;
        }
    }
    out[k] = '\0';
}

static json_t *fallback_causes(rs_plan_h plan)
{
    json_t *causes = json_object();
    char cause[512];
    for (size_t i = 0; i < rs_plan_num_fallback(plan); i++) {
        const char *src, *reason;
        rs_plan_fallback(plan, i, &src, &reason);
        cause_of(reason, cause, sizeof(cause));
        json_t *c = json_object_get(causes, cause);
        json_int_t n = c != NULL ? json_integer_value(c) : 0;
        json_object_set_new(causes, cause, json_integer(n + 1));
    }
    return causes;
}

static json_t *param_names(rs_exec_h x, unsigned char state)
{
    json_t *a = json_array();
    for (size_t p = 0; p < x->nparams && json_array_size(a) < RS_RECORD_LIST_MAX; p++) {
        if (x->param_state[p] == state) {
            rs_param_info_t info;
            rs_capture_param(x->cap, p, &info);
            json_array_append_new(a, json_string(info.name));
        }
    }
    return a;
}

static json_t *uncovered_list(rs_plan_h plan)
{
    size_t n;
    const rs_uncovered_t *u = rs_plan_uncovered(plan, &n);
    json_t *a = json_array();
    for (size_t i = 0; i < n && i < RS_RECORD_LIST_MAX; i++) {
        json_array_append_new(a, json_pack("{s:I, s:s, s:s, s:I}", "copy",
                                           (json_int_t)u[i].copy, "src",
                                           u[i].src, "param", u[i].param,
                                           "missing_elements",
                                           (json_int_t)u[i].missing_elements));
    }
    return a;
}

rs_status_t rs_exec_write_coverage_json(rs_exec_h x, FILE *out, rs_diag_t *diag)
{
    rs_coverage_t c;
    size_t nunc;
    rs_status_t st = rs_exec_coverage(x, diag, &c);
    if (st != RS_OK)
        return st;
    rs_plan_uncovered(x->plan, &nunc);
    json_t *root = json_object();
    json_object_set_new(root, "schema", json_string("reshard.coverage.v1"));
    json_object_set_new(root, "params_total", json_integer((json_int_t)c.params_total));
    json_object_set_new(root, "params_installed", json_integer((json_int_t)c.params_full));
    json_object_set_new(root, "params_partial", json_integer((json_int_t)c.params_partial));
    json_object_set_new(root, "params_missing", json_integer((json_int_t)c.params_missing));
    json_object_set_new(root, "bytes_total", json_integer((json_int_t)c.bytes_total));
    json_object_set_new(root, "bytes_covered", json_integer((json_int_t)c.bytes_covered));
    json_object_set_new(root, "bytes_multi_written", json_integer((json_int_t)c.bytes_multi));
    json_object_set_new(root, "percent", json_real(c.fraction * 100.0));
    json_object_set_new(root, "missing_params", param_names(x, 0));
    json_object_set_new(root, "partial_params", param_names(x, 1));
    json_object_set_new(root, "uncovered_count", json_integer((json_int_t)nunc));
    json_object_set_new(root, "uncovered_copies", uncovered_list(x->plan));
    json_object_set_new(root, "fallback_causes", fallback_causes(x->plan));
    return dump(root, out, diag);
}
