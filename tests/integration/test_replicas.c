/* Several publishers per slot, end to end. Trainer ranks of a tiny model
 * (megatron tp=2: two slots) run as separate processes, each rank with up
 * to two data-parallel replicas publishing the same shards to the same
 * directory slot over UCX (tcp on loopback); this process pulls as one
 * inference rank (vllm tp=1) with a small progress chunk, so its progress
 * callback can strike publishers while the wire stage runs:
 * - one replica of slot 1, the one the receiver reads from, is SIGKILLed
 *   mid-pull: the same pull completes from the other replica, byte-exact
 *   against an independent build of vLLM's loaders, and the result records
 *   the failover; the next pull reads from the live replica directly;
 *   a replica frozen mid-pull (SIGSTOP) the same, once its reads made no
 *   progress for the stall bound (timeout_s far longer); a frozen rank
 *   without a replica is waited for as before, up to timeout_s;
 * - rank 1's only publisher is killed mid-pull after a second replica
 *   published (it joined after the pull read the slot): the pull reads
 *   slot 1 from it;
 * - two replicas per rank publishing versions in alternating order: every
 *   pull after the first reuses the plan (the choice follows names);
 * - the version abandoned mid-pull, then the replica read from killed: the
 *   pull fails naming the lost lease first (not the read it saw fail) and
 *   does not fail over to a replica of a version that went;
 * - both replicas of slot 1 are SIGKILLed mid-pull: the pull fails naming
 *   both, install is not called, the bound parameters keep their bytes;
 * - a rank (one publisher per slot) is killed after a pull and started
 *   again with the same geometry at new addresses: it rejoins its slot of
 *   the same version and the next pull of that version is byte-exact;
 * - a table changed in the directory after it was published (one byte of
 *   its file) is refused before it is parsed: the pull fails with
 *   RS_ERR_VERIFY naming model, version, slot and publisher, and nothing
 *   is installed or touched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "reshard/reshard.h"
#include "proc_fixture.h"
#include "rank_fixture.h"

#define TRAIN "megatron:tp=2"
#define INFER "vllm:tp=1"
#define MODEL "tiny"
#define CHUNK_BYTES (16u << 10)
#define WAIT_TIMEOUT_S 3.0
#define ACK_WAIT_MS 20000
/* The receiver's salt. Publishers join in a fixed order (replica 0 of
 * every rank first), and a receiver reads slot s from its publisher
 * (salt + s) mod count: with salt 1, slot 1 is read from replica 0. */
#define SALT 1

typedef struct world {
    pfx_world_t pw;
    pfx_proc_t pubs[2][2]; /* [rank][replica] */
} world_t;

static world_t world;

/* ---- the world ----------------------------------------------------------- */

/* Starts publisher (rank, replica) with `flags` besides the usual and
 * waits until it has published, so publishers join their slots in the
 * order they are started. */
static void start_publisher_with(world_t *w, int rank, int replica,
                                 unsigned flags)
{
    pfx_publish_t s = {.config = w->pw.config, .train = TRAIN,
                       .directory = w->pw.directory, .model = MODEL,
                       .backend = "ucx", .rank = rank, .replica = replica,
                       .first = 1,
                       .flags = PFX_ACK_PIPE | PFX_ACK_PUBLISHED |
                                PFX_UCX_QUIET | PFX_OWN_PAGES | flags};
    pfx_start(&w->pubs[rank][replica], &s);
    if (!pfx_await_ack(&w->pubs[rank][replica], ACK_WAIT_MS))
        fail_msg("publisher rank %d replica %d did not publish", rank,
                 replica);
}

static void start_publisher(world_t *w, int rank, int replica)
{
    start_publisher_with(w, rank, replica, 0);
}

static int world_setup(void **state)
{
    (void)state;
    world_t *w = &world;
    memset(w, 0, sizeof(*w));
    if (pfx_world_open(&w->pw, "tiny-llama.json", TRAIN, INFER,
                       "replicas") != 0)
        return -1;
    pfx_use_tls("tcp");
    return 0;
}

/* Both ranks, with `replicas` publishers each (replica 0 of every rank
 * first). */
static void start_all(world_t *w, int replicas)
{
    for (int k = 0; k < replicas; k++)
        for (int r = 0; r < 2; r++)
            start_publisher(w, r, k);
}

/* ---- the inference rank ------------------------------------------------ */

