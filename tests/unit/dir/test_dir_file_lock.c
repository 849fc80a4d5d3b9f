/* The file: backend's version lock is never taken by a heartbeat, so a
 * process stopped while it holds the lock (SIGSTOP mid-lease, a debugger)
 * delays no publisher's heartbeat, and a publisher stopped after
 * publishing holds nothing others need. Here the test itself holds the
 * version's flock, as a stopped holder would, while a publisher beats;
 * and a beat after the release leaves no heartbeat file behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reshard/dir.h"
#include "assert_status.h"
#include "tmp_path.h"

#define MODEL "m"

typedef struct fx {
    char tmp[64];
    char url[96];
    rs_dir_h dir;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    rs_diag_t d;
    assert_non_null(f);
    tmp_dir(f->tmp, sizeof(f->tmp), "file-lock");
    snprintf(f->url, sizeof(f->url), "file:%s", f->tmp);
    ASSERT_ST(rs_dir_open(f->url, &d, &f->dir), RS_OK, d);
    ASSERT_ST(rs_dir_create_version(f->dir, MODEL, 1, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_publish_as(f->dir, MODEL, 1, 0, "p0", 0x1234, "tbl", 3,
                                &d), RS_OK, d);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    rs_dir_close(f->dir);
    tmp_remove(f->tmp);
    free(f);
    return 0;
}

static void version_file(const fx_t *f, const char *name, char *out,
                         size_t cap)
{
    snprintf(out, cap, "%s/%s/1/%s", f->tmp, MODEL, name);
}

static int beat_exists(const fx_t *f)
{
    char path[PATH_MAX];
    struct stat st;
    version_file(f, "hb-0@p0", path, sizeof(path));
    return stat(path, &st) == 0;
}

/* The lock held by another open file description (as by a stopped
 * process): the heartbeat goes through at once and is written. Before,
 * it waited out the lock's 30 s bound and failed with RS_ERR_TIMEOUT. */
static void test_beat_while_lock_held(void **state)
{
    fx_t *f = *state;
    rs_diag_t d;
    char path[PATH_MAX];
    version_file(f, "lock", path, sizeof(path));
    int held = open(path, O_RDWR | O_CLOEXEC);
    assert_true(held >= 0);
    assert_int_equal(flock(held, LOCK_EX | LOCK_NB), 0);
    /* the publish's own beat out of the way: the next one must write */
    version_file(f, "hb-0@p0", path, sizeof(path));
    assert_int_equal(unlink(path), 0);
    ASSERT_ST(rs_dir_heartbeat_as(f->dir, MODEL, 1, 0, "p0", &d), RS_OK, d);
    assert_true(beat_exists(f));
    /* a publisher the slot does not list still beats for nothing */
    ASSERT_ST(rs_dir_heartbeat_as(f->dir, MODEL, 1, 0, "stranger", &d),
              RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "no table of publisher 'stranger'");
    close(held);
}

/* After the release a beat writes nothing that stays. */
static void test_beat_after_release(void **state)
{
    fx_t *f = *state;
    rs_diag_t d;
    ASSERT_ST(rs_dir_release(f->dir, MODEL, 1, &d), RS_OK, d);
    ASSERT_ST(rs_dir_heartbeat_as(f->dir, MODEL, 1, 0, "p0", &d), RS_OK, d);
    assert_false(beat_exists(f));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_beat_while_lock_held, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_beat_after_release, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
