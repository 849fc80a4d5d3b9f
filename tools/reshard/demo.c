/* `reshard demo`: the main job on one machine. Starts one process per
 * trainer rank (`reshard publish`) and per inference rank (`reshard pull`)
 * of a real layout pair around a directory in a temporary folder, moves two
 * versions (the second over the cached plan), has every inference rank check
 * every parameter byte and every digest, releases the versions, and prints
 * a summary. Every child is killed and reaped and the folder removed on
 * every path, including errors and Ctrl-C. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define DEMO_VERSIONS 2
#define DEMO_MAX_ARGS 40

typedef struct demo_args {
    const char *config, *train, *infer, *backend, *directory, *staging;
    double timeout_s;
    const char *changed; /* --changed-fraction, as given; NULL: none */
} demo_args_t;

typedef struct child {
    pid_t pid;          /* 0 once reaped */
    int status;
    int fd;             /* pullers: read end of their stdout; else -1 */
    char *buf;          /* bytes read but not yet a whole line */
    size_t len, cap;
    int lines;          /* JSON lines received */
    int64_t rank;
    int trainer;
} child_t;

typedef struct demo {
    rs_model_h model;
    rs_layout_t train, infer;
    char self[PATH_MAX];
    char tmp[PATH_MAX];       /* the temporary folder we own, or "" */
    char url[PATH_MAX + 8];
    char name[64];            /* model name in the directory */
    child_t *kids;
    size_t nkids, ntrainers;
    json_t *res[DEMO_VERSIONS][64 + 1]; /* per version, per inference rank */
    double t0, deadline, version_s[DEMO_VERSIONS];
    double memcpy_bps;        /* measured here, after the run */
} demo_t;

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = sig;
}

enum { OPT_CONFIG = 256, OPT_TRAIN, OPT_INFER, OPT_BACKEND, OPT_DIRECTORY,
       OPT_TIMEOUT, OPT_STAGING, OPT_CHANGED_FRACTION };

static const struct option long_opts[] = {
    {"model-config", required_argument, NULL, OPT_CONFIG},
    {"train", required_argument, NULL, OPT_TRAIN},
    {"infer", required_argument, NULL, OPT_INFER},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"directory", required_argument, NULL, OPT_DIRECTORY},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"staging", required_argument, NULL, OPT_STAGING},
    {"changed-fraction", required_argument, NULL, OPT_CHANGED_FRACTION},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void demo_usage(FILE *out)
{
    fprintf(out,
        "usage: reshard demo [--model-config CONFIG.json] [--train LAYOUT]\n"
        "                    [--infer LAYOUT] [--backend ucx|cma]\n"
        "                    [--directory file:DIR|redis://...] [--timeout S]\n"
        "                    [--staging arena|in_place|caller]\n"
        "                    [--changed-fraction F]\n"
        "\n"
        "Runs the whole refit on this machine: one `reshard publish` process per\n"
        "trainer rank and one `reshard pull` process per inference rank move two\n"
        "versions through a directory (the second reuses the cached plan); every\n"
        "inference rank checks every parameter byte against contents computed\n"
        "independently and every reassembled shard against its digest. Prints a\n"
        "summary per inference rank and version, each rank's read rate beside a\n"
        "memcpy measured on this machine in the same run.\n"
        "\n"
        "options:\n"
        "  --model-config FILE  Hugging Face config.json\n"
        "                       (default: the bundled examples/models/qwen2.5-0.5b.json,\n"
        "                       found from any working directory)\n"
        "  --train LAYOUT       trainer layout (default megatron:tp=2,pp=2)\n"
        "  --infer LAYOUT       inference layout (default vllm:tp=2)\n"
        "  --backend B          ucx (default) or cma; for ucx, UCX_TLS defaults\n"
        "                       to sm (shared memory) when it is not set\n"
        "  --directory URL      use this directory instead of a file: directory\n"
        "                       in a new temporary folder (removed at the end)\n"
        "  --timeout S          give up after S seconds (default 300)\n"
        "  --staging S          the trainers' `reshard publish --staging` (default\n"
        "                       arena: each version copied into memory the exposer\n"
        "                       allocates, which readers copy one-sided)\n"
        "  --changed-fraction F\n"
        "                       contents in which each version changes about F\n"
        "                       (0 < F <= 1, e.g. 0.02) of every tensor's elements;\n"
        "                       passed to every publish and pull, which checks them\n"
        "  -h, --help           show this help and exit\n"
        "\n"
        "exit status: 0 every byte of both versions verified; 1 a process\n"
        "failed, a check failed or the run timed out; 2 bad usage or input.\n");
}