typedef struct strike {
    world_t *w;
    int nvictims;          /* replicas of rank 1 to strike: 0, 1 or 2 */
    int freeze;            /* stop them (SIGSTOP) instead of killing;
                            * FREEZE_SHORT: with timeout_s 3 s */
    int late_replica;      /* start rank 1's replica 1 first */
    int abandon;           /* abandon version 1 first */
    int fired;
} strike_t;

typedef struct rank {
    pfx_rank_t r;
    strike_t strike;
} rank_t;

/* Halfway through the first transfer, while both slots' publishers still
 * have reads to serve: rank 1's replicas are killed and reaped, or
 * frozen. */
static void on_progress(void *ctx, const rs_progress_t *p)
{
    strike_t *s = ctx;
    if (s->nvictims == 0 || s->fired || p->bytes_done >= p->bytes_total ||
        p->sessions_outstanding < 2 || p->bytes_done * 2 < p->bytes_total)
        return;
    s->fired = 1;
    if (s->abandon) {
        rs_dir_h dir = NULL;
        rs_diag_t d;
        if (rs_dir_open(s->w->pw.directory, &d, &dir) != RS_OK ||
            rs_dir_abandon(dir, MODEL, 1, &d, NULL) != RS_OK)
            fprintf(stderr, "abandon: %s\n", d.msg);
        rs_dir_close(dir);
    }
    if (s->late_replica) /* it joins slot 1 after the pull read it */
        start_publisher(s->w, 1, 1);
    for (int k = 0; k < s->nvictims; k++) {
        if (s->freeze)
            kill(s->w->pubs[1][k].pid, SIGSTOP); /* its gets stay in flight */
        else
            pfx_stop(&s->w->pubs[1][k], 1);
    }
}

/* Stall bound of the frozen cases: far below their timeout_s (but for
 * FREEZE_SHORT's). */
#define STALL_S 1.0
#define FROZEN_TIMEOUT_S 60.0
#define FREEZE_SHORT 2

static void open_rank(world_t *w, rank_t *ir, int nvictims, int freeze)
{
    rs_receiver_params_t rp;
    ir->strike = (strike_t){w, nvictims, freeze, 0, 0, 0};
    rs_receiver_params_init(&rp);
    rp.directory = w->pw.directory;
    rp.model = MODEL;
    rp.backend = "ucx";
    rp.salt = SALT;
    rp.discover_timeout_s = 20;
    rp.pull_timeout_s = 60;
    rp.timeout_s = WAIT_TIMEOUT_S;
    if (freeze) { /* the stall bound must end the frozen reads */
        rp.timeout_s = freeze == FREEZE_SHORT ? WAIT_TIMEOUT_S
                                              : FROZEN_TIMEOUT_S;
        rp.stall_s = STALL_S;
    }
    rp.progress = on_progress;
    rp.progress_ctx = &ir->strike;
    rp.progress_chunk_bytes = CHUNK_BYTES;
    pfx_rank_open(&ir->r, w->pw.model, &w->pw.infer, 0, &rp, PFX_FILL_PATTERN);
}

/* The rank of the running case: the teardown closes it after a failed
 * assertion. */
static rank_t rank;

/* Both ranks with `replicas` publishers each, and the inference rank
 * striking nvictims replicas of rank 1. */
static rank_t *begin(world_t *w, int replicas, int nvictims, int freeze)
{
    start_all(w, replicas);
    open_rank(w, &rank, nvictims, freeze);
    return &rank;
}

static void expect_installed(world_t *w, const rank_t *ir)
{
    pfx_expect_direct(&ir->r, w->pw.model, &w->pw.infer, 0);
}

static void expect_message(const rs_diag_t *d, const char *text)
{
    if (strstr(d->msg, text) == NULL)
        fail_msg("message lacks '%s': %s", text, d->msg);
}

/* Runs on every path, failed assertions included. */
static int world_teardown(void **state)
{
    (void)state;
    world_t *w = &world;
    pfx_teardown(&rank.r, &w->pubs[0][0], 4, &w->pw);
    return 0;
}

/* ---- the cases ------------------------------------------------------------ */

