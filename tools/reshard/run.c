/* `reshard run`: plan a capture against shard tables and execute it on this
 * machine, reading each shard's bytes from DIR/<session>/<addr>.bin, for
 * testing and debugging. With --transport cma the shards live in a child
 * process and are read across the process boundary. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

typedef struct run_args {
    const char *capture, *data, *out, *transport;
    const char **sources;
    size_t nsources;
    const char **only;
    size_t nonly;
    uint64_t threads, salt;
    int64_t max_segments;
    int verify, verify_partial, require_coverage, phased, json;
    double max_gbps;
    double nic_gbps, descriptor_ns; /* 0 = not given */
    uint64_t staging_budget; /* 0: the library's default */
} run_args_t;

typedef struct shard_buf {
    uint32_t session;
    uint64_t addr, nbytes;
    unsigned char *data;
} shard_buf_t;

typedef struct run_state {
    rs_capture_h cap;
    rs_sources_h src;
    rs_plan_h plan;
    double plan_seconds;
    shard_buf_t *bufs;
    size_t nbufs;
    unsigned char **params;
    size_t nparams;
    rs_transport_h t;
    rs_exec_h exec;
    pid_t child;
    int child_fd;
} run_state_t;

enum {
    OPT_CAPTURE = 256, OPT_SOURCES, OPT_DATA, OPT_TRANSPORT, OPT_THREADS,
    OPT_MAX_SEGS, OPT_VERIFY, OPT_VERIFY_PARTIAL, OPT_REQUIRE, OPT_OUT,
    OPT_ONLY, OPT_SALT, OPT_PHASED, OPT_JSON, OPT_MAX_GBPS, OPT_NIC, OPT_DESC,
    OPT_BUDGET,
};

static const struct option long_opts[] = {
    {"capture", required_argument, NULL, OPT_CAPTURE},
    {"sources", required_argument, NULL, OPT_SOURCES},
    {"data", required_argument, NULL, OPT_DATA},
    {"transport", required_argument, NULL, OPT_TRANSPORT},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"max-segments-per-copy", required_argument, NULL, OPT_MAX_SEGS},
    {"verify", no_argument, NULL, OPT_VERIFY},
    {"verify-partial", no_argument, NULL, OPT_VERIFY_PARTIAL},
    {"require-full-coverage", no_argument, NULL, OPT_REQUIRE},
    {"out", required_argument, NULL, OPT_OUT},
    {"only", required_argument, NULL, OPT_ONLY},
    {"salt", required_argument, NULL, OPT_SALT},
    {"phased", no_argument, NULL, OPT_PHASED},
    {"json", no_argument, NULL, OPT_JSON},
    {"max-gbps", required_argument, NULL, OPT_MAX_GBPS},
    {"nic-gbps", required_argument, NULL, OPT_NIC},
    {"descriptor-ns", required_argument, NULL, OPT_DESC},
    {"staging-budget", required_argument, NULL, OPT_BUDGET},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void run_usage(FILE *out)
{
    fprintf(out,
        "usage: reshard run --capture CAP.json --sources SRC.json [--sources ...]\n"
        "                   --data DIR [--transport local|local-mt|cma]\n"
        "                   [--threads N] [--max-segments-per-copy N]\n"
        "                   [--verify] [--verify-partial] [--require-full-coverage]\n"
        "                   [--out DIR] [--only GLOB ...] [--salt N] [--phased]\n"
        "                   [--max-gbps G] [--nic-gbps G] [--descriptor-ns N] [--json]\n"
        "                   [--staging-budget B]\n"
        "\n"
        "Plans the capture against the shard tables and executes the plan on this\n"
        "machine. Each shard's bytes come from DIR/<session>/<addr>.bin (its\n"
        "agent_name, its addr in decimal; the shard's row-major bytes). Every\n"
        "parameter is filled with 0xEE before the run, so bytes the plan never\n"
        "writes stay visible.\n"
        "\n"
        "options:\n"
        "  --capture FILE        reshard.capture.v1 JSON (required)\n"
        "  --sources FILE        shard tables; repeat for several files (required)\n"
        "  --data DIR            shard bytes, DIR/<session>/<addr>.bin (required)\n"
        "  --transport NAME      local (default), local-mt (a thread pool) or cma\n"
        "                        (shards held by a child process, read with\n"
        "                        process_vm_readv)\n"
        "  --threads N           local-mt workers (default: one per core)\n"
        "  --max-segments-per-copy N\n"
        "                        hard cap on one copy's exact runs (default from\n"
        "                        RESHARD_MAX_SEGMENTS_PER_COPY, else %d)\n"
        RS_CLI_COST_USAGE
        "  --verify              re-digest every shard the run reassembled whole and\n"
        "                        compare with the digest its table published\n"
        "  --verify-partial      with --verify, also pull partly read shards whole\n"
        "                        to check their digests\n"
        "  --require-full-coverage\n"
        "                        fail when the plan writes less than %.1f%% of the\n"
        "                        parameter bytes\n"
        "  --out DIR             after a successful run, write every parameter to\n"
        "                        DIR/<param>.bin (its whole storage)\n"
        "  --only GLOB           refit only parameters matching the glob (repeat)\n"
        "  --salt N              replica choice salt (default 0)\n"
        "  --phased              one transport batch per kind (debugging)\n"
        "  --max-gbps G          fail a run whose bytes and wire time imply more\n"
        "                        than G Gb/s (a transfer that did not move its data)\n"
        "  --json                print the stage and coverage records as JSON\n"
        "  --staging-budget B    the most staging (staged reads, converts,\n"
        "                        quantized boxes) held at once, e.g. 256MiB; a\n"
        "                        plan staging more runs in rounds that share it.\n"
        "                        Default 1GiB (or the largest single box); a box\n"
        "                        above an explicit budget is refused (exit 2);\n"
        "                        'unbounded': every box at once\n"
        "  -h, --help            show this help and exit\n"
        "\n"
        "exit status: 0 success; 1 incomplete plan or failed check (nothing is\n"
        "written to --out); 2 bad usage or bad input (missing or short files).\n",
        RS_PLAN_DEFAULT_MAX_SEGMENTS_PER_COPY,
        RS_EXEC_DEFAULT_COVERAGE_FLOOR * 100);
}

