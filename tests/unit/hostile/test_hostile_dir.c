/* A directory that answers garbage, never answers, or loses a table. For
 * redis://, a fake server on a loopback port (a forked child) replies with
 * nonsense bytes, with well-formed replies of the wrong type, or with
 * nothing at all; for file:, meta, heartbeat and marker files are
 * corrupted and a slot table vanishes between READY and its read. Every
 * call ends in a bounded time with an error naming the server or file, and
 * leaves no file descriptor open. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "hostile.h"
#include "reshard/dir.h"
#include "tmp_path.h"

typedef struct fake {
    pid_t pid;
    int port;
    char url[128];
} fake_t;

/* Answers each read on a connection: the first with `first` (NULL: the
 * same as the rest), every later one with `rest` (NULL: stay silent). */
static void serve(int conn, const char *first, const char *rest)
{
    char buf[65536];
    int n = 0;
    for (;;) {
        ssize_t got = read(conn, buf, sizeof(buf));
        if (got <= 0)
            return;
        const char *reply = n++ == 0 && first != NULL ? first : rest;
        if (reply != NULL && write(conn, reply, strlen(reply)) < 0)
            return;
    }
}

static void fake_start(fake_t *f, const char *first, const char *rest)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof(a);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(ls >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(ls, 16), 0);
    assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &alen), 0);
    f->port = ntohs(a.sin_port);
    snprintf(f->url, sizeof(f->url), "redis://127.0.0.1:%d?timeout=0.3",
             f->port);
    f->pid = fork();
    assert_true(f->pid >= 0);
    if (f->pid == 0) {
        for (;;) {
            int conn = accept(ls, NULL, NULL);
            if (conn < 0)
                _exit(0);
            serve(conn, first, rest);
            close(conn);
        }
    }
    close(ls);
}

static void fake_stop(fake_t *f)
{
    kill(f->pid, SIGKILL);
    waitpid(f->pid, NULL, 0);
}

/* Opening against a server that answers PING with `first` fails. */
static void expect_open_fails(const char *first, const char *rest,
                              const char *frag)
{
    fake_t f;
    rs_dir_h dir = NULL;
    rs_diag_t diag;
    char where[64];

    fake_start(&f, first, rest);
    snprintf(where, sizeof(where), "127.0.0.1:%d", f.port);
    int fds = hostile_count_fds();
    double t0 = rs__now_s();
    HOSTILE_EXPECT(rs_dir_open(f.url, &diag, &dir), RS_ERR_TRANSPORT, &diag,
                   where, frag);
    fprintf(stderr, "  open answered in %.2f s: %s\n", rs__now_s() - t0,
            diag.msg);
    assert_null(dir);
    assert_int_equal(hostile_count_fds(), fds);
    fake_stop(&f);
}

static void test_redis_garbage_at_connect(void **state)
{
    (void)state;
    /* not RESP at all */
    expect_open_fails("\xff\xfe\x01garbage\r\n", NULL, "Protocol error");
    expect_open_fails("HTTP/1.1 400 Bad Request\r\n\r\n", NULL, "");
    /* RESP, but an error or a malformed length */
    expect_open_fails("-ERR go away\r\n", NULL, "PING refused: ERR go away");
    expect_open_fails("*-7\r\n", NULL, "");
    expect_open_fails("$-9\r\n", NULL, "");
    /* promises more bytes than it sends: the command timeout ends it */
    expect_open_fails("$99999999999\r\nabc", NULL, "");
    expect_open_fails("$5\r\nabc", NULL, "no reply within the timeout");
    /* accepts and never answers */
    expect_open_fails(NULL, NULL, "no reply within the timeout");
}

/* After a proper PONG, every operation gets a reply of the wrong shape. */
static void test_redis_wrong_replies(void **state)
{
    (void)state;
    static const char *replies[] = {
        ":42\r\n",                 /* an integer where a SHA is expected */
        "$40\r\nnot-a-sha-but-forty-bytes-long-exactly!!\r\n*3\r\n", /* junk after */
        "*2\r\n:1\r\n$3\r\nabc\r\n", /* an array */
        "+OK\r\n",
        "\x01\x02\x03\r\n",
    };
    for (size_t i = 0; i < sizeof(replies) / sizeof(replies[0]); i++) {
        fake_t f;
        rs_dir_h dir = NULL;
        rs_diag_t diag;
        rs_version_info_t info;
        char where[64];
        void *table = NULL;
        size_t len = 0;

        fake_start(&f, "+PONG\r\n", replies[i]);
        snprintf(where, sizeof(where), "127.0.0.1:%d", f.port);
        int fds = hostile_count_fds();
        assert_int_equal(rs_dir_open(f.url, &diag, &dir), RS_OK);
        rs_status_t st = rs_dir_info(dir, "m", 1, &diag, &info);
        assert_int_not_equal(st, RS_OK);
        HOSTILE_EXPECT(st, RS_ERR_TRANSPORT, &diag, where);
        st = rs_dir_create_version(dir, "m", 1, 2, &diag);
        HOSTILE_EXPECT(st, RS_ERR_TRANSPORT, &diag, where);
        st = rs_dir_read(dir, "m", 1, 0, &diag, &table, &len);
        HOSTILE_EXPECT(st, RS_ERR_TRANSPORT, &diag, where);
        assert_null(table);
        st = rs_dir_wait_ready(dir, "m", 1, 0.5, 0, &diag, &info);
        assert_int_not_equal(st, RS_OK);
        assert_non_null(strstr(diag.msg, where));
        rs_dir_close(dir);
        assert_int_equal(hostile_count_fds(), fds);
        fake_stop(&f);
    }
}

