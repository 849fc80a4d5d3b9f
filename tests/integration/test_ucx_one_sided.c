/* One-sided means the publisher does nothing: a child process exposes an
 * exposer allocation (UCX's own shared memory) and a malloc'd buffer over
 * UCX_TLS=sm, then is frozen with SIGSTOP. Reads of the allocation, every
 * size and offset, still complete byte-exact against the fill formula (the
 * reader maps it and copies); reads of the malloc'd buffer, which UCX can
 * only serve through the frozen process's progress thread, time out
 * instead of returning anything. With RESHARD_UCX_GETS=1 the allocation is
 * read with ucp_get_nbx, which is one-sided too once the endpoint is wired
 * up (one read the running publisher serves comes first). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/transport_impl.h"
#include "reshard/digest.h"
#include "reshard/expose.h"
#include "reshard/transport.h"
#include "transport_fixture.h"

#define ARENA_BYTES (8u << 20)
#define CALLER_BYTES (1u << 20)
#define ARENA_ADDR 0x100000000ull
#define CALLER_ADDR 0x200000000ull

static uint8_t pattern(uint64_t i, unsigned salt)
{
    return (uint8_t)((i * 2654435761u + salt) >> 7);
}

/* The publisher: exposes both buffers, sends its blob, then waits to be
 * frozen and killed. */
static void child(int out)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    rs_exposer_h x = NULL;
    void *arena = NULL;
    uint8_t *caller = malloc(CALLER_BYTES);
    if (caller == NULL || rs_exposer_create("ucx", NULL, &x) != RS_OK ||
        rs_exposer_alloc(x, ARENA_BYTES, NULL, &arena) != RS_OK)
        _exit(2);
    for (uint64_t i = 0; i < ARENA_BYTES; i++)
        ((uint8_t *)arena)[i] = pattern(i, 1);
    for (uint64_t i = 0; i < CALLER_BYTES; i++)
        caller[i] = pattern(i, 2);
    const void *blob = NULL;
    size_t len = 0;
    if (rs_exposer_add_region(x, ARENA_ADDR, arena, ARENA_BYTES, RS_MEM_HOST,
                              NULL) != RS_OK ||
        rs_exposer_add_region(x, CALLER_ADDR, caller, CALLER_BYTES,
                              RS_MEM_HOST, NULL) != RS_OK ||
        rs_exposer_start(x, NULL) != RS_OK ||
        rs_exposer_blob(x, &blob, &len) != RS_OK)
        _exit(3);
    uint64_t len64 = len;
    if (tfx_write_all(out, &len64, 8) != 0 || tfx_write_all(out, blob, len))
        _exit(4);
    for (;;)
        pause();
}

typedef struct peer {
    pid_t pid;
    void *blob;
    size_t len;
} peer_t;

static void peer_start(peer_t *p)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    p->pid = fork();
    assert_true(p->pid >= 0);
    if (p->pid == 0) {
        close(fds[0]);
        child(fds[1]);
    }
    close(fds[1]);
    uint64_t len = 0;
    assert_int_equal(tfx_read_all(fds[0], &len, 8), 0);
    p->len = (size_t)len;
    p->blob = malloc(p->len);
    assert_non_null(p->blob);
    assert_int_equal(tfx_read_all(fds[0], p->blob, p->len), 0);
    close(fds[0]);
}

static void peer_stop(peer_t *p)
{
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    free(p->blob);
}

static rs_transport_h connect_peer(const peer_t *p)
{
    rs_transport_params_t tp;
    rs_transport_params_init(&tp);
    tp.backend = "ucx";
    rs_transport_h t = NULL;
    rs_diag_t d;
    assert_int_equal(rs_transport_create(&tp, &d, &t), RS_OK);
    rs_peer_t peer = {"publisher", p->pid, NULL, 0, p->blob, p->len};
    if (rs_transport_connect(t, 0, &peer, &d) != RS_OK)
        fail_msg("connect: %s", d.msg);
    return t;
}

/* Reads of many sizes and offsets into one buffer, checked byte for
 * byte; bytes between reads must stay as they were. */
static void read_arena(rs_transport_h t)
{
    static const uint64_t sizes[] = {1, 7, 64, 4096, 65536, 1u << 20,
                                     3u << 20};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    uint8_t *dst = malloc(ARENA_BYTES);
    assert_non_null(dst);
    memset(dst, 0xA5, ARENA_BYTES);
    rs_read_t r[N];
    uint64_t off = 3, at = 0;
    for (size_t i = 0; i < N; i++) {
        r[i] = (rs_read_t){0, ARENA_ADDR + off, dst + at, sizes[i]};
        off += sizes[i] + 100;
        at += sizes[i] + 11;
    }
    rs_diag_t d;
    if (rs_transport_post(t, r, N, &d) != RS_OK ||
        rs_transport_wait(t, 10, &d) != RS_OK)
        fail_msg("arena reads with the publisher frozen: %s", d.msg);
    size_t k = 0;
    for (size_t i = 0; i < N; i++) {
        uint64_t src = r[i].src_addr - ARENA_ADDR;
        uint8_t *out = r[i].dst;
        for (; dst + k < out; k++)
            assert_int_equal(dst[k], 0xA5);
        for (uint64_t j = 0; j < sizes[i]; j++, k++)
            if (out[j] != pattern(src + j, 1))
                fail_msg("read %zu byte %llu", i, (unsigned long long)j);
    }
    for (; k < ARENA_BYTES; k++)
        assert_int_equal(dst[k], 0xA5);
    free(dst);
}

