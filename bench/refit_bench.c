/* The receiver's per-pull control path (discover, tables, fingerprint, plan
 * or reuse, prepare: everything but the wire), timed with rs_receiver_dry_run
 * for one inference rank against every trainer rank's table in a file:
 * directory, in both entry layouts: split entries as publishers write them
 * (a geometry document per rank, written once, and each version's digests
 * and step), and whole tables (the earlier layout, which every pull reads
 * and parses). Cold is a fresh receiver's first dry run (plan built), warm
 * its later ones (a new version: same geometry, new digests, cached plan).
 * The baseline is parsing the same tables (rs_sources_load_string), which a
 * cold pull must do; a warm pull of split entries reuses its parse. Each
 * figure is the best of a few runs, chosen and compared by process CPU
 * time (the machine may be shared), with the least wall time of those
 * runs beside it; every figure is also printed as a ratio to the baseline
 * of the same run.
 *
 * The bench plans bf16 weights: a config with an FP8 quantization_config
 * is loaded without it (the trainers publish bf16, and receivers that
 * quantize stage a bf16 copy of every weight, which a dry run allocates).
 *
 * usage: refit_bench [CONFIG.json TRAIN INFER [RANK]]
 * default: examples/models/kimi-k2.json megatron:tp=8,pp=16,ep=16
 *          vllm:tp=8,ep=8,dp=16 0; a smoke run:
 *   refit_bench examples/models/tiny-moe.json megatron:tp=2,ep=2 vllm:tp=2 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "dir/split.h"
#include "refit/publisher_impl.h"
#include "reshard_layout/layout.h"
#include "reshard/reshard.h"

#define BENCH_NAME "refit_bench"
#include "bench_util.h"

#define MODEL_SPLIT "bench"       /* split entries, as publishers write */
#define MODEL_WHOLE "bench-whole" /* whole tables: the earlier layout */
#define REPEATS 5 /* best of: the machine may be shared */

typedef struct bench {
    const char *config, *train_spec, *infer_spec;
    int64_t rank;
    rs_model_h model;
    rs_layout_t train, infer;
    char dir[256], url[300], config_bf16[300];
    char **tables; /* version 1's table per trainer rank */
    size_t *lens;
    uint64_t table_bytes;
    /* publishing split entries: geometry documents written per version,
     * their bytes, and the bytes of the versions' insertions */
    uint64_t docs_written[3], doc_bytes[3], insert_bytes[3];
} bench_t;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "refit_bench: out of memory\n");
        exit(1);
    }
    return p;
}

/* The layout's table with what a publisher adds per version: a digest per
 * shard (its own value each version), the step, a transport blob. */
static char *versioned_table(const char *plain, size_t len, int64_t rank,
                             int64_t version, size_t *len_p)
{
    static const char shard_key[] = "{\"agent_name\": ";
    static const char step_key[] = "\"publisher_step\": 0";
    size_t nshards = 0;
    for (const char *p = plain; (p = strstr(p, shard_key)) != NULL; p++)
        nshards++;
    char *out = xmalloc(len + nshards * 48 + 128), *w = out;
    const char *p = plain;
    uint64_t k = 0;
    for (;;) {
        const char *step = strstr(p, step_key), *shard = strstr(p, shard_key);
        const char *next = step != NULL && (shard == NULL || step < shard)
                               ? step : shard;
        if (next == NULL)
            break;
        memcpy(w, p, (size_t)(next - p));
        w += next - p;
        if (next == step) {
            w += sprintf(w, "\"publisher_step\": %lld, \"agent_meta_b64\": "
                         "\"dHJhbnNwb3J0LWJsb2I=\"", (long long)version);
            p = next + sizeof(step_key) - 1;
        } else {
            char digest[RS_DIGEST_STR_LEN + 1];
            uint64_t seed = ((uint64_t)version << 48) ^
                            ((uint64_t)rank << 32) ^ k++;
            rs_digest_format(rs_digest(&seed, sizeof(seed)), digest);
            w += sprintf(w, "{\"digest\": \"%s\", \"agent_name\": ", digest);
            p = next + sizeof(shard_key) - 1;
        }
    }
    size_t rest = len - (size_t)(p - plain);
    memcpy(w, p, rest);
    w += rest;
    *w = '\0';
    *len_p = (size_t)(w - out);
    return out;
}