/* A server that stops answering after the handshake: every call returns
 * within its timeout, and a bounded wait stays bounded. */
static void test_redis_hangs(void **state)
{
    (void)state;
    fake_t f;
    rs_dir_h dir = NULL;
    rs_diag_t diag;
    rs_version_info_t info;
    char where[64];

    fake_start(&f, "+PONG\r\n", NULL);
    snprintf(where, sizeof(where), "127.0.0.1:%d", f.port);
    int fds = hostile_count_fds();
    assert_int_equal(rs_dir_open(f.url, &diag, &dir), RS_OK);
    double t0 = rs__now_s();
    HOSTILE_EXPECT(rs_dir_info(dir, "m", 1, &diag, &info), RS_ERR_TRANSPORT,
                   &diag, where, "no reply within the timeout (timeout 0.3 s)");
    fprintf(stderr, "  info answered in %.2f s\n", rs__now_s() - t0);
    t0 = rs__now_s();
    rs_status_t st = rs_dir_wait_ready(dir, "m", 1, 1.0, 0, &diag, &info);
    assert_int_not_equal(st, RS_OK);
    assert_non_null(strstr(diag.msg, where));
    fprintf(stderr, "  wait_ready answered in %.2f s: %s\n", rs__now_s() - t0,
            diag.msg);
    rs_dir_close(dir);
    assert_int_equal(hostile_count_fds(), fds);
    fake_stop(&f);
}

/* --- file: ------------------------------------------------------------ */

static void put_file(const char *dir, const char *name, const char *text)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

typedef struct fenv {
    char root[64];
    char url[80];
    char vdir[128];
    rs_dir_h dir;
} fenv_t;

/* A READY version 1 of model "m" with two slots. */
static void fenv_init(fenv_t *e)
{
    rs_diag_t diag;
    tmp_dir(e->root, sizeof(e->root), "hostile-dir");
    snprintf(e->url, sizeof(e->url), "file:%s", e->root);
    snprintf(e->vdir, sizeof(e->vdir), "%s/m/1", e->root);
    assert_int_equal(rs_dir_open(e->url, &diag, &e->dir), RS_OK);
    assert_int_equal(rs_dir_create_version(e->dir, "m", 1, 2, &diag), RS_OK);
    assert_int_equal(rs_dir_publish(e->dir, "m", 1, 0, "t0", 2, &diag), RS_OK);
    assert_int_equal(rs_dir_publish(e->dir, "m", 1, 1, "t1", 2, &diag), RS_OK);
}

static void fenv_free(fenv_t *e)
{
    rs_dir_close(e->dir);
    assert_int_equal(tmp_remove(e->root), 0);
}

static void test_file_corrupt_meta(void **state)
{
    (void)state;
    static const char *bad[] = {"", "garbage{", "{\"format\": \"x\", "
                                "\"slots\": 2}", "{\"format\": "
                                "\"reshard.dir.v1\", \"slots\": -1}",
                                "{\"format\": \"reshard.dir.v1\"}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fenv_t e;
        rs_diag_t diag;
        rs_version_info_t info;
        char meta[160];
        void *table = NULL;
        size_t len;

        fenv_init(&e);
        snprintf(meta, sizeof(meta), "%s/meta", e.vdir);
        put_file(e.vdir, "meta", bad[i]);
        int fds = hostile_count_fds();
        HOSTILE_EXPECT(rs_dir_info(e.dir, "m", 1, &diag, &info), RS_ERR_INPUT,
                       &diag, meta, "reshard.dir.v1");
        HOSTILE_EXPECT(rs_dir_read(e.dir, "m", 1, 0, &diag, &table, &len),
                       RS_ERR_INPUT, &diag, meta);
        HOSTILE_EXPECT(rs_dir_wait_ready(e.dir, "m", 1, 0.2, 0, &diag, &info),
                       RS_ERR_INPUT, &diag, meta);
        HOSTILE_EXPECT(rs_dir_publish(e.dir, "m", 1, 0, "t0", 2, &diag),
                       RS_ERR_INPUT, &diag, meta);
        assert_null(table);
        assert_int_equal(hostile_count_fds(), fds);
        fenv_free(&e);
    }
}

