/* `reshard publish`: one trainer rank of a layout serving its shards. Builds
 * the rank's shards in one buffer laid out as the layout's address plan
 * (malloc'd, or from the publisher's exposer with --staging in_place),
 * fills them with the demo contents, publishes each version through the
 * directory and waits for its release before refilling the same buffers
 * for the next one (same addresses, so receivers keep their plans). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "cli.h"

typedef struct pub_args {
    const char *directory, *model, *layout, *config, *backend, *staging;
    const char *cuts_file;
    uint64_t version, rank, world, versions, replica;
    double timeout_s;
    int have_version, have_rank, have_world, no_digests, cut_aligned;
    int have_staging, quantize_wanted;
    uint64_t fraction_q; /* --changed-fraction (rs_cli_fill_box); 0 none */
    const char **quantize; /* the --quantize values (argv's strings) */
    size_t num_quantize;
    uint64_t delta_keep; /* --delta-keep (default 2) */
    int have_delta_keep;
} pub_args_t;

typedef struct pub_shard {
    const char *tensor; /* borrowed from the model manifest */
    rs_dtype_t dtype;
    int ndim;
    int64_t full_shape[RS_MAX_DIMS], offset[RS_MAX_DIMS], shape[RS_MAX_DIMS];
    uint64_t addr, nbytes;
    unsigned char *ptr;
} pub_shard_t;

typedef struct pub_state {
    rs_model_h model;
    rs_layout_t layout;
    pub_shard_t *shards;
    size_t n, cap;
    unsigned char *buf;
    int buf_owned;      /* buf is ours to free (not the publisher's) */
    uint64_t bytes;
    rs_publisher_h pub;
} pub_state_t;

enum { OPT_DIRECTORY = 256, OPT_MODEL, OPT_VERSION, OPT_RANK, OPT_WORLD,
       OPT_LAYOUT, OPT_CONFIG, OPT_BACKEND, OPT_VERSIONS, OPT_TIMEOUT,
       OPT_NO_DIGESTS, OPT_REPLICA, OPT_STAGING, OPT_CUT_ALIGNED, OPT_CUTS,
       OPT_QUANTIZE, OPT_QUANTIZE_WANTED, OPT_CHANGED_FRACTION,
       OPT_DELTA_KEEP };