static char *plain_table(bench_t *b, int64_t rank, size_t *len_p)
{
    char *text = NULL;
    size_t len = 0;
    rs_diag_t diag;
    rs_diag_clear(&diag);
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        exit(1);
    rs_status_t st = rs_layout_write_table(b->model, &b->train, rank, f,
                                           &diag);
    fclose(f);
    check(st, &diag, "rs_layout_write_table");
    *len_p = len;
    return text;
}

/* One rank's version-v table as a publisher publishes it: split. */
static void publish_split(bench_t *b, rs_dir_h dir, int64_t v, int64_t r,
                          const char *table, size_t len)
{
    rs_diag_t diag;
    char *doc, *ins;
    size_t doc_len, ins_len;
    int written = 0;
    rs_diag_clear(&diag);
    check(rs__publisher_split(table, len, &doc, &doc_len, &ins, &ins_len,
                              &diag), &diag, "rs__publisher_split");
    check(rs__dir_publish_split(dir, MODEL_SPLIT, v, r, "default",
                                rs_digest(doc, doc_len), doc, doc_len, ins,
                                ins_len, &diag, &written),
          &diag, "rs__dir_publish_split");
    b->docs_written[v] += (uint64_t)written;
    b->doc_bytes[v] += written ? doc_len : 0;
    b->insert_bytes[v] += ins_len;
    free(doc);
    free(ins);
}

/* Writes versions 1 and 2 (same topology, new digests) of every trainer
 * rank's table in both layouts; keeps version 1's for the parse
 * baseline. */
static void publish_versions(bench_t *b)
{
    rs_dir_h dir;
    rs_diag_t diag;
    rs_diag_clear(&diag);
    check(rs_dir_open(b->url, &diag, &dir), &diag, "rs_dir_open");
    b->tables = xmalloc((size_t)b->train.world * sizeof(char *));
    b->lens = xmalloc((size_t)b->train.world * sizeof(size_t));
    for (int64_t v = 1; v <= 2; v++) {
        check(rs_dir_create_version(dir, MODEL_SPLIT, v, b->train.world,
                                    &diag), &diag, "rs_dir_create_version");
        check(rs_dir_create_version(dir, MODEL_WHOLE, v, b->train.world,
                                    &diag), &diag, "rs_dir_create_version");
    }
    for (int64_t r = 0; r < b->train.world; r++) {
        size_t plen, len2;
        char *plain = plain_table(b, r, &plen);
        b->tables[r] = versioned_table(plain, plen, r, 1, &b->lens[r]);
        char *t2 = versioned_table(plain, plen, r, 2, &len2);
        b->table_bytes += b->lens[r];
        check(rs_dir_publish(dir, MODEL_WHOLE, 1, r, b->tables[r], b->lens[r],
                             &diag), &diag, "rs_dir_publish v1");
        check(rs_dir_publish(dir, MODEL_WHOLE, 2, r, t2, len2, &diag), &diag,
              "rs_dir_publish v2");
        publish_split(b, dir, 1, r, b->tables[r], b->lens[r]);
        publish_split(b, dir, 2, r, t2, len2);
        free(plain);
        free(t2);
    }
    rs_dir_close(dir);
}

/* Process CPU time: the receiver runs no thread of its own in a dry run,
 * so this is the dry run's own work, less disturbed than the wall clock
 * by whatever else the machine runs. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct sample {
    double wall, cpu;
    double wall_min; /* kept: the least wall time of all the samples */
    rs_dry_run_t d;  /* dry runs only */
} sample_t;

/* The sample of least CPU time, and the least wall time of any sample
 * (the wall clock of a shared machine is what the other work leaves). */
static void keep_best(sample_t *best, const sample_t *x, int first)
{
    double wall_min = first || x->wall < best->wall_min ? x->wall
                                                        : best->wall_min;
    if (first || x->cpu < best->cpu)
        *best = *x;
    best->wall_min = wall_min;
}

/* Reading (and digest-checking) every slot's entries, as a pull's tables
 * step does before it parses or reuses: the part of that step the parse
 * baseline does not cover. */
