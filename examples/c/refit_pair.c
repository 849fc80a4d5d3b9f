/* refit_pair: a trainer and an inference engine moving one model version
 * with a layout change, in plain C against the installed reshard headers.
 *
 * Two trainer ranks (forked processes) each own half of the rows (dim 0) of
 * two tensors and a replica of a third, expose them over UCX and publish
 * their shard tables to a file: directory. The inference process captures
 * what its loader would read: columns 3..8 of the weight (a narrow on dim
 * 1) cast from f32 to bf16, the whole bias, and the whole replicated norm
 * scale. It pulls the version, and the program exits 0 only when every
 * received byte equals a value computed here, independently of the library
 * (including the bf16 rounding).
 *
 *   cc -o refit_pair refit_pair.c $(pkg-config --cflags --libs reshard)
 *   ./refit_pair [DIR]    (DIR: an existing directory for the tables;
 *                          default: a fresh one under /tmp, removed after)
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <reshard/reshard.h>

#define MODEL "refit-pair"
#define VERSION 1
#define TRAINERS 2
#define ROWS 8                 /* dim 0 of weight and bias, split by rank */
#define COLS 12                /* dim 1 of the weight */
#define NARROW_START 3         /* the inference side keeps columns 3..8 */
#define NARROW_LEN 6
#define NORM 12                /* the replicated norm scale */
#define MY_ROWS (ROWS / TRAINERS)

/* The model version's values, as the trainer computes them. */
static float weight_at(int r, int c) { return (float)(r * COLS + c - 40) / 7.0f; }
static float bias_at(int r) { return 0.5f * (float)r - 1.25f; }
static float norm_at(int i) { return 1.0f + (float)i / 3.0f; }

/* ---- trainer rank ------------------------------------------------------ */

static int fail(const char *who, const char *what, rs_status_t st,
                const rs_diag_t *d)
{
    fprintf(stderr, "refit_pair %s: %s: %s: %s\n", who, what,
            rs_status_str(st), d->msg);
    return 1;
}

/* Registers this rank's rows of the weight and the bias, and the whole
 * norm scale, then publishes and serves until the version is released. */
static int trainer(const char *url, int rank)
{
    static float w[MY_ROWS * COLS], b[MY_ROWS], norm[NORM];
    const int64_t w_full[2] = {ROWS, COLS}, w_off[2] = {rank * MY_ROWS, 0};
    const int64_t w_shape[2] = {MY_ROWS, COLS};
    const int64_t b_full[1] = {ROWS}, b_off[1] = {rank * MY_ROWS};
    const int64_t b_shape[1] = {MY_ROWS}, n_full[1] = {NORM}, n_off[1] = {0};
    char who[32];
    rs_publisher_params_t pp;
    rs_publisher_h pub;
    rs_diag_t d;
    rs_status_t st;
    snprintf(who, sizeof(who), "trainer %d", rank);
    for (int r = 0; r < MY_ROWS; r++) {
        for (int c = 0; c < COLS; c++)
            w[r * COLS + c] = weight_at(rank * MY_ROWS + r, c);
        b[r] = bias_at(rank * MY_ROWS + r);
    }
    for (int i = 0; i < NORM; i++)
        norm[i] = norm_at(i);

    rs_publisher_params_init(&pp);
    pp.directory = url;
    pp.model = MODEL;
    pp.rank = rank;
    pp.world = TRAINERS;
    pp.backend = "ucx";
    if ((st = rs_publisher_create(&pp, &d, &pub)) != RS_OK)
        return fail(who, "create", st, &d);
    if ((st = rs_publisher_register(pub, "layers.0.mlp.weight", RS_DTYPE_F32,
                                    2, w_full, w_off, w_shape, w, RS_MEM_HOST,
                                    &d)) != RS_OK ||
        (st = rs_publisher_register(pub, "layers.0.mlp.bias", RS_DTYPE_F32, 1,
                                    b_full, b_off, b_shape, b, RS_MEM_HOST,
                                    &d)) != RS_OK ||
        (st = rs_publisher_register(pub, "norm.scale", RS_DTYPE_F32, 1,
                                    n_full, n_off, n_full, norm, RS_MEM_HOST,
                                    &d)) != RS_OK ||
        (st = rs_publisher_publish(pub, VERSION, &d)) != RS_OK ||
        (st = rs_publisher_wait_released(pub, VERSION, 60, &d)) != RS_OK) {
        rs_publisher_destroy(pub);
        return fail(who, "serving", st, &d);
    }
    rs_publisher_destroy(pub);
    return 0;
}

