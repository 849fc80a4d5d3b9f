/* ucx transport benchmark: read bandwidth of rs_transport (backend ucx,
 * reading from a ucx exposer in a child process) against `ucx_perftest -t
 * ucp_get` run as a server and client pair on loopback, at the same message
 * sizes and UCX_TLS, as a ratio; and the per-descriptor cost of 100k small
 * reads against ucx_perftest's 64-byte get rate. ucx_perftest reads memory
 * UCX allocated itself (shared memory segments the reader maps, no target
 * involved); it is also run on heap memory (UCX_ALLOC_PRIO=heap), which is
 * what an exposer registers, as the like-for-like baseline.
 * Usage: ucx_bench [tls...]   (default: sm tcp) */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "reshard/expose.h"
#include "reshard/transport.h"

#define BENCH_NAME "ucx_bench"
#include "bench_util.h"

#define REGION_BYTES (64u << 20)
#define SMALL_READS 100000
#define SMALL_BYTES 64
#define SMALL_STRIDE 256

static int io_all(int fd, void *buf, size_t n, int writing)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ---- the exposer child -------------------------------------------------- */

typedef struct peer_proc {
    pid_t pid;
    int done_fd;
    void *blob;
    size_t blob_len;
} peer_proc_t;

static void child_main(int out_fd, int done_fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    uint8_t *mem = malloc(REGION_BYTES);
    for (size_t i = 0; mem != NULL && i < REGION_BYTES; i++)
        mem[i] = (uint8_t)(i * 131 + 7);
    rs_diag_t d;
    rs_exposer_h x;
    const void *blob;
    size_t len;
    if (mem == NULL || rs_exposer_create("ucx", &d, &x) != RS_OK ||
        rs_exposer_add_region(x, 0x10000000, mem, REGION_BYTES, RS_MEM_HOST, &d) != RS_OK ||
        rs_exposer_start(x, &d) != RS_OK ||
        rs_exposer_blob(x, &blob, &len) != RS_OK) {
        fprintf(stderr, "exposer: %s\n", d.msg);
        _exit(3);
    }
    uint64_t len64 = len;
    if (io_all(out_fd, &len64, 8, 1) != 0 ||
        io_all(out_fd, (void *)blob, len, 1) != 0)
        _exit(4);
    char c;
    while (read(done_fd, &c, 1) < 0 && errno == EINTR)
        ;
    rs_exposer_destroy(x);
    free(mem);
    _exit(0);
}

static int peer_start(peer_proc_t *p)
{
    int out[2], done[2];
    if (pipe(out) != 0 || pipe(done) != 0)
        return -1;
    fflush(NULL);
    p->pid = fork();
    if (p->pid == 0) {
        close(out[0]);
        close(done[1]);
        child_main(out[1], done[0]);
    }
    close(out[1]);
    close(done[0]);
    p->done_fd = done[1];
    uint64_t len;
    if (p->pid < 0 || io_all(out[0], &len, 8, 0) != 0) {
        close(out[0]);
        return -1;
    }
    p->blob = malloc(len);
    p->blob_len = len;
    int rc = io_all(out[0], p->blob, len, 0);
    close(out[0]);
    return rc;
}

static void peer_stop(peer_proc_t *p)
{
    close(p->done_fd);
    if (p->pid > 0)
        while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    free(p->blob);
}

/* ---- our transport ----------------------------------------------------------- */

static rs_transport_h open_transport(const peer_proc_t *p)
{
    rs_transport_params_t tp;
    rs_transport_params_init(&tp);
    tp.backend = "ucx";
    rs_transport_h t;
    rs_diag_t d;
    rs_peer_t peer = {"bench", p->pid, NULL, 0, p->blob, p->blob_len};
    if (rs_transport_create(&tp, &d, &t) != RS_OK ||
        rs_transport_connect(t, 0, &peer, &d) != RS_OK) {
        fprintf(stderr, "transport: %s\n", d.msg);
        exit(1);
    }
    return t;
}

static void run(rs_transport_h t, const rs_read_t *r, size_t n)
{
    rs_diag_t d;
    if (rs_transport_post(t, r, n, &d) != RS_OK ||
        rs_transport_wait(t, 60, &d) != RS_OK) {
        fprintf(stderr, "read: %s\n", d.msg);
        exit(1);
    }
}

/* MiB/s of `iters` reads of `size` bytes, one read per post and wait, as
 * ucx_perftest issues one get at a time. */
static double our_bandwidth(rs_transport_h t, uint8_t *dst, uint64_t size,
                            unsigned iters)
{
    rs_read_t r = {0, 0x10000000, dst, size};
    for (unsigned i = 0; i < 3; i++)
        run(t, &r, 1);
    double t0 = now_s();
    for (unsigned i = 0; i < iters; i++)
        run(t, &r, 1);
    double dt = now_s() - t0;
    if (dst[size - 1] != (uint8_t)((size - 1) * 131 + 7)) {
        fprintf(stderr, "read: wrong bytes\n");
        exit(1);
    }
    return (double)size * iters / dt / (1 << 20);
}

/* ---- ucx_perftest ------------------------------------------------------------ */

typedef struct perf {
    double mbps;    /* overall bandwidth, MiB/s */
    double msgrate; /* overall messages per second */
} perf_t;

/* Runs a server and a client of ucx_perftest on loopback, on heap memory
 * when `heap` is set; 0 on success. */