static sample_t read_once(const bench_t *b, const char *model,
                          int64_t version)
{
    rs_dir_h dir;
    rs_diag_t diag;
    sample_t x;
    memset(&x, 0, sizeof(x));
    rs_diag_clear(&diag);
    check(rs_dir_open(b->url, &diag, &dir), &diag, "rs_dir_open");
    double t0 = rs_clock_seconds(), c0 = cpu_s();
    for (int64_t r = 0; r < b->train.world; r++) {
        rs_dir_entry_t *e;
        size_t n;
        rs__dir_split_t *sp;
        check(rs__dir_read_parts(dir, model, version, r, &diag, &e, &sp, &n),
              &diag, "rs__dir_read_parts");
        rs_dir_entries_free(e, n);
        free(sp);
    }
    x.wall = rs_clock_seconds() - t0;
    x.cpu = cpu_s() - c0;
    rs_dir_close(dir);
    return x;
}

/* One parse of version 1's tables into one sources. */
static sample_t parse_once(const bench_t *b, size_t *shards_p)
{
    rs_sources_h s;
    rs_diag_t diag;
    sample_t x;
    memset(&x, 0, sizeof(x));
    rs_diag_clear(&diag);
    check(rs_sources_create(&s), &diag, "rs_sources_create");
    double t0 = rs_clock_seconds(), c0 = cpu_s();
    for (int64_t r = 0; r < b->train.world; r++)
        check(rs_sources_load_string(s, b->tables[r], b->lens[r], "table",
                                     &diag), &diag, "load");
    x.wall = rs_clock_seconds() - t0;
    x.cpu = cpu_s() - c0;
    *shards_p = rs_sources_num_shards(s);
    rs_sources_destroy(s);
    return x;
}

/* Every parameter bound to address space that is reserved, never touched:
 * a dry run prepares descriptors into it without writing a byte. */
static void *bind_all(rs_receiver_h recv, rs_capture_h cap, size_t *len_p)
{
    uint64_t total = 0;
    size_t n = rs_capture_num_params(cap);
    for (size_t p = 0; p < n; p++) {
        rs_param_info_t info;
        rs_capture_param(cap, p, &info);
        total += (info.nbytes + 63) & ~(uint64_t)63;
    }
    unsigned char *base = mmap(NULL, total ? total : 1, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                               -1, 0);
    if (base == MAP_FAILED) {
        perror("refit_bench: mmap");
        exit(1);
    }
    uint64_t at = 0;
    for (size_t p = 0; p < n; p++) {
        rs_param_info_t info;
        rs_diag_t diag;
        rs_diag_clear(&diag);
        rs_capture_param(cap, p, &info);
        check(rs_receiver_bind(recv, p, base + at, info.nbytes, RS_MEM_HOST, &diag), &diag,
              "rs_receiver_bind");
        at += (info.nbytes + 63) & ~(uint64_t)63;
    }
    *len_p = total ? total : 1;
    return base;
}

static sample_t dry_run(rs_receiver_h recv, int64_t version)
{
    rs_diag_t diag;
    sample_t x;
    rs_diag_clear(&diag);
    double c0 = cpu_s();
    check(rs_receiver_dry_run(recv, version, &diag, &x.d), &diag,
          "rs_receiver_dry_run");
    x.cpu = cpu_s() - c0;
    x.wall = x.d.total_s;
    return x;
}

typedef struct results {
    sample_t reads, cold, warm;
} results_t;

/* Cold: a fresh receiver's first dry run (version 1). Warm: its later dry
 * runs, alternating versions 2 and 1, so every one takes new digests into
 * the cached plan. Parses are interleaved with them (same conditions) and
 * kept in *parse. The best (least CPU) of REPEATS each. */
static void cold_and_warm(const bench_t *b, const rs_receiver_params_t *rp,
                          rs_capture_h cap, sample_t *parse, int *nparse,
                          size_t *shards, results_t *res)
{
    for (int k = 0; k < REPEATS; k++) {
        rs_receiver_h recv;
        rs_diag_t diag;
        size_t maplen;
        rs_diag_clear(&diag);
        check(rs_receiver_create(rp, cap, &diag, &recv), &diag,
              "rs_receiver_create");
        void *map = bind_all(recv, cap, &maplen);
        sample_t x = read_once(b, rp->model, 1);
        keep_best(&res->reads, &x, k == 0);
        x = parse_once(b, shards);
        keep_best(parse, &x, (*nparse)++ == 0);
        x = dry_run(recv, 1);
        keep_best(&res->cold, &x, k == 0);
        for (int w = 0; k == 0 && w < REPEATS; w++) {
            x = parse_once(b, shards);
            keep_best(parse, &x, 0);
            x = dry_run(recv, 2 - (w % 2));
            if (x.d.replanned) {
                fprintf(stderr, "refit_bench: the warm dry run replanned\n");
                exit(1);
            }
            keep_best(&res->warm, &x, w == 0);
        }
        rs_receiver_destroy(recv);
        munmap(map, maplen);
    }
}