static int usage_error(const char *fmt, const char *what)
{
    return rs_cli_usage_error("demo", fmt, what);
}

static int take_option(void *args, int c, const char *arg)
{
    demo_args_t *a = args;
    char *end;
    switch (c) {
    case OPT_CONFIG: a->config = arg; break;
    case OPT_TRAIN: a->train = arg; break;
    case OPT_INFER: a->infer = arg; break;
    case OPT_BACKEND: a->backend = arg; break;
    case OPT_DIRECTORY: a->directory = arg; break;
    case OPT_STAGING: a->staging = arg; break;
    case OPT_CHANGED_FRACTION: {
        uint64_t q; /* checked here so that no child is started for it */
        a->changed = arg;
        return rs_cli_take_fraction("demo", arg, &q);
    }
    case OPT_TIMEOUT:
        a->timeout_s = strtod(arg, &end);
        if (end == arg || *end != '\0' || !(a->timeout_s > 0) ||
            a->timeout_s > 1e6)
            return usage_error("--timeout must be a positive number of "
                               "seconds, got '%s'", arg);
        break;
    default:
        return RS_CLI_USAGE;
    }
    return RS_CLI_OK;
}

#define DEFAULT_CONFIG "examples/models/qwen2.5-0.5b.json"

/* The bundled default config, found from any working directory: beside
 * the working directory, then beside the binary (build/reshard in a source
 * tree, bin/reshard under a prefix with share/reshard), then in the source
 * tree the binary was built from. An absolute path, since the children
 * get it too. NULL when none exists. */
static const char *find_default_config(void)
{
    static char found[PATH_MAX];
    char exe[PATH_MAX], cand[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash != NULL)
        *slash = '\0';
    const char *const fmts[] = {"%s" DEFAULT_CONFIG, "%s/../" DEFAULT_CONFIG,
                                "%s/../share/reshard/" DEFAULT_CONFIG,
                                "%s/" DEFAULT_CONFIG};
    const char *const bases[] = {"", exe, exe, RESHARD_SOURCE_DIR};
    for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
        snprintf(cand, sizeof(cand), fmts[i], bases[i]);
        if (realpath(cand, found) != NULL)
            return found;
    }
    return NULL;
}

static int parse_args(int argc, char **argv, demo_args_t *a)
{
    const char *config = find_default_config();
    *a = (demo_args_t){config != NULL ? config : DEFAULT_CONFIG,
                       "megatron:tp=2,pp=2", "vllm:tp=2", "ucx", NULL,
                       "arena", 300, NULL};
    int rc = rs_cli_options("demo", argc, argv, long_opts, demo_usage,
                            take_option, a);
    if (rc != RS_CLI_OK)
        return rc;
    if (strcmp(a->backend, "ucx") != 0 && strcmp(a->backend, "cma") != 0)
        return usage_error("--backend takes ucx or cma, got '%s'", a->backend);
    if (rs_cli_staging(a->staging) < 0)
        return usage_error("--staging takes arena, in_place or caller, got "
                           "'%s'", a->staging);
    return RS_CLI_OK;
}

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("reshard demo: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return RS_CLI_INCOMPLETE;
}

/* ---- set-up ------------------------------------------------------------ */

