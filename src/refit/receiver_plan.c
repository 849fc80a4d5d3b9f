/* The receiver's plan cache and its connections: the plan, transport and
 * executor are kept while the topology fingerprint of the tables
 * (receiver_tables.c) stays the same (a new version only brings new
 * digests), and rebuilt, with every session the plan reads from connected
 * again, when it changes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base64.h"
#include "core/clock.h"
#include "core/diag.h"
#include "exec/delta_read.h"
#include "refit/receiver_impl.h"
#include "reshard/plan.h"

void rs__receiver_drop_cache(rs_receiver_h r)
{
    rs_exec_destroy(r->exec);
    rs_transport_destroy(r->transport);
    rs_plan_destroy(r->plan);
    if (r->memo_for == r->sources) /* else: kept for the new sources */
        rs__receiver_forget_tables(r);
    rs_sources_destroy(r->sources);
    r->exec = NULL;
    r->transport = NULL;
    r->plan = NULL;
    r->sources = NULL;
    r->cached = 0;
    r->staging_asked = 0;
    r->connected = 0;
}

/* The directory slot a session's table came from, or -1. O(1). */
static int64_t slot_of(rs_receiver_h r, const char *session)
{
    long i = rs_sources_find_table(r->sources, session);
    return i >= 0 && (size_t)i < r->ntable_slot ? r->table_slot[i] : -1;
}

/* The transport blob a session's table carries, decoded. O(1) lookup. */
static rs_status_t blob_of(rs_sources_h s, const char *session, void **blob_p,
                           size_t *len_p, rs_diag_t *diag)
{
    long i = rs_sources_find_table(s, session);
    rs_table_info_t t = {0};
    if (i >= 0)
        rs_sources_table(s, (size_t)i, &t);
    if (t.agent_meta_b64 == NULL)
        return rs__diag_set(diag, RS_ERR_INPUT, "session '%s' published no "
                            "transport blob (agent_meta_b64)", session);
    if (rs__base64_decode(t.agent_meta_b64, blob_p, len_p) != RS_OK)
        return rs__diag_set(diag, RS_ERR_INPUT, "session '%s': "
                            "agent_meta_b64 is not base64", session);
    return RS_OK;
}

/* Connects every session the plan reads from, retrying each a few times
 * under one deadline; names every session that never connected and the
 * first one's cause. Peers are named "<agent>, slot <S>" in transport
 * messages. */
static rs_status_t connect_all(rs_receiver_h r, rs_diag_t *diag)
{
    char failed[512] = "", cause[RS_DIAG_MSG_MAX] = "";
    size_t nfailed = 0;
    double deadline = rs__now_s() + r->params.discover_timeout_s;
    if (r->deadline > 0 && r->deadline < deadline)
        deadline = r->deadline;
    for (uint32_t k = 0; k < rs_plan_num_sessions(r->plan); k++) {
        if (rs_plan_session_bytes(r->plan, k) == 0)
            continue;
        const char *name = rs_plan_session_name(r->plan, k);
        char peer_name[160];
        snprintf(peer_name, sizeof(peer_name), "%.120s, slot %lld", name,
                 (long long)slot_of(r, name));
        rs_status_t st = RS_ERR_TRANSPORT;
        for (int attempt = 0;
             attempt < 3 && st != RS_OK && rs__now_s() < deadline;
             attempt++) {
            if (rs_cancel_raised(&r->cancel))
                return rs__diag_set(diag, RS_ERR_CANCELLED, "cancelled "
                                    "while connecting to %s", peer_name);
            void *blob = NULL;
            size_t len = 0;
            st = blob_of(r->sources, name, &blob, &len, diag);
            if (st == RS_OK) {
                rs_peer_t peer = {peer_name, 0, NULL, 0, blob, len};
                st = rs_transport_connect(r->transport, k, &peer, diag);
            }
            free(blob);
            if (st == RS_ERR_INPUT)
                break; /* a malformed table does not get better */
        }
        if (st != RS_OK) {
            size_t used = strlen(failed);
            snprintf(failed + used, sizeof(failed) - used, "%s%s",
                     nfailed ? "; " : "", peer_name);
            if (nfailed++ == 0 && diag != NULL)
                snprintf(cause, sizeof(cause), "%s", diag->msg);
        }
    }
    if (nfailed > 0)
        return rs__diag_set(diag, RS_ERR_TRANSPORT, "could not connect to "
                            "%zu publisher(s) (%.400s); the first: %.500s",
                            nfailed, failed, cause);
    return RS_OK;
}

