/* Fuzz target for mx.reshard.shard_table.v1 JSON (one table or an array of
 * tables). The input loads into sources that already hold a valid table,
 * which a failed load must leave exactly as it was (all-or-nothing); on
 * success the merged sources are planned against a small fixed capture and
 * every segment must lie inside a published shard and its parameter. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/capture.h"
#include "reshard/plan.h"
#include "reshard/sources.h"

static const char base_table[] =
    "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"base\","
    " \"tensors\": [{\"name\": \"w\", \"dtype\": \"torch.bfloat16\","
    " \"elsize\": 2, \"full_shape\": [8, 4], \"shards\": [{\"agent_name\":"
    " \"base\", \"device_id\": 0, \"addr\": 4096, \"shard_offset\": [0, 0],"
    " \"shape\": [4, 4]}]}]}";

/* Reads tensors "w", "a", "b" and "c" (the names seeds use) with a few op
 * shapes, into params of both dtypes so converts appear too. */
static const char capture_json[] =
    "{\"schema\": \"reshard.capture.v1\","
    " \"params\": {\"p\": {\"shape\": [8, 4], \"dtype\": \"bf16\"},"
    "  \"q\": {\"shape\": [64], \"dtype\": \"f32\"}},"
    " \"copies\": ["
    "  {\"src\": \"w\", \"ops\": [], \"param\": \"p\", \"dest_offset\": 0,"
    "   \"dest_shape\": [8, 4], \"dest_stride\": [4, 1], \"dest_dtype\": \"bf16\"},"
    "  {\"src\": \"a\", \"ops\": [[\"narrow\", 0, 1, 2], [\"t\"]], \"param\": \"q\","
    "   \"dest_offset\": 0, \"dest_shape\": [4, 2], \"dest_stride\": [2, 1],"
    "   \"dest_dtype\": \"f32\"},"
    "  {\"src\": \"b\", \"ops\": [[\"flatten\"]], \"param\": \"q\", \"dest_offset\": 8,"
    "   \"dest_shape\": [16], \"dest_stride\": [1], \"dest_dtype\": \"f32\"},"
    "  {\"src\": \"c\", \"ops\": [[\"slice\", 0, null, null, 2]], \"param\": \"q\","
    "   \"dest_offset\": 24, \"dest_shape\": [4], \"dest_stride\": [1],"
    "   \"dest_dtype\": \"f32\"}],"
    " \"unsupported\": {}, \"unattributed\": 0}";

static rs_capture_h capture;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    rs_diag_t diag;
    if (rs_capture_load_string(capture_json, strlen(capture_json), "fixed",
                               &diag, &capture) != RS_OK) {
        fprintf(stderr, "fuzz_sources: fixed capture: %s\n", diag.msg);
        abort();
    }
    return 0;
}

/* A fingerprint of every shard, to see that a failed load added nothing. */
static uint64_t fingerprint(rs_sources_h s)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < rs_sources_num_shards(s); i++) {
        rs_shard_desc_t d;
        rs_sources_shard(s, i, &d);
        h = (h ^ d.addr) * 1099511628211ull;
        h = (h ^ (uint64_t)d.ndim) * 1099511628211ull;
        for (const char *c = d.tensor; *c; c++)
            h = (h ^ (uint8_t)*c) * 1099511628211ull;
    }
    return (h ^ rs_sources_num_tables(s)) * 1099511628211ull ^
           rs_sources_num_tensors(s);
}

static uint64_t shard_bytes(const rs_shard_desc_t *d)
{
    uint64_t n = d->elsize;
    for (int k = 0; k < d->ndim; k++)
        n *= (uint64_t)d->shape[k];
    return n;
}

/* A segment reads inside one shard of its session (or a run of shards
 * back to back) and writes inside its target of dst_limit bytes. */
static void check_segment(rs_plan_h plan, rs_sources_h s,
                          const rs_segment_t *seg, uint64_t dst_limit)
{
    if (seg->nbytes == 0 || seg->dst_byte > dst_limit ||
        seg->nbytes > dst_limit - seg->dst_byte)
        abort();
    const char *sess = rs_plan_session_name(plan, seg->session);
    uint64_t at = seg->src_addr, end = at + seg->nbytes;
    if (sess == NULL || end < at)
        abort();
    while (at < end) {
        uint64_t next = at;
        for (size_t k = 0; k < rs_sources_num_shards(s); k++) {
            rs_shard_desc_t d;
            rs_sources_shard(s, k, &d);
            uint64_t sz = shard_bytes(&d);
            if (strcmp(d.session, sess) == 0 && d.addr <= at &&
                at - d.addr < sz && d.addr + sz > next)
                next = d.addr + sz;
        }
        if (next == at)
            abort(); /* reads bytes no shard publishes */
        at = next;
    }
}

static void check_plan(rs_plan_h plan, rs_sources_h s)
{
    size_t n;
    const rs_segment_t *seg = rs_plan_segments(plan, &n);
    for (size_t i = 0; i < n; i++) {
        rs_param_info_t p;
        if (seg[i].param >= rs_capture_num_params(capture))
            abort();
        rs_capture_param(capture, seg[i].param, &p);
        check_segment(plan, s, &seg[i], p.nbytes);
    }
    const rs_convert_t *cv = rs_plan_converts(plan, &n);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < cv[i].nsegments; j++)
            check_segment(plan, s, &cv[i].segments[j], cv[i].staging_bytes);
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &n);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < fp[i].nsegments; j++)
            check_segment(plan, s, &fp[i].segments[j], fp[i].staging_bytes);
}

static void plan_and_check(rs_sources_h s)
{
    rs_plan_params_t params;
    rs_plan_params_init(&params);
    params.split_bytes = 16; /* cut replicated cells, a path seeds reach */
    rs_plan_h plan = NULL;
    rs_diag_t diag;
    rs_status_t st = rs_plan_build(capture, s, &params, &diag, &plan);
    if (st != RS_OK) {
        if (plan != NULL || diag.msg[0] == '\0')
            abort();
        return;
    }
    check_plan(plan, s);
    rs_plan_stats_t stats;
    rs_plan_stats(plan, &stats);
    FILE *null = fopen("/dev/null", "w");
    if (null != NULL) {
        rs_plan_write_json(plan, null, NULL);
        rs_plan_write_summary(plan, null, NULL);
        fclose(null);
    }
    rs_plan_destroy(plan);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rs_sources_h s = NULL;
    rs_diag_t diag;
    if (rs_sources_create(&s) != RS_OK)
        abort();
    if (rs_sources_load_string(s, base_table, strlen(base_table), "base",
                               &diag) != RS_OK)
        abort();
    uint64_t before = fingerprint(s);
    rs_diag_clear(&diag);
    rs_status_t st = rs_sources_load_string(s, (const char *)data, size,
                                            "fuzz.json", &diag);
    if (st != RS_OK) {
        if (diag.msg[0] == '\0' || fingerprint(s) != before)
            abort();
    }
    for (size_t i = 0; i < rs_sources_num_tables(s); i++) {
        rs_table_info_t t;
        rs_sources_table(s, i, &t);
        if (t.agent_name == NULL)
            abort();
    }
    plan_and_check(s);
    rs_sources_destroy(s);
    return 0;
}
