/* Trainer ranks as separate processes (proc_fixture.h): the parent's start,
 * bounded wait and stop, and the child's publisher, whose shards hold the
 * values vllm_direct.h builds its expectations from. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc_fixture.h"
#include "tmp_path.h"
#include "reshard_layout/layout.h"
#include "vllm_direct.h"

/* ---- the parent's side -------------------------------------------------- */

#define PFX_ARG_MAX 16384
#define PFX_NFIELDS 11

/* s as one argument: fields joined by '|' (none of them is empty). */
static void encode(char *out, size_t n, const pfx_publish_t *s)
{
    snprintf(out, n, "%s|%s|%s|%s|%s|%lld|%lld|%lld|%u|%d|%d", s->config,
             s->train, s->directory, s->model, s->backend, (long long)s->rank,
             (long long)s->replica, (long long)s->first, s->flags, s->cmd_fd,
             s->ack_fd);
}

static int decode(char *buf, pfx_publish_t *s)
{
    char *f[PFX_NFIELDS];
    f[0] = strtok(buf, "|");
    for (int i = 1; i < PFX_NFIELDS; i++)
        f[i] = strtok(NULL, "|");
    if (f[PFX_NFIELDS - 1] == NULL)
        return -1;
    *s = (pfx_publish_t){f[0], f[1], f[2], f[3], f[4], atoll(f[5]),
                         atoll(f[6]), atoll(f[7]), (unsigned)atoi(f[8]),
                         atoi(f[9]), atoi(f[10]), NULL};
    return 0;
}

void pfx_start(pfx_proc_t *p, const pfx_publish_t *s)
{
    int cmd[2], ack[2] = {-1, -1};
    assert_int_equal(pipe(cmd), 0);
    if (s->flags & PFX_ACK_PIPE)
        assert_int_equal(pipe(ack), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char arg[PFX_ARG_MAX];
        pfx_publish_t child = *s;
        close(cmd[1]);
        if (ack[0] >= 0)
            close(ack[0]);
        if (s->flags & PFX_UCX_QUIET)
            setenv("UCX_HANDLE_ERRORS", "none", 1);
        if (s->before_exec != NULL)
            s->before_exec();
        child.cmd_fd = cmd[0];
        child.ack_fd = ack[1];
        encode(arg, sizeof(arg), &child);
        execl("/proc/self/exe", program_invocation_short_name, "--publisher",
              arg, (char *)NULL);
        _exit(13);
    }
    close(cmd[0]);
    if (ack[1] >= 0)
        close(ack[1]);
    *p = (pfx_proc_t){pid, cmd[1], ack[0], 0};
}

int pfx_await_ack(const pfx_proc_t *p, int ms)
{
    struct pollfd pfd = {p->ack, POLLIN, 0};
    char c;
    while (poll(&pfd, 1, ms) < 0 && errno == EINTR)
        ;
    return (pfd.revents & POLLIN) && read(p->ack, &c, 1) == 1;
}

int pfx_send(const pfx_proc_t *p, unsigned char c)
{
    return write(p->cmd, &c, 1) == 1 ? 0 : -1;
}

void pfx_stop(pfx_proc_t *p, int kill_it)
{
    if (p->pid <= 0)
        return;
    if (kill_it)
        kill(p->pid, SIGKILL);
    close(p->cmd);
    if (p->ack >= 0)
        close(p->ack);
    while (waitpid(p->pid, &p->status, 0) < 0 && errno == EINTR)
        ;
    p->pid = 0;
}

/* ---- the child's side --------------------------------------------------- */

/* The shards this process registered, kept until it exits. */
#define PFX_MAX_SHARDS 4096
static void *shard_buf[PFX_MAX_SHARDS];
static size_t shard_len[PFX_MAX_SHARDS];
static size_t shard_n;
static int shard_own_pages;