static int load(const demo_args_t *a, demo_t *d)
{
    rs_diag_t diag;
    rs_status_t st;
    int rc = rs_cli_load_layout("demo", "--train", a->config, a->train, 0,
                                &d->model, &d->train);
    if (rc != RS_CLI_OK)
        return rc;
    rs_diag_clear(&diag);
    if ((st = rs_layout_parse(a->infer, &diag, &d->infer)) != RS_OK ||
        (st = rs_layout_check(&d->infer, d->model, &diag)) != RS_OK)
        return rs_cli_input_error("demo", &diag, st, "--infer");
    if (d->infer.kind != RS_LAYOUT_VLLM)
        return usage_error("--infer takes a vllm layout, got '%s'", a->infer);
    if (d->infer.world > 64 || d->train.world > 256)
        return usage_error("%s", "the demo runs at most 256 trainer and 64 "
                           "inference processes on one machine");
    ssize_t n = readlink("/proc/self/exe", d->self, sizeof(d->self) - 1);
    if (n <= 0)
        return fail("cannot find this program (/proc/self/exe): %s",
                    strerror(errno));
    d->self[n] = '\0';
    return RS_CLI_OK;
}

/* The directory: a file: one in a new temporary folder unless given. */
static int make_directory(const demo_args_t *a, demo_t *d)
{
    if (a->directory != NULL) {
        snprintf(d->url, sizeof(d->url), "%s", a->directory);
        snprintf(d->name, sizeof(d->name), "demo-%ld", (long)getpid());
        return RS_CLI_OK;
    }
    const char *base = getenv("TMPDIR");
    snprintf(d->tmp, sizeof(d->tmp), "%s/reshard-demo-XXXXXX",
             base && *base ? base : "/tmp");
    if (mkdtemp(d->tmp) == NULL) {
        int e = errno;
        d->tmp[0] = '\0';
        return fail("cannot create a temporary folder: %s", strerror(e));
    }
    snprintf(d->url, sizeof(d->url), "file:%s", d->tmp);
    snprintf(d->name, sizeof(d->name), "demo");
    return RS_CLI_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int flag,
                        struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* ---- children ------------------------------------------------------------ */

typedef struct argv_buf {
    char *argv[DEMO_MAX_ARGS];
    char num[6][32];
    int n, nnum;
} argv_buf_t;

static void push(argv_buf_t *b, const char *s)
{
    if (b->n < DEMO_MAX_ARGS - 1)
        b->argv[b->n++] = (char *)s;
    b->argv[b->n] = NULL;
}

static void push_num(argv_buf_t *b, const char *opt, long long v)
{
    snprintf(b->num[b->nnum], sizeof(b->num[0]), "%lld", v);
    push(b, opt);
    push(b, b->num[b->nnum++]);
}

static void common_args(argv_buf_t *b, const demo_args_t *a, const demo_t *d,
                        const char *verb, int64_t rank)
{
    memset(b, 0, sizeof(*b));
    push(b, d->self);
    push(b, verb);
    push(b, "--directory");
    push(b, d->url);
    push(b, "--model");
    push(b, d->name);
    push_num(b, "--version", 1);
    push_num(b, "--rank", rank);
    push(b, "--model-config");
    push(b, a->config);
    push(b, "--backend");
    push(b, a->backend);
    push_num(b, "--timeout", (long long)a->timeout_s + 1);
    if (a->changed != NULL) { /* publish and pull --check agree on it */
        push(b, "--changed-fraction");
        push(b, a->changed);
    }
}

/* fork + exec of this binary; a puller's stdout comes back on a pipe,
 * a trainer's goes to /dev/null (errors still reach our stderr). */
static int spawn(demo_t *d, argv_buf_t *b, int64_t rank, int trainer)
{
    int p[2] = {-1, -1};
    if (!trainer && pipe2(p, O_CLOEXEC) != 0)
        return fail("pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        if (!trainer) {
            close(p[0]);
            close(p[1]);
        }
        return fail("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        int out = trainer ? open("/dev/null", O_WRONLY) : p[1];
        if (out < 0 || dup2(out, STDOUT_FILENO) < 0)
            _exit(127);
        execv(d->self, b->argv);
        _exit(127);
    }
    child_t *c = &d->kids[d->nkids++];
    memset(c, 0, sizeof(*c));
    c->pid = pid;
    c->fd = trainer ? -1 : p[0];
    c->rank = rank;
    c->trainer = trainer;
    if (!trainer)
        close(p[1]);
    return RS_CLI_OK;
}

static int spawn_all(const demo_args_t *a, demo_t *d)
{
    argv_buf_t b;
    int rc = RS_CLI_OK;
    d->kids = calloc((size_t)(d->train.world + d->infer.world), sizeof(child_t));
    if (d->kids == NULL)
        return fail("out of memory");
    for (int64_t r = 0; rc == RS_CLI_OK && r < d->train.world; r++) {
        common_args(&b, a, d, "publish", r);
        push_num(&b, "--world", d->train.world);
        push(&b, "--layout");
        push(&b, a->train);
        push_num(&b, "--versions", DEMO_VERSIONS);
        push(&b, "--staging");
        push(&b, a->staging);
        rc = spawn(d, &b, r, 1);
    }
    d->ntrainers = d->nkids;
    for (int64_t r = 0; rc == RS_CLI_OK && r < d->infer.world; r++) {
        common_args(&b, a, d, "pull", r);
        push(&b, "--layout");
        push(&b, a->infer);
        push_num(&b, "--versions", DEMO_VERSIONS);
        push(&b, "--check");
        push(&b, "--verify");
        push(&b, "--json");
        if (a->changed != NULL) /* versions after the first by deltas */
            push(&b, "--delta");
        rc = spawn(d, &b, r, 0);
    }
    return rc;
}

static const char *describe_exit(int status, char *buf, size_t n)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(buf, n, "stopped");
    return buf;
}

