/* Starts and stops private redis-server processes for tests. Servers die
 * with the test: PR_SET_PDEATHSIG in the child, an atexit handler in the
 * process that started them, and rfx_stop in teardown. */
#include "core/clock.h"
#include "redis_fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIVE 8
#define START_ATTEMPTS 3
#define READY_WAIT_S 5.0

static pid_t live[MAX_LIVE];
static pid_t live_owner;
static int atexit_done;

static void kill_live(void)
{
    if (getpid() != live_owner) /* a forked test child exiting */
        return;
    for (int i = 0; i < MAX_LIVE; i++) {
        if (live[i] > 0) {
            kill(live[i], SIGKILL);
            waitpid(live[i], NULL, 0);
            live[i] = 0;
        }
    }
}

static void track(pid_t pid, int add)
{
    if (!atexit_done) {
        atexit(kill_live);
        atexit_done = 1;
    }
    live_owner = getpid();
    for (int i = 0; i < MAX_LIVE; i++) {
        if (add && live[i] == 0) {
            live[i] = pid;
            return;
        }
        if (!add && live[i] == pid) {
            live[i] = 0;
            return;
        }
    }
}

static int find_redis(char *out, size_t cap)
{
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s:/usr/bin:/usr/sbin:/usr/local/bin",
             path != NULL ? path : "");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d != NULL;
         d = strtok_r(NULL, ":", &save)) {
        int n = snprintf(out, cap, "%s/redis-server", d);
        if (n > 0 && (size_t)n < cap && access(out, X_OK) == 0)
            return 1;
    }
    return 0;
}

int rfx_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static pid_t spawn(const char *exe, const rfx_server_t *s,
                   const char *password)
{
    char port[16], log[PATH_MAX + 16];
    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(log, sizeof(log), "%s/redis.log", s->dir);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    const char *argv[16] = {exe, "--save", "", "--appendonly", "no",
                            "--port", port, "--bind", "127.0.0.1",
                            "--dir", s->dir, NULL};
    if (password != NULL) {
        argv[11] = "--requirepass";
        argv[12] = password;
        argv[13] = NULL;
    }
    execv(exe, (char *const *)argv);
    _exit(127);
}

/* 1 once the server answers PING (NOAUTH counts: it is up). */
static int answers(int port)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    int ok = 0;
    if (c != NULL && c->err == 0) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        ok = r != NULL && (r->type == REDIS_REPLY_STATUS ||
                           (r->type == REDIS_REPLY_ERROR &&
                            strncmp(r->str, "NOAUTH", 6) == 0));
        if (r != NULL)
            freeReplyObject(r);
    }
    if (c != NULL)
        redisFree(c);
    return ok;
}

/* Waits for PING; 0 when the child exited first (port taken?). */
static int wait_up(rfx_server_t *s)
{
    double deadline = rs__now_s() + READY_WAIT_S;
    while (rs__now_s() < deadline) {
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            track(s->pid, 0);
            s->pid = 0;
            return 0;
        }
        if (answers(s->port))
            return 1;
        usleep(10000);
    }
    return 0;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char p[PATH_MAX * 2];
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

int rfx_start(rfx_server_t *s, const char *password, char *why,
              size_t whylen)
{
    char exe[PATH_MAX];
    memset(s, 0, sizeof(*s));
    if (!find_redis(exe, sizeof(exe))) {
        snprintf(why, whylen, "redis-server is not installed (Debian "
                 "package redis-server): the Redis directory tests are "
                 "skipped");
        return 1;
    }
    snprintf(s->dir, sizeof(s->dir), "/tmp/rs-redis-XXXXXX");
    if (mkdtemp(s->dir) == NULL) {
        snprintf(why, whylen, "mkdtemp: %s", strerror(errno));
        return -1;
    }
    for (int attempt = 0; attempt < START_ATTEMPTS; attempt++) {
        s->port = rfx_free_port();
        s->pid = spawn(exe, s, password);
        if (s->pid < 0)
            break;
        track(s->pid, 1);
        if (wait_up(s)) {
            snprintf(s->url, sizeof(s->url), "redis://%s%s%s127.0.0.1:%d",
                     password ? ":" : "", password ? password : "",
                     password ? "@" : "", s->port);
            return 0;
        }
        rfx_stop(s);
        snprintf(s->dir, sizeof(s->dir), "/tmp/rs-redis-XXXXXX");
        if (mkdtemp(s->dir) == NULL)
            break;
    }
    snprintf(why, whylen, "redis-server did not answer PING on a free "
             "loopback port after %d attempts", START_ATTEMPTS);
    rfx_stop(s);
    return -1;
}

void rfx_stop(rfx_server_t *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGCONT); /* a test may have stopped it */
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        track(s->pid, 0);
        s->pid = 0;
    }
    if (s->dir[0] != '\0')
        remove_tree(s->dir);
    s->dir[0] = '\0';
}