static int usage_error(const char *fmt, const char *what)
{
    return rs_cli_usage_error("run", fmt, what);
}

static int take_number(const char *opt, const char *arg, uint64_t min,
                       uint64_t *out)
{
    if (!rs_cli_parse_u64(arg, out) || *out < min || *out > INT64_MAX) {
        fprintf(stderr, "reshard run: %s must be an integer >= %llu, got "
                        "'%s'\nTry 'reshard run --help'.\n",
                opt, (unsigned long long)min, arg);
        return RS_CLI_USAGE;
    }
    return RS_CLI_OK;
}

static int take_option(void *args, int c, const char *arg)
{
    run_args_t *a = args;
    uint64_t v;
    char *end;
    switch (c) {
    case OPT_CAPTURE: a->capture = arg; return RS_CLI_OK;
    case OPT_SOURCES: a->sources[a->nsources++] = arg; return RS_CLI_OK;
    case OPT_DATA: a->data = arg; return RS_CLI_OK;
    case OPT_OUT: a->out = arg; return RS_CLI_OK;
    case OPT_ONLY: a->only[a->nonly++] = arg; return RS_CLI_OK;
    case OPT_TRANSPORT: a->transport = arg; return RS_CLI_OK;
    case OPT_THREADS: return take_number("--threads", arg, 1, &a->threads);
    case OPT_SALT: return take_number("--salt", arg, 0, &a->salt);
    case OPT_MAX_SEGS:
        if (take_number("--max-segments-per-copy", arg, 1, &v) != RS_CLI_OK)
            return RS_CLI_USAGE;
        a->max_segments = (int64_t)v;
        return RS_CLI_OK;
    case OPT_MAX_GBPS:
        a->max_gbps = strtod(arg, &end);
        if (*end != '\0' || end == arg || !(a->max_gbps > 0))
            return usage_error("--max-gbps must be a positive number, got "
                               "'%s'", arg);
        return RS_CLI_OK;
    case OPT_NIC:
        return rs_cli_take_cost("run", "--nic-gbps", arg, &a->nic_gbps);
    case OPT_DESC:
        return rs_cli_take_cost("run", "--descriptor-ns", arg,
                                &a->descriptor_ns);
    case OPT_VERIFY: a->verify = 1; return RS_CLI_OK;
    case OPT_VERIFY_PARTIAL: a->verify_partial = 1; return RS_CLI_OK;
    case OPT_REQUIRE: a->require_coverage = 1; return RS_CLI_OK;
    case OPT_PHASED: a->phased = 1; return RS_CLI_OK;
    case OPT_JSON: a->json = 1; return RS_CLI_OK;
    case OPT_BUDGET: return rs_cli_take_budget("run", arg, &a->staging_budget);
    }
    return RS_CLI_USAGE;
}

