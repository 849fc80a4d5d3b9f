/* A private redis-server for tests: started on a free loopback port in a
 * temporary directory (no persistence), answered PING before it is handed
 * out, and killed on stop, at exit, or when the test process dies. */
#ifndef RS_TEST_REDIS_FIXTURE_H
#define RS_TEST_REDIS_FIXTURE_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct rfx_server {
    pid_t pid;      /* 0 when not running */
    int port;
    char dir[PATH_MAX];
    char url[PATH_MAX + 64]; /* redis://[:password@]127.0.0.1:port */
} rfx_server_t;

/* Starts a server (with --requirepass when password != NULL). Returns 0;
 * 1 when redis-server is not installed (the caller skips, reason in why);
 * -1 on failure (reason in why). */
int rfx_start(rfx_server_t *s, const char *password, char *why,
              size_t whylen);

/* Kills the server, reaps it and removes its directory. Accepts a server
 * that never started or was already stopped. */
void rfx_stop(rfx_server_t *s);

/* A loopback port nothing listens on (bound and closed again). */
int rfx_free_port(void);

#endif
