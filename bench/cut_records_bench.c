/* What a cut-aligned publisher pays per version for the receivers' cuts
 * records, before and after generations: every rank of an inference
 * layout announces its record (one capture per rank, as receivers do)
 * into a file: directory, then one publisher's per-version work is
 * measured three ways in the same run: reading and parsing every record
 * (the baseline: what staging did before generations), listing the
 * generations with nothing changed, and listing plus reading and parsing
 * the one record that changed. Bytes are counted by the directory handle;
 * times are ratios against the baseline.
 * Usage: cut_records_bench [SOURCE_DIR [CONFIG [LAYOUT [URL]]]]
 * (defaults: ., deepseek-v3.json, vllm:tp=16, a temporary file: dir). */
#define BENCH_NAME "cut_records_bench"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dir/dir_impl.h"
#include "reshard/reshard.h"
#include "reshard_layout/layout.h"
#include "bench_util.h"

#define MODEL "bench-model"
#define ROUNDS_LIST 200

/* Rank r's record as a receiver announces it. */
static char *rank_record(rs_model_h m, const rs_layout_t *l, int64_t r,
                         size_t *len_p)
{
    rs_capture_h cap = NULL;
    rs_cuts_h cuts = NULL;
    rs_diag_t d;
    uint64_t padding = 0;
    char *text = NULL;
    rs_diag_clear(&d);
    check(rs_layout_capture(m, l, r, &d, &cap, &padding), &d, "capture");
    check(rs_cuts_create(&d, &cuts), &d, "rs_cuts_create");
    check(rs_cuts_set_model(cuts, MODEL, &d), &d, "rs_cuts_set_model");
    check(rs_cuts_add_capture(cuts, cap, &d), &d, "rs_cuts_add_capture");
    FILE *f = open_memstream(&text, len_p);
    check(f ? rs_cuts_write_json(cuts, f, &d) : RS_ERR_NO_MEMORY, &d,
          "rs_cuts_write_json");
    fclose(f);
    rs_cuts_destroy(cuts);
    rs_capture_destroy(cap);
    return text;
}

/* The baseline: every record read and parsed, as staging did before. */
static double read_all(rs_dir_h dir, uint64_t *bytes_p)
{
    rs_dir_cuts_record_t *recs = NULL;
    rs_cuts_h one = NULL;
    size_t n = 0;
    rs_diag_t d;
    rs_diag_clear(&d);
    uint64_t r0, b0, r1, b1;
    rs__dir_cuts_reads(dir, &r0, &b0);
    double t0 = rs_clock_seconds();
    check(rs_dir_read_cuts(dir, MODEL, &d, &recs, &n), &d, "read_cuts");
    for (size_t i = 0; i < n; i++) {
        check(rs_cuts_read_json(recs[i].json, recs[i].len, "record", &d,
                                &one), &d, "rs_cuts_read_json");
        rs_cuts_destroy(one);
    }
    double t = rs_clock_seconds() - t0;
    rs_dir_cuts_free(recs, n);
    rs__dir_cuts_reads(dir, &r1, &b1);
    *bytes_p = b1 - b0;
    return t;
}

/* Nothing changed: the listing only. */
static double list_only(rs_dir_h dir)
{
    rs_dir_cuts_stamp_t *s = NULL;
    size_t n = 0;
    rs_diag_t d;
    rs_diag_clear(&d);
    double t0 = rs_clock_seconds();
    for (int k = 0; k < ROUNDS_LIST; k++) {
        check(rs_dir_list_cuts(dir, MODEL, &d, &s, &n), &d, "list_cuts");
        free(s);
    }
    return (rs_clock_seconds() - t0) / ROUNDS_LIST;
}

