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
 * one element at least), its length and capacity n; 0 on exhaustion. */
static int dup_table(void **to, size_t *len_p, size_t *cap_p, const void *from,
                     size_t n, size_t size)
{
    *to = malloc((n > 0 ? n : 1) * size);
    if (*to == NULL)
        return 0;
    if (n > 0)
        memcpy(*to, from, n * size);
    *len_p = n;
    *cap_p = n > 0 ? n : 1;
    return 1;
}

#define DUP_VEC(to, from, name)                                               \
    dup_table((void **)&(to)->name, &(to)->name##_len, &(to)->name##_cap,     \
              (from)->name, (from)->name##_len, sizeof(*(from)->name))

static int dup_tables(rs_capture_h to, rs_capture_h from)
{
    int ok = DUP_VEC(to, from, params);
    ok = DUP_VEC(to, from, copies) && ok;
    ok = DUP_VEC(to, from, sources) && ok;
    ok = DUP_VEC(to, from, unsupported) && ok;
    ok = DUP_VEC(to, from, names) && ok;
    ok = DUP_VEC(to, from, geoms) && ok;
    ok = rs__strmap_copy(&to->param_index, &from->param_index) && ok;
    ok = rs__strmap_copy(&to->unsupported_index, &from->unsupported_index) &&
         ok;
    ok = rs__strmap_copy(&to->name_index, &from->name_index) && ok;
    if (from->geom_slots_len > 0) {
        size_t len = 0, cap = 0;
        ok = dup_table((void **)&to->geom_slots, &len, &cap, from->geom_slots,
                       from->geom_slots_len, sizeof(uint32_t)) && ok;
        to->geom_slots_len = len;
    }
    to->unattributed = from->unattributed;
    return ok;
}

rs_status_t rs__capture_work_copy(rs_capture_h from, rs_capture_h *to_p,
                                  rs_diag_t *diag)
{
    rs_capture_h to;
    if (rs_capture_create(&to) != RS_OK)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (!dup_tables(to, from)) {
        rs_capture_destroy(to);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    *to_p = to;
    return RS_OK;
}