static int child_failed(const child_t *c)
{
    char why[64];
    return fail("%s rank %lld %s", c->trainer ? "trainer" : "inference",
                (long long)c->rank, describe_exit(c->status, why, sizeof(why)));
}

/* Reaps whoever exited; a child that exited early or badly is an error. */
static int reap(demo_t *d, int expect_exit)
{
    for (size_t i = 0; i < d->nkids; i++) {
        child_t *c = &d->kids[i];
        if (c->pid == 0 || waitpid(c->pid, &c->status, WNOHANG) != c->pid)
            continue;
        c->pid = 0;
        int clean = WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0;
        if (!clean || (!expect_exit && c->trainer))
            return child_failed(c);
    }
    return RS_CLI_OK;
}

/* Stops every live child: SIGTERM, a short grace, then SIGKILL; reaps all. */
static void kill_all(demo_t *d)
{
    double until = rs_clock_seconds() + 3;
    for (size_t i = 0; i < d->nkids; i++)
        if (d->kids[i].pid > 0)
            kill(d->kids[i].pid, SIGTERM);
    for (size_t i = 0; i < d->nkids; i++) {
        child_t *c = &d->kids[i];
        while (c->pid > 0 && waitpid(c->pid, &c->status, WNOHANG) == 0 &&
               rs_clock_seconds() < until)
            usleep(20000);
        if (c->pid > 0 && waitpid(c->pid, &c->status, WNOHANG) == 0) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &c->status, 0);
        }
        c->pid = 0;
    }
}

/* ---- collecting the inference ranks' records --------------------------- */

static int take_line(demo_t *d, child_t *c, const char *line)
{
    json_error_t err;
    json_t *v = json_loads(line, 0, &err);
    if (v == NULL || !json_is_object(v) || c->lines >= DEMO_VERSIONS) {
        json_decref(v);
        return fail("inference rank %lld printed something that is not its "
                    "JSON record: %.200s", (long long)c->rank, line);
    }
    d->res[c->lines++][c->rank] = v;
    if (!json_is_true(json_object_get(v, "ok"))) {
        const char *e = json_string_value(json_object_get(v, "error"));
        return fail("inference rank %lld, version %d: %s", (long long)c->rank,
                    c->lines, e ? e : "failed");
    }
    return RS_CLI_OK;
}