static int parse_args(int argc, char **argv, run_args_t *a)
{
    int rc = rs_cli_options("run", argc, argv, long_opts, run_usage,
                            take_option, a);
    if (rc != RS_CLI_OK)
        return rc;
    if (a->capture == NULL)
        return usage_error("%s", "--capture FILE is required");
    if (a->nsources == 0)
        return usage_error("%s", "at least one --sources FILE is required");
    if (a->data == NULL)
        return usage_error("%s", "--data DIR is required");
    if (strcmp(a->transport, "local") != 0 &&
        strcmp(a->transport, "local-mt") != 0 && strcmp(a->transport, "cma") != 0)
        return usage_error("unknown transport '%s' (local, local-mt, cma)",
                           a->transport);
    return RS_CLI_OK;
}

static int build_plan(const run_args_t *a, run_state_t *s)
{
    rs_plan_params_t params;
    rs_diag_t diag;
    rs_status_t st;
    rs_diag_clear(&diag);
    rs_plan_params_init(&params);
    if (a->max_segments > 0)
        params.max_segments_per_copy = a->max_segments;
    if (a->nic_gbps > 0)
        params.nic_gbps = a->nic_gbps;
    if (a->descriptor_ns > 0)
        params.descriptor_ns = a->descriptor_ns;
    params.only = a->only;
    params.nonly = a->nonly;
    params.replica_salt = a->salt;
    double t0 = rs_clock_seconds();
    if ((st = rs_plan_build(s->cap, s->src, &params, &diag, &s->plan)) != RS_OK)
        return rs_cli_input_error("run", &diag, st, "planning");
    s->plan_seconds = rs_clock_seconds() - t0;
    return RS_CLI_OK;
}

/* The shard holding a read, by binary search over (session, addr). */
static long shard_of(const rs_shard_ref_t *sh, size_t n, uint32_t session,
                     uint64_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sh[mid].session < session ||
            (sh[mid].session == session && sh[mid].addr <= addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || sh[lo - 1].session != session ||
        addr - sh[lo - 1].addr >= sh[lo - 1].nbytes)
        return -1;
    return (long)(lo - 1);
}

/* Marks every shard a segment reads: one read may run from a shard into
 * the next when a session publishes them back to back. */
static void mark(const rs_shard_ref_t *sh, size_t n, const rs_segment_t *seg,
                 size_t nseg, unsigned char *needed)
{
    for (size_t i = 0; i < nseg; i++) {
        uint64_t addr = seg[i].src_addr, left = seg[i].nbytes;
        long k = shard_of(sh, n, seg[i].session, addr);
        while (k >= 0 && left > 0) {
            needed[k] = 1;
            uint64_t room = sh[k].addr + sh[k].nbytes - addr;
            if (left <= room)
                break;
            addr += room;
            left -= room;
            k = shard_of(sh, n, seg[i].session, addr);
        }
    }
}