static void test_replica_killed_mid_pull(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t diag;
    rs_pull_result_t res;
    rank_t *ir = begin(w, 2, 1, 0);
    rs_status_t st = rs_receiver_pull(ir->r.recv, 1, &diag, &res);
    fprintf(stderr, "one replica of slot 1 killed: %s: %s; failovers %u: "
            "%s\n", rs_status_str(st), st ? diag.msg : "", res.failovers,
            st == RS_OK ? res.failover_msg : "");
    assert_true(ir->strike.fired);
    if (st != RS_OK)
        fail_msg("pull with a replica killed: %s", diag.msg);
    assert_int_equal(ir->r.installs, 1);
    assert_true(res.exec.shards_verified > 0);
    expect_installed(w, ir);
    assert_int_equal(res.failovers, 1);
    assert_string_equal(res.failover_msg, "trainer-1, slot 1 -> trainer-1-r1");
    /* the next pull goes to the live replica first */
    pfx_rank_restore(&ir->r);
    st = rs_receiver_pull(ir->r.recv, 1, &diag, &res);
    if (st != RS_OK)
        fail_msg("pull after the failover: %s", diag.msg);
    assert_int_equal(res.failovers, 0);
    assert_int_equal(ir->r.installs, 2);
    expect_installed(w, ir);
    pfx_rank_close(&ir->r);
    pfx_stop(&w->pubs[1][0], 0);
    assert_true(WIFSIGNALED(w->pubs[1][0].status));
    assert_int_equal(WTERMSIG(w->pubs[1][0].status), SIGKILL);
}

/* The same failover inside rs_receiver_stage: the stage completes from the
 * other replica into staging, the bound parameters keep their prior bytes
 * until apply, and apply installs the version byte-exact. */
static void test_replica_killed_mid_stage(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t diag;
    rs_pull_result_t res;
    rs_staged_h staged = NULL;
    rank_t *ir = begin(w, 2, 1, 0);
    rs_status_t st = rs_receiver_stage(ir->r.recv, 1, &diag, &staged);
    assert_true(ir->strike.fired);
    if (st != RS_OK)
        fail_msg("stage with a replica killed: %s", diag.msg);
    assert_int_equal(rs_staged_version(staged), 1);
    assert_int_equal(ir->r.installs, 0);
    pfx_expect_untouched(&ir->r); /* staged, not applied */
    st = rs_receiver_apply(ir->r.recv, staged, &diag, &res);
    if (st != RS_OK)
        fail_msg("apply after a failover: %s", diag.msg);
    assert_int_equal(ir->r.installs, 1);
    assert_int_equal(res.failovers, 1);
    assert_string_equal(res.failover_msg, "trainer-1, slot 1 -> trainer-1-r1");
    expect_installed(w, ir);
    pfx_rank_close(&ir->r);
    pfx_stop(&w->pubs[1][0], 0);
    assert_true(WIFSIGNALED(w->pubs[1][0].status));
}

/* A frozen replica answers nothing: its reads make no progress for the
 * stall bound (1 s; timeout_s is 60 s) and the pull moves to the other
 * replica, the failure recorded with its cause. */
static void test_replica_frozen_mid_pull(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_pull_result_t res;
    rank_t *ir = begin(w, 2, 1, 1);
    /* no diag: the failover does not depend on the caller's */
    rs_status_t st = rs_receiver_pull(ir->r.recv, 1, NULL, &res);
    fprintf(stderr, "one replica of slot 1 frozen: %s in %.2f s; failovers "
            "%u: %s\n", rs_status_str(st), st == RS_OK ? res.stage_s : 0,
            res.failovers, st == RS_OK ? res.failover_msg : "");
    assert_true(ir->strike.fired);
    assert_int_equal(st, RS_OK);
    assert_int_equal(ir->r.installs, 1);
    expect_installed(w, ir);
    assert_int_equal(res.failovers, 1);
    assert_string_equal(res.failover_msg, "trainer-1, slot 1 -> trainer-1-r1");
    assert_int_equal(res.nfailures, 1);
    assert_string_equal(res.failures[0].publisher, "trainer-1");
    assert_int_equal(res.failures[0].slot, 1);
    if (strstr(res.failures[0].why, "no progress for 1 s") == NULL)
        fail_msg("failure cause: %s", res.failures[0].why);
    assert_true(res.stage_s < FROZEN_TIMEOUT_S);
    pfx_rank_close(&ir->r);
}

/* Without a replica a frozen publisher is waited for as before: the
 * stall bound does not apply, the wait ends at timeout_s (3 s here). */