/* One record changed: the listing, then that record read and parsed. */
static double one_changed(rs_dir_h dir, const char *holder, uint64_t *bytes_p)
{
    rs_dir_cuts_stamp_t *s = NULL;
    rs_dir_cuts_record_t *recs = NULL;
    rs_cuts_h one = NULL;
    size_t n = 0, nr = 0;
    rs_diag_t d;
    rs_diag_clear(&d);
    uint64_t r0, b0, r1, b1;
    rs__dir_cuts_reads(dir, &r0, &b0);
    double t0 = rs_clock_seconds();
    check(rs_dir_list_cuts(dir, MODEL, &d, &s, &n), &d, "list_cuts");
    check(rs_dir_read_cuts_of(dir, MODEL, &holder, 1, &d, &recs, &nr), &d,
          "read_cuts_of");
    check(rs_cuts_read_json(recs[0].json, recs[0].len, "record", &d, &one),
          &d, "rs_cuts_read_json");
    double t = rs_clock_seconds() - t0;
    rs_cuts_destroy(one);
    rs_dir_cuts_free(recs, nr);
    free(s);
    rs__dir_cuts_reads(dir, &r1, &b1);
    *bytes_p = b1 - b0;
    return t;
}

int main(int argc, char **argv)
{
    const char *src = argc > 1 ? argv[1] : ".";
    const char *config = argc > 2 ? argv[2] : "deepseek-v3.json";
    const char *spec = argc > 3 ? argv[3] : "vllm:tp=16";
    char path[4096], tmp[] = "/tmp/rs-cut-records-bench-XXXXXX", url[256];
    rs_model_h m;
    rs_layout_t l;
    rs_dir_h dir;
    rs_diag_t d;
    rs_diag_clear(&d);
    snprintf(path, sizeof(path), "%s/examples/models/%s", src, config);
    check(rs_model_load(path, &d, &m), &d, path);
    check(rs_layout_parse(spec, &d, &l), &d, spec);
    check(rs_layout_check(&l, m, &d), &d, spec);
    if (argc > 4) {
        snprintf(url, sizeof(url), "%s", argv[4]);
    } else {
        check(mkdtemp(tmp) ? RS_OK : RS_ERR_IO, &d, "mkdtemp");
        snprintf(url, sizeof(url), "file:%s/dir", tmp);
    }
    check(rs_dir_open(url, &d, &dir), &d, url);
    size_t min = SIZE_MAX, max = 0, total = 0;
    double put_s = 0;
    for (int64_t r = 0; r < l.world; r++) {
        size_t len = 0;
        char holder[64], *rec = rank_record(m, &l, r, &len);
        snprintf(holder, sizeof(holder), "rank%lld", (long long)r);
        double t0 = rs_clock_seconds();
        check(rs_dir_put_cuts(dir, MODEL, holder, rec, len, &d), &d, "put");
        put_s += rs_clock_seconds() - t0;
        if (r == 0) { /* announcing the same bytes again writes nothing */
            t0 = rs_clock_seconds();
            check(rs_dir_put_cuts(dir, MODEL, holder, rec, len, &d), &d,
                  "put again");
            printf("  re-announcing rank 0's record unchanged: %.4f s\n",
                   rs_clock_seconds() - t0);
        }
        free(rec);
        min = len < min ? len : min;
        max = len > max ? len : max;
        total += len;
    }
    printf("%s %s: %lld records, %zu to %zu bytes (mean %zu, total %zu), "
           "written in %.3f s\n", config, spec, (long long)l.world, min, max,
           total / (size_t)l.world, total, put_s);
    uint64_t all_bytes = 0, one_bytes = 0;
    double base = read_all(dir, &all_bytes);
    double listed = list_only(dir);
    double changed = one_changed(dir, "rank1", &one_bytes);
    printf("  per publisher and version:\n");
    printf("    %-36s %10llu bytes read  %.4f s (1.00x)\n",
           "read and parse every record", (unsigned long long)all_bytes,
           base);
    printf("    %-36s %10d bytes read  %.6f s (%.5fx)\n",
           "list generations, nothing changed", 0, listed, listed / base);
    printf("    %-36s %10llu bytes read  %.4f s (%.3fx)\n",
           "list, one record changed", (unsigned long long)one_bytes,
           changed, changed / base);
    rs_dir_close(dir);
    rs_model_destroy(m);
    if (argc <= 4) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "cut_records_bench: could not remove %s\n", tmp);
    }
    return 0;
}