static int read_child(demo_t *d, child_t *c)
{
    if (c->cap - c->len < 4096) {
        size_t cap = c->cap ? 2 * c->cap : 16384;
        char *grown = realloc(c->buf, cap);
        if (grown == NULL)
            return fail("out of memory");
        c->buf = grown;
        c->cap = cap;
    }
    ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len - 1);
    if (n < 0)
        return errno == EINTR ? RS_CLI_OK : fail("read: %s", strerror(errno));
    if (n == 0) {
        close(c->fd);
        c->fd = -1;
        return c->lines < DEMO_VERSIONS
            ? fail("inference rank %lld stopped after %d of %d versions (its "
                   "messages are above)", (long long)c->rank, c->lines,
                   DEMO_VERSIONS) : RS_CLI_OK;
    }
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    char *nl;
    while ((nl = memchr(c->buf, '\n', c->len)) != NULL) {
        *nl = '\0';
        int rc = take_line(d, c, c->buf);
        c->len -= (size_t)(nl + 1 - c->buf);
        memmove(c->buf, nl + 1, c->len);
        if (rc != RS_CLI_OK)
            return rc;
    }
    return RS_CLI_OK;
}

static int all_have(const demo_t *d, int lines)
{
    for (size_t i = d->ntrainers; i < d->nkids; i++)
        if (d->kids[i].lines < lines)
            return 0;
    return 1;
}

/* Waits until every inference rank reported version index `k`. */
static int collect(demo_t *d, int k)
{
    struct pollfd fds[64];
    child_t *who[64];
    while (!all_have(d, k + 1)) {
        if (interrupted) /* before reaping: Ctrl-C also hit the children */
            return fail("interrupted");
        int rc = reap(d, 0);
        if (rc != RS_CLI_OK)
            return rc;
        if (rs_clock_seconds() > d->deadline)
            return fail("timed out waiting for version %d", k + 1);
        nfds_t n = 0;
        for (size_t i = d->ntrainers; i < d->nkids; i++) {
            if (d->kids[i].fd >= 0) {
                fds[n] = (struct pollfd){d->kids[i].fd, POLLIN, 0};
                who[n++] = &d->kids[i];
            }
        }
        if (poll(fds, n, 200) < 0 && errno != EINTR)
            return fail("poll: %s", strerror(errno));
        for (nfds_t i = 0; i < n; i++) {
            if (fds[i].revents != 0 && (rc = read_child(d, who[i])) != RS_CLI_OK)
                return rc;
        }
    }
    return RS_CLI_OK;
}

/* Every inference rank is done with the version (its lease is gone): let
 * the trainers move on. */
static int release(demo_t *d, int64_t version)
{
    rs_dir_h dir = NULL;
    rs_diag_t diag;
    rs_diag_clear(&diag);
    rs_status_t st = rs_dir_open(d->url, &diag, &dir);
    double until = rs_clock_seconds() + 10;
    while (st == RS_OK) {
        st = rs_dir_release(dir, d->name, version, &diag);
        if (st != RS_ERR_INCOMPLETE || rs_clock_seconds() > until || interrupted)
            break;
        usleep(20000);
    }
    rs_dir_close(dir);
    if (st != RS_OK)
        return fail("releasing version %lld: %s", (long long)version,
                    diag.msg[0] ? diag.msg : rs_status_str(st));
    return RS_CLI_OK;
}

/* After the last release every child exits on its own. */
static int wait_exit(demo_t *d)
{
    for (;;) {
        if (interrupted)
            return fail("interrupted");
        int rc = reap(d, 1);
        if (rc != RS_CLI_OK)
            return rc;
        size_t live = 0;
        for (size_t i = 0; i < d->nkids; i++)
            live += d->kids[i].pid > 0;
        if (live == 0)
            return RS_CLI_OK;
        if (rs_clock_seconds() > d->deadline)
            return fail("timed out waiting for %zu process(es) to exit", live);
        usleep(20000);
    }
}

/* ---- the summary --------------------------------------------------------- */

static double num(json_t *o, const char *path)
{
    char key[64];
    snprintf(key, sizeof(key), "%s", path);
    for (char *k = key, *dot; o != NULL; k = dot + 1) {
        dot = strchr(k, '.');
        if (dot != NULL)
            *dot = '\0';
        o = json_object_get(o, k);
        if (dot == NULL)
            return json_is_number(o) ? json_number_value(o) : 0.0;
    }
    return 0.0;
}