static void test_file_corrupt_heartbeat_and_lease(void **state)
{
    (void)state;
    fenv_t e;
    rs_diag_t diag;
    rs_version_info_t info;
    char hb[160];

    fenv_init(&e);
    snprintf(hb, sizeof(hb), "%s/hb-1@default", e.vdir);
    put_file(e.vdir, "hb-1@default", "yesterday\n");
    int fds = hostile_count_fds();
    /* staleness needs the heartbeat: a bad one is named */
    HOSTILE_EXPECT(rs_dir_wait_ready(e.dir, "m", 1, 0.2, 30, &diag, &info),
                   RS_ERR_INPUT, &diag, hb, "decimal time");
    put_file(e.vdir, "lease-bob", "\x01\x02");
    HOSTILE_EXPECT(rs_dir_release(e.dir, "m", 1, &diag), RS_ERR_INPUT, &diag,
                   "lease-bob");
    assert_int_equal(hostile_count_fds(), fds);
    fenv_free(&e);
}

/* A slot record (geometry key and publisher names) that is not one: every
 * call that reads it names the file, none follows a name out of the
 * version directory. */
static void test_file_corrupt_slot_record(void **state)
{
    (void)state;
    static const char *bad[] = {"", "0123\n", "00000000000000zz default\n",
                                "0000000000000000\n",
                                "0000000000000000 ../../x\n",
                                "0000000000000000 a/b\n",
                                "0000000000000000 default"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fenv_t e;
        rs_diag_t diag;
        rs_version_info_t info;
        char rec[160];
        void *table = NULL;
        size_t len = 0;
        fenv_init(&e);
        snprintf(rec, sizeof(rec), "%s/slot-1", e.vdir);
        put_file(e.vdir, "slot-1", bad[i]);
        int fds = hostile_count_fds();
        HOSTILE_EXPECT(rs_dir_read(e.dir, "m", 1, 1, &diag, &table, &len),
                       RS_ERR_INPUT, &diag, rec, "slot record");
        assert_null(table);
        HOSTILE_EXPECT(rs_dir_wait_ready(e.dir, "m", 1, 0.2, 30, &diag,
                                         &info), RS_ERR_INPUT, &diag, rec);
        HOSTILE_EXPECT(rs_dir_publish(e.dir, "m", 1, 1, "t1", 2, &diag),
                       RS_ERR_INPUT, &diag, rec);
        HOSTILE_EXPECT(rs_dir_heartbeat(e.dir, "m", 1, 1, &diag),
                       RS_ERR_INPUT, &diag, rec);
        assert_int_equal(hostile_count_fds(), fds);
        fenv_free(&e);
    }
}

/* A slot table removed after READY was seen and before it was read. */
static void test_file_table_vanishes(void **state)
{
    (void)state;
    fenv_t e;
    rs_diag_t diag;
    rs_version_info_t info;
    char path[160];
    void *table = NULL;
    size_t len = 0;

    fenv_init(&e);
    assert_int_equal(rs_dir_wait_ready(e.dir, "m", 1, 1.0, 0, &diag, &info),
                     RS_OK);
    assert_int_equal(info.state, RS_VERSION_READY);
    assert_int_equal(rs_dir_read(e.dir, "m", 1, 0, &diag, &table, &len),
                     RS_OK);
    assert_int_equal(len, 2);
    assert_memory_equal(table, "t0", 2);
    free(table);
    table = NULL;
    snprintf(path, sizeof(path), "%s/slot-1@default", e.vdir);
    assert_int_equal(unlink(path), 0);
    int fds = hostile_count_fds();
    HOSTILE_EXPECT(rs_dir_read(e.dir, "m", 1, 1, &diag, &table, &len),
                   RS_ERR_INCOMPLETE, &diag, "slot 1", "'m'", "version 1");
    assert_null(table);
    /* a slot table replaced by a directory cannot be read either */
    assert_int_equal(mkdir(path, 0755), 0);
    rs_status_t st = rs_dir_read(e.dir, "m", 1, 1, &diag, &table, &len);
    assert_int_not_equal(st, RS_OK);
    assert_non_null(strstr(diag.msg, "slot-1@default"));
    assert_null(table);
    assert_int_equal(hostile_count_fds(), fds);
    fenv_free(&e);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_garbage_at_connect),
        cmocka_unit_test(test_redis_wrong_replies),
        cmocka_unit_test(test_redis_hangs),
        cmocka_unit_test(test_file_corrupt_meta),
        cmocka_unit_test(test_file_corrupt_heartbeat_and_lease),
        cmocka_unit_test(test_file_table_vanishes),
        cmocka_unit_test(test_file_corrupt_slot_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
