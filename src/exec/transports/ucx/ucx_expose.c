/* The ucx exposer: maps each region for remote access (ucp_mem_map, or the
 * holding allocation's own mapping), packs the rkeys and the worker
 * address into the blob, and runs a progress thread until reset or
 * destroyed, because UCX emulates one-sided reads of registered memory
 * over tcp and shared memory with messages the target has to answer. The
 * context outlives resets (allocations live on it, ucx_xalloc.c); the
 * worker does not, so a reset ends every receiver's endpoint. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/diag.h"
#include "exec/expose_impl.h"
#include "exec/transports/ucx/ucx_expose.h"

/* The thread spins while events keep coming and for SPIN_IDLE_S after the
 * last one, then sleeps on the worker's event fd. A reply stalled on a
 * full queue resumes without any event to wake a sleeper, so sleeps are
 * short (SLEEP_SHORT_MS) for WARM_S after activity and long
 * (SLEEP_LONG_MS, also how often an idle thread checks the stop flag)
 * once the exposer has gone quiet. */
#define SPIN_IDLE_S 0.005
#define WARM_S 1.0
#define SLEEP_SHORT_MS 1
#define SLEEP_LONG_MS 50

static rs_status_t ux_open(rs_exposer_h x, rs_diag_t *diag)
{
    ucx_exposer_t *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exposer (ucx): state");
    /* Serialized: the progress thread owns the worker once started; the
     * creating thread only touches it before start and after the join.
     * The context is shared: allocations are mapped while it serves. */
    rs_status_t st = rs__ucx_open(&e->u, 1, 1, UCS_THREAD_MODE_SERIALIZED,
                                  "exposer (ucx)", diag);
    if (st != RS_OK) {
        free(e);
        return st;
    }
    atomic_init(&e->stop, 0);
    e->shm_offered = -1;
    x->priv = e;
    return RS_OK;
}

/* Stops the thread, unmaps the regions' own mappings and closes the
 * worker; the context and allocations stay. */
static void ux_reset(rs_exposer_h x)
{
    ucx_exposer_t *e = x->priv;
    if (e->running) {
        atomic_store(&e->stop, 1);
        ucp_worker_signal(e->u.worker);
        pthread_join(e->thread, NULL);
        e->running = 0;
        atomic_store(&e->stop, 0);
    }
    /* Endpoints of receivers that went away are torn down here: first
     * what UCX still has in flight with them is let finish (a worker
     * destroyed mid-wireup aborts the process on an assertion), then the
     * memory goes, then the worker. */
    rs__ucx_quiet_begin();
    rs__ucx_worker_quiesce(&e->u);
    for (size_t i = 0; i < e->mems_len; i++)
        if (e->mems[i] != NULL)
            ucp_mem_unmap(e->u.ctx, e->mems[i]);
    e->mems_len = 0;
    rs__ucx_worker_close(&e->u);
    rs__ucx_quiet_end();
}

static void ux_close(rs_exposer_h x)
{
    ucx_exposer_t *e = x->priv;
    ux_reset(x);
    rs__ucx_quiet_begin();
    free(e->mems);
    rs__ucx_close(&e->u);
    rs__ucx_quiet_end();
    free(e);
    x->priv = NULL;
}

static rs_status_t ux_add(rs_exposer_h x, const rs__expose_region_t *r,
                          rs_diag_t *diag)
{
    ucx_exposer_t *e = x->priv;
    if (!rs__vec_reserve((void **)&e->mems, &e->mems_cap, e->mems_len + 1,
                        sizeof(ucp_mem_h)))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exposer (ucx): maps");
    if (r->alloc != NULL) { /* served under its allocation's own key */
        e->mems[e->mems_len++] = NULL;
        return RS_OK;
    }
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                    UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = r->ptr;
    mp.length = (size_t)r->nbytes;
    ucs_status_t us = ucp_mem_map(e->u.ctx, &mp, &e->mems[e->mems_len]);
    if (us != UCS_OK)
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "exposer (ucx): ucp_mem_map of %llu bytes at %p "
                            "(published 0x%llx): %s",
                            (unsigned long long)r->nbytes, r->ptr,
                            (unsigned long long)r->addr,
                            ucs_status_string(us));
    e->mems_len++;
    return RS_OK;
}