static void report_run(const char *name, const sample_t *x,
                       const sample_t *parse)
{
    const rs_dry_run_t *d = &x->d;
    char size[RS_UNITS_TEXT_MAX];
    printf("    %-5s %8.1f ms wall %8.1f ms cpu  %5.3fx parse  (discover "
           "%.1f, tables %.1f, fingerprint %.1f, plan %.1f, prepare %.1f ms; "
           "%s)\n", name, x->wall_min * 1e3, x->cpu * 1e3,
           x->cpu / parse->cpu, d->discover_s * 1e3,
           d->tables_s * 1e3, d->fingerprint_s * 1e3, d->plan_s * 1e3,
           d->prepare_s * 1e3, d->replanned ? "planned" : "cached plan");
    printf("          touched: %s read from the directory, %u tables "
           "parsed, %u reused\n",
           rs_format_bytes(size, sizeof(size), d->table_bytes_read),
           d->tables_parsed, d->tables_reused);
}

static void report_layout(const char *name, const results_t *res,
                          const sample_t *parse)
{
    printf("  %s\n", name);
    report_run("cold", &res->cold, parse);
    report_run("warm", &res->warm, parse);
    printf("    directory reads alone %.1f ms cpu (every slot's entries, "
           "digests checked, no parse)\n", res->reads.cpu * 1e3);
}

static void measure(bench_t *b)
{
    rs_capture_h cap;
    rs_receiver_params_t rp;
    results_t split, whole;
    sample_t parse;
    size_t shards = 0;
    int nparse = 0;
    rs_diag_t diag;
    uint64_t pad;
    memset(&split, 0, sizeof(split));
    memset(&whole, 0, sizeof(whole));
    memset(&parse, 0, sizeof(parse));
    rs_diag_clear(&diag);
    check(rs_layout_capture(b->model, &b->infer, b->rank, &diag, &cap, &pad),
          &diag, "rs_layout_capture");
    rs_receiver_params_init(&rp);
    rp.directory = b->url;
    rp.salt = (uint64_t)b->rank;
    rp.shadow = 0; /* no copies of the parameters */
    rp.discover_timeout_s = 10;
    rp.model = MODEL_SPLIT;
    cold_and_warm(b, &rp, cap, &parse, &nparse, &shards, &split);
    rp.model = MODEL_WHOLE;
    cold_and_warm(b, &rp, cap, &parse, &nparse, &shards, &whole);
    const rs_dry_run_t *c = &split.cold.d;
    char size[RS_UNITS_TEXT_MAX];
    printf("  %zu shards; rank %lld would read %s in %" PRIu64 " descriptors "
           "from %zu sessions (plan %s)\n", shards, (long long)b->rank,
           rs_format_bytes(size, sizeof(size), c->bytes), c->descriptors,
           c->sessions, c->complete ? "complete" : "INCOMPLETE");
    printf("  parse %8.1f ms wall %8.1f ms cpu  (baseline: "
           "rs_sources_load_string of the same tables)\n",
           parse.wall_min * 1e3, parse.cpu * 1e3);
    report_layout("split entries (publishers' layout):", &split, &parse);
    report_layout("whole tables (earlier layout, parsed every pull):", &whole,
                  &parse);
    printf("  warm pull, split entries: %.1f ms wall (expected under 50 ms), "
           "%.3fx parse, %.3fx a warm pull of whole tables\n",
           split.warm.wall_min * 1e3, split.warm.cpu / parse.cpu,
           split.warm.cpu / whole.warm.cpu);
    printf("  cold pull, split entries: %.1f ms wall = parse + %.1f ms "
           "(expected under parse + 1000 ms), %.3fx parse\n",
           split.cold.wall_min * 1e3,
           (split.cold.wall_min - parse.wall_min) * 1e3,
           split.cold.cpu / parse.cpu);
    rs_capture_destroy(cap);
}

/* CONFIG without its quantization_config, when it has one, written into
 * the bench's directory: the bench plans bf16 weights. */
