/* Transport test worlds: the pattern, the in-process and child-hosted
 * region sets, and cleanup of the child on every path. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reshard/expose.h"
#include "transport_fixture.h"

const tfx_backend_t tfx_backends[] = {
    {"local", 0, 0, NULL, 0},
    {"local-mt", 1, 0, NULL, 0},
    {"local-mt", 3, 0, NULL, 0},
    {"cma", 0, 1, NULL, 0},
};
const size_t tfx_nbackends = sizeof(tfx_backends) / sizeof(tfx_backends[0]);

const tfx_backend_t tfx_ucx_backends[] = {
    {"ucx", 0, 1, "sm", 0},
    {"ucx", 0, 1, "tcp", 0},
};
const size_t tfx_nucx_backends =
    sizeof(tfx_ucx_backends) / sizeof(tfx_ucx_backends[0]);

/* The child answers within this long or the world fails to open. */
#define CHILD_ANSWER_MS 30000
/* A child's failure message on the pipe: UINT64_MAX, then this many bytes. */
#define CHILD_WHY_LEN 256

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t word_at(uint32_t session, size_t region, uint64_t word)
{
    uint64_t seed = ((uint64_t)session << 40) ^ ((uint64_t)region << 32);
    return mix(seed + word);
}

uint8_t tfx_byte(uint32_t session, size_t region, uint64_t off)
{
    return (uint8_t)(word_at(session, region, off / 8) >> (8 * (off % 8)));
}

/* Fills by whole words; tfx_byte reads them back byte by byte. */
static void fill(uint8_t *p, uint32_t session, size_t region, uint64_t n)
{
    for (uint64_t w = 0; w * 8 < n; w++) {
        uint64_t v = word_at(session, region, w);
        for (uint64_t b = 0; b < 8 && w * 8 + b < n; b++)
            p[w * 8 + b] = (uint8_t)(v >> (8 * b));
    }
}

const rs_region_t *tfx_region(const tfx_world_t *w, uint32_t session,
                              size_t region)
{
    return &w->regions[(size_t)session * w->nregions + region];
}

/* Allocates and fills every region here; returns 0 or -1. */
static int fill_all(tfx_world_t *w, const uint64_t *sizes, void **mem)
{
    for (uint32_t s = 0; s < w->nsessions; s++) {
        for (size_t r = 0; r < w->nregions; r++) {
            size_t k = (size_t)s * w->nregions + r;
            mem[k] = malloc(sizes[r]);
            if (mem[k] == NULL)
                return -1;
            fill(mem[k], s, r, sizes[r]);
        }
    }
    return 0;
}

int tfx_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int tfx_read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int ready = poll(&pfd, 1, CHILD_ANSWER_MS);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0)
            return -1;
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Blocks until the parent closes the done pipe (or dies). */
static void await_done(int done_fd)
{
    char c;
    while (read(done_fd, &c, 1) < 0 && errno == EINTR)
        ;
}

/* The cma child: fill its own regions, send their addresses, wait until
 * released, exit. Never returns. */
static void cma_child(tfx_world_t *w, const uint64_t *sizes, int out_fd,
                      int done_fd)
{
    size_t n = (size_t)w->nsessions * w->nregions;
    void **mem = calloc(n, sizeof(void *));
    uint64_t *addrs = calloc(n, sizeof(uint64_t));
    if (mem == NULL || addrs == NULL || fill_all(w, sizes, mem) != 0)
        _exit(3);
    for (size_t k = 0; k < n; k++)
        addrs[k] = (uint64_t)(uintptr_t)mem[k];
    if (tfx_write_all(out_fd, addrs, n * sizeof(uint64_t)) != 0)
        _exit(4);
    await_done(done_fd);
    _exit(0);
}

/* Made-up published addresses, with gaps between regions (or back to back
 * when the backend says `packed`), so translation is really exercised. */
static uint64_t published_addr(const tfx_world_t *w, uint32_t s, size_t r,
                               const uint64_t *sizes)
{
    uint64_t base = (uint64_t)(s + 1) << 40;
    if (!w->backend.packed)
        return base | ((uint64_t)(r + 1) << 33);
    for (size_t k = 0; k < r; k++)
        base += sizes[k];
    return base;
}

/* One exposer serving session s's regions; its blob goes to out_fd as a
 * u64 length and the bytes. 0, or -1 with the reason in d. */
static int serve_session(tfx_world_t *w, const uint64_t *sizes, uint32_t s,
                         void **mem, int out_fd, rs_exposer_h *x_p,
                         rs_diag_t *d)
{
    if (rs_exposer_create("ucx", d, x_p) != RS_OK)
        return -1;
    for (size_t r = 0; r < w->nregions; r++) {
        if (rs_exposer_add_region(*x_p, published_addr(w, s, r, sizes),
                                  mem[(size_t)s * w->nregions + r], sizes[r],
                                  RS_MEM_HOST, d) != RS_OK)
            return -1;
    }
    const void *blob;
    size_t len;
    if (rs_exposer_start(*x_p, d) != RS_OK ||
        rs_exposer_blob(*x_p, &blob, &len) != RS_OK)
        return -1;
    uint64_t len64 = len;
    if (tfx_write_all(out_fd, &len64, 8) != 0 ||
        tfx_write_all(out_fd, blob, len) != 0)
        _exit(4);
    return 0;
}