/* With deltas (--changed-fraction): per rank, the bytes read through
 * deltas for the bytes they stand for, and what was read whole. */
static void delta_summary(const demo_t *d, int k)
{
    for (int64_t r = 0; r < d->infer.world; r++) {
        json_t *o = d->res[k][r];
        if (json_object_get(o, "delta") == NULL || num(o, "delta.runs") == 0)
            continue;
        char got[RS_UNITS_TEXT_MAX], of[RS_UNITS_TEXT_MAX];
        char whole[RS_UNITS_TEXT_MAX];
        double full = num(o, "delta.full_bytes");
        double wire = num(o, "delta.bytes") + num(o, "delta.whole_bytes");
        double all = full + num(o, "delta.whole_bytes");
        printf("  rank %lld deltas: %.0f reads, %s for %s; %.0f read whole "
               "(%s): %.4f of a full pull's bytes\n", (long long)r,
               num(o, "delta.runs"),
               rs_format_bytes(got, sizeof(got), (uint64_t)num(o, "delta.bytes")),
               rs_format_bytes(of, sizeof(of), (uint64_t)full),
               num(o, "delta.whole_runs"),
               rs_format_bytes(whole, sizeof(whole),
                               (uint64_t)num(o, "delta.whole_bytes")),
               all > 0 ? wire / all : 0);
    }
}

static int version_summary(const demo_t *d, int k)
{
    int replanned = 0;
    for (int64_t r = 0; r < d->infer.world; r++)
        replanned += json_is_true(json_object_get(d->res[k][r], "replanned"));
    printf("\nversion %d, %s (all ranks done %.2f s after %s)\n", k + 1,
           k == 0 ? "cold: discover, plan, connect, prepare, read"
                  : replanned ? "NOT warm: re-planned although no trainer "
                                "changed"
                              : "warm: cached plan, connections and "
                                "descriptors reused",
           d->version_s[k], k == 0 ? "start" : "the previous version");
    printf("  rank        size  descr   wait s   plan s   wire s   pull s"
           "         rate  x memcpy  digests  check\n");
    for (int64_t r = 0; r < d->infer.world; r++) {
        json_t *o = d->res[k][r];
        double wire = num(o, "stage.stages_s.wire"), bytes = num(o, "stage.bytes");
        char size[RS_UNITS_TEXT_MAX], rate[RS_UNITS_TEXT_MAX];
        double bps = wire > 0 ? bytes / wire : 0;
        printf("  %4lld  %10s  %5.0f  %7.3f  %7.3f  %7.3f  %7.3f  %11s  "
               "%8.2f  %7.0f  %s\n", (long long)r,
               rs_format_bytes(size, sizeof(size), (uint64_t)bytes),
               num(o, "stage.descriptors"), num(o, "discover_s"),
               num(o, "plan_s"), wire, num(o, "wall_s") - num(o, "discover_s"),
               rs_format_rate(rate, sizeof(rate), bps),
               d->memcpy_bps > 0 ? bps / d->memcpy_bps : 0,
               num(o, "stage.shards_verified"),
               json_is_true(json_object_get(o, "check")) ? "byte-exact" : "-");
    }
    delta_summary(d, k);
    return k > 0 && replanned > 0;
}

static void pull_times(const demo_t *d, int k, double *pull, double *wire)
{
    *pull = *wire = 0;
    for (int64_t r = 0; r < d->infer.world; r++) {
        json_t *o = d->res[k][r];
        double p = num(o, "wall_s") - num(o, "discover_s");
        *pull = p > *pull ? p : *pull;
        *wire = num(o, "stage.stages_s.wire") > *wire ? num(o, "stage.stages_s.wire")
                                                    : *wire;
    }
}

/* Bytes over seconds as a ratio of the memcpy; 0 for a stage that did not
 * run (absent from the record) or took no measurable time. */
static double ratio(const demo_t *d, double bytes, double s)
{
    return s > 0 && d->memcpy_bps > 0 ? bytes / s / d->memcpy_bps : 0;
}

