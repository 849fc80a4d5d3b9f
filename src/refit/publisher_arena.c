/* A publisher's staging: memory it allocates from its exposer
 * (rs_publisher_alloc), shards held in place there, and the copy-in arena each
 * publish of a new version fills from the trainer's tensors (and, after them,
 * the quantized copies of publisher_arena_quant.c). The exposer lives as long
 * as the publisher, so allocations and the arena survive re-exposing
 * (docs/refit.md, "Publisher staging"). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/diag.h"
#include "refit/publisher_impl.h"
#include "reshard/dir.h"
#include "reshard/expose.h"


rs_status_t rs__publisher_exposer(rs_publisher_h p, rs_diag_t *diag)
{
    if (p->exposer != NULL)
        return RS_OK;
    return rs_exposer_create(p->backend, diag, &p->exposer);
}

/* The fallback notice, once per publisher. */
static void tell_fallback(rs_publisher_h p, void *ptr, uint64_t nbytes,
                          const char *what)
{
    rs_exposer_memory_t m;
    char line[RS_DIAG_MSG_MAX];
    if (p->fallback_told || rs_exposer_memory(p->exposer, ptr, &m) != RS_OK ||
        !m.fallback)
        return;
    p->fallback_told = 1;
    snprintf(line, sizeof(line), "publisher rank %lld: UCX gave ordinary "
             "memory, not shared memory, for the %s (%" PRIu64 " bytes): "
             "sysv or /dev/shm limits (kernel.shmmax, kernel.shmall, the "
             "size of /dev/shm) or UCX_ALLOC_PRIO; readers on this machine "
             "get emulated reads answered by this publisher's progress "
             "thread, several times slower than one-sided copies",
             (long long)p->params.rank, what, nbytes);
    rs__publisher_notify(p, line);
}

static rs_status_t publisher_alloc(rs_publisher_h p, uint64_t nbytes,
                                   const char *what, rs_diag_t *diag,
                                   void **ptr_p)
{
    void *ptr;
    rs_status_t st = rs__publisher_exposer(p, diag);
    if (st == RS_OK)
        st = rs_exposer_alloc(p->exposer, nbytes, diag, &ptr);
    if (st != RS_OK)
        return st;
    tell_fallback(p, ptr, nbytes, what);
    *ptr_p = ptr;
    return RS_OK;
}

rs_status_t rs_publisher_alloc(rs_publisher_h p, uint64_t nbytes,
                               rs_diag_t *diag, void **ptr_p)
{
    if (p == NULL || ptr_p == NULL || nbytes == 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: alloc "
                            "needs a publisher, an output and a size above "
                            "0");
    return publisher_alloc(p, nbytes, "allocation", diag, ptr_p);
}

/* 1 when [ptr, +nbytes) overlaps [base, +len). */
static int overlaps(const void *ptr, uint64_t nbytes, const void *base,
                    uint64_t len)
{
    uintptr_t a = (uintptr_t)ptr, b = (uintptr_t)base;
    return a < b + len && b < a + nbytes;
}

rs_status_t rs_publisher_free(rs_publisher_h p, void *ptr, rs_diag_t *diag)
{
    rs_exposer_memory_t m;
    if (p == NULL || ptr == NULL || p->exposer == NULL ||
        ptr == p->arena || rs_exposer_memory(p->exposer, ptr, &m) != RS_OK ||
        m.base != ptr)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: %p is not "
                            "memory from rs_publisher_alloc", ptr);
    for (size_t i = 0; i < p->shards_len; i++)
        if (p->shards[i].nbytes > 0 &&
            overlaps(p->shards[i].ptr, p->shards[i].nbytes, m.base, m.nbytes))
            return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: cannot "
                                "free %p: tensor '%s' is registered in it "
                                "(unregister it first)", ptr,
                                p->shards[i].tensor);
    return rs_exposer_free(p->exposer, ptr, diag);
}

rs_status_t rs__publisher_check_in_place(rs_publisher_h p, const char *tensor,
                                         const void *ptr, uint64_t nbytes,
                                         rs_diag_t *diag)
{
    rs_exposer_memory_t m;
    if (nbytes == 0)
        return RS_OK; /* never exposed */
    if (p->exposer != NULL && rs_exposer_memory(p->exposer, ptr, &m) == RS_OK &&
        nbytes <= m.nbytes - (uint64_t)((uintptr_t)ptr - (uintptr_t)m.base))
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: tensor '%s': "
                        "staging in_place serves only memory from "
                        "rs_publisher_alloc, and [%p, +%" PRIu64 ") is not "
                        "inside one allocation", tensor, ptr, nbytes);
}

/* Slots for every non-empty shard; the bytes they need. */
static uint64_t lay_out(rs_publisher_h p, void *base)
{
    uint64_t off = 0;
    for (size_t i = 0; i < p->shards_len; i++) {
        rs__publish_shard_t *s = &p->shards[i];
        s->served = base != NULL ? (char *)base + off : NULL;
        if (s->nbytes > 0)
            off += rs__publisher_slot(s->nbytes);
    }
    return off;
}