/* ---- inference rank ---------------------------------------------------- */

/* What the loader reads, as a capture: three params and their copies. */
static rs_status_t build_capture(rs_diag_t *d, rs_capture_h *cap_p)
{
    const int64_t w_shape[2] = {ROWS, NARROW_LEN}, w_stride[2] = {NARROW_LEN, 1};
    const int64_t w_src[2] = {ROWS, COLS}, b_shape[1] = {ROWS};
    const int64_t n_shape[1] = {NORM}, unit[1] = {1};
    const rs_op_t narrow = {.kind = RS_OP_NARROW,
                            .arg = {1, NARROW_START, NARROW_LEN}};
    const rs_copy_desc_t copies[3] = {
        {"layers.0.mlp.weight", "mlp.weight", &narrow, 1, 0, 2, w_shape,
         w_stride, RS_DTYPE_BF16},
        {"layers.0.mlp.bias", "mlp.bias", NULL, 0, 0, 1, b_shape, unit,
         RS_DTYPE_F32},
        {"norm.scale", "norm", NULL, 0, 0, 1, n_shape, unit, RS_DTYPE_F32},
    };
    rs_capture_h cap;
    rs_status_t st = rs_capture_create(&cap);
    if (st != RS_OK)
        return st;
    if ((st = rs_capture_add_param(cap, "mlp.weight", 2, w_shape,
                                   RS_DTYPE_BF16, d)) == RS_OK &&
        (st = rs_capture_add_param(cap, "mlp.bias", 1, b_shape, RS_DTYPE_F32,
                                   d)) == RS_OK &&
        (st = rs_capture_add_param(cap, "norm", 1, n_shape, RS_DTYPE_F32,
                                   d)) == RS_OK &&
        /* the full tensor the loader's ops assume: a trainer publishing
         * another shape is refused, not misread */
        (st = rs_capture_declare_source(cap, "layers.0.mlp.weight", 2, w_src,
                                        RS_DTYPE_F32, d)) == RS_OK)
        for (int i = 0; i < 3 && st == RS_OK; i++)
            st = rs_capture_add_copy(cap, &copies[i], d);
    if (st != RS_OK) {
        rs_capture_destroy(cap);
        return st;
    }
    *cap_p = cap;
    return RS_OK;
}

/* The bf16 nearest to f, ties to even, found by comparing the two
 * candidates around it in double precision (finite inputs). */
static double bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return (double)f;
}

static uint16_t bf16_nearest(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    uint16_t toward_zero = (uint16_t)(u >> 16), away = toward_zero + 1;
    double lo = bf16_value(toward_zero) - (double)f;
    double hi = bf16_value(away) - (double)f;
    lo = lo < 0 ? -lo : lo;
    hi = hi < 0 ? -hi : hi;
    if (lo != hi)
        return lo < hi ? toward_zero : away;
    return (toward_zero & 1) ? away : toward_zero;
}

typedef struct received {
    uint16_t weight[ROWS * NARROW_LEN]; /* bf16 */
    float bias[ROWS];
    float norm[NORM];
    int installs;
} received_t;

/* The engine would swap its weights in here: every byte has arrived and
 * passed its digest. */
static rs_status_t on_install(void *ctx, rs_exec_h exec)
{
    (void)exec;
    ((received_t *)ctx)->installs++;
    return RS_OK;
}