/* Builds plan, transport and executor for a new topology; connects the
 * plan's sessions when `connect`. */
static rs_status_t rebuild(rs_receiver_h r, rs_sources_h sources,
                           uint64_t fingerprint, int connect,
                           rs_pull_result_t *res, rs_diag_t *diag)
{
    rs_plan_params_t pp;
    rs_transport_params_t tp;
    rs_exec_params_t ep;
    rs__receiver_drop_cache(r);
    r->sources = sources;
    rs_plan_params_init(&pp);
    pp.replica_salt = r->params.salt;
    if (r->params.max_segments_per_copy > 0)
        pp.max_segments_per_copy = r->params.max_segments_per_copy;
    pp.nic_gbps = r->params.nic_gbps;
    pp.descriptor_ns = r->params.descriptor_ns;
    rs_transport_params_init(&tp);
    tp.backend = r->backend;
    tp.cancel = &r->cancel;
    rs_status_t st = rs_plan_build(r->cap, sources, &pp, diag, &r->plan);
    if (st == RS_OK)
        st = rs_transport_create(&tp, diag, &r->transport);
    /* docs/delta.md, "Receivers": only when some shard's publisher serves
     * deltas (a table entry with a `deltas` key), so receivers of other
     * publishers keep no copies and read as before, and the plan has
     * somewhere to patch them */
    if (st == RS_OK && r->dshard_len > 0 && rs__receiver_patches_deltas(r)) {
        rs_transport_h inner = r->transport;
        r->transport = NULL;
        st = rs__delta_reads_wrap(inner, r->params.nic_gbps,
                                  r->params.descriptor_ns, diag,
                                  &r->transport);
    }
    r->stage = "connect";
    double t0 = rs__now_s();
    if (st == RS_OK && connect)
        st = connect_all(r, diag);
    res->connect_s = rs__now_s() - t0;
    rs__receiver_exec_params(r, &ep);
    if (st == RS_OK)
        st = rs_exec_create(r->plan, r->transport, &ep, diag, &r->exec);
    for (size_t p = 0; st == RS_OK && p < r->nparams; p++) {
        if (r->binds[p].base != NULL)
            st = rs_exec_bind(r->exec, p, rs__receiver_bind_target(&r->binds[p]),
                              r->binds[p].nbytes, RS_MEM_HOST, diag);
    }
    if (st != RS_OK) {
        rs__receiver_drop_cache(r);
        return st;
    }
    r->fingerprint = fingerprint;
    r->cached = 1;
    r->connected = connect;
    return RS_OK;
}

rs_status_t rs__receiver_prepare(rs_receiver_h r, rs_sources_h sources,
                                 uint64_t fp, int connect,
                                 rs_pull_result_t *res, rs_diag_t *diag)
{
    double t0 = rs__now_s();
    if (r->cached && fp == r->fingerprint) {
        rs_status_t st = rs_exec_set_digests(r->exec, sources, diag);
        if (sources != r->sources) { /* else: the cached tables, renewed */
            rs_sources_destroy(r->sources);
            r->sources = sources;
        }
        if (st == RS_OK && connect && !r->connected) {
            r->stage = "connect"; /* planned by a dry run: connect now */
            st = connect_all(r, diag);
            r->connected = st == RS_OK;
        }
        return st;
    }
    res->replanned = 1;
    rs_status_t st = rebuild(r, sources, fp, connect, res, diag);
    res->plan_s = rs__now_s() - t0;
    return st;
}

uint32_t rs__receiver_sessions_read(rs_plan_h plan)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < rs_plan_num_sessions(plan); k++)
        n += rs_plan_session_bytes(plan, k) > 0;
    return n;
}
