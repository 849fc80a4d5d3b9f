/* The receiver's install copy (src/refit/receiver_install.c): many
 * parameters of odd sizes, bound at every offset within a cache line,
 * some larger than the copy's 8 MiB pieces and some cut by a piece
 * boundary, others smaller than the streaming threshold, installed from
 * the staging on the executor's threads (cma: one worker and the pulling
 * thread) with streaming stores, at every SIMD level up to the best here.
 * Each pull leaves every parameter byte for byte the published version
 * (ground truth: the formula the publisher fills from) and every guard
 * byte around them untouched. A pull whose lease was lost is refused
 * before the copy: every bound byte keeps the previous version and the
 * install callback is not called; the next version then installs whole.
 * One cma publisher in this process, a file: directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/simd.h"
#include "reshard/reshard.h"
#include "assert_status.h"
#include "simd_levels.h"
#include "tmp_path.h"

#define HOLDER "install-0"
#define GUARD 64
#define GUARD_BYTE 0xC3
#define UNTOUCHED 0xEE
#define MIB ((int64_t)1 << 20)

/* The sizes, in bytes: below, at and above the 256 KiB streaming
 * threshold, one over two 8 MiB pieces (cut twice), one that starts in one
 * piece and ends in the next, and many small ones between them. */
static const int64_t big_sizes[] = {1, 63, 64, 65, 4095, 262143, 262144,
                                    262145, 2 * 8 * MIB + 4097, 3 * MIB + 1,
                                    6 * MIB - 3, 1000003};
#define NBIG ((int)(sizeof(big_sizes) / sizeof(big_sizes[0])))
#define NSMALL 150
#define NPARAMS (NBIG + NSMALL)

typedef struct world {
    char tmp[PATH_MAX];
    char url[PATH_MAX + 16];
    rs_dir_h dir;
    rs_publisher_h pub;
    rs_capture_h cap;
    int64_t size[NPARAMS];
    uint8_t *src[NPARAMS];  /* what the publisher serves */
    uint8_t *alloc[NPARAMS]; /* the bound storage with its guards */
    uint8_t *live[NPARAMS];  /* inside alloc, at offset p % 64 of a line */
    int installs;
} world_t;

static world_t w;

static int64_t size_of(int p)
{
    return p < NBIG ? big_sizes[p] : 1 + (p * 37) % 700;
}

/* Byte i of parameter p in version v; every byte differs between
 * versions 1..8. */
static uint8_t byte_of(int p, int64_t i, int64_t v)
{
    return (uint8_t)((uint64_t)i * 31 + ((uint64_t)i >> 9) +
                     (uint64_t)p * 7 + (uint64_t)v * 101);
}

static void name_of(int p, char *out, size_t n)
{
    snprintf(out, n, "p%03d", p);
}

static void publish(int64_t v)
{
    rs_diag_t d;
    for (int p = 0; p < NPARAMS; p++)
        for (int64_t i = 0; i < w.size[p]; i++)
            w.src[p][i] = byte_of(p, i, v);
    ASSERT_ST(rs_publisher_publish(w.pub, v, &d), RS_OK, d);
}

/* Every bound parameter holds version v (0: untouched) and every guard
 * byte is intact; names the first wrong byte. */
static void expect_live(int64_t v)
{
    for (int p = 0; p < NPARAMS; p++) {
        for (int64_t i = 0; i < w.size[p]; i++) {
            uint8_t want = v == 0 ? UNTOUCHED : byte_of(p, i, v);
            if (w.live[p][i] != want)
                fail_msg("param %d (%lld bytes at line offset %d): byte %lld "
                         "is 0x%02x, version %lld has 0x%02x", p,
                         (long long)w.size[p], p % 64, (long long)i,
                         w.live[p][i], (long long)v, want);
        }
        for (uint8_t *g = w.alloc[p]; g < w.live[p]; g++)
            assert_int_equal(*g, GUARD_BYTE);
        for (int i = 0; i < GUARD; i++)
            assert_int_equal(w.live[p][w.size[p] + i], GUARD_BYTE);
    }
}

static rs_status_t on_install(void *ctx, rs_exec_h exec)
{
    (void)ctx;
    (void)exec;
    w.installs++;
    return RS_OK;
}

static rs_receiver_h open_receiver(void)
{
    rs_receiver_params_t rp;
    rs_receiver_h recv = NULL;
    rs_diag_t d;
    rs_receiver_params_init(&rp);
    rp.directory = w.url;
    rp.model = "m";
    rp.backend = "cma";
    rp.holder = HOLDER;
    rp.discover_timeout_s = 10;
    rp.timeout_s = 20;
    rp.install = on_install;
    ASSERT_ST(rs_receiver_create(&rp, w.cap, &d, &recv), RS_OK, d);
    for (int p = 0; p < NPARAMS; p++)
        ASSERT_ST(rs_receiver_bind(recv, (size_t)p, w.live[p],
                                   (uint64_t)w.size[p], RS_MEM_HOST, &d),
                  RS_OK, d);
    return recv;
}

