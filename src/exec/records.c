/* The JSON records of a run: the stage record (reshard.stage.v2, written
 * from the public rs_exec_stages_t figures) and the coverage record
 * (reshard.coverage.v1). Small, so built with jansson. */
#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "exec/delta_read.h"
#include "exec/exec_impl.h"

#define RS_RECORD_LIST_MAX 8

static rs_status_t dump(json_t *root, unsigned flags, FILE *out,
                        rs_diag_t *diag)
{
    if (root == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    int compact = (flags & RS_RECORD_COMPACT) != 0;
    int rc = json_dumpf(root, out, (compact ? JSON_COMPACT : JSON_INDENT(2)) |
                                       JSON_PRESERVE_ORDER);
    json_decref(root);
    if (rc != 0 || (!compact && fputc('\n', out) == EOF))
        return rs__diag_set(diag, RS_ERR_IO, "cannot write the record");
    return RS_OK;
}

void rs_exec_stages(rs_exec_h x, rs_exec_stages_t *s)
{
    size_t nfp, ncv;
    rs_plan_staged_reads(x->plan, &nfp);
    rs_plan_converts(x->plan, &ncv);
    *s = (rs_exec_stages_t){
        .plan_s = -1,
        .prepare_s = x->stage[RS_STAGE_PREPARE],
        .descriptors_s = x->stage[RS_STAGE_DESCRIPTORS],
        .wire_s = x->stage[RS_STAGE_WIRE],
        .replay_s = x->stage[RS_STAGE_REPLAY],
        .convert_s = x->stage[RS_STAGE_CONVERT],
        .verify_s = x->stage[RS_STAGE_VERIFY],
        .install_s = x->stage[RS_STAGE_INSTALL],
        .bytes = x->stats.bytes,
        .descriptors = x->stats.descriptors,
        .full_pulls = nfp,
        .converts = ncv,
        .fallback = rs_plan_num_fallback(x->plan),
        .shards_verified = x->stats.shards_verified,
        .ok = x->failure == NULL,
        .failure = x->failure,
        .run_s = x->run_s,
        .waves = x->run_waves,
        .threads = x->run_threads,
        .staging_bytes = x->prepared ? (uint64_t)x->staging_len +
                                           x->verify_buf_len : 0,
        .staging_unbounded = x->prepared ? x->layout.need.unbounded : 0,
        .staging_rounds = x->prepared ? x->layout.need.rounds : 0,
    };
}

/* stages_s: the stages that ran, in the order they run. */
static json_t *stage_times(const rs_exec_stages_t *s)
{
    const struct { const char *name; double secs; } t[] = {
        {"plan", s->plan_s},       {"prepare", s->prepare_s},
        {"descriptors", s->descriptors_s}, {"wire", s->wire_s},
        {"replay", s->replay_s},   {"convert", s->convert_s},
        {"verify", s->verify_s},   {"install", s->install_s},
    };
    json_t *stages = json_object();
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        if (t[i].secs >= 0)
            json_object_set_new(stages, t[i].name, json_real(t[i].secs));
    }
    return stages;
}

/* The record's `delta` object: what the run's reads were, when its
 * transport reads deltas (docs/delta.md, "Receivers"). */
static json_t *delta_object(const rs__delta_stats_t *d)
{
    uint64_t wire = d->delta_bytes + d->whole_bytes;
    return json_pack("{sI,sI,sI,sI,sI,sI,sI,sI,sI}",
                     "runs", (json_int_t)d->delta_runs,
                     "bytes", (json_int_t)d->delta_bytes,
                     "full_bytes", (json_int_t)d->delta_full,
                     "whole_runs", (json_int_t)d->whole_runs,
                     "whole_bytes", (json_int_t)d->whole_bytes,
                     "refused", (json_int_t)d->refused,
                     "held_bytes", (json_int_t)d->held_bytes,
                     "in_place_bytes", (json_int_t)d->in_place_bytes,
                     "wire_bytes", (json_int_t)wire);
}

/* The stage record of s, with `delta` (NULL: none). */
static rs_status_t write_record(const rs_exec_stages_t *s,
                                const rs__delta_stats_t *delta,
                                unsigned flags, FILE *out, rs_diag_t *diag)
{
    json_t *root = json_object();
    json_object_set_new(root, "schema", json_string("reshard.stage.v2"));
    json_object_set_new(root, "stages_s", stage_times(s));
    json_object_set_new(root, "bytes", json_integer((json_int_t)s->bytes));
    json_object_set_new(root, "descriptors",
                        json_integer((json_int_t)s->descriptors));
    json_object_set_new(root, "full_pulls",
                        json_integer((json_int_t)s->full_pulls));
    json_object_set_new(root, "converts",
                        json_integer((json_int_t)s->converts));
    json_object_set_new(root, "fallback",
                        json_integer((json_int_t)s->fallback));
    json_object_set_new(root, "shards_verified",
                        json_integer((json_int_t)s->shards_verified));
    if (s->wire_s > 0)
        json_object_set_new(root, "wire_GB_per_s",
                            json_real((double)s->bytes / s->wire_s / 1e9));
    json_object_set_new(root, "ok", json_boolean(s->ok));
    if (!s->ok)
        json_object_set_new(root, "failure", json_string(s->failure != NULL
                                                             ? s->failure
                                                             : "unknown"));
    /* added after the first keys of v2, which readers may expect in order */
    if (s->run_s >= 0)
        json_object_set_new(root, "run_s", json_real(s->run_s));
    json_object_set_new(root, "waves", json_integer((json_int_t)s->waves));
    json_object_set_new(root, "threads", json_integer((json_int_t)s->threads));
    json_object_set_new(root, "staging_bytes",
                        json_integer((json_int_t)s->staging_bytes));
    json_object_set_new(root, "staging_unbounded_bytes",
                        json_integer((json_int_t)s->staging_unbounded));
    json_object_set_new(root, "staging_rounds",
                        json_integer((json_int_t)s->staging_rounds));
    if (delta != NULL) /* added after the keys above: older readers skip it */
        json_object_set_new(root, "delta", delta_object(delta));
    return dump(root, flags, out, diag);
}

rs_status_t rs_exec_write_stages(const rs_exec_stages_t *s, unsigned flags,
                                 FILE *out, rs_diag_t *diag)
{
    return write_record(s, NULL, flags, out, diag);
}

rs_status_t rs_exec_write_stage_record(rs_exec_h x, double plan_seconds,
                                       unsigned flags, FILE *out,
                                       rs_diag_t *diag)
{
    rs_exec_stages_t s;
    rs__delta_stats_t d;
    int deltas = x->t != NULL && rs__delta_reads_is(x->t);
    rs_exec_stages(x, &s);
    s.plan_s = plan_seconds;
    if (deltas)
        rs__delta_reads_stats(x->t, &d);
    return write_record(&s, deltas ? &d : NULL, flags, out, diag);
}

rs_status_t rs_exec_write_stage_json(rs_exec_h x, double plan_seconds,
                                     FILE *out, rs_diag_t *diag)
{
    return rs_exec_write_stage_record(x, plan_seconds, 0, out, diag);
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
    return rs_exec_write_coverage_record(x, 0, out, diag);
}

rs_status_t rs_exec_write_coverage_record(rs_exec_h x, unsigned flags,
                                          FILE *out, rs_diag_t *diag)
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
    return dump(root, flags, out, diag);
}