/* Which shards the plan reads: only their files must exist. */
static unsigned char *needed_shards(rs_plan_h plan)
{
    size_t n, m;
    const rs_shard_ref_t *sh = rs_plan_shards(plan, &n);
    unsigned char *needed = calloc(n + 1, 1);
    if (needed == NULL)
        return NULL;
    const rs_segment_t *seg = rs_plan_segments(plan, &m);
    mark(sh, n, seg, m, needed);
    const rs_convert_t *cv = rs_plan_converts(plan, &m);
    for (size_t i = 0; i < m; i++)
        mark(sh, n, cv[i].segments, cv[i].nsegments, needed);
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &m);
    for (size_t i = 0; i < m; i++)
        mark(sh, n, fp[i].segments, fp[i].nsegments, needed);
    return needed;
}

static int read_shard_file(const char *dir, const char *session,
                           const rs_shard_ref_t *ref, shard_buf_t *b)
{
    char path[4096];
    struct stat stt;
    snprintf(path, sizeof(path), "%s/%s/%llu.bin", dir, session,
             (unsigned long long)ref->addr);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "reshard run: %s: %s (shard of tensor '%s')\n", path,
                strerror(errno), ref->tensor);
        return RS_CLI_USAGE;
    }
    if (fstat(fileno(f), &stt) != 0 || (uint64_t)stt.st_size != ref->nbytes) {
        fprintf(stderr, "reshard run: %s: holds %lld bytes, the shard of "
                        "tensor '%s' has %llu\n", path, (long long)stt.st_size,
                ref->tensor, (unsigned long long)ref->nbytes);
        fclose(f);
        return RS_CLI_USAGE;
    }
    b->session = ref->session;
    b->addr = ref->addr;
    b->nbytes = ref->nbytes;
    b->data = malloc(ref->nbytes ? ref->nbytes : 1);
    int ok = b->data != NULL &&
             fread(b->data, 1, ref->nbytes, f) == ref->nbytes;
    fclose(f);
    if (!ok) {
        fprintf(stderr, "reshard run: %s: cannot read %llu bytes\n", path,
                (unsigned long long)ref->nbytes);
        return RS_CLI_USAGE;
    }
    return RS_CLI_OK;
}

static int load_data(const run_args_t *a, run_state_t *s)
{
    size_t n;
    const rs_shard_ref_t *sh = rs_plan_shards(s->plan, &n);
    unsigned char *needed = needed_shards(s->plan);
    int rc = RS_CLI_OK;
    s->bufs = calloc(n + 1, sizeof(shard_buf_t));
    if (needed == NULL || s->bufs == NULL) {
        free(needed);
        fprintf(stderr, "reshard run: out of memory\n");
        return RS_CLI_USAGE;
    }
    for (size_t i = 0; i < n && rc == RS_CLI_OK; i++) {
        if (needed[i])
            rc = read_shard_file(a->data,
                                 rs_plan_session_name(s->plan, sh[i].session),
                                 &sh[i], &s->bufs[s->nbufs++]);
    }
    free(needed);
    return rc;
}

/* Holds the shard bytes in a child process for the cma transport: the child
 * inherits the buffers at the same addresses and waits until the parent
 * closes the pipe; the parent then poisons its own copies so that any byte
 * not read across the process boundary would show. */
static int start_holder(run_state_t *s)
{
    int fd[2];
    if (pipe(fd) != 0)
        return 0;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return 0;
    }
    if (pid == 0) {
        char c;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(fd[1]);
        while (read(fd[0], &c, 1) != 0 && errno == EINTR)
            ;
        _exit(0);
    }
    close(fd[0]);
    s->child = pid;
    s->child_fd = fd[1];
    for (size_t i = 0; i < s->nbufs; i++)
        memset(s->bufs[i].data, 0x5A, (size_t)s->bufs[i].nbytes);
    return 1;
}

static void stop_holder(run_state_t *s)
{
    if (s->child <= 0)
        return;
    close(s->child_fd);
    waitpid(s->child, NULL, 0);
    s->child = 0;
}

