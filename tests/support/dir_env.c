/* Backends for the directory tests (dir_env.h): set up, torn down, and a
 * group of tests run against each. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>

#include "assert_status.h"
#include "dir_env.h"
#include "reshard/dir.h"
#include "tmp_path.h"

int dir_env_setup(dir_env_t *e, const char *tag)
{
    e->tmp[0] = '\0';
    if (!e->redis) {
        snprintf(e->tmp, sizeof(e->tmp), "/tmp/rs-%s-XXXXXX", tag);
        if (mkdtemp(e->tmp) == NULL) {
            perror("dir_env: mkdtemp");
            e->tmp[0] = '\0';
            return -1;
        }
        snprintf(e->url, sizeof(e->url), "file:%s/dir", e->tmp);
        return 0;
    }
    int rc = rfx_start(&e->server, NULL, e->why, sizeof(e->why));
    if (rc < 0) {
        fprintf(stderr, "redis fixture: %s\n", e->why);
        return -1;
    }
    e->skip = rc == 1;
    if (e->skip)
        fprintf(stderr, "%s\n", e->why);
    snprintf(e->url, sizeof(e->url), "%s", e->server.url);
    return 0;
}

void dir_env_teardown(dir_env_t *e)
{
    if (e->redis)
        rfx_stop(&e->server);
    tmp_remove(e->tmp);
    e->tmp[0] = '\0';
}

rs_sources_h dir_env_table(const dir_env_t *e, const char *model, int64_t v,
                           int64_t slot)
{
    rs_dir_h dir = NULL;
    rs_sources_h src = NULL;
    rs_diag_t d = {RS_OK, ""};
    void *table = NULL;
    size_t len = 0;
    char origin[64];
    snprintf(origin, sizeof(origin), "slot %lld", (long long)slot);
    if (rs_dir_open(e->url, &d, &dir) == RS_OK &&
        rs_dir_read(dir, model, v, slot, &d, &table, &len) == RS_OK &&
        rs_sources_create(&src) == RS_OK &&
        rs_sources_load_string(src, table, len, origin, &d) != RS_OK) {
        rs_sources_destroy(src);
        src = NULL;
    }
    if (src == NULL)
        fprintf(stderr, "dir_env: %s of version %lld: %s\n", origin,
                (long long)v, d.msg);
    rs_dir_close(dir);
    free(table);
    return src;
}

rs_dir_h dir_env_open(const dir_env_t *e)
{
    rs_diag_t d;
    rs_dir_h dir = NULL;
    DIR_ENV_NEED(e);
    if (rs_dir_open(e->url, &d, &dir) != RS_OK)
        fail_msg("open %s: %s", e->backend, d.msg);
    return dir;
}

void dir_env_release(const dir_env_t *e, const char *model, int64_t v,
                     rs_publisher_h pub)
{
    rs_diag_t d;
    rs_dir_h dir;
    ASSERT_ST(rs_dir_open(e->url, &d, &dir), RS_OK, d);
    rs_dir_release(dir, model, v, NULL); /* released already: fine */
    rs_dir_close(dir);
    ASSERT_ST(rs_publisher_wait_released(pub, v, 20, &d), RS_OK, d);
}

void dir_env_put_cuts(const dir_env_t *e, const char *model,
                      const char *holder, const char *json, size_t len)
{
    rs_dir_h dir;
    rs_diag_t d;
    ASSERT_ST(rs_dir_open(e->url, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_put_cuts(dir, model, holder, json, len, &d), RS_OK, d);
    rs_dir_close(dir);
}

/* The group that is running: cmocka's group setup takes no argument. */
static dir_env_t *group_env;
static const char *group_tag;

static int group_setup(void **state)
{
    (void)state;
    return dir_env_setup(group_env, group_tag);
}

static int group_teardown(void **state)
{
    (void)state;
    dir_env_teardown(group_env);
    return 0;
}

int dir_env_run(dir_env_t *e, const char *tag, const struct CMUnitTest *tests,
                size_t n, dir_env_t **current)
{
    const char *name = e->redis ? "redis" : "file";
    group_env = e;
    group_tag = tag;
    *current = e;
    fprintf(stderr, "== directory backend: %s\n", name);
    return _cmocka_run_group_tests(name, tests, n, group_setup,
                                   group_teardown);
}

int dir_env_run_both(const char *tag, const struct CMUnitTest *tests,
                     size_t n, dir_env_t **current)
{
    static dir_env_t file_env = {.backend = "file"};
    static dir_env_t redis_env = {.backend = "redis", .redis = 1};
    return dir_env_run(&file_env, tag, tests, n, current) +
           dir_env_run(&redis_env, tag, tests, n, current);
}

void dir_env_hset(const dir_env_t *e, const char *key, const char *field,
                  const char *value)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", e->server.port,
                                              tv);
    assert_true(c != NULL && c->err == 0);
    redisReply *r = redisCommand(c, "HSET %s %s %s", key, field, value);
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(c);
}

void dir_env_rewrite(const char *path, int keep_stamp, const char *text)
{
    char stamp[64] = "";
    FILE *f = fopen(path, keep_stamp ? "rb" : "wb");
    assert_non_null(f);
    if (keep_stamp) {
        assert_non_null(fgets(stamp, sizeof(stamp), f));
        fclose(f);
        assert_non_null(f = fopen(path, "wb"));
    }
    fputs(stamp, f);
    fputs(text, f);
    fclose(f);
}