/* The ucx child: one exposer per session over its pattern-filled regions,
 * the blobs sent up the pipe, served until released. A setup failure is
 * sent as UINT64_MAX and a message. Never returns. */
static void ucx_child(tfx_world_t *w, const uint64_t *sizes, int out_fd,
                      int done_fd)
{
    size_t n = (size_t)w->nsessions * w->nregions;
    void **mem = calloc(n, sizeof(void *));
    rs_exposer_h *xs = calloc(w->nsessions, sizeof(rs_exposer_h));
    if (mem == NULL || xs == NULL || fill_all(w, sizes, mem) != 0)
        _exit(3);
    rs_diag_t d;
    for (uint32_t s = 0; s < w->nsessions; s++) {
        if (serve_session(w, sizes, s, mem, out_fd, &xs[s], &d) != 0) {
            char why[CHILD_WHY_LEN] = {0};
            uint64_t mark = UINT64_MAX;
            snprintf(why, sizeof(why), "session %u: %.200s", s, d.msg);
            if (tfx_write_all(out_fd, &mark, 8) == 0)
                tfx_write_all(out_fd, why, sizeof(why));
            _exit(5);
        }
    }
    await_done(done_fd);
    for (uint32_t s = 0; s < w->nsessions; s++)
        rs_exposer_destroy(xs[s]);
    for (size_t k = 0; k < n; k++)
        free(mem[k]);
    free(mem);
    free(xs);
    _exit(0);
}

/* Can this process read the child at all? 0, or 1 with the reason. */
static int probe_cma(const tfx_world_t *w, char *why, size_t whylen)
{
    uint8_t b;
    struct iovec l = {&b, 1};
    struct iovec r = {(void *)(uintptr_t)w->regions[0].addr, 1};
    if (process_vm_readv(w->child, &l, 1, &r, 1, 0) == 1)
        return 0;
    snprintf(why, whylen,
             "cma: process_vm_readv of a child process failed (%s); this "
             "environment forbids cross-memory attach (ptrace_scope, "
             "seccomp or missing CAP_SYS_PTRACE)", strerror(errno));
    return 1;
}

typedef void (*child_fn)(tfx_world_t *w, const uint64_t *sizes, int out_fd,
                         int done_fd);

/* Forks a child running fn; returns the read end of its pipe, or -1. */
static int spawn(tfx_world_t *w, const uint64_t *sizes, child_fn fn,
                 char *why, size_t whylen)
{
    int out_pipe[2], done_pipe[2];
    if (pipe(out_pipe) != 0)
        return snprintf(why, whylen, "pipe: %s", strerror(errno)), -1;
    if (pipe(done_pipe) != 0) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        return snprintf(why, whylen, "pipe: %s", strerror(errno)), -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(out_pipe[0]);
        close(done_pipe[1]);
        fn(w, sizes, out_pipe[1], done_pipe[0]);
    }
    close(out_pipe[1]);
    close(done_pipe[0]);
    w->done_fd = done_pipe[1];
    if (pid < 0) {
        close(out_pipe[0]);
        return snprintf(why, whylen, "fork: %s", strerror(errno)), -1;
    }
    w->child = pid;
    return out_pipe[0];
}

static int open_child(tfx_world_t *w, const uint64_t *sizes, char *why,
                      size_t whylen)
{
    int fd = spawn(w, sizes, cma_child, why, whylen);
    if (fd < 0)
        return -1;
    size_t n = (size_t)w->nsessions * w->nregions;
    uint64_t *addrs = calloc(n, sizeof(uint64_t));
    int rc = addrs != NULL && tfx_read_all(fd, addrs, n * 8) == 0;
    close(fd);
    for (size_t k = 0; rc && k < n; k++)
        w->regions[k].addr = addrs[k];
    free(addrs);
    if (!rc)
        return snprintf(why, whylen, "child sent no region addresses"), -1;
    return probe_cma(w, why, whylen);
}

/* Reads the blob of session s, or the child's failure message. */
static int read_blob(tfx_world_t *w, int fd, uint32_t s, char *why,
                     size_t whylen)
{
    uint64_t len;
    if (tfx_read_all(fd, &len, 8) != 0)
        return snprintf(why, whylen, "ucx child sent no blob for session "
                        "%u", s), -1;
    if (len == UINT64_MAX) {
        char msg[CHILD_WHY_LEN];
        if (tfx_read_all(fd, msg, sizeof(msg)) != 0)
            msg[0] = '\0';
        msg[sizeof(msg) - 1] = '\0';
        return snprintf(why, whylen, "ucx child: %s", msg), -1;
    }
    w->blobs[s] = malloc(len > 0 ? len : 1);
    w->blob_lens[s] = len;
    if (w->blobs[s] == NULL || tfx_read_all(fd, w->blobs[s], len) != 0)
        return snprintf(why, whylen, "ucx child: blob of session %u cut "
                        "short", s), -1;
    return 0;
}