static void test_frozen_without_replica(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t diag;
    rs_pull_result_t res;
    rank_t *ir = begin(w, 1, 1, FREEZE_SHORT);
    rs_status_t st = rs_receiver_pull(ir->r.recv, 1, &diag, &res);
    fprintf(stderr, "a frozen rank without a replica: %s: %s\n",
            rs_status_str(st), diag.msg);
    assert_true(ir->strike.fired);
    assert_int_equal(st, RS_ERR_TIMEOUT);
    expect_message(&diag, "timed out after 3 s");
    expect_message(&diag, "trainer-1, slot 1");
    /* a failed pull writes no result: the receiver keeps its failures */
    rs_pull_failure_t f;
    assert_int_equal(rs_receiver_failures(ir->r.recv, &f, 1), 1);
    assert_string_equal(f.publisher, "trainer-1");
    if (strstr(f.why, "timed out after 3 s") == NULL)
        fail_msg("failure cause: %s", f.why);
    assert_int_equal(ir->r.installs, 0);
    pfx_expect_untouched(&ir->r);
    kill(w->pubs[1][0].pid, SIGCONT);
    pfx_rank_close(&ir->r);
}

/* Rank 1's second replica publishes after the pull read slot 1, then its
 * first is killed: the pull reads the slot again and uses the newcomer. */
static void test_replica_joins_mid_pull(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t diag;
    rs_pull_result_t res;
    rank_t *ir = begin(w, 1, 1, 0);
    ir->strike.late_replica = 1;
    rs_status_t st = rs_receiver_pull(ir->r.recv, 1, &diag, &res);
    fprintf(stderr, "a replica joined mid-pull: %s: %s; failovers %u: %s\n",
            rs_status_str(st), st ? diag.msg : "", res.failovers,
            st == RS_OK ? res.failover_msg : "");
    assert_true(ir->strike.fired);
    if (st != RS_OK)
        fail_msg("pull with a replica joining mid-pull: %s", diag.msg);
    assert_int_equal(ir->r.installs, 1);
    expect_installed(w, ir);
    assert_int_equal(res.failovers, 1);
    assert_string_equal(res.failover_msg, "trainer-1, slot 1 -> trainer-1-r1");
    pfx_rank_close(&ir->r);
}

/* Both replicas of both ranks publish versions 2..5, replica 1 first in
 * even versions, replica 0 first in odd ones: each pull after the first
 * reads the same publishers and reuses the plan. */
static void test_alternating_order_keeps_plan(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t diag;
    rs_pull_result_t res;
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < 2; r++)
            start_publisher_with(w, r, k, PFX_NEXT_VERSIONS);
    open_rank(w, &rank, 0, 0);
    rank_t *ir = &rank;
    for (int v = 1; v <= 5; v++) {
        for (int i = 0; v > 1 && i < 2; i++) {
            int k = v % 2 == 0 ? 1 - i : i;
            for (int r = 0; r < 2; r++) {
                assert_int_equal(pfx_send(&w->pubs[r][k], (unsigned char)v),
                                 0);
                if (!pfx_await_ack(&w->pubs[r][k], ACK_WAIT_MS))
                    fail_msg("rank %d replica %d: no version %d", r, k, v);
            }
        }
        pfx_rank_restore(&ir->r);
        rs_status_t st = rs_receiver_pull(ir->r.recv, v, &diag, &res);
        if (st != RS_OK)
            fail_msg("pull of version %d: %s", v, diag.msg);
        assert_int_equal(res.replanned, v == 1);
        assert_int_equal(res.failovers, 0);
        expect_installed(w, ir);
    }
    pfx_rank_close(&ir->r);
}

static void test_abandoned_mid_pull(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t diag;
    rs_pull_result_t res;
    rank_t *ir = begin(w, 2, 1, 0);
    ir->strike.abandon = 1;
    rs_status_t st = rs_receiver_pull(ir->r.recv, 1, &diag, &res);
    fprintf(stderr, "abandoned mid-pull: %s: %s\n", rs_status_str(st),
            diag.msg);
    assert_true(ir->strike.fired);
    assert_int_equal(st, RS_ERR_VERIFY);
    if (strncmp(diag.msg, "version 1 of 'tiny': lease '", 28) != 0)
        fail_msg("the lease does not come first: %s", diag.msg);
    expect_message(&diag, "lost mid-pull (version 1 of 'tiny' was "
                   "released by ");
    expect_message(&diag, "so the publishers may have refilled or dropped "
                   "their buffers while they were read; nothing installed");
    expect_message(&diag, "what the reads saw then: reading from the "
                   "publishers: ");
    assert_int_equal(rs_receiver_failures(ir->r.recv, NULL, 0), 0);
    assert_int_equal(ir->r.installs, 0);
    pfx_expect_untouched(&ir->r);
    pfx_rank_close(&ir->r);
}