static int connect_sessions(const run_args_t *a, run_state_t *s)
{
    rs_transport_params_t tp;
    rs_diag_t diag;
    rs_status_t st;
    rs_diag_clear(&diag);
    rs_transport_params_init(&tp);
    tp.backend = a->transport;
    tp.threads = (unsigned)a->threads;
    if ((st = rs_transport_create(&tp, &diag, &s->t)) != RS_OK)
        return rs_cli_input_error("run", &diag, st, "transport");
    int cma = strcmp(a->transport, "cma") == 0;
    if (cma && !start_holder(s)) {
        fprintf(stderr, "reshard run: cannot start the shard holder: %s\n",
                strerror(errno));
        return RS_CLI_INCOMPLETE;
    }
    rs_region_t *regions = calloc(s->nbufs + 1, sizeof(rs_region_t));
    if (regions == NULL)
        return RS_CLI_USAGE;
    for (size_t i = 0; i < s->nbufs; i++)
        regions[i] = (rs_region_t){s->bufs[i].addr, s->bufs[i].nbytes,
                                   s->bufs[i].data};
    for (size_t i = 0; i < s->nbufs;) { /* buffers are sorted by session */
        size_t e = i;
        while (e < s->nbufs && s->bufs[e].session == s->bufs[i].session)
            e++;
        rs_peer_t peer = {rs_plan_session_name(s->plan, s->bufs[i].session),
                          cma ? s->child : 0, regions + i, e - i, NULL, 0};
        if (rs_transport_connect(s->t, s->bufs[i].session, &peer, &diag) !=
            RS_OK) {
            free(regions);
            fprintf(stderr, "reshard run: %s\n", diag.msg);
            return RS_CLI_INCOMPLETE;
        }
        i = e;
    }
    free(regions);
    return RS_CLI_OK;
}

static int bind_params(run_state_t *s)
{
    rs_diag_t diag;
    s->nparams = rs_capture_num_params(s->cap);
    s->params = calloc(s->nparams + 1, sizeof(unsigned char *));
    if (s->params == NULL)
        return RS_CLI_USAGE;
    for (size_t p = 0; p < s->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(s->cap, p, &info);
        s->params[p] = malloc(info.nbytes ? (size_t)info.nbytes : 1);
        if (s->params[p] == NULL) {
            fprintf(stderr, "reshard run: out of memory for param '%s'\n",
                    info.name);
            return RS_CLI_USAGE;
        }
        memset(s->params[p], 0xEE, (size_t)info.nbytes);
        if (rs_exec_bind(s->exec, p, s->params[p], info.nbytes, RS_MEM_HOST, &diag) != RS_OK)
            return rs_cli_input_error("run", &diag, diag.status, "bind");
    }
    return RS_CLI_OK;
}

static int write_params(const char *dir, run_state_t *s)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "reshard run: %s: %s\n", dir, strerror(errno));
        return RS_CLI_USAGE;
    }
    for (size_t p = 0; p < s->nparams; p++) {
        rs_param_info_t info;
        char path[4096];
        rs_capture_param(s->cap, p, &info);
        if (strchr(info.name, '/') != NULL || strcmp(info.name, "..") == 0 ||
            strcmp(info.name, ".") == 0) {
            fprintf(stderr, "reshard run: param '%s' cannot be a file name\n",
                    info.name);
            return RS_CLI_USAGE;
        }
        snprintf(path, sizeof(path), "%s/%s.bin", dir, info.name);
        FILE *f = fopen(path, "wb");
        int ok = f != NULL &&
                 fwrite(s->params[p], 1, info.nbytes, f) == info.nbytes;
        if (f != NULL && fclose(f) != 0)
            ok = 0;
        if (!ok) {
            fprintf(stderr, "reshard run: %s: cannot write\n", path);
            return RS_CLI_USAGE;
        }
    }
    return RS_CLI_OK;
}

