/* The planner's working capture of a capture with quantized copies: the
 * same params, sources, unsupported entries, names, copies and geometry
 * ids, as one copy of each table. Rebuilding it through the public calls
 * hashed every param, source and copy name again and was the largest part
 * of planning an FP8 rank (docs/performance.md, "Planning FP8 captures").
 * The copy borrows what the tables point at (names, shapes, op chains,
 * quantization specs) from the original's arena: a plan borrows its
 * capture for its whole life, and the working capture lives in the plan.
 * Only what is appended to it later lands in its own arena. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "model/capture_impl.h"

/* A copy of a table of n elements of `size` bytes into *to (malloc'd,
 * room for n + extra, one element at least), its length n; 0 on
 * exhaustion. */
static int dup_table(void **to, size_t *len_p, size_t *cap_p, const void *from,
                     size_t n, size_t size, size_t extra)
{
    size_t cap = n + extra > 0 ? n + extra : 1;
    *to = malloc(cap * size);
    if (*to == NULL)
        return 0;
    if (n > 0)
        memcpy(*to, from, n * size);
    *len_p = n;
    *cap_p = cap;
    return 1;
}

#define DUP_VEC(to, from, name, extra)                                        \
    dup_table((void **)&(to)->name, &(to)->name##_len, &(to)->name##_cap,     \
              (from)->name, (from)->name##_len, sizeof(*(from)->name), extra)

/* The name index for the names and `extra` more, filled from the names'
 * own hashes (the map a string map's puts would build, sized so that
 * the puts to come never rehash it). */
static int name_index(rs_capture_h to, size_t extra)
{
    size_t n = to->names_len, cap = 16;
    while ((n + extra + 1) * 2 > cap)
        cap *= 2;
    rs__strmap_slot_t *slots = calloc(cap, sizeof(rs__strmap_slot_t));
    if (slots == NULL)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const rs__capture_name_t *nm = &to->names[i];
        size_t j = (size_t)nm->hash & (cap - 1);
        while (slots[j].key != NULL)
            j = (j + 1) & (cap - 1);
        slots[j] = (rs__strmap_slot_t){nm->name, (uint32_t)i,
                                       (uint32_t)(nm->hash >> 32)};
    }
    to->name_index.slots = slots;
    to->name_index.cap = cap;
    to->name_index.len = n;
    return 1;
}

static int dup_tables(rs_capture_h to, rs_capture_h from, size_t extra)
{
    int ok = DUP_VEC(to, from, params, 0);
    ok = DUP_VEC(to, from, copies, extra) && ok;
    ok = DUP_VEC(to, from, sources, 0) && ok;
    ok = DUP_VEC(to, from, unsupported, 0) && ok;
    ok = DUP_VEC(to, from, names, extra) && ok;
    ok = DUP_VEC(to, from, geoms, 0) && ok;
    ok = rs__strmap_copy(&to->param_index, &from->param_index) && ok;
    ok = rs__strmap_copy(&to->unsupported_index, &from->unsupported_index) &&
         ok;
    ok = ok && name_index(to, extra);
    if (from->geom_slots_len > 0) {
        size_t len = 0, cap = 0;
        ok = dup_table((void **)&to->geom_slots, &len, &cap, from->geom_slots,
                       from->geom_slots_len, sizeof(uint32_t), 0) && ok;
        to->geom_slots_len = len;
    }
    to->unattributed = from->unattributed;
    to->named_derived = from->named_derived;
    return ok;
}

rs_status_t rs__capture_work_copy(rs_capture_h from, size_t extra,
                                  rs_capture_h *to_p, rs_diag_t *diag)
{
    rs_capture_h to;
    if (rs_capture_create(&to) != RS_OK)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (!dup_tables(to, from, extra)) {
        rs_capture_destroy(to);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    *to_p = to;
    return RS_OK;
}

/* A new last copy, copy `like` of the capture as it is; NULL on
 * exhaustion. The fields that differ are then stored into it: a copy of
 * `like` on the stack, changed and pushed, reloaded its changed fields in
 * wider loads than they were stored with, a stall per field (a derived
 * copy per quantized copy, ten thousand a MoE rank). */
static rs__capture_copy_t *push_like(rs_capture_h cap, size_t like)
{
    if (!rs__vec_reserve((void **)&cap->copies, &cap->copies_cap,
                         cap->copies_len + 1, sizeof(*cap->copies)))
        return NULL;
    rs__capture_copy_t *c = &cap->copies[cap->copies_len++];
    *c = cap->copies[like]; /* after the reserve: it may move the table */
    return c;
}

rs_status_t rs__capture_add_like_at(rs_capture_h cap, size_t like,
                                    uint32_t src_id, uint32_t param_id,
                                    int64_t dest_offset, rs_diag_t *diag)
{
    rs__capture_copy_t *c = push_like(cap, like);
    if (c == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    c->src_id = src_id;
    c->src = cap->names[src_id].name;
    c->param_id = param_id;
    c->param = cap->params[param_id].name;
    c->dest_offset = dest_offset;
    return RS_OK;
}

rs_status_t rs__capture_add_like(rs_capture_h cap, size_t like,
                                 uint32_t src_id, rs_dtype_t dtype,
                                 rs_diag_t *diag)
{
    rs__capture_copy_t *c = push_like(cap, like);
    if (c == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    c->quant = NULL;
    c->dest_dtype = dtype;
    c->src_id = src_id;
    c->src = cap->names[src_id].name;
    /* as rs_capture_add_copy binds it: a param declared since `like` was
     * added is found now */
    if (c->param_id == UINT32_MAX &&
        rs__strmap_get(&cap->param_index, c->param, &c->param_id))
        c->param = cap->params[c->param_id].name;
    return RS_OK;
}