static const struct option long_opts[] = {
    {"directory", required_argument, NULL, OPT_DIRECTORY},
    {"model", required_argument, NULL, OPT_MODEL},
    {"version", required_argument, NULL, OPT_VERSION},
    {"rank", required_argument, NULL, OPT_RANK},
    {"world", required_argument, NULL, OPT_WORLD},
    {"layout", required_argument, NULL, OPT_LAYOUT},
    {"model-config", required_argument, NULL, OPT_CONFIG},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"versions", required_argument, NULL, OPT_VERSIONS},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"no-digests", no_argument, NULL, OPT_NO_DIGESTS},
    {"replica", required_argument, NULL, OPT_REPLICA},
    {"staging", required_argument, NULL, OPT_STAGING},
    {"cut-aligned", no_argument, NULL, OPT_CUT_ALIGNED},
    {"cuts", required_argument, NULL, OPT_CUTS},
    {"quantize", required_argument, NULL, OPT_QUANTIZE},
    {"quantize-wanted", no_argument, NULL, OPT_QUANTIZE_WANTED},
    {"changed-fraction", required_argument, NULL, OPT_CHANGED_FRACTION},
    {"delta-keep", required_argument, NULL, OPT_DELTA_KEEP},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void pub_usage(FILE *out)
{
    fprintf(out,
        "usage: reshard publish --directory D --model M --version V --rank R\n"
        "                       --world N --layout LAYOUT --model-config CONFIG.json\n"
        "                       [--backend ucx|cma] [--versions K] [--timeout S]\n"
        "                       [--no-digests] [--replica K]\n"
        "                       [--staging caller|in_place|arena]\n"
        "                       [--cut-aligned] [--cuts FILE]\n"
        "                       [--quantize GLOB=SPEC]... [--quantize-wanted]\n"
        "                       [--changed-fraction F] [--delta-keep K]\n"
        "\n"
        "Serves trainer rank R's shards of LAYOUT with deterministic contents\n"
        "(docs/formats.md, \"Demo contents\"): publishes version V, waits until\n"
        "it is released, then refills the same buffers for V+1 ... V+K-1.\n"
        "\n"
        "options:\n"
        "  --directory D       file:DIR (created if missing) or\n"
        "                      redis://[:password@]host:port[?timeout=S&password_file=F]\n"
        "                      (or the password in RESHARD_REDIS_PASSWORD)\n"
        "  --model M           model name in the directory\n"
        "  --version V         first version to publish (>= 0)\n"
        "  --rank R            this trainer rank (0 <= R < N)\n"
        "  --world N           trainer ranks; must equal the layout's world\n"
        "  --layout LAYOUT     fsdp:N or megatron:tp=T,pp=P,ep=E,dp=D,etp=X\n"
        "  --model-config FILE a Hugging Face config.json (examples/models/)\n"
        "  --backend B         exposer: ucx (default; UCX_TLS picks the wire) or cma\n"
        "  --versions K        versions to publish one after another (default 1)\n"
        "  --timeout S         wait at most S seconds for each release, and for an\n"
        "                      unreachable directory when publishing (default 300)\n"
        "  --no-digests        publish tables without shard digests (receivers that\n"
        "                      verify, the default, refuse them)\n"
        "  --replica K         serve as data-parallel replica K of rank R (default\n"
        "                      0; session trainer-R-rK): replicas publish the same\n"
        "                      shards to slot R, and receivers fail over between\n"
        "                      them. A rank restarted with the same --replica\n"
        "                      takes its place in the slot again\n"
        "  --staging S         where the served bytes live (default caller):\n"
        "                      caller    the shards' own buffer, registered as\n"
        "                                it is (ucx on one machine: reads are\n"
        "                                emulated by UCX, answered by this process)\n"
        "                      in_place  the shards held in memory the exposer\n"
        "                                allocates (ucx: shared memory readers on\n"
        "                                this machine copy one-sided); no copy\n"
        "                      arena     each version copied from the shards into\n"
        "                                such memory before publishing, so the\n"
        "                                buffer is free again at once (one local\n"
        "                                copy per version)\n"
        "                      When UCX falls back to ordinary memory (sysv or\n"
        "                      /dev/shm limits) a notice says so once\n"
        "  --cut-aligned       before staging each version, read the cuts every\n"
        "                      receiver announced in the directory (`reshard pull`\n"
        "                      announces) and serve each shard as the sub-boxes\n"
        "                      between them, so every receiver reads its slices\n"
        "                      as a few whole runs; implies --staging arena (no\n"
        "                      other staging). An unusable record is reported\n"
        "                      once, naming its holder, and left out\n"
        "  --cuts FILE         also cut at the cuts of a reshard.cuts.v1 file\n"
        "                      (`reshard cuts` writes one for an inference\n"
        "                      layout); implies --staging arena\n"
        "  --quantize GLOB=SPEC also serve an FP8 copy of every tensor whose name\n"
        "                      matches GLOB (fnmatch: '*' matches dots too), as\n"
        "                      NAME#SPEC with its scales NAME#SPEC#scale, SPEC\n"
        "                      being fp8_block:RxC:FMT, fp8_channel:FMT or\n"
        "                      fp8_tensor:FMT with FMT f8e4m3 or f8e5m2; each\n"
        "                      shard serves the blocks wholly inside it, quantized\n"
        "                      at each version (receivers quantize the blocks that\n"
        "                      straddle shards). Repeatable; implies --staging\n"
        "                      arena. Example:\n"
        "                      --quantize '*.experts.*.weight=fp8_block:128x128:f8e4m3'\n"
        "  --quantize-wanted   also serve the FP8 copies receivers ask for: before\n"
        "                      staging each version, read their cuts records\n"
        "                      (`reshard pull` announces the quantized copies of\n"
        "                      its capture), and those a --cuts FILE lists;\n"
        "                      implies --staging arena\n"
        RS_CLI_FRACTION_HELP("`pull --check` needs the same F")
        "  --delta-keep K      in arena staging, serve beside each version a delta\n"
        "                      of every shard against the version before, and\n"
        "                      keep those of the last K versions (default 2; 0:\n"
        "                      none); K above 0 implies --staging arena\n"
        "                      (docs/delta.md; receivers: pull --delta)\n"
        "  -h, --help          show this help and exit\n"
        "\n"
        "A directory outage while serving is reported (one line when it begins,\n"
        "one when it ends) and ridden out: the shards stay served, heartbeats\n"
        "back off and resume, the release wait goes on until --timeout.\n"
        "\n"
        "exit status: 0 every version published and released; 1 publishing\n"
        "failed or a release did not come in time; 2 bad usage or input.\n");
}