static void print_records(const run_args_t *a, run_state_t *s)
{
    rs_diag_t diag;
    if (a->json) {
        printf("{\"stage\": ");
        rs_exec_write_stage_json(s->exec, s->plan_seconds, stdout, &diag);
        printf(", \"coverage\": ");
        rs_exec_write_coverage_json(s->exec, stdout, &diag);
        printf("}\n");
        return;
    }
    rs_exec_stats_t st;
    rs_coverage_t cov;
    rs_exec_stats(s->exec, &st);
    rs_exec_coverage(s->exec, &diag, &cov);
    printf("reshard run (%s)\n", a->transport);
    printf("  planned in        %.6f s\n", s->plan_seconds);
    char size[RS_UNITS_TEXT_MAX];
    printf("  bytes read        %s in %llu descriptors\n",
           rs_format_bytes(size, sizeof(size), st.bytes),
           (unsigned long long)st.descriptors);
    printf("  wire time         %.6f s\n", st.wire_seconds);
    printf("  params installed  %zu of %zu (%zu partial, %zu missing)\n",
           cov.params_full, cov.params_total, cov.params_partial,
           cov.params_missing);
    printf("  bytes covered     %.4f%%\n", cov.fraction * 100);
    if (a->verify)
        printf("  shards verified   %llu\n",
               (unsigned long long)st.shards_verified);
}

static int execute(const run_args_t *a, run_state_t *s)
{
    rs_exec_params_t ep;
    rs_diag_t diag;
    rs_status_t st;
    rs_diag_clear(&diag);
    rs_exec_params_init(&ep);
    ep.verify_digests = a->verify;
    ep.verify_partial = a->verify_partial;
    ep.require_full_coverage = a->require_coverage;
    ep.phased = a->phased;
    ep.max_gbps = a->max_gbps;
    ep.staging_budget = a->staging_budget;
    if ((st = rs_exec_create(s->plan, s->t, &ep, &diag, &s->exec)) != RS_OK)
        return rs_cli_input_error("run", &diag, st, "executor");
    int rc = bind_params(s);
    if (rc != RS_CLI_OK)
        return rc;
    if ((st = rs_exec_run(s->exec, &diag)) != RS_OK) {
        fprintf(stderr, "reshard run: %s: %s\n", rs_status_str(st), diag.msg);
        if (a->json)
            print_records(a, s);
        return st == RS_ERR_INPUT || st == RS_ERR_INVALID_ARG ? RS_CLI_USAGE
                                                               : RS_CLI_INCOMPLETE;
    }
    if (a->out != NULL && (rc = write_params(a->out, s)) != RS_CLI_OK)
        return rc;
    print_records(a, s);
    return RS_CLI_OK;
}

static void cleanup(run_state_t *s)
{
    stop_holder(s);
    rs_exec_destroy(s->exec);
    rs_transport_destroy(s->t);
    for (size_t i = 0; i < s->nbufs; i++)
        free(s->bufs[i].data);
    free(s->bufs);
    for (size_t p = 0; p < s->nparams; p++)
        free(s->params[p]);
    free(s->params);
    rs_plan_destroy(s->plan);
    rs_sources_destroy(s->src);
    rs_capture_destroy(s->cap);
}

int rs_cli_run(int argc, char **argv)
{
    run_args_t a = {0};
    run_state_t s = {0};
    int rc;
    a.transport = "local";
    a.sources = calloc((size_t)argc, sizeof(*a.sources));
    a.only = calloc((size_t)argc, sizeof(*a.only));
    if (a.sources == NULL || a.only == NULL) {
        rc = RS_CLI_USAGE;
        goto done;
    }
    rc = parse_args(argc, argv, &a);
    if (rc < 0) {
        rc = RS_CLI_OK;
        goto done;
    }
    if (rc == RS_CLI_OK)
        rc = rs_cli_load_inputs("run", a.capture, a.sources, a.nsources,
                                &s.cap, &s.src);
    if (rc == RS_CLI_OK)
        rc = build_plan(&a, &s);
    if (rc == RS_CLI_OK)
        rc = load_data(&a, &s);
    if (rc == RS_CLI_OK)
        rc = connect_sessions(&a, &s);
    if (rc == RS_CLI_OK)
        rc = execute(&a, &s);
    cleanup(&s);
done:
    free(a.sources);
    free(a.only);
    return rc;
}