rs_status_t rs__publisher_replace_region(rs_publisher_h p, void **mem_p,
                                         uint64_t *cap_p, uint64_t need,
                                         const char *what, rs_diag_t *diag)
{
    void *fresh;
    rs_status_t st = publisher_alloc(p, need, what, diag, &fresh);
    if (st != RS_OK)
        return st;
    rs_exposer_reset(p->exposer);
    p->exposed = 0;
    if (*mem_p != NULL)
        rs_exposer_free(p->exposer, *mem_p, NULL);
    rs_exposer_memory_t m;
    rs_exposer_memory(p->exposer, fresh, &m);
    *mem_p = fresh;
    *cap_p = m.nbytes;
    p->dirty = 1;
    return RS_OK;
}

/* Replaces the arena by one of `need` bytes. Nothing may be served from
 * the old one, so the exposer is reset first (the caller re-exposes). */
static rs_status_t grow_arena(rs_publisher_h p, uint64_t need,
                              rs_diag_t *diag)
{
    return rs__publisher_replace_region(p, &p->arena, &p->arena_cap, need,
                                        "copy-in arena", diag);
}

/* RS_OK when the arena's version may be overwritten: none yet, seen
 * released, or released (or gone) in the directory now. */
static rs_status_t check_released(rs_publisher_h p, int64_t version,
                                  rs_diag_t *diag)
{
    int64_t held = p->arena_version;
    if (held < 0 || held == p->released)
        return RS_OK;
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_status_t st = rs_dir_wait_released(p->dir, p->model, held, 0, &d);
    if (st == RS_OK || st == RS_ERR_INPUT) { /* released, or never there */
        p->released = held;
        return RS_OK;
    }
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher rank %lld: "
                        "cannot publish version %lld: the copy-in arena "
                        "still serves version %lld, which is not released "
                        "(%s); wait for its release first",
                        (long long)p->params.rank, (long long)version,
                        (long long)held, d.msg[0] ? d.msg : rs_status_str(st));
}

/* Copies every shard into its slot (with its delta when one is being
 * written, publisher_delta.c). */
static void copy_shards(rs_publisher_h p)
{
    lay_out(p, p->arena);
    for (size_t i = 0; i < p->shards_len; i++)
        if (p->shards[i].nbytes > 0 && p->shards[i].served != NULL)
            rs__publisher_delta_copy(p, i, p->shards[i].served,
                                     p->shards[i].ptr, p->shards[i].nbytes);
}

static rs_status_t stage_arena(rs_publisher_h p, int64_t version,
                               rs_diag_t *diag)
{
    if (version == p->arena_version && !p->dirty)
        return RS_OK; /* a republish: the arena holds these bytes */
    rs_status_t st = check_released(p, version, diag);
    if (st != RS_OK)
        return st;
    int64_t prev = p->arena_version; /* what the arena holds: a delta's base */
    uint64_t need = 0, qneed = 0;
    if (p->cut_mode)
        st = rs__publisher_cut(p, diag, &need); /* the served layout stays */
    else
        need = lay_out(p, NULL);
    if (st == RS_OK) /* the quantized pieces follow the shards' bytes */
        st = rs__publisher_quant_plan(p, diag, &qneed);
    if (st == RS_OK && need + qneed > 0 && need + qneed > p->arena_cap) {
        st = grow_arena(p, need + qneed, diag);
        prev = -1; /* a fresh arena holds no version */
    }
    if (st == RS_OK)
        st = rs__publisher_delta_begin(p, prev >= version ? -1 : prev, version,
                                       rs__publisher_layout_key(p), diag);
    if (st != RS_OK)
        return st;
    if (p->arena_len != need + qneed)
        p->dirty = 1; /* the one region changes size */
    p->arena_len = need + qneed;
    p->arena_version = -1; /* mixed bytes until every copy is done */
    if (p->cut_mode)
        rs__publisher_fill_pieces(p, p->arena);
    else
        copy_shards(p);
    st = rs__publisher_quant_fill(p, p->arena != NULL
                                         ? (char *)p->arena + need : NULL,
                                  version, diag);
    rs__publisher_delta_end(p, version, st == RS_OK);
    if (st != RS_OK)
        return st; /* arena_version stays -1: nothing of it is served */
    p->arena_version = version;
    return RS_OK;
}

rs_status_t rs__publisher_stage(rs_publisher_h p, int64_t version,
                                rs_diag_t *diag)
{
    if (p->params.staging == RS_STAGING_ARENA)
        return stage_arena(p, version, diag);
    for (size_t i = 0; i < p->shards_len; i++)
        p->shards[i].served = p->shards[i].ptr;
    return RS_OK;
}

rs_status_t rs__publisher_add_regions(rs_publisher_h p, rs_diag_t *diag)
{
    if (p->params.staging == RS_STAGING_ARENA) {
        rs_status_t st = p->arena_len == 0
            ? RS_OK
            : rs_exposer_add_region(p->exposer, (uint64_t)(uintptr_t)p->arena,
                                    p->arena, p->arena_len, RS_MEM_HOST,
                                    diag);
        return st == RS_OK ? rs__publisher_delta_regions(p, diag) : st;
    }
    rs_status_t st = RS_OK;
    for (size_t i = 0; st == RS_OK && i < p->shards_len; i++) {
        const rs__publish_shard_t *s = &p->shards[i];
        if (s->nbytes > 0)
            st = rs_exposer_add_region(p->exposer, (uint64_t)(uintptr_t)s->ptr,
                                       s->ptr, s->nbytes, RS_MEM_HOST, diag);
    }
    return st;
}