static int usage_error(const char *fmt, const char *what)
{
    return rs_cli_usage_error("publish", fmt, what);
}

static int parse_u64(const char *opt, const char *arg, uint64_t *out, int *have)
{
    int rc = rs_cli_take_count("publish", opt, arg, out);
    if (rc != RS_CLI_OK)
        return rc;
    if (have != NULL)
        *have = 1;
    return RS_CLI_OK;
}

static int parse_timeout(const char *arg, double *out)
{
    char *end;
    *out = strtod(arg, &end);
    if (end == arg || *end != '\0' || !(*out > 0) || *out > 1e7)
        return usage_error("--timeout must be a positive number of seconds, "
                           "got '%s'", arg);
    return RS_CLI_OK;
}

/* One more --quantize entry (checked by rs_publisher_create, which names
 * a bad one). */
static int add_quantize(pub_args_t *a, const char *arg)
{
    const char **grown = realloc(a->quantize, (a->num_quantize + 1) *
                                                  sizeof(*grown));
    if (grown == NULL) {
        fprintf(stderr, "reshard publish: out of memory\n");
        return RS_CLI_INCOMPLETE;
    }
    grown[a->num_quantize++] = arg;
    a->quantize = grown;
    return RS_CLI_OK;
}

/* Staging arena is implied by the options that cut or quantize it. */
static int wants_arena(const pub_args_t *a)
{
    return a->cut_aligned || a->cuts_file != NULL || a->num_quantize > 0 ||
           a->quantize_wanted || (a->have_delta_keep && a->delta_keep > 0);
}

static int take_option(void *args, int c, const char *arg)
{
    pub_args_t *a = args;
    switch (c) {
    case OPT_DIRECTORY: a->directory = arg; return RS_CLI_OK;
    case OPT_MODEL: a->model = arg; return RS_CLI_OK;
    case OPT_LAYOUT: a->layout = arg; return RS_CLI_OK;
    case OPT_CONFIG: a->config = arg; return RS_CLI_OK;
    case OPT_BACKEND: a->backend = arg; return RS_CLI_OK;
    case OPT_STAGING: a->staging = arg; a->have_staging = 1; return RS_CLI_OK;
    case OPT_CUT_ALIGNED: a->cut_aligned = 1; return RS_CLI_OK;
    case OPT_CUTS: a->cuts_file = arg; return RS_CLI_OK;
    case OPT_QUANTIZE: return add_quantize(a, arg);
    case OPT_QUANTIZE_WANTED: a->quantize_wanted = 1; return RS_CLI_OK;
    case OPT_CHANGED_FRACTION:
        return rs_cli_take_fraction("publish", arg, &a->fraction_q);
    case OPT_NO_DIGESTS: a->no_digests = 1; return RS_CLI_OK;
    case OPT_DELTA_KEEP: return parse_u64("--delta-keep", arg, &a->delta_keep,
                                          &a->have_delta_keep);
    case OPT_VERSION: return parse_u64("--version", arg, &a->version,
                                       &a->have_version);
    case OPT_RANK: return parse_u64("--rank", arg, &a->rank, &a->have_rank);
    case OPT_WORLD: return parse_u64("--world", arg, &a->world,
                                     &a->have_world);
    case OPT_VERSIONS: return parse_u64("--versions", arg, &a->versions,
                                        NULL);
    case OPT_TIMEOUT: return parse_timeout(arg, &a->timeout_s);
    case OPT_REPLICA: return parse_u64("--replica", arg, &a->replica, NULL);
    default: return usage_error("%s", "unknown option");
    }
}

