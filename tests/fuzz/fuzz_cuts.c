/* Fuzz target for reshard.cuts.v1 JSON. A refused input must come with a
 * message and no set; an accepted one must hold sorted cuts strictly
 * inside each dim, write back as text that reads back to the same text,
 * merge into a fixed set (or be refused naming a disagreement, leaving the
 * fixed set's text as it was), and split each tensor's full box into
 * sub-boxes whose element counts sum to the box's (for grids small enough
 * to walk) tile it: as many as the grid's cells, as many elements. Its
 * quantized-copy pairs are strictly increasing and survive the merge. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/cuts.h"

static const char base_json[] =
    "{\"schema\": \"reshard.cuts.v1\", \"tensors\": ["
    "{\"name\": \"a\", \"shape\": [8, 6], \"cuts\": [[2, 4], []]},"
    "{\"name\": \"w\", \"shape\": [16], \"cuts\": [[3]]}]}";

static char *text_of(rs_cuts_h c, size_t *len_p)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len_p);
    if (f == NULL || rs_cuts_write_json(c, f, NULL) != RS_OK)
        abort();
    fclose(f);
    return buf;
}

static void check_sorted(rs_cuts_h c)
{
    for (size_t i = 0; i < rs_cuts_num_tensors(c); i++) {
        const char *t = rs_cuts_tensor(c, i);
        int ndim;
        const int64_t *shape = rs_cuts_shape(c, t, &ndim);
        if (t == NULL || shape == NULL ||
            (i > 0 && strcmp(rs_cuts_tensor(c, i - 1), t) >= 0))
            abort();
        for (int d = 0; d < ndim; d++) {
            size_t n;
            const int64_t *cut = rs_cuts_get(c, t, d, &n);
            for (size_t k = 0; k < n; k++)
                if (cut[k] <= (k ? cut[k - 1] : 0) || cut[k] >= shape[d])
                    abort();
        }
    }
}

/* The pairs in strictly increasing (src, spec) order. */
static void check_quants(rs_cuts_h c)
{
    const char *src, *spec, *psrc = NULL, *pspec = NULL;
    for (size_t i = 0; rs_cuts_quant(c, i, &src, &spec); i++) {
        int order = psrc == NULL ? -1 : strcmp(psrc, src);
        if (order > 0 || (order == 0 && strcmp(pspec, spec) >= 0))
            abort();
        psrc = src;
        pspec = spec;
    }
}

typedef struct tally {
    int ndim;
    uint64_t elems, boxes; /* element counts fit: the reader checks them */
} tally_t;

static uint64_t numel(const int64_t *shape, int ndim)
{
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (uint64_t)shape[d];
    return n;
}

static rs_status_t count(void *ctx, const int64_t *off, const int64_t *shape)
{
    tally_t *t = ctx;
    (void)off;
    t->boxes++;
    t->elems += numel(shape, t->ndim);
    return RS_OK;
}

/* The full box of each tensor whose grid has at most 4096 cells. */
static void check_split(rs_cuts_h c)
{
    static const int64_t zero[16];
    for (size_t i = 0; i < rs_cuts_num_tensors(c); i++) {
        const char *t = rs_cuts_tensor(c, i);
        int ndim;
        const int64_t *shape = rs_cuts_shape(c, t, &ndim);
        uint64_t cells = 1;
        int empty = 0;
        for (int d = 0; d < ndim && cells <= 4096; d++) {
            size_t n;
            rs_cuts_get(c, t, d, &n);
            cells *= n + 1;
            empty |= shape[d] == 0;
        }
        if (cells > 4096)
            continue;
        tally_t tl = {ndim, 0, 0};
        if (rs_cuts_split(c, t, ndim, zero, shape, count, &tl, NULL) != RS_OK ||
            tl.boxes != (empty ? 1 : cells) || tl.elems != numel(shape, ndim))
            abort();
    }
}

static void check_merge(rs_cuts_h c)
{
    rs_cuts_h base = NULL;
    rs_diag_t diag;
    size_t n1, n2;
    if (rs_cuts_read_json(base_json, strlen(base_json), "base", NULL,
                          &base) != RS_OK)
        abort();
    char *before = text_of(base, &n1);
    if (rs_cuts_merge(base, c, &diag) != RS_OK) {
        char *after = text_of(base, &n2);
        if (diag.msg[0] == '\0' || strcmp(before, after) != 0)
            abort();
        free(after);
    } else {
        check_sorted(base);
        check_quants(base);
        if (rs_cuts_num_quants(base) != rs_cuts_num_quants(c))
            abort(); /* the base set asks for none */
    }
    free(before);
    rs_cuts_destroy(base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rs_cuts_h c = NULL, back = NULL;
    rs_diag_t diag;
    size_t n1, n2;
    if (rs_cuts_read_json((const char *)data, size, "fuzz.json", &diag, &c) !=
        RS_OK) {
        if (c != NULL || diag.msg[0] == '\0')
            abort();
        return 0;
    }
    check_sorted(c);
    check_quants(c);
    char *t1 = text_of(c, &n1);
    if (rs_cuts_read_json(t1, n1, "again", NULL, &back) != RS_OK)
        abort();
    char *t2 = text_of(back, &n2);
    if (n1 != n2 || memcmp(t1, t2, n1) != 0)
        abort();
    check_split(c);
    check_merge(c);
    free(t1);
    free(t2);
    rs_cuts_destroy(back);
    rs_cuts_destroy(c);
    return 0;
}
