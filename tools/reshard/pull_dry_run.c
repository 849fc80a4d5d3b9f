/* `reshard pull --dry-run`: what a pull of one version would move (bytes,
 * descriptors, sessions and the bytes of each) and hold (parameters,
 * shadows, staging), from the receiver's dry run: tables read, plan built or
 * reused, nothing allocated or connected, no lease, no byte moved. Text, or one JSON object
 * (docs/formats.md, "pull --dry-run"). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The plan's sessions that a pull would read from, with their bytes. */
static json_t *sessions_json(rs_plan_h plan)
{
    json_t *obj = json_object();
    for (uint32_t k = 0; obj != NULL && k < rs_plan_num_sessions(plan); k++) {
        uint64_t n = rs_plan_session_bytes(plan, k);
        if (n > 0)
            json_object_set_new(obj, rs_plan_session_name(plan, k),
                                json_integer((json_int_t)n));
    }
    return obj;
}

static void set_u64(json_t *o, const char *key, uint64_t v)
{
    json_object_set_new(o, key, json_integer((json_int_t)v));
}

static void print_json(uint64_t rank, const rs_dry_run_t *d, rs_plan_h plan)
{
    json_t *root = json_object();
    json_object_set_new(root, "version", json_integer(d->version));
    set_u64(root, "rank", rank);
    json_object_set_new(root, "dry_run", json_true());
    json_object_set_new(root, "complete", json_boolean(d->complete));
    json_object_set_new(root, "replanned", json_boolean(d->replanned));
    set_u64(root, "bytes", d->bytes);
    set_u64(root, "descriptors", d->descriptors);
    set_u64(root, "sessions", d->sessions);
    json_object_set_new(root, "session_bytes", sessions_json(plan));
    set_u64(root, "tables", d->tables);
    set_u64(root, "shards", d->shards);
    json_object_set_new(root, "discover_s", json_real(d->discover_s));
    json_object_set_new(root, "tables_s", json_real(d->tables_s));
    set_u64(root, "tables_parsed", d->tables_parsed);
    set_u64(root, "tables_reused", d->tables_reused);
    set_u64(root, "table_bytes_read", d->table_bytes_read);
    json_object_set_new(root, "fingerprint_s", json_real(d->fingerprint_s));
    json_object_set_new(root, "plan_s", json_real(d->plan_s));
    json_object_set_new(root, "prepare_s", json_real(d->prepare_s));
    json_object_set_new(root, "total_s", json_real(d->total_s));
    set_u64(root, "param_bytes", d->param_bytes);
    set_u64(root, "shadow_bytes", d->shadow_bytes);
    set_u64(root, "staging_bytes", d->staging_bytes);
    set_u64(root, "staging_unbounded_bytes", d->staging_unbounded);
    set_u64(root, "staging_rounds", d->staging_rounds);
    json_dumpf(root, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    fputc('\n', stdout);
}

static void print_text(uint64_t rank, const rs_dry_run_t *d, rs_plan_h plan)
{
    char size[RS_UNITS_TEXT_MAX];
    printf("reshard pull --dry-run: rank %llu version %lld: would read %s "
           "(%llu bytes) in %llu descriptors from %zu sessions, %s, plan %s\n",
           (unsigned long long)rank, (long long)d->version,
           rs_format_bytes(size, sizeof(size), d->bytes),
           (unsigned long long)d->bytes,
           (unsigned long long)d->descriptors, d->sessions,
           d->replanned ? "planned" : "cached plan",
           d->complete ? "complete" : "INCOMPLETE");
    printf("  %zu tables, %zu shards; discover %.3f s, tables %.3f s, "
           "fingerprint %.3f s, plan %.3f s, prepare %.3f s, total %.3f s\n",
           d->tables, d->shards, d->discover_s, d->tables_s, d->fingerprint_s,
           d->plan_s, d->prepare_s, d->total_s);
    printf("  tables: %u parsed, %u reused (only their digests read), %s "
           "read from the directory\n", d->tables_parsed, d->tables_reused,
           rs_format_bytes(size, sizeof(size), d->table_bytes_read));
    char p[RS_UNITS_TEXT_MAX], sh[RS_UNITS_TEXT_MAX], st[RS_UNITS_TEXT_MAX],
        un[RS_UNITS_TEXT_MAX];
    printf("  would hold: parameters %s, shadows %s, staging %s in %llu "
           "round(s) (%s staged at once)\n",
           rs_format_bytes(p, sizeof(p), d->param_bytes),
           rs_format_bytes(sh, sizeof(sh), d->shadow_bytes),
           rs_format_bytes(st, sizeof(st), d->staging_bytes),
           (unsigned long long)d->staging_rounds,
           rs_format_bytes(un, sizeof(un), d->staging_unbounded));
    for (uint32_t k = 0; k < rs_plan_num_sessions(plan); k++) {
        uint64_t n = rs_plan_session_bytes(plan, k);
        if (n > 0)
            printf("  session %s: %s (%llu bytes)\n",
                   rs_plan_session_name(plan, k),
                   rs_format_bytes(size, sizeof(size), n),
                   (unsigned long long)n);
    }
}

int rs_cli_pull_dry_run(rs_receiver_h recv, int64_t version, uint64_t rank,
                        int json)
{
    rs_dry_run_t d;
    rs_diag_t diag;
    rs_diag_clear(&diag);
    rs_status_t st = rs_receiver_dry_run(recv, version, &diag, &d);
    if (st != RS_OK) {
        fprintf(stderr, "reshard pull: rank %llu: dry run: %s\n",
                (unsigned long long)rank,
                diag.msg[0] ? diag.msg : rs_status_str(st));
        return RS_CLI_USAGE;
    }
    rs_plan_h plan = rs_receiver_plan(recv);
    if (json)
        print_json(rank, &d, plan);
    else
        print_text(rank, &d, plan);
    fflush(stdout);
    if (!d.complete)
        fprintf(stderr, "reshard pull: rank %llu version %lld: dry run: the "
                "plan is incomplete (%zu fallback source(s), sources missing "
                "for some copies); `reshard plan` lists them\n",
                (unsigned long long)rank, (long long)d.version,
                rs_plan_num_fallback(plan));
    return d.complete ? RS_CLI_OK : RS_CLI_INCOMPLETE;
}