static int check_args(const pub_args_t *a)
{
    if (a->directory == NULL || a->model == NULL || !a->have_version ||
        !a->have_rank || !a->have_world || a->layout == NULL ||
        a->config == NULL)
        return usage_error("%s", "--directory, --model, --version, --rank, "
                           "--world, --layout and --model-config are required");
    if (strcmp(a->backend, "ucx") != 0 && strcmp(a->backend, "cma") != 0)
        return usage_error("--backend takes ucx or cma, got '%s'", a->backend);
    if (rs_cli_staging(a->staging) < 0)
        return usage_error("--staging takes caller, in_place or arena, got "
                           "'%s'", a->staging);
    if (wants_arena(a) && rs_cli_staging(a->staging) != RS_STAGING_ARENA)
        return usage_error("--cut-aligned, --cuts, --quantize, "
                           "--quantize-wanted and --delta-keep stage into the "
                           "arena: not with --staging %s", a->staging);
    if (a->versions == 0)
        return usage_error("%s", "--versions must be at least 1");
    if (a->delta_keep > 16)
        return usage_error("%s", "--delta-keep must be 0 to 16");
    if (a->world == 0 || a->rank >= a->world)
        return usage_error("%s", "--rank must be below --world");
    return RS_CLI_OK;
}

static int parse_args(int argc, char **argv, pub_args_t *a)
{
    int rc;
    a->backend = "ucx";
    a->staging = "caller";
    a->versions = 1;
    a->delta_keep = 2;
    a->timeout_s = 300;
    rc = rs_cli_options("publish", argc, argv, long_opts, pub_usage,
                        take_option, a);
    if (rc != RS_CLI_OK)
        return rc;
    if (!a->have_staging && wants_arena(a))
        a->staging = "arena";
    return check_args(a);
}

static rs_status_t on_shard(void *ctx, const rs_shard_desc_t *d)
{
    pub_state_t *s = ctx;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        pub_shard_t *grown = realloc(s->shards, cap * sizeof(*grown));
        if (grown == NULL)
            return RS_ERR_NO_MEMORY;
        s->shards = grown;
        s->cap = cap;
    }
    pub_shard_t *p = &s->shards[s->n++];
    uint64_t numel = 1;
    memset(p, 0, sizeof(*p));
    p->tensor = d->tensor;
    p->dtype = d->dtype;
    p->ndim = d->ndim;
    for (int i = 0; i < d->ndim; i++) {
        p->full_shape[i] = d->full_shape[i];
        p->offset[i] = d->offset[i];
        p->shape[i] = d->shape[i];
        numel *= (uint64_t)d->shape[i];
    }
    p->addr = d->addr;
    p->nbytes = numel * d->elsize;
    return RS_OK;
}

/* One page-aligned buffer holding every shard at its planned offset: the
 * publisher's memory in place, else our own. */