/* The warm version's figures as ratios of the memcpy: per rank each stage
 * of the pull on its own (wire, verify, install: bytes over the stage's
 * seconds) and the whole pull (bytes over everything after discovery), so
 * that what keeps the whole pull below its wire shows. Verify is the part
 * left after the copy (with cma most digests are taken by the wire's own
 * copy), and in a pipelined run busy seconds summed over threads; install
 * is the lease's last renewal plus the copy of the staging into the bound
 * parameters. */
static void warm_ratios(const demo_t *d)
{
    if (d->memcpy_bps <= 0)
        return;
    printf("\nwarm pull as ratios of the one-thread memcpy (bytes over each "
           "stage's time):\n");
    for (int64_t r = 0; r < d->infer.world; r++) {
        json_t *o = d->res[1][r];
        const double bytes = num(o, "stage.bytes");
        const double wire = num(o, "stage.stages_s.wire");
        const double verify = num(o, "stage.stages_s.verify");
        const double install = num(o, "stage.stages_s.install");
        const double pull = num(o, "wall_s") - num(o, "discover_s");
        printf("  rank %lld: wire %.2fx, verify %.2fx, install %.2fx, whole "
               "pull %.2fx\n          (wire %.3f s, verify %.3f s, install "
               "%.3f s, pull %.3f s)\n", (long long)r,
               ratio(d, bytes, wire), ratio(d, bytes, verify),
               ratio(d, bytes, install), ratio(d, bytes, pull), wire, verify,
               install, pull);
    }
}

/* Bytes per second of one thread's memcpy of MEMCPY_BYTES between two
 * touched buffers, best of MEMCPY_REPS: the baseline each rank's read rate
 * is shown against (a read is a copy from another process's memory). */
#define MEMCPY_BYTES (256u << 20)
#define MEMCPY_REPS 5

static double measure_memcpy(void)
{
    unsigned char *src = malloc(MEMCPY_BYTES), *dst = malloc(MEMCPY_BYTES);
    double best = 0;
    if (src != NULL && dst != NULL) {
        memset(src, 1, MEMCPY_BYTES);
        memset(dst, 2, MEMCPY_BYTES);
        for (int i = 0; i < MEMCPY_REPS; i++) {
            double t = rs_clock_seconds();
            memcpy(dst, src, MEMCPY_BYTES);
            t = rs_clock_seconds() - t;
            if (t > 0 && MEMCPY_BYTES / t > best)
                best = MEMCPY_BYTES / t;
            src[i] = dst[MEMCPY_BYTES - 1 - i]; /* keep the copies */
        }
    }
    free(src);
    free(dst);
    return best;
}

static int summary(const demo_args_t *a, demo_t *d)
{
    char rate[RS_UNITS_TEXT_MAX];
    d->memcpy_bps = measure_memcpy();
    int bad = 0;
    double cold, warm, cold_wire, warm_wire;
    for (int k = 0; k < DEMO_VERSIONS; k++)
        bad |= version_summary(d, k);
    pull_times(d, 0, &cold, &cold_wire);
    pull_times(d, 1, &warm, &warm_wire);
    printf("\n  wait: discovering the READY version and reading every table;"
           " plan: planning\n  and connecting (0 when cached); pull: "
           "everything after discovery (plan,\n  prepare, read, verify, "
           "install); rate: the parameters' bytes over wire\n  time (with "
           "deltas the wire moves fewer: their line says how many);\n  "
           "digests: reassembled shards re-digested; check: every parameter "
           "byte\n  compared with contents computed independently of the "
           "transfer; x memcpy:\n  rate over a one-thread memcpy measured on "
           "this machine after the run,\n  %s.\n",
           rs_format_rate(rate, sizeof(rate), d->memcpy_bps));
    warm_ratios(d);
    printf("\ncold vs warm: slowest pull %.3f s -> %.3f s, slowest wire %.3f s "
           "-> %.3f s\n", cold, warm, cold_wire, warm_wire);
    printf("every parameter of %lld inference ranks byte-exact for %d versions;"
           " %s backend, %s staging", (long long)d->infer.world,
           DEMO_VERSIONS, a->backend, a->staging);
    if (a->changed != NULL)
        printf("; changed share %s", a->changed);
    printf("; total %.1f s\n", rs_clock_seconds() - d->t0);
    if (bad)
        return fail("version 2 was re-planned although no trainer changed");
    return RS_CLI_OK;
}