/* Compares every received element with the value computed here. */
static int check(const received_t *got)
{
    int bad = 0;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < NARROW_LEN; c++) {
            uint16_t want = bf16_nearest(weight_at(r, NARROW_START + c));
            if (got->weight[r * NARROW_LEN + c] != want && bad++ < 5)
                fprintf(stderr, "mlp.weight[%d][%d] = 0x%04x, want 0x%04x\n",
                        r, c, got->weight[r * NARROW_LEN + c], want);
        }
    for (int r = 0; r < ROWS; r++) {
        float want = bias_at(r);
        if (memcmp(&got->bias[r], &want, sizeof(want)) != 0 && bad++ < 5)
            fprintf(stderr, "mlp.bias[%d] = %g, want %g\n", r,
                    (double)got->bias[r], (double)want);
    }
    for (int i = 0; i < NORM; i++) {
        float want = norm_at(i);
        if (memcmp(&got->norm[i], &want, sizeof(want)) != 0 && bad++ < 5)
            fprintf(stderr, "norm[%d] = %g, want %g\n", i,
                    (double)got->norm[i], (double)want);
    }
    return bad;
}

static int inference(const char *url, received_t *got)
{
    rs_receiver_params_t rp;
    rs_capture_h cap = NULL;
    rs_receiver_h recv = NULL;
    rs_pull_result_t res;
    rs_diag_t d;
    rs_status_t st = build_capture(&d, &cap);
    if (st != RS_OK)
        return fail("inference", "capture", st, &d);
    rs_receiver_params_init(&rp);
    rp.directory = url;
    rp.model = MODEL;
    rp.backend = "ucx";
    rp.discover_timeout_s = 60;
    rp.release_after = 1;      /* lets the trainers go on */
    rp.install = on_install;
    rp.install_ctx = got;
    if ((st = rs_receiver_create(&rp, cap, &d, &recv)) == RS_OK &&
        (st = rs_receiver_bind(recv, 0, got->weight, sizeof(got->weight),
                               RS_MEM_HOST, &d)) == RS_OK &&
        (st = rs_receiver_bind(recv, 1, got->bias, sizeof(got->bias),
                               RS_MEM_HOST, &d)) == RS_OK &&
        (st = rs_receiver_bind(recv, 2, got->norm, sizeof(got->norm),
                               RS_MEM_HOST, &d)) == RS_OK)
        st = rs_receiver_pull(recv, VERSION, &d, &res);
    rs_receiver_destroy(recv);
    rs_capture_destroy(cap);
    if (st != RS_OK)
        return fail("inference", "pull", st, &d);
    printf("refit_pair: version %lld: %llu bytes read over ucx from %d "
           "trainers\n", (long long)res.version,
           (unsigned long long)res.exec.bytes, TRAINERS);
    return 0;
}

/* ---- the pair ---------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *sb, int flag,
                        struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Waits for the trainers; after a failed pull they are stopped first. */
static int reap(const pid_t *pids, int stop)
{
    int rc = 0;
    for (int i = 0; i < TRAINERS; i++) {
        int status = 0;
        if (pids[i] <= 0)
            continue;
        if (stop)
            kill(pids[i], SIGTERM);
        if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            rc = 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    char tmp[] = "/tmp/refit_pair-XXXXXX", url[4200];
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmp);
    pid_t pids[TRAINERS] = {0};
    static received_t got;
    if (dir == NULL) {
        perror("refit_pair: mkdtemp");
        return 1;
    }
    snprintf(url, sizeof(url), "file:%s", dir);
    fflush(stdout);
    /* fork before any reshard call: UCX state is not carried over fork */
    for (int r = 0; r < TRAINERS; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(trainer(url, r));
        if (pids[r] < 0)
            perror("refit_pair: fork");
    }
    memset(&got, 0xEE, sizeof(got));
    got.installs = 0;
    int rc = pids[0] > 0 && pids[1] > 0 ? inference(url, &got) : 1;
    rc |= reap(pids, rc != 0);
    if (rc == 0 && got.installs != 1) {
        fprintf(stderr, "refit_pair: install ran %d times\n", got.installs);
        rc = 1;
    }
    if (rc == 0 && check(&got) != 0)
        rc = 1;
    if (argc <= 1)
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (rc == 0)
        printf("refit_pair: every byte matches\n");
    return rc;
}
