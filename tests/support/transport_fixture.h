/* A test world for transports: sessions publishing regions filled with a
 * known byte pattern, hosted in this process (local, local-mt) or in a
 * forked child process (cma; ucx, where the child serves every session
 * through its own exposer and sends the blobs back), so one test body runs
 * against every backend with the pattern as independent ground truth. */
#ifndef RS_TEST_TRANSPORT_FIXTURE_H
#define RS_TEST_TRANSPORT_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "reshard/transport.h"

typedef struct tfx_backend {
    const char *name;
    unsigned threads;
    int remote; /* regions live in a child process */
    const char *tls; /* ucx: UCX_TLS for the child and the transport */
    int packed; /* a session's regions sit back to back in published
                 * addresses (not for cma, which publishes real ones) */
} tfx_backend_t;

/* local, local-mt with 1 and 3 threads, cma. */
extern const tfx_backend_t tfx_backends[];
extern const size_t tfx_nbackends;
/* ucx over shared memory (UCX_TLS=sm) and over tcp on loopback. */
extern const tfx_backend_t tfx_ucx_backends[];
extern const size_t tfx_nucx_backends;

typedef struct tfx_world {
    tfx_backend_t backend;
    uint32_t nsessions;
    size_t nregions;        /* per session */
    rs_region_t *regions;   /* [session * nregions + region] */
    void **mem;             /* local copies (in-process backends) */
    pid_t child;            /* 0 when none */
    int done_fd;            /* closing it releases the child */
    void **blobs;           /* ucx: each session's blob */
    size_t *blob_lens;
} tfx_world_t;

/* Opens a world of nsessions, each with nregions regions of sizes[]. Returns
 * 0; 1 when the backend cannot run here (reason in why: the test should
 * skip); -1 on failure (reason in why). */
int tfx_world_open(tfx_world_t *w, const tfx_backend_t *backend,
                   uint32_t nsessions, const uint64_t *sizes, size_t nregions,
                   char *why, size_t whylen);
void tfx_world_close(tfx_world_t *w);

/* The pattern byte at `off` of a session's region: computed on its own, so
 * tests can derive expected bytes without reading any region. */
uint8_t tfx_byte(uint32_t session, size_t region, uint64_t off);

const rs_region_t *tfx_region(const tfx_world_t *w, uint32_t session,
                              size_t region);

/* Kills the child now (SIGKILL) and reaps it: its sessions are dead. */
void tfx_world_kill(tfx_world_t *w);

/* Pipe helpers between a test and the processes it forks: 0 once all n
 * bytes are written, or -1. tfx_read_all reads exactly n bytes, giving up
 * when the writer is silent for CHILD_ANSWER_MS (a child stuck in setup
 * must not hang the test). */
int tfx_write_all(int fd, const void *buf, size_t n);
int tfx_read_all(int fd, void *buf, size_t n);

/* Creates a transport of the world's backend and connects every session
 * (peer name "s<N>", pid of the child for cma, the blob for ucx). */
rs_status_t tfx_transport(const tfx_world_t *w, rs_diag_t *diag,
                          rs_transport_h *t_p);

/* Forks a child that holds a copy of this process's memory, as it is now,
 * until it is killed (or this process dies): a peer for cma reads. */
pid_t tfx_paused_child(void);

/* Forks a child that exits at once and reaps it: a pid that is gone. */
pid_t tfx_dead_pid(void);

#endif