/* The ucx world: UCX_TLS is set before the fork so the child's exposers and
 * this process's transport pick the same transports. */
static int open_ucx(tfx_world_t *w, const uint64_t *sizes, char *why,
                    size_t whylen)
{
    setenv("UCX_TLS", w->backend.tls, 1);
    w->blobs = calloc(w->nsessions, sizeof(void *));
    w->blob_lens = calloc(w->nsessions, sizeof(size_t));
    if (w->blobs == NULL || w->blob_lens == NULL)
        return snprintf(why, whylen, "out of memory"), -1;
    for (uint32_t s = 0; s < w->nsessions; s++) {
        for (size_t r = 0; r < w->nregions; r++)
            w->regions[(size_t)s * w->nregions + r].addr =
                published_addr(w, s, r, sizes);
    }
    int fd = spawn(w, sizes, ucx_child, why, whylen);
    if (fd < 0)
        return -1;
    int rc = 0;
    for (uint32_t s = 0; rc == 0 && s < w->nsessions; s++)
        rc = read_blob(w, fd, s, why, whylen);
    close(fd);
    return rc;
}

/* In-process regions get made-up addresses, so the translation to `local`
 * pointers is really exercised. */
static int open_local(tfx_world_t *w, const uint64_t *sizes, char *why,
                      size_t whylen)
{
    if (fill_all(w, sizes, w->mem) != 0)
        return snprintf(why, whylen, "out of memory"), -1;
    for (uint32_t s = 0; s < w->nsessions; s++) {
        for (size_t r = 0; r < w->nregions; r++) {
            size_t k = (size_t)s * w->nregions + r;
            w->regions[k].addr = published_addr(w, s, r, sizes);
            w->regions[k].local = w->mem[k];
        }
    }
    return 0;
}

int tfx_world_open(tfx_world_t *w, const tfx_backend_t *backend,
                   uint32_t nsessions, const uint64_t *sizes, size_t nregions,
                   char *why, size_t whylen)
{
    memset(w, 0, sizeof(*w));
    w->backend = *backend;
    w->nsessions = nsessions;
    w->nregions = nregions;
    w->done_fd = -1;
    size_t n = (size_t)nsessions * nregions;
    w->regions = calloc(n, sizeof(rs_region_t));
    w->mem = calloc(n, sizeof(void *));
    if (w->regions == NULL || w->mem == NULL)
        return snprintf(why, whylen, "out of memory"), -1;
    for (size_t k = 0; k < n; k++)
        w->regions[k].nbytes = sizes[k % nregions];
    if (backend->remote && backend->tls != NULL)
        return open_ucx(w, sizes, why, whylen);
    if (backend->remote)
        return open_child(w, sizes, why, whylen);
    return open_local(w, sizes, why, whylen);
}

void tfx_world_close(tfx_world_t *w)
{
    if (w->done_fd >= 0)
        close(w->done_fd);
    tfx_world_kill(w);
    for (uint32_t s = 0; w->blobs != NULL && s < w->nsessions; s++)
        free(w->blobs[s]);
    free(w->blobs);
    free(w->blob_lens);
    size_t n = (size_t)w->nsessions * w->nregions;
    for (size_t k = 0; w->mem != NULL && k < n; k++)
        free(w->mem[k]);
    free(w->mem);
    free(w->regions);
    memset(w, 0, sizeof(*w));
    w->done_fd = -1;
}

void tfx_world_kill(tfx_world_t *w)
{
    if (w->child <= 0)
        return;
    kill(w->child, SIGKILL);
    while (waitpid(w->child, NULL, 0) < 0 && errno == EINTR)
        ;
    w->child = 0;
}

rs_status_t tfx_transport(const tfx_world_t *w, rs_diag_t *diag,
                          rs_transport_h *t_p)
{
    rs_transport_params_t p;
    rs_transport_params_init(&p);
    p.backend = w->backend.name;
    p.threads = w->backend.threads;
    rs_transport_h t;
    rs_status_t st = rs_transport_create(&p, diag, &t);
    for (uint32_t s = 0; st == RS_OK && s < w->nsessions; s++) {
        char name[32];
        snprintf(name, sizeof(name), "s%u", s);
        rs_peer_t peer = {name, w->child, tfx_region(w, s, 0), w->nregions,
                          w->blobs != NULL ? w->blobs[s] : NULL,
                          w->blob_lens != NULL ? w->blob_lens[s] : 0};
        st = rs_transport_connect(t, s, &peer, diag);
        if (st != RS_OK)
            rs_transport_destroy(t);
    }
    if (st == RS_OK)
        *t_p = t;
    return st;
}

pid_t tfx_paused_child(void)
{
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        pause();
        _exit(0);
    }
    return child;
}

pid_t tfx_dead_pid(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    return pid;
}