/* One region of the blob: published address, size, real address, rkey. */
static rs_status_t write_region(rs_exposer_h x, size_t i, rs_diag_t *diag)
{
    ucx_exposer_t *e = x->priv;
    const rs__expose_region_t *r = &x->regions[i];
    void *rkey;
    size_t rkey_len;
    ucp_mem_h m = e->mems[i] != NULL ? e->mems[i] : (ucp_mem_h)r->alloc;
    ucs_status_t us = ucp_rkey_pack(e->u.ctx, m, &rkey, &rkey_len);
    if (us != UCS_OK)
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "exposer (ucx): ucp_rkey_pack of region %zu: %s",
                            i, ucs_status_string(us));
    rs__blob_write_u64(&x->blob, r->addr);
    rs__blob_write_u64(&x->blob, r->nbytes);
    rs__blob_write_u64(&x->blob, (uint64_t)(uintptr_t)r->ptr);
    rs__blob_write_u32(&x->blob, (uint32_t)rkey_len);
    rs__blob_write_bytes(&x->blob, rkey, rkey_len);
    ucp_rkey_buffer_release(rkey);
    return RS_OK;
}

static rs_status_t write_blob(rs_exposer_h x, rs_diag_t *diag)
{
    ucx_exposer_t *e = x->priv;
    ucp_address_t *addr;
    size_t addr_len;
    ucs_status_t us = ucp_worker_get_address(e->u.worker, &addr, &addr_len);
    if (us != UCS_OK)
        return rs__diag_set(diag, RS_ERR_TRANSPORT,
                            "exposer (ucx): ucp_worker_get_address: %s",
                            ucs_status_string(us));
    rs__blob_write_header(&x->blob, RS_BLOB_UCX);
    rs__blob_write_u32(&x->blob, (uint32_t)addr_len);
    rs__blob_write_bytes(&x->blob, addr, addr_len);
    ucp_worker_release_address(e->u.worker, addr);
    rs__blob_write_u32(&x->blob, (uint32_t)x->regions_len);
    for (size_t i = 0; i < x->regions_len; i++) {
        rs_status_t st = write_region(x, i, diag);
        if (st != RS_OK)
            return st;
    }
    if (x->blob.failed)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exposer (ucx): blob");
    return RS_OK;
}

/* Sleeps until the worker has events, the stop signal, or `ms`. */
static void sleep_for_events(ucx_exposer_t *e, int ms)
{
    if (e->u.efd < 0) {
        struct timespec ts = {0, 50000}; /* 50 us */
        nanosleep(&ts, NULL);
        return;
    }
    if (ucp_worker_arm(e->u.worker) != UCS_OK)
        return; /* events are pending: progress them first */
    struct pollfd p = {e->u.efd, POLLIN, 0};
    while (poll(&p, 1, ms) < 0 && errno == EINTR)
        ;
}

static void *progress_main(void *arg)
{
    ucx_exposer_t *e = arg;
    double last = rs__now_s(); /* of the last event seen */
    unsigned idle = 0;
    int active = 0;
    /* A receiver that goes away (it finished, died or lost its link) is
     * ordinary here: UCX's lines about it stay quiet. */
    rs__ucx_quiet_begin();
    while (!atomic_load_explicit(&e->stop, memory_order_acquire)) {
        if (ucp_worker_progress(e->u.worker) != 0) {
            active = 1;
            continue;
        }
        /* Over emulated RMA the reader and this thread hand fragments to
         * each other through a bounded queue: when both spin on one core,
         * each waits out the other's whole time slice. Yielding while idle
         * hands the core over at once. */
        if (++idle % 16 == 0)
            sched_yield();
        if (idle < 64) /* read the clock only now and then */
            continue;
        idle = 0;
        double now = rs__now_s();
        if (active) {
            last = now;
            active = 0;
        } else if (now - last >= SPIN_IDLE_S) {
            sleep_for_events(e, now - last < WARM_S ? SLEEP_SHORT_MS
                                                    : SLEEP_LONG_MS);
        }
    }
    rs__ucx_quiet_end();
    return NULL;
}

static rs_status_t ux_start(rs_exposer_h x, rs_diag_t *diag)
{
    ucx_exposer_t *e = x->priv;
    rs_status_t st = RS_OK;
    if (e->u.worker == NULL) /* closed by a reset: a fresh one */
        st = rs__ucx_worker_open(&e->u, 1, UCS_THREAD_MODE_SERIALIZED,
                                 "exposer (ucx)", diag);
    if (st == RS_OK)
        st = write_blob(x, diag);
    if (st != RS_OK)
        return st;
    int rc = pthread_create(&e->thread, NULL, progress_main, e);
    if (rc != 0)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY,
                            "exposer (ucx): progress thread: %s",
                            strerror(rc));
    e->running = 1;
    return RS_OK;
}

const rs__exposer_ops_t rs__exposer_ucx = {
    .name = "ucx",
    .open = ux_open,
    .close = ux_close,
    .add = ux_add,
    .start = ux_start,
    .reset = ux_reset,
    .alloc = rs__ucx_expose_alloc,
    .release = rs__ucx_expose_release,
};