/* ---- the job ------------------------------------------------------------- */

static void header(const demo_args_t *a, const demo_t *d)
{
    const char *tls = getenv("UCX_TLS");
    char size[RS_UNITS_TEXT_MAX];
    printf("reshard demo: %s, %llu parameters (%s)\n",
           rs_model_config(d->model)->model_type,
           (unsigned long long)rs_model_num_params(d->model),
           rs_format_bytes(size, sizeof(size), rs_model_num_bytes(d->model)));
    printf("  trainers   %lld processes (%s), `reshard publish --staging %s`\n",
           (long long)d->train.world, a->train, a->staging);
    printf("  inference  %lld processes (%s), `reshard pull --check --verify`\n",
           (long long)d->infer.world, a->infer);
    if (a->changed != NULL)
        printf("  contents   each version changes about %.4g %% of every "
               "tensor's elements (--changed-fraction %s)\n",
               strtod(a->changed, NULL) * 100, a->changed);
    printf("  transport  %s%s%s%s\n", a->backend,
           strcmp(a->backend, "ucx") == 0 ? " (UCX_TLS=" : "",
           strcmp(a->backend, "ucx") == 0 ? (tls ? tls : "") : "",
           strcmp(a->backend, "ucx") == 0 ? ")" : "");
    char shown[sizeof(d->url)];
    rs_dir_redact_url(d->url, shown, sizeof(shown));
    printf("  directory  %s (model '%s')\n", shown, d->name);
    fflush(stdout);
}

static int run(const demo_args_t *a, demo_t *d)
{
    int rc = spawn_all(a, d);
    double t = rs_clock_seconds();
    for (int k = 0; rc == RS_CLI_OK && k < DEMO_VERSIONS; k++) {
        rc = collect(d, k);
        d->version_s[k] = rs_clock_seconds() - t;
        t = rs_clock_seconds();
        if (rc == RS_CLI_OK)
            rc = release(d, k + 1);
    }
    if (rc == RS_CLI_OK)
        rc = wait_exit(d);
    if (rc == RS_CLI_OK)
        rc = summary(a, d);
    return rc;
}

static void install_signals(struct sigaction *old_int, struct sigaction *old_term)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, old_int);
    sigaction(SIGTERM, &sa, old_term);
}

static void teardown(demo_t *d)
{
    kill_all(d);
    for (size_t i = 0; i < d->nkids; i++) {
        if (d->kids[i].fd >= 0)
            close(d->kids[i].fd);
        free(d->kids[i].buf);
    }
    free(d->kids);
    for (int k = 0; k < DEMO_VERSIONS; k++)
        for (int r = 0; r <= 64; r++)
            json_decref(d->res[k][r]);
    if (d->tmp[0] != '\0')
        nftw(d->tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    rs_model_destroy(d->model);
}

int rs_cli_demo(int argc, char **argv)
{
    demo_args_t a;
    demo_t d;
    struct sigaction old_int, old_term;
    memset(&d, 0, sizeof(d));
    int rc = parse_args(argc, argv, &a);
    if (rc < 0)
        return RS_CLI_OK;
    if (rc != RS_CLI_OK)
        return rc;
    d.t0 = rs_clock_seconds();
    d.deadline = d.t0 + a.timeout_s;
    /* One machine out of the box: shared memory unless told otherwise. */
    if (strcmp(a.backend, "ucx") == 0)
        setenv("UCX_TLS", "sm", 0);
    interrupted = 0;
    install_signals(&old_int, &old_term);
    rc = load(&a, &d);
    if (rc == RS_CLI_OK)
        rc = make_directory(&a, &d);
    if (rc == RS_CLI_OK) {
        header(&a, &d);
        rc = run(&a, &d);
    }
    teardown(&d);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}