static int perftest(uint64_t size, unsigned iters, int heap, perf_t *out)
{
    const char *env = heap ? "UCX_ALLOC_PRIO=heap " : "";
    static int port = 0;
    if (port == 0)
        port = 20000 + (int)(getpid() % 20000);
    port++;
    char args[160];
    snprintf(args, sizeof(args), "-p %d -t ucp_get -s %llu -n %u -w %u",
             port, (unsigned long long)size, iters, iters / 10 + 1);
    fflush(NULL);
    pid_t server = fork();
    if (server == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char cmd[256];
        snprintf(cmd, sizeof(cmd),
                 "exec env %sucx_perftest %s >/dev/null 2>&1", env, args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    usleep(500000); /* let the server listen */
    char cmd[256], line[512];
    snprintf(cmd, sizeof(cmd), "env %sucx_perftest 127.0.0.1 %s 2>/dev/null",
             env, args);
    FILE *f = popen(cmd, "r");
    int found = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        double v[7];
        if (sscanf(line, "Final: %lf %lf %lf %lf %lf %lf %lf %lf", &v[0],
                   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &out->msgrate)
            == 8) {
            out->mbps = v[5];
            found = 1;
        }
    }
    if (f != NULL)
        pclose(f);
    kill(server, SIGTERM);
    while (waitpid(server, NULL, 0) < 0 && errno == EINTR)
        ;
    return found ? 0 : -1;
}

/* ucx_perftest gets over tcp take about a millisecond each here whatever
 * their size, so its runs there are capped to keep the bench short. */
static unsigned perf_iters(const char *tls, unsigned iters)
{
    return strcmp(tls, "tcp") == 0 && iters > 2000 ? 2000 : iters;
}

/* ---- sections ----------------------------------------------------------------- */

static void bandwidth_section(const char *tls, rs_transport_h t, uint8_t *dst)
{
    static const uint64_t sizes[] = {64u << 10, 1u << 20, 16u << 20};
    for (size_t k = 0; k < 3; k++) {
        uint64_t size = sizes[k];
        uint64_t budget = strcmp(tls, "tcp") == 0 ? 512u << 20 : 2048u << 20;
        unsigned iters = (unsigned)(budget / size);
        iters = iters < 20 ? 20 : iters;
        perf_t p, h;
        double ours = our_bandwidth(t, dst, size, iters);
        unsigned pi = perf_iters(tls, iters);
        int have = perftest(size, pi, 0, &p) == 0;
        int have_heap = perftest(size, pi, 1, &h) == 0;
        printf("%-4s %9llu B  ours %9.1f MiB/s", tls,
               (unsigned long long)size, ours);
        if (have)
            printf("  ucx_perftest %9.1f MiB/s ratio %.3f", p.mbps,
                   ours / p.mbps);
        else
            printf("  ucx_perftest failed");
        if (have_heap)
            printf("  | on heap %9.1f MiB/s ratio %.3f\n", h.mbps,
                   ours / h.mbps);
        else
            printf("  | on heap failed\n");
    }
}

static void small_section(const char *tls, rs_transport_h t)
{
    rs_read_t *r = calloc(SMALL_READS, sizeof(*r));
    uint8_t *dst = malloc((size_t)SMALL_READS * SMALL_STRIDE);
    for (size_t i = 0; i < SMALL_READS; i++) {
        /* gaps on both sides, so no two reads merge into one get */
        r[i].src_addr = 0x10000000 + i * SMALL_STRIDE;
        r[i].dst = dst + i * SMALL_STRIDE;
        r[i].nbytes = SMALL_BYTES;
    }
    run(t, r, SMALL_READS); /* warm-up */
    rs_diag_t d;
    double t0 = now_s();
    if (rs_transport_post(t, r, SMALL_READS, &d) != RS_OK)
        exit(1);
    double t1 = now_s();
    if (rs_transport_wait(t, 60, &d) != RS_OK) {
        fprintf(stderr, "small reads: %s\n", d.msg);
        exit(1);
    }
    double t2 = now_s();
    perf_t p;
    int have = perftest(SMALL_BYTES, perf_iters(tls, SMALL_READS), 0,
                        &p) == 0;
    double per = (t2 - t0) / SMALL_READS * 1e9;
    printf("%-4s %d x %d B reads: post %.1f ns/read, wait (issue + "
           "complete) %.1f ns/read, total %.1f ns/read", tls, SMALL_READS,
           SMALL_BYTES, (t1 - t0) / SMALL_READS * 1e9,
           (t2 - t1) / SMALL_READS * 1e9, per);
    if (have)
        printf("; ucx_perftest %d B get %.1f ns/get, ratio %.3f\n",
               SMALL_BYTES, 1e9 / p.msgrate, (1e9 / p.msgrate) / per);
    else
        printf("; ucx_perftest failed\n");
    free(dst);
    free(r);
}

int main(int argc, char **argv)
{
    static const char *defaults[] = {"sm", "tcp"};
    const char **tls = argc > 1 ? (const char **)argv + 1 : defaults;
    int ntls = argc > 1 ? argc - 1 : 2;
    uint8_t *dst = malloc(16u << 20);
    printf("ucx_bench: rs_transport (ucx) reads vs ucx_perftest -t ucp_get, "
           "loopback; ratio > 1 means faster than ucx_perftest\n");
    for (int k = 0; k < ntls; k++) {
        setenv("UCX_TLS", tls[k], 1);
        peer_proc_t p = {0};
        if (peer_start(&p) != 0) {
            fprintf(stderr, "UCX_TLS=%s: exposer child failed\n", tls[k]);
            return 1;
        }
        rs_transport_h t = open_transport(&p);
        bandwidth_section(tls[k], t, dst);
        small_section(tls[k], t);
        rs_transport_destroy(t);
        peer_stop(&p);
    }
    free(dst);
    return 0;
}
