/* Allocations of the ucx exposer: memory UCX allocates itself
 * (ucp_mem_map with UCP_MEM_MAP_ALLOCATE), whose key covers a shared-memory
 * domain (sysv or posix) on one machine, so a reader's get is a one-sided
 * copy no progress of ours takes part in. UCX falls back to ordinary memory
 * without a word when those segments cannot be had (sysv limits, a small
 * /dev/shm, UCX_ALLOC_PRIO), so each allocation is probed: its key is
 * unpacked on a loopback endpoint and asked for a direct pointer
 * (ucp_rkey_ptr), which only shared-memory domains give. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/diag.h"
#include "exec/transports/ucx/ucx_expose.h"

/* 1 when the context opened a sysv or posix memory domain (UCX_TLS
 * reaches shared memory): only then can an allocation be one-sided. UCX
 * 1.13 names its domains only in ucp_context_print_info. */
static int shm_offered(ucp_context_h ctx)
{
    char *text = NULL, line[256], name[64];
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (out == NULL)
        return 0;
    ucp_context_print_info(ctx, out);
    fclose(out);
    int found = 0;
    FILE *in = text != NULL ? fmemopen(text, len, "r") : NULL;
    while (in != NULL && !found && fgets(line, sizeof(line), in) != NULL) {
        unsigned md, cmpt;
        if (sscanf(line, "# md %u : component %u %63s", &md, &cmpt,
                   name) == 3)
            found = strcmp(name, "sysv") == 0 || strcmp(name, "posix") == 0;
    }
    if (in != NULL)
        fclose(in);
    free(text);
    return found;
}

/* Force-closes a loopback endpoint, progressing its worker until done. */
static void close_ep(ucp_worker_h w, ucp_ep_h ep)
{
    ucp_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void *req = ucp_ep_close_nbx(ep, &rp);
    if (UCS_PTR_IS_PTR(req)) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS)
            ucp_worker_progress(w);
        ucp_request_free(req);
    }
}

/* Unpacks m's key on `ep` and asks for a direct pointer to `addr`. */
static int key_is_direct(ucp_context_h ctx, ucp_ep_h ep, ucp_mem_h m,
                         void *addr)
{
    void *packed, *direct = NULL;
    size_t packed_len;
    ucp_rkey_h rkey;
    if (ucp_rkey_pack(ctx, m, &packed, &packed_len) != UCS_OK)
        return 0;
    int ok = ucp_ep_rkey_unpack(ep, packed, &rkey) == UCS_OK;
    ucp_rkey_buffer_release(packed);
    if (!ok)
        return 0;
    ok = ucp_rkey_ptr(rkey, (uint64_t)(uintptr_t)addr, &direct) == UCS_OK;
    ucp_rkey_destroy(rkey);
    return ok;
}

/* 1 when a reader on this machine maps m directly. Runs on a worker of its
 * own (the exposer's may be progressing on its thread). */
static int probe_one_sided(ucx_exposer_t *e, ucp_mem_h m, void *addr)
{
    rs__ucx_t probe = {e->u.ctx, NULL, -1};
    ucp_address_t *self;
    size_t self_len;
    ucp_ep_h ep;
    int direct = 0;
    if (rs__ucx_worker_open(&probe, 0, UCS_THREAD_MODE_SINGLE,
                            "exposer (ucx) probe", NULL) != RS_OK)
        return 0;
    if (ucp_worker_get_address(probe.worker, &self, &self_len) == UCS_OK) {
        ucp_ep_params_t ep_params;
        memset(&ep_params, 0, sizeof(ep_params));
        ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep_params.address = self;
        if (ucp_ep_create(probe.worker, &ep_params, &ep) == UCS_OK) {
            direct = key_is_direct(e->u.ctx, ep, m, addr);
            close_ep(probe.worker, ep);
        }
        ucp_worker_release_address(probe.worker, self);
    }
    rs__ucx_worker_close(&probe);
    return direct;
}

/* ucp_mem_map(ALLOCATE) of len bytes; *addr_p and *len_p as UCX made it. */
static ucs_status_t map_new(ucp_context_h ctx, size_t len, ucp_mem_h *m_p,
                            void **addr_p, size_t *len_p)
{
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                    UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = NULL;
    mp.length = len;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    ucs_status_t us = ucp_mem_map(ctx, &mp, m_p);
    if (us != UCS_OK)
        return us;
    ucp_mem_attr_t attr;
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    us = ucp_mem_query(*m_p, &attr);
    if (us != UCS_OK) {
        ucp_mem_unmap(ctx, *m_p);
        return us;
    }
    *addr_p = attr.address;
    *len_p = attr.length;
    return UCS_OK;
}

rs_status_t rs__ucx_expose_alloc(rs_exposer_h x, uint64_t nbytes, rs__expose_alloc_t *a,
                         rs_diag_t *diag)
{
    ucx_exposer_t *e = x->priv;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    /* A page more than asked: heap and THP fallbacks are not page-aligned,
     * and the caller is promised a page-aligned start. */
    size_t want = (size_t)((nbytes + page - 1) / page * page + page);
    ucp_mem_h m;
    void *addr;
    size_t got;
    unsigned long mark = rs__ucx_quiet_begin();
    ucs_status_t us = map_new(e->u.ctx, want, &m, &addr, &got);
    rs__ucx_quiet_end();
    if (us != UCS_OK) {
        char cause[200];
        int kept = rs__ucx_quiet_cause(mark, cause, sizeof(cause));
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "exposer (ucx): cannot "
                            "allocate %" PRIu64 " bytes: %s%s%s%s", nbytes,
                            ucs_status_string(us), kept ? " (UCX: " : "",
                            kept ? cause : "", kept ? ")" : "");
    }
    uintptr_t start = ((uintptr_t)addr + page - 1) / page * page;
    if (e->shm_offered < 0)
        e->shm_offered = shm_offered(e->u.ctx);
    a->ptr = (void *)start;
    a->nbytes = got - (start - (uintptr_t)addr);
    a->handle = m;
    a->one_sided = e->shm_offered && probe_one_sided(e, m, a->ptr);
    a->fallback = e->shm_offered && !a->one_sided;
    /* Fresh sysv and posix segments are zero; heap, THP and the rest may
     * hold this process's old bytes, which a reader could then see. */
    if (!a->one_sided)
        memset(addr, 0, got);
    return RS_OK;
}

void rs__ucx_expose_release(rs_exposer_h x, rs__expose_alloc_t *a)
{
    ucx_exposer_t *e = x->priv;
    rs__ucx_quiet_begin();
    ucp_mem_unmap(e->u.ctx, (ucp_mem_h)a->handle);
    rs__ucx_quiet_end();
}