/* A buffer for one shard: from malloc, or its own pages. */
static void *shard_alloc(size_t bytes, size_t *len_p)
{
    if (!shard_own_pages) {
        *len_p = bytes;
        return malloc(bytes);
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    *len_p = (bytes + page - 1) / page * page;
    void *buf = mmap(NULL, *len_p, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return buf == MAP_FAILED ? NULL : buf;
}

static rs_status_t on_shard(void *ctx, const rs_shard_desc_t *d)
{
    rs_publisher_h pub = ctx;
    int64_t n = 1;
    size_t len;
    for (int i = 0; i < d->ndim; i++)
        n *= d->shape[i];
    if (shard_n == PFX_MAX_SHARDS)
        return RS_ERR_NO_MEMORY;
    uint8_t *buf = shard_alloc((size_t)(n ? n : 1) * d->elsize, &len);
    if (buf == NULL)
        return RS_ERR_NO_MEMORY;
    vd_fill_box(buf, d);
    shard_buf[shard_n] = buf;
    shard_len[shard_n++] = len;
    return rs_publisher_register(pub, d->tensor, d->dtype, d->ndim,
                                 d->full_shape, d->offset, d->shape, buf,
                                 RS_MEM_HOST, NULL);
}

void pfx_shards_unreadable(void)
{
    for (size_t i = 0; i < shard_n; i++)
        mprotect(shard_buf[i], shard_len[i], PROT_NONE);
}

static void shards_free(void)
{
    for (size_t i = 0; i < shard_n; i++) {
        if (shard_own_pages)
            munmap(shard_buf[i], shard_len[i]);
        else
            free(shard_buf[i]);
    }
    shard_n = 0;
}

/* One command byte: 1, or 0 once the pipe is closed (or broken). */
static int next_command(int fd, unsigned char *c)
{
    ssize_t k;
    while ((k = read(fd, c, 1)) < 0 && errno == EINTR)
        ;
    return k == 1;
}

/* Publishes `first`, acknowledges it, then follows the command pipe
 * (acknowledging each version it publishes). */
static int serve(const pfx_publish_t *s, rs_publisher_h pub, rs_diag_t *diag)
{
    unsigned char c = 'p';
    if (rs_publisher_publish(pub, s->first, diag) != RS_OK)
        return 4;
    if ((s->flags & PFX_ACK_PUBLISHED) && write(s->ack_fd, &c, 1) != 1)
        return 5;
    while (next_command(s->cmd_fd, &c)) {
        if (!(s->flags & PFX_NEXT_VERSIONS))
            continue;
        if (rs_publisher_publish(pub, (int64_t)c, diag) != RS_OK)
            return 4;
        if ((s->flags & PFX_ACK_PUBLISHED) && write(s->ack_fd, &c, 1) != 1)
            return 5;
    }
    return 0;
}

int pfx_is_publisher(int argc, char **argv)
{
    return argc == 3 && strcmp(argv[1], "--publisher") == 0;
}

static rs_status_t publisher_create(const pfx_publish_t *s, int64_t world,
                                    rs_diag_t *diag, rs_publisher_h *pub_p)
{
    rs_publisher_params_t pp;
    rs_publisher_params_init(&pp);
    pp.directory = s->directory;
    pp.model = s->model;
    pp.rank = s->rank;
    pp.replica = s->replica;
    pp.world = world;
    pp.backend = s->backend;
    pp.heartbeat_s = 0.2;
    if (s->flags & PFX_QUANTIZE_WANTED) {
        pp.staging = RS_STAGING_ARENA;
        pp.quantize_wanted = 1;
    }
    return rs_publisher_create(&pp, diag, pub_p);
}

int pfx_publisher_main(const char *arg, void (*prepare)(const pfx_publish_t *))
{
    static char buf[PFX_ARG_MAX];
    pfx_publish_t s;
    rs_model_h model;
    rs_layout_t train;
    rs_publisher_h pub;
    rs_diag_t diag;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    snprintf(buf, sizeof(buf), "%s", arg);
    if (decode(buf, &s) != 0)
        return 2;
    if (prepare != NULL)
        prepare(&s);
    if (rs_model_load(s.config, &diag, &model) != RS_OK ||
        rs_layout_parse(s.train, &diag, &train) != RS_OK ||
        rs_layout_check(&train, model, &diag) != RS_OK)
        return 2;
    if (publisher_create(&s, train.world, &diag, &pub) != RS_OK) {
        fprintf(stderr, "publisher %lld/%lld: %s\n", (long long)s.rank,
                (long long)s.replica, diag.msg);
        return 3;
    }
    shard_own_pages = (s.flags & PFX_OWN_PAGES) != 0;
    int rc = rs_layout_trainer_shards(model, &train, s.rank, on_shard, pub,
                                      &diag) != RS_OK
                 ? 4
                 : serve(&s, pub, &diag);
    if (rc == 4)
        fprintf(stderr, "publisher %lld/%lld: %s\n", (long long)s.rank,
                (long long)s.replica, diag.msg);
    rs_publisher_destroy(pub);
    shards_free();
    rs_model_destroy(model);
    return rc;
}

/* ---- the world ---------------------------------------------------------- */

static int layout_of(rs_model_h model, const char *text, rs_layout_t *l,
                     rs_diag_t *diag)
{
    return rs_layout_parse(text, diag, l) == RS_OK &&
                   rs_layout_check(l, model, diag) == RS_OK
               ? 0
               : -1;
}

int pfx_world_open(pfx_world_t *w, const char *model_file, const char *train,
                   const char *infer, const char *tag)
{
    rs_diag_t diag;
    const char *src = getenv("RESHARD_SOURCE_DIR");
    memset(w, 0, sizeof(*w));
    snprintf(w->config, sizeof(w->config), "%.900s/examples/models/%s",
             src ? src : ".", model_file);
    w->train_text = train;
    if (tag != NULL) {
        snprintf(w->tmp, sizeof(w->tmp), "/tmp/rs-%.40s-XXXXXX", tag);
        if (mkdtemp(w->tmp) == NULL) {
            perror("pfx_world_open: mkdtemp");
            w->tmp[0] = '\0';
            return -1;
        }
        snprintf(w->directory, sizeof(w->directory), "file:%s", w->tmp);
    }
    rs_diag_clear(&diag);
    if (rs_model_load(w->config, &diag, &w->model) != RS_OK ||
        (train != NULL && layout_of(w->model, train, &w->train, &diag)) ||
        layout_of(w->model, infer, &w->infer, &diag)) {
        fprintf(stderr, "pfx_world_open: %s\n", diag.msg);
        return -1;
    }
    return 0;
}

void pfx_world_train(pfx_world_t *w, const char *train)
{
    rs_diag_t diag;
    w->train_text = train;
    if (layout_of(w->model, train, &w->train, &diag) != 0)
        fail_msg("trainer layout %s: %s", train, diag.msg);
}

void pfx_world_close(pfx_world_t *w)
{
    rs_model_destroy(w->model);
    w->model = NULL;
    tmp_remove(w->tmp);
    w->tmp[0] = '\0';
}

void pfx_use_tls(const char *tls)
{
    setenv("UCX_TLS", tls, 1);
    if (strcmp(tls, "tcp") == 0)
        setenv("UCX_NET_DEVICES", "lo", 1);
    else
        unsetenv("UCX_NET_DEVICES");
}