static void test_both_replicas_killed(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t diag;
    rs_pull_result_t res;
    rank_t *ir = begin(w, 2, 2, 0);
    rs_status_t st = rs_receiver_pull(ir->r.recv, 1, &diag, &res);
    fprintf(stderr, "both replicas of slot 1 killed: %s: %s\n",
            rs_status_str(st), diag.msg);
    assert_true(ir->strike.fired);
    if (st != RS_ERR_TRANSPORT && st != RS_ERR_TIMEOUT)
        fail_msg("pull with both replicas killed: %s: %s", rs_status_str(st),
                 diag.msg);
    expect_message(&diag, "slot 1 of version 1: reading from each of its 2 "
                   "publishers failed");
    expect_message(&diag, "trainer-1, slot 1: ");
    expect_message(&diag, "trainer-1-r1, slot 1: ");
    assert_int_equal(ir->r.installs, 0);
    pfx_expect_untouched(&ir->r);
    pfx_rank_close(&ir->r);
}

static void test_restarted_rank_rejoins(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t diag;
    rs_pull_result_t res;
    rank_t *ir = begin(w, 1, 0, 0);
    rs_status_t st = rs_receiver_pull(ir->r.recv, 1, &diag, &res);
    if (st != RS_OK)
        fail_msg("first pull: %s", diag.msg);
    expect_installed(w, ir);
    /* rank 1 dies and comes back: same session and shards, new memory and
     * UCX address; its publish replaces its own entry in slot 1 */
    pfx_stop(&w->pubs[1][0], 1);
    start_publisher(w, 1, 0);
    pfx_rank_restore(&ir->r);
    st = rs_receiver_pull(ir->r.recv, 1, &diag, &res);
    if (st != RS_OK)
        fail_msg("pull after rank 1 restarted: %s", diag.msg);
    assert_int_equal(res.replanned, 1); /* new addresses: a new topology */
    assert_int_equal(res.failovers, 0);
    assert_int_equal(ir->r.installs, 2);
    expect_installed(w, ir);
    pfx_rank_close(&ir->r);
}

static void test_corrupted_table_refused(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t diag;
    rs_pull_result_t res;
    char path[512];
    start_all(w, 1);
    /* one byte near the end of trainer-1's table (its JSON, past the
     * digest line), flipped behind the directory's back */
    snprintf(path, sizeof(path), "%.60s/%s/1/slot-1@trainer-1", w->pw.tmp,
             MODEL);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -3, SEEK_END), 0);
    int c = fgetc(f);
    assert_true(c != EOF);
    assert_int_equal(fseek(f, -3, SEEK_END), 0);
    assert_int_equal(fputc(c ^ 0x01, f), c ^ 0x01);
    assert_int_equal(fclose(f), 0);
    rank_t *ir = &rank;
    open_rank(w, ir, 0, 0);
    rs_status_t st = rs_receiver_pull(ir->r.recv, 1, &diag, &res);
    fprintf(stderr, "corrupted table: %s: %s\n", rs_status_str(st), diag.msg);
    assert_int_equal(st, RS_ERR_VERIFY);
    expect_message(&diag, "table of publisher 'trainer-1' of slot 1 of "
                   "version 1 of 'tiny' is corrupted");
    assert_int_equal(ir->r.installs, 0);
    pfx_expect_untouched(&ir->r);
    pfx_rank_close(&ir->r);
}

#define T(name) cmocka_unit_test_setup_teardown(name, world_setup, world_teardown)

int main(int argc, char **argv)
{
    if (pfx_is_publisher(argc, argv))
        return pfx_publisher_main(argv[2], NULL);
    const struct CMUnitTest tests[] = {
        T(test_replica_killed_mid_pull),
        T(test_replica_killed_mid_stage),
        T(test_replica_frozen_mid_pull),
        T(test_frozen_without_replica),
        T(test_replica_joins_mid_pull),
        T(test_alternating_order_keeps_plan),
        T(test_abandoned_mid_pull),
        T(test_both_replicas_killed),
        T(test_restarted_rank_rejoins),
        T(test_corrupted_table_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
