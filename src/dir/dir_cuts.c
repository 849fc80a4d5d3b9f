/* Cuts records: the model-wide announcements of receivers' cut points
 * (one record per holder) that cut-aligned publishers read before staging
 * a version. This file checks arguments and the size cap once, computes
 * each written record's generation (its digest), dispatches to the
 * backend, puts what it returns in holder order and counts the records
 * read. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/dir_impl.h"
#include "reshard/digest.h"

/* The checks of every cuts call: a directory, the model's and (when
 * holder != NULL) the holder's names; a call on one holder's record
 * (`one`) needs one. Fills the request's model (and holder); version 0
 * stands for "no version" in the shared record. */
static rs_status_t cuts_request(rs_dir_h dir, const char *model, int one,
                                const char *holder, rs_diag_t *diag,
                                rs__dir_request_t *req)
{
    rs_status_t st = rs__dir_start(dir, model, 0, diag, req);
    if (st == RS_OK && holder != NULL)
        st = rs__dir_check_name("cuts holder", holder, diag);
    if (st == RS_OK && one && holder == NULL)
        st = rs__diag_set(diag, RS_ERR_INPUT, "cuts holder name is empty");
    if (st != RS_OK)
        return st;
    req->holder = holder;
    return RS_OK;
}

rs_status_t rs_dir_put_cuts(rs_dir_h dir, const char *model,
                            const char *holder, const void *json, size_t len,
                            rs_diag_t *diag)
{
    rs__dir_request_t req;
    rs_status_t st = cuts_request(dir, model, 1, holder, diag, &req);
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
    req.generation = rs_digest(req.table, len);
    return rs__dir_call(dir, dir->ops->put_cuts, &req, diag);
}

rs_status_t rs__dir_cuts_check(const rs__dir_request_t *req,
                               const rs_dir_cuts_record_t *rec,
                               rs_diag_t *diag)
{
    if (rec->json == NULL || rs_digest(rec->json, rec->len) == rec->generation)
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_VERIFY, "cuts record of holder '%s' for "
                        "'%s' is corrupted: its %zu bytes do not match the "
                        "generation stored with it", rec->holder, req->model,
                        rec->len);
}

void rs__dir_cuts_reads(rs_dir_h dir, uint64_t *records_p, uint64_t *bytes_p)
{
    *records_p = dir->cuts_read;
    *bytes_p = dir->cuts_read_bytes;
}

/* Appends what one backend read left in `one` to `all`; `one` is emptied
 * (freed records stay with whoever holds them on failure). */
static rs_status_t append(rs__dir_request_t *all, size_t *cap, rs__dir_request_t *one,
                          rs_diag_t *diag)
{
    if (all->ncuts + one->ncuts > *cap) {
        size_t ncap = (all->ncuts + one->ncuts) * 2;
        void *grown = realloc(all->cuts, ncap * sizeof(*all->cuts));
        if (grown == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts records of "
                                "'%s': out of memory", all->model);
        all->cuts = grown;
        *cap = ncap;
    }
    if (one->ncuts > 0)
        memcpy(all->cuts + all->ncuts, one->cuts,
               one->ncuts * sizeof(*one->cuts));
    all->ncuts += one->ncuts;
    free(one->cuts);
    one->cuts = NULL;
    one->ncuts = 0;
    return RS_OK;
}

/* Reads holder `holder`'s record (NULL: every record) and appends it. */
static rs_status_t read_into(rs_dir_h dir, rs__dir_request_t *all, size_t *cap,
                             const char *holder, rs_diag_t *diag)
{
    rs__dir_request_t one = *all;
    one.holder = holder;
    one.cuts = NULL;
    one.ncuts = 0;
    rs_status_t st = rs__dir_call(dir, dir->ops->read_cuts, &one, diag);
    if (st == RS_OK)
        st = append(all, cap, &one, diag);
    rs_dir_cuts_free(one.cuts, one.ncuts);
    return st;
}

/* Sorts and hands out what was read, counting it. */
static rs_status_t hand_out(rs_dir_h dir, rs__dir_request_t *req,
                            rs_dir_cuts_record_t **records_p, size_t *count_p)
{
    if (req->ncuts > 1)
        qsort(req->cuts, req->ncuts, sizeof(*req->cuts), rs__dir_by_holder);
    for (size_t i = 0; i < req->ncuts; i++) {
        if (req->cuts[i].json == NULL)
            continue; /* its size only */
        dir->cuts_read++;
        dir->cuts_read_bytes += req->cuts[i].len;
    }
    *records_p = req->cuts;
    *count_p = req->ncuts;
    return RS_OK;
}

/* rs_dir_read_cuts (every: all records) and rs_dir_read_cuts_of (the n
 * holders'): the records read, sorted and counted. */
static rs_status_t read_cuts(rs_dir_h dir, const char *model, int every,
                             const char *const *holders, size_t n,
                             rs_diag_t *diag, rs_dir_cuts_record_t **records_p,
                             size_t *count_p)
{
    rs__dir_request_t req;
    size_t cap = 0;
    rs_status_t st = cuts_request(dir, model, 0, NULL, diag, &req);
    if (st == RS_OK && (records_p == NULL || count_p == NULL ||
                        (holders == NULL && n > 0)))
        st = rs__diag_set(diag, RS_ERR_INVALID_ARG, every ?
                          "rs_dir_read_cuts: NULL output" :
                          "rs_dir_read_cuts_of: NULL holders or output");
    for (size_t i = 0; st == RS_OK && i < n; i++)
        st = rs__dir_check_name("cuts holder", holders[i], diag);
    if (st != RS_OK)
        return st;
    req.cuts = NULL;
    req.ncuts = 0;
    if (every)
        st = read_into(dir, &req, &cap, NULL, diag);
    for (size_t i = 0; st == RS_OK && i < n; i++)
        st = read_into(dir, &req, &cap, holders[i], diag);
    if (st != RS_OK) {
        rs_dir_cuts_free(req.cuts, req.ncuts);
        return st;
    }
    return hand_out(dir, &req, records_p, count_p);
}

rs_status_t rs_dir_read_cuts(rs_dir_h dir, const char *model,
                             rs_diag_t *diag, rs_dir_cuts_record_t **records_p,
                             size_t *count_p)
{
    return read_cuts(dir, model, 1, NULL, 0, diag, records_p, count_p);
}

rs_status_t rs_dir_read_cuts_of(rs_dir_h dir, const char *model,
                                const char *const *holders, size_t n,
                                rs_diag_t *diag,
                                rs_dir_cuts_record_t **records_p,
                                size_t *count_p)
{
    return read_cuts(dir, model, 0, holders, n, diag, records_p, count_p);
}

rs_status_t rs_dir_list_cuts(rs_dir_h dir, const char *model,
                             rs_diag_t *diag, rs_dir_cuts_stamp_t **stamps_p,
                             size_t *count_p)
{
    return rs__dir_listing(dir, model, 0, 1, diag, (void **)stamps_p, count_p);
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
    rs__dir_request_t req;
    rs_status_t st = cuts_request(dir, model, 1, holder, diag, &req);
    if (st != RS_OK)
        return st;
    return rs__dir_call(dir, dir->ops->drop_cuts, &req, diag);
}
