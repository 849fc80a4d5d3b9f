/* The cuts an inference layout's receivers announce: every rank captured
 * as its loaders would read, and the bounds of every box each capture reads
 * merged into one set (what a cut-aligned publisher splits its shards at). */
#include "core/diag.h"
#include "reshard/cuts.h"
#include "reshard_layout/layout.h"

static rs_status_t add_rank(rs_model_h model, const rs_layout_t *infer,
                            int64_t rank, rs_cuts_h cuts, rs_diag_t *diag)
{
    rs_capture_h cap = NULL;
    uint64_t padding = 0;
    rs_status_t st = rs_layout_capture(model, infer, rank, diag, &cap,
                                       &padding);
    if (st != RS_OK)
        return st;
    st = rs_cuts_add_capture(cuts, cap, diag);
    rs_capture_destroy(cap);
    return st;
}

rs_status_t rs_layout_infer_cuts(rs_model_h model, const rs_layout_t *infer,
                                 rs_diag_t *diag, rs_cuts_h *cuts_p)
{
    rs_layout_t l;
    rs_cuts_h cuts = NULL;
    rs_status_t st;

    if (model == NULL || infer == NULL || cuts_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    l = *infer;
    if ((st = rs_layout_check(&l, model, diag)) != RS_OK ||
        (st = rs_cuts_create(diag, &cuts)) != RS_OK)
        return st;
    for (int64_t r = 0; st == RS_OK && r < l.world; r++)
        st = add_rank(model, &l, r, cuts, diag);
    if (st != RS_OK) {
        rs_cuts_destroy(cuts);
        return st;
    }
    *cuts_p = cuts;
    return RS_OK;
}
