/* A receiver's cut announcement: the cut points of the boxes its capture
 * reads (rs_cuts_add_capture), written as reshard.cuts.v1 into its cuts
 * record of the model, which cut-aligned publishers read before staging a
 * version (docs/cut-aligned.md). */
#include <stdio.h>
#include <stdlib.h>

#include "core/diag.h"
#include "refit/refit_impl.h"
#include "reshard/cuts.h"

/* The capture's cuts as reshard.cuts.v1 text (the caller frees it). */
static rs_status_t cuts_text(rs_capture_h cap, const char *model,
                             rs_diag_t *diag, char **text_p, size_t *len_p)
{
    rs_cuts_h cuts = NULL;
    char *text = NULL;
    size_t len = 0;
    rs_status_t st = rs_cuts_create(diag, &cuts);
    if (st == RS_OK)
        st = rs_cuts_set_model(cuts, model, diag);
    if (st == RS_OK)
        st = rs_cuts_add_capture(cuts, cap, diag);
    FILE *out = st == RS_OK ? open_memstream(&text, &len) : NULL;
    if (st == RS_OK && out == NULL)
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (out != NULL) {
        st = rs_cuts_write_json(cuts, out, diag);
        if (fclose(out) != 0 && st == RS_OK)
            st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    rs_cuts_destroy(cuts);
    if (st != RS_OK) {
        free(text);
        return st;
    }
    *text_p = text;
    *len_p = len;
    return RS_OK;
}

rs_status_t rs__announce_cuts(rs_dir_h dir, const char *model,
                              const char *name, rs_capture_h cap,
                              rs_diag_t *diag)
{
    char *text = NULL;
    size_t len = 0;
    rs_status_t st = cuts_text(cap, model, diag, &text, &len);
    if (st == RS_OK)
        st = rs_dir_put_cuts(dir, model, name, text, len, diag);
    free(text);
    if (st != RS_OK)
        rs__diag_prefix(diag, "announcing the cuts of '%s' as '%s': ", model,
                        name);
    return st;
}