static int allocate(const pub_args_t *a, pub_state_t *s)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->shards[i].addr < lo)
            lo = s->shards[i].addr;
        if (s->shards[i].addr + s->shards[i].nbytes > hi)
            hi = s->shards[i].addr + s->shards[i].nbytes;
        s->bytes += s->shards[i].nbytes;
    }
    uint64_t span = s->n ? hi - lo : 0;
    rs_diag_t diag;
    rs_diag_clear(&diag);
    if (rs_cli_staging(a->staging) == RS_STAGING_IN_PLACE) {
        if (rs_publisher_alloc(s->pub, span ? span : 1, &diag,
                               (void **)&s->buf) != RS_OK) {
            fprintf(stderr, "reshard publish: %s\n", diag.msg);
            return 0;
        }
    } else if (posix_memalign((void **)&s->buf, 4096,
                              span ? (size_t)span : 1) != 0) {
        fprintf(stderr, "reshard publish: cannot allocate %llu bytes of "
                "shards\n", (unsigned long long)span);
        return 0;
    } else {
        s->buf_owned = 1;
    }
    for (size_t i = 0; i < s->n; i++)
        s->shards[i].ptr = s->buf + (s->shards[i].addr - lo);
    return 1;
}

static int build_shards(const pub_args_t *a, pub_state_t *s)
{
    rs_diag_t diag;
    int rc = rs_cli_load_layout("publish", "--layout", a->config, a->layout,
                                0, &s->model, &s->layout);
    if (rc != RS_CLI_OK)
        return rc;
    if ((uint64_t)s->layout.world != a->world) {
        fprintf(stderr, "reshard publish: --world %llu does not match the "
                "layout '%s', which has %lld ranks\n",
                (unsigned long long)a->world, a->layout,
                (long long)s->layout.world);
        return RS_CLI_USAGE;
    }
    rs_diag_clear(&diag);
    rs_status_t st = rs_layout_trainer_shards(s->model, &s->layout,
                                              (int64_t)a->rank, on_shard, s,
                                              &diag);
    if (st != RS_OK)
        return rs_cli_input_error("publish", &diag, st, "building the shards");
    for (size_t i = 0; i < s->n; i++) {
        if (!rs_cli_fill_supported(s->shards[i].dtype)) {
            fprintf(stderr, "reshard publish: tensor '%s': dtype %s has no "
                    "demo contents (bf16, f16, f32, f64 only)\n",
                    s->shards[i].tensor, rs_dtype_name(s->shards[i].dtype));
            return RS_CLI_USAGE;
        }
    }
    return RS_CLI_OK;
}

static void fill_all(pub_state_t *s, int64_t version, uint64_t fraction_q)
{
    for (size_t i = 0; i < s->n; i++) {
        const pub_shard_t *p = &s->shards[i];
        rs_cli_fill_box(p->tensor, p->dtype, version, fraction_q, p->ndim,
                        p->full_shape, p->offset, p->shape, p->ptr);
    }
}

static int runtime_error(const pub_args_t *a, const rs_diag_t *diag,
                         rs_status_t st, const char *what)
{
    fprintf(stderr, "reshard publish: rank %llu: %s: %s\n",
            (unsigned long long)a->rank, what,
            diag->msg[0] ? diag->msg : rs_status_str(st));
    return st == RS_ERR_INPUT || st == RS_ERR_INVALID_ARG ? RS_CLI_USAGE
                                                          : RS_CLI_INCOMPLETE;
}