/* Taps (fused digests): a read of the mapped allocation feeds the tap its
 * destination lies in with exactly its bytes, in order, even when a read
 * without a tap continues it in both source and destination (the two are
 * not merged into one copy); reads by gets leave every tap unfed, so the
 * executor digests those after the wire. */
static void read_tapped(rs_transport_h t, int gets)
{
    enum { A = 3u << 20, B = 65536 + 5, C = 4096 };
    uint8_t *dst = malloc(A + B + C);
    assert_non_null(dst);
    rs__tap_t taps[2];
    memset(taps, 0, sizeof(taps));
    taps[0].dst = dst;
    taps[0].nbytes = A;
    taps[1].dst = dst + A + C;
    taps[1].nbytes = B;
    for (int i = 0; i < 2; i++)
        rs_digest_init(&taps[i].digest);
    rs__transport_set_taps(t, taps, 2);
    /* A, then C right after A in source and destination (no tap), then B
     * in two reads that continue each other */
    rs_read_t r[4] = {{0, ARENA_ADDR + 9, dst, A},
                      {0, ARENA_ADDR + 9 + A, dst + A, C},
                      {0, ARENA_ADDR + 9 + A + C, dst + A + C, 1000},
                      {0, ARENA_ADDR + 9 + A + C + 1000, dst + A + C + 1000,
                       B - 1000}};
    rs_diag_t d;
    if (rs_transport_post(t, r, 4, &d) != RS_OK ||
        rs_transport_wait(t, 10, &d) != RS_OK)
        fail_msg("tapped reads: %s", d.msg);
    rs__transport_set_taps(t, NULL, 0);
    for (uint64_t i = 0; i < (uint64_t)A + B + C; i++)
        if (dst[i] != pattern(9 + i, 1))
            fail_msg("tapped read byte %llu", (unsigned long long)i);
    for (int i = 0; i < 2; i++) {
        if (gets) {
            assert_int_equal(taps[i].digest.total, 0);
            continue;
        }
        assert_int_equal(taps[i].digest.total, taps[i].nbytes);
        assert_true(rs_digest_final(&taps[i].digest) ==
                    rs_digest(taps[i].dst, (size_t)taps[i].nbytes));
    }
    free(dst);
}

static void frozen_publisher(int gets)
{
    setenv("UCX_TLS", "sm", 1);
    if (gets)
        setenv("RESHARD_UCX_GETS", "1", 1);
    else
        unsetenv("RESHARD_UCX_GETS");
    peer_t p;
    peer_start(&p);
    rs_transport_h t = connect_peer(&p);
    /* One read the publisher serves first: the endpoint's wireup finishes
     * with its help, then it is frozen. */
    uint8_t warm[64];
    rs_read_t w = {0, CALLER_ADDR, warm, sizeof(warm)};
    rs_diag_t d;
    if (rs_transport_post(t, &w, 1, &d) != RS_OK ||
        rs_transport_wait(t, 30, &d) != RS_OK)
        fail_msg("read with the publisher running: %s", d.msg);
    for (size_t i = 0; i < sizeof(warm); i++)
        assert_int_equal(warm[i], pattern(i, 2));
    assert_int_equal(kill(p.pid, SIGSTOP), 0);
    read_arena(t);
    read_tapped(t, gets);

    uint8_t buf[4096];
    memset(buf, 0x5A, sizeof(buf));
    rs_read_t r = {0, CALLER_ADDR + 8, buf, sizeof(buf)};
    rs_status_t st = rs_transport_post(t, &r, 1, &d);
    if (st == RS_OK)
        st = rs_transport_wait(t, 1.0, &d);
    assert_int_equal(st, RS_ERR_TIMEOUT); /* only the publisher can serve it */
    rs_transport_destroy(t);
    peer_stop(&p);
    unsetenv("RESHARD_UCX_GETS");
}

static void test_arena_reads_need_no_publisher(void **state)
{
    (void)state;
    frozen_publisher(0);
}

static void test_arena_gets_need_no_publisher(void **state)
{
    (void)state;
    frozen_publisher(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_reads_need_no_publisher),
        cmocka_unit_test(test_arena_gets_need_no_publisher),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
