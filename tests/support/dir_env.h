/* The backend a directory test runs against: a file: directory in a fresh
 * temporary folder, or a private redis-server (redis_fixture.h). The same
 * test bodies run on both; a missing redis-server skips the redis group. */
#ifndef RS_TEST_DIR_ENV_H
#define RS_TEST_DIR_ENV_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "redis_fixture.h"
#include "reshard/dir.h"
#include "reshard/refit.h"
#include "reshard/sources.h"

typedef struct dir_env {
    const char *backend; /* "file" or "redis" */
    int redis, skip;
    char why[512];
    char tmp[PATH_MAX];       /* file: the folder holding dir/ */
    char url[PATH_MAX + 64];  /* file:<tmp>/dir or the server's URL */
    rfx_server_t server;
} dir_env_t;

/* Sets up e's backend; `tag` names the temporary folder. 0, or -1 with
 * the reason on stderr. */
int dir_env_setup(dir_env_t *e, const char *tag);
/* Stops the server or removes the folder; accepts a failed setup. */
void dir_env_teardown(dir_env_t *e);

struct CMUnitTest;

/* Runs one group of cmocka tests against e's backend: *current points at
 * e while they run, the group sets e up (`tag` names its folder) and tears
 * it down. Returns the number of failed tests. */
int dir_env_run(dir_env_t *e, const char *tag, const struct CMUnitTest *tests,
                size_t n, dir_env_t **current);

/* The same tests against a file directory, then a redis one. */
int dir_env_run_both(const char *tag, const struct CMUnitTest *tests,
                     size_t n, dir_env_t **current);

/* Opens e's directory; skips the test when the backend is unavailable,
 * fails it when the directory does not open. */
rs_dir_h dir_env_open(const dir_env_t *e);

/* Releases version v of `model` in e's directory (a version released
 * already is fine) and waits up to 20 s for `pub` to see it. Fails the
 * test otherwise. */
void dir_env_release(const dir_env_t *e, const char *model, int64_t v,
                     rs_publisher_h pub);

/* Puts `holder`'s cuts record (json, len bytes) for `model` in e's
 * directory; fails the test when it cannot. */
void dir_env_put_cuts(const dir_env_t *e, const char *model,
                      const char *holder, const char *json, size_t len);

/* Slot `slot`'s table of version v of `model`, read from e's directory
 * and loaded as sources (the caller destroys them), or NULL with the
 * reason on stderr. */
rs_sources_h dir_env_table(const dir_env_t *e, const char *model, int64_t v,
                           int64_t slot);

/* Behind the API: sets `field` of the hash `key` to `value` on e's
 * redis server. Fails the test when it cannot. */
void dir_env_hset(const dir_env_t *e, const char *key, const char *field,
                  const char *value);

/* Behind the API: replaces the file at `path` by `text`, after the file's
 * first line (its stamp) when keep_stamp. Fails the test when it cannot. */
void dir_env_rewrite(const char *path, int keep_stamp, const char *text);

/* Inside a cmocka test: skips it when the backend is unavailable. */
#define DIR_ENV_NEED(e)                                                       \
    do {                                                                      \
        if ((e)->skip) {                                                      \
            fprintf(stderr, "skipped: %s\n", (e)->why);                       \
            skip();                                                           \
        }                                                                     \
    } while (0)

#endif