static int open_publisher(const pub_args_t *a, pub_state_t *s)
{
    rs_publisher_params_t pp;
    rs_diag_t diag;
    rs_status_t st;
    rs_publisher_params_init(&pp);
    pp.directory = a->directory;
    pp.model = a->model;
    pp.rank = (int64_t)a->rank;
    pp.replica = (int64_t)a->replica;
    pp.world = (int64_t)a->world;
    pp.backend = a->backend;
    pp.digests = !a->no_digests;
    pp.publish_retry_s = a->timeout_s; /* ride out an outage that long */
    pp.staging = rs_cli_staging(a->staging);
    pp.cut_aligned = a->cut_aligned;
    pp.delta_keep = (int64_t)a->delta_keep;
    pp.cuts_file = a->cuts_file;
    pp.quantize = a->quantize;
    pp.num_quantize = a->num_quantize;
    pp.quantize_wanted = a->quantize_wanted;
    rs_diag_clear(&diag);
    if ((st = rs_publisher_create(&pp, &diag, &s->pub)) != RS_OK) {
        char shown[512];
        rs_dir_redact_url(a->directory, shown, sizeof(shown));
        return runtime_error(a, &diag, st, shown);
    }
    if (!allocate(a, s))
        return RS_CLI_INCOMPLETE;
    for (size_t i = 0; i < s->n; i++) {
        const pub_shard_t *p = &s->shards[i];
        st = rs_publisher_register(s->pub, p->tensor, p->dtype, p->ndim,
                                   p->full_shape, p->offset, p->shape, p->ptr,
                                   RS_MEM_HOST, &diag);
        if (st != RS_OK)
            return runtime_error(a, &diag, st, "registering");
    }
    return RS_CLI_OK;
}

/* Publish, wait for the release, refill in place, next version. */
static int serve(const pub_args_t *a, pub_state_t *s)
{
    rs_diag_t diag;
    rs_status_t st;
    for (uint64_t k = 0; k < a->versions; k++) {
        int64_t v = (int64_t)(a->version + k);
        char what[64];
        fill_all(s, v, a->fraction_q);
        rs_diag_clear(&diag);
        snprintf(what, sizeof(what), "version %lld", (long long)v);
        if ((st = rs_publisher_publish(s->pub, v, &diag)) != RS_OK)
            return runtime_error(a, &diag, st, what);
        char who[64] = "";
        if (a->replica > 0)
            snprintf(who, sizeof(who), " replica %llu",
                     (unsigned long long)a->replica);
        char cut[96] = "";
        if (a->num_quantize > 0 || a->quantize_wanted)
            snprintf(cut, sizeof(cut), ", served as %zu entries with the "
                     "quantized ones", rs_publisher_num_served(s->pub));
        else if (a->cut_aligned || a->cuts_file != NULL)
            snprintf(cut, sizeof(cut), ", served as %zu sub-boxes",
                     rs_publisher_num_served(s->pub));
        printf("reshard publish: rank %llu%s published version %lld (%zu "
               "shards, %llu bytes%s)\n", (unsigned long long)a->rank, who,
               (long long)v, s->n, (unsigned long long)s->bytes, cut);
        fflush(stdout);
        st = rs_publisher_wait_released(s->pub, v, a->timeout_s, &diag);
        if (st != RS_OK)
            return runtime_error(a, &diag, st, what);
    }
    return RS_CLI_OK;
}

int rs_cli_publish(int argc, char **argv)
{
    pub_args_t a;
    pub_state_t s;
    memset(&a, 0, sizeof(a));
    memset(&s, 0, sizeof(s));
    int rc = parse_args(argc, argv, &a);
    if (rc < 0)
        return RS_CLI_OK;
    /* cma readers are siblings, not ancestors: let any of them attach where
     * the Yama LSM would otherwise refuse process_vm_readv. */
    if (rc == RS_CLI_OK && strcmp(a.backend, "cma") == 0)
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    if (rc == RS_CLI_OK)
        rc = build_shards(&a, &s);
    if (rc == RS_CLI_OK)
        rc = open_publisher(&a, &s);
    if (rc == RS_CLI_OK)
        rc = serve(&a, &s);
    rs_publisher_destroy(s.pub); /* with an in-place buffer */
    if (s.buf_owned)
        free(s.buf);
    free(s.shards);
    free(a.quantize);
    rs_model_destroy(s.model);
    return rc;
}
