/* Cuts records: the model-wide announcements of receivers' cut points
 * (one record per holder) that cut-aligned publishers read before staging
 * a version. This file checks arguments and the size cap once, dispatches
 * to the backend and puts what it returns in holder order. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/dir_impl.h"

/* The checks of every cuts call: a directory, the model's and (when
 * holder != NULL) the holder's names. Fills the request's model (and
 * holder); version 0 stands for "no version" in the shared record. */
static rs_status_t cuts_request(rs_dir_h dir, const char *model,
                                const char *holder, rs_diag_t *diag,
                                rs_dir_req_t *req)
{
    rs_status_t st = rs__dir_start(dir, model, 0, diag, req);
    if (st == RS_OK && holder != NULL)
        st = rs__dir_check_name("cuts holder", holder, diag);
    if (st != RS_OK)
        return st;
    req->holder = holder;
    return RS_OK;
}

rs_status_t rs_dir_put_cuts(rs_dir_h dir, const char *model,
                            const char *holder, const void *json, size_t len,
                            rs_diag_t *diag)
{
    rs_dir_req_t req;
    rs_status_t st = cuts_request(dir, model, holder, diag, &req);
    if (st == RS_OK && holder == NULL)
        st = rs__diag_set(diag, RS_ERR_INPUT, "cuts holder name is empty");
    if (st != RS_OK)
        return st;
    if (json == NULL && len > 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dir_put_cuts: NULL "
                            "record of %zu bytes", len);
    if (len > RS_DIR_CUTS_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "cuts record of holder '%s' "
                            "for '%s' is %zu bytes, more than the %zu-byte "
                            "limit", holder, model, len, RS_DIR_CUTS_MAX);
    req.table = json != NULL ? json : "";
    req.len = len;
    return rs__dir_call(dir, dir->ops->put_cuts, &req, diag);
}

static int by_holder(const void *a, const void *b)
{
    return strcmp(((const rs_dir_cuts_record_t *)a)->holder,
                  ((const rs_dir_cuts_record_t *)b)->holder);
}

rs_status_t rs_dir_read_cuts(rs_dir_h dir, const char *model,
                             rs_diag_t *diag, rs_dir_cuts_record_t **records_p,
                             size_t *count_p)
{
    rs_dir_req_t req;
    rs_status_t st = cuts_request(dir, model, NULL, diag, &req);
    if (st != RS_OK)
        return st;
    if (records_p == NULL || count_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dir_read_cuts: "
                            "NULL output");
    st = rs__dir_call(dir, dir->ops->read_cuts, &req, diag);
    if (st != RS_OK) {
        rs_dir_cuts_free(req.cuts, req.ncuts);
        return st;
    }
    if (req.ncuts > 1)
        qsort(req.cuts, req.ncuts, sizeof(*req.cuts), by_holder);
    *records_p = req.cuts;
    *count_p = req.ncuts;
    return RS_OK;
}

void rs_dir_cuts_free(rs_dir_cuts_record_t *records, size_t count)
{
    for (size_t i = 0; records != NULL && i < count; i++)
        free(records[i].json);
    free(records);
}

rs_status_t rs_dir_drop_cuts(rs_dir_h dir, const char *model,
                             const char *holder, rs_diag_t *diag)
{
    rs_dir_req_t req;
    rs_status_t st = cuts_request(dir, model, holder, diag, &req);
    if (st == RS_OK && holder == NULL)
        st = rs__diag_set(diag, RS_ERR_INPUT, "cuts holder name is empty");
    if (st != RS_OK)
        return st;
    return rs__dir_call(dir, dir->ops->drop_cuts, &req, diag);
}