static const char *bf16_config(bench_t *b)
{
    FILE *in = fopen(b->config, "rb");
    if (in == NULL)
        return b->config;
    char *text = xmalloc(1 << 20);
    size_t len = fread(text, 1, (1 << 20) - 1, in);
    fclose(in);
    text[len] = '\0';
    char *key = strstr(text, "\"quantization_config\"");
    char *open = key != NULL ? strchr(key, '{') : NULL;
    if (open == NULL) {
        free(text);
        return b->config;
    }
    int depth = 0;
    char *end = open;
    for (; *end != '\0'; end++) {
        depth += *end == '{' ? 1 : *end == '}' ? -1 : 0;
        if (depth == 0)
            break;
    }
    char *from = key; /* the key with the comma before it */
    while (from > text && from[-1] != ',' && from[-1] != '{')
        from--;
    if (from > text && from[-1] == ',')
        from--;
    snprintf(b->config_bf16, sizeof(b->config_bf16), "%s/config-bf16.json",
             b->dir);
    FILE *out = fopen(b->config_bf16, "wb");
    if (out == NULL || *end == '\0') {
        fprintf(stderr, "refit_bench: cannot write %s\n", b->config_bf16);
        exit(1);
    }
    fwrite(text, 1, (size_t)(from - text), out);
    fputs(end + 1, out);
    fclose(out);
    free(text);
    printf("refit_bench: %s without its quantization_config (bf16 "
           "weights)\n", b->config);
    return b->config_bf16;
}

static void setup(bench_t *b)
{
    rs_diag_t diag;
    rs_diag_clear(&diag);
    snprintf(b->dir, sizeof(b->dir), "/tmp/refit_bench.XXXXXX");
    if (mkdtemp(b->dir) == NULL) {
        perror("refit_bench: mkdtemp");
        exit(1);
    }
    snprintf(b->url, sizeof(b->url), "file:%s", b->dir);
    check(rs_model_load(bf16_config(b), &diag, &b->model), &diag,
          "rs_model_load");
    check(rs_layout_parse(b->train_spec, &diag, &b->train), &diag, "train");
    check(rs_layout_check(&b->train, b->model, &diag), &diag, "train");
    check(rs_layout_parse(b->infer_spec, &diag, &b->infer), &diag, "infer");
    check(rs_layout_check(&b->infer, b->model, &diag), &diag, "infer");
    if (b->rank < 0 || b->rank >= b->infer.world) {
        fprintf(stderr, "refit_bench: rank %lld outside 0..%lld\n",
                (long long)b->rank, (long long)b->infer.world - 1);
        exit(2);
    }
}

static void teardown(bench_t *b)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", b->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "refit_bench: could not remove %s\n", b->dir);
    for (int64_t r = 0; b->tables != NULL && r < b->train.world; r++)
        free(b->tables[r]);
    free(b->tables);
    free(b->lens);
    rs_model_destroy(b->model);
}

int main(int argc, char **argv)
{
    bench_t b;
    memset(&b, 0, sizeof(b));
    b.config = argc > 1 ? argv[1] : "examples/models/kimi-k2.json";
    b.train_spec = argc > 2 ? argv[2] : "megatron:tp=8,pp=16,ep=16";
    b.infer_spec = argc > 3 ? argv[3] : "vllm:tp=8,ep=8,dp=16";
    b.rank = argc > 4 ? atoll(argv[4]) : 0;
    if (argc > 5 || (argc > 1 && argc < 4)) {
        fprintf(stderr, "usage: refit_bench [CONFIG.json TRAIN INFER [RANK]]\n");
        return 2;
    }
    setup(&b);
    double t0 = rs_clock_seconds();
    publish_versions(&b);
    double t_pub = rs_clock_seconds() - t0;
    char size[RS_UNITS_TEXT_MAX];
    printf("refit_bench: %s, %s -> %s, inference rank %lld\n", b.config,
           b.train_spec, b.infer_spec, (long long)b.rank);
    printf("  %lld tables (%s of JSON, written in %.2f s)\n",
           (long long)b.train.world,
           rs_format_bytes(size, sizeof(size), b.table_bytes), t_pub);
    for (int v = 1; v <= 2; v++) {
        char docs[RS_UNITS_TEXT_MAX], ins[RS_UNITS_TEXT_MAX];
        printf("  publishing version %d split: %" PRIu64 " geometry documents "
               "written (%s), %s of digests and steps\n", v,
               b.docs_written[v],
               rs_format_bytes(docs, sizeof(docs), b.doc_bytes[v]),
               rs_format_bytes(ins, sizeof(ins), b.insert_bytes[v]));
    }
    measure(&b);
    teardown(&b);
    return 0;
}