static uint64_t total_bytes(void)
{
    uint64_t total = 0;
    for (int p = 0; p < NPARAMS; p++)
        total += (uint64_t)w.size[p];
    return total;
}

/* A pull of version v: every byte installed, and counted. */
static void pull_ok(rs_receiver_h recv, int64_t v)
{
    rs_diag_t d;
    rs_pull_result_t res;
    ASSERT_ST(rs_receiver_pull(recv, v, &d, &res), RS_OK, d);
    expect_live(v);
    assert_int_equal(res.bytes_installed, total_bytes());
}

static void release(int64_t v)
{
    rs_diag_t d;
    ASSERT_ST(rs_dir_release(w.dir, "m", v, &d), RS_OK, d);
}

/* Pulls at every SIMD level (each a new version): byte-exact each time. */
static void test_install_byte_exact(void **state)
{
    (void)state;
    rs_receiver_h recv = open_receiver();
    expect_live(0); /* binding copies into the staging, never out of it */
    int64_t v = 1;
    for (int lv = 0; lv < simd_nlevels(); lv++, v++) {
        assert_int_equal(rs__simd_force((rs__simd_t)lv), lv);
        if (v > 1) {
            release(v - 1);
            publish(v);
        }
        pull_ok(recv, v);
        assert_int_equal(w.installs, (int)v);
    }
    rs_receiver_destroy(recv);
}

/* The lease lost while staged: apply refuses before writing any bound
 * byte, then the next version installs whole. */
static void test_refused_before_any_byte(void **state)
{
    (void)state;
    rs_diag_t d;
    size_t dropped = 0;
    rs_receiver_h recv = open_receiver();
    pull_ok(recv, 1);
    release(1);
    publish(2);
    rs_staged_h h = NULL;
    ASSERT_ST(rs_receiver_stage(recv, 2, &d, &h), RS_OK, d);
    ASSERT_ST(rs_dir_abandon(w.dir, "m", 2, &d, &dropped), RS_OK, d);
    assert_int_equal(dropped, 1);
    rs_diag_clear(&d);
    ASSERT_ST(rs_receiver_apply(recv, h, &d, (rs_pull_result_t *)NULL),
              RS_ERR_VERIFY, d);
    ASSERT_MSG_HAS(d, "refusing to install");
    expect_live(1);
    assert_int_equal(w.installs, 1);
    publish(3);
    pull_ok(recv, 3);
    assert_int_equal(w.installs, 2);
    rs_receiver_destroy(recv);
}

static int world_setup(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_publisher_params_t pp;
    char name[16];
    memset(&w, 0, sizeof(w));
    tmp_dir(w.tmp, sizeof(w.tmp), "install-copy");
    snprintf(w.url, sizeof(w.url), "file:%s", w.tmp);
    if (rs_dir_open(w.url, &d, &w.dir) != RS_OK)
        return -1;
    rs_publisher_params_init(&pp);
    pp.directory = w.url;
    pp.model = "m";
    pp.rank = 0;
    pp.world = 1;
    pp.backend = "cma";
    pp.heartbeat_s = 0;
    ASSERT_ST(rs_publisher_create(&pp, &d, &w.pub), RS_OK, d);
    assert_int_equal(rs_capture_create(&w.cap), RS_OK);
    for (int p = 0; p < NPARAMS; p++) {
        const int64_t size = size_of(p), off = 0, stride = 1;
        w.size[p] = size;
        name_of(p, name, sizeof(name));
        w.src[p] = malloc((size_t)size);
        w.alloc[p] = malloc((size_t)size + 2 * GUARD + 128);
        assert_non_null(w.src[p]);
        assert_non_null(w.alloc[p]);
        memset(w.alloc[p], GUARD_BYTE, (size_t)size + 2 * GUARD + 128);
        uint8_t *line = w.alloc[p] + GUARD;
        line += (64 - ((uintptr_t)line & 63)) & 63;
        w.live[p] = line + p % 64;
        memset(w.live[p], UNTOUCHED, (size_t)size);
        ASSERT_ST(rs_publisher_register(w.pub, name, RS_DTYPE_U8, 1, &size,
                                        &off, &size, w.src[p], RS_MEM_HOST,
                                        &d), RS_OK, d);
        ASSERT_ST(rs_capture_add_param(w.cap, name, 1, &size, RS_DTYPE_U8,
                                       &d), RS_OK, d);
        rs_copy_desc_t c = {name, name, NULL, 0, 0, 1, &size, &stride,
                            RS_DTYPE_U8};
        ASSERT_ST(rs_capture_add_copy(w.cap, &c, &d), RS_OK, d);
    }
    publish(1);
    return 0;
}

static int world_teardown(void **state)
{
    rs_publisher_destroy(w.pub);
    rs_capture_destroy(w.cap);
    rs_dir_close(w.dir);
    for (int p = 0; p < NPARAMS; p++) {
        free(w.src[p]);
        free(w.alloc[p]);
    }
    tmp_remove(w.tmp); /* each test has a directory of its own */
    return simd_restore_level(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_install_byte_exact, world_setup,
                                        world_teardown),
        cmocka_unit_test_setup_teardown(test_refused_before_any_byte,
                                        world_setup, world_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
