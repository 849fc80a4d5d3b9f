/* The quantized copies a cut set asks for: (source tensor, spec) pairs a
 * receiver's capture quantizes, announced with its cuts so that publishers
 * serving what receivers want (rs_publisher_params_t.quantize_wanted) quantize
 * those tensors themselves (docs/quantized-refit.md, "Publisher-side
 * quantization").
 * Kept sorted and unique, so that equal sets write equal text. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "model/capture_impl.h"
#include "model/cuts_impl.h"
#include "reshard/quant.h"

static int quant_cmp(const char *src_a, const char *spec_a, const char *src_b,
                     const char *spec_b)
{
    int c = strcmp(src_a, src_b);
    return c != 0 ? c : strcmp(spec_a, spec_b);
}

static int by_pair(const void *a, const void *b)
{
    const rs__cut_quant_t *x = a, *y = b;
    return quant_cmp(x->src, x->spec, y->src, y->spec);
}

void rs__cuts_free_quants(rs_cuts_h cuts)
{
    for (size_t i = 0; i < cuts->quants_len; i++) {
        free(cuts->quants[i].src);
        free(cuts->quants[i].spec);
    }
    free(cuts->quants);
    cuts->quants = NULL;
    cuts->quants_len = cuts->quants_cap = 0;
}

int rs__cuts_check_spec(const char *src, const char *spec, rs_diag_t *diag)
{
    int64_t block[RS_MAX_DIMS];
    char canon[128];
    rs_quant_desc_t q;
    rs_diag_t d;
    rs_diag_clear(&d);
    if (src[0] == '\0' || strchr(src, RS_QUANT_NAME_SEP) != NULL) {
        rs__diag_set(diag, RS_ERR_INPUT, "cuts: quantized source '%s': not a "
                     "source tensor name (empty, or holding '%c')", src,
                     RS_QUANT_NAME_SEP);
        return 0;
    }
    if (rs_quant_spec_parse(spec, block, &d, &q) != RS_OK) {
        rs__diag_set(diag, RS_ERR_INPUT, "cuts: quantized source '%s': spec "
                     "'%s': %s", src, spec, d.msg);
        return 0;
    }
    size_t n = rs_quant_spec_format(&q, canon, sizeof(canon));
    if (n == 0 || n >= sizeof(canon) || strcmp(canon, spec) != 0) {
        rs__diag_set(diag, RS_ERR_INPUT, "cuts: quantized source '%s': spec "
                     "'%s' is not in its canonical spelling '%s'", src, spec,
                     n > 0 && n < sizeof(canon) ? canon : "?");
        return 0;
    }
    return 1;
}

/* Inserts a copy of (src, spec) at index i of the sorted array. */
static rs_status_t insert_at(rs_cuts_h cuts, size_t i, const char *src,
                             const char *spec, rs_diag_t *diag)
{
    rs__cut_quant_t q = {strdup(src), strdup(spec)};
    if (q.src == NULL || q.spec == NULL ||
        !rs__vec_reserve((void **)&cuts->quants, &cuts->quants_cap,
                         cuts->quants_len + 1, sizeof(rs__cut_quant_t))) {
        free(q.src);
        free(q.spec);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts: out of memory");
    }
    memmove(cuts->quants + i + 1, cuts->quants + i,
            (cuts->quants_len - i) * sizeof(rs__cut_quant_t));
    cuts->quants[i] = q;
    cuts->quants_len++;
    return RS_OK;
}

/* Index of the first request >= (src, spec); *found_p when equal. */
static size_t find_pair(rs_cuts_h cuts, const char *src, const char *spec,
                        int *found_p)
{
    size_t lo = 0, hi = cuts->quants_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const rs__cut_quant_t *m = &cuts->quants[mid];
        if (quant_cmp(m->src, m->spec, src, spec) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found_p = lo < cuts->quants_len &&
               quant_cmp(cuts->quants[lo].src, cuts->quants[lo].spec, src,
                         spec) == 0;
    return lo;
}

/* Adds one request; already there: a no-op. Appending in order is O(1). */
static rs_status_t add_pair(rs_cuts_h cuts, const char *src, const char *spec,
                            rs_diag_t *diag)
{
    int found = 0;
    size_t n = cuts->quants_len;
    if (n > 0 && quant_cmp(cuts->quants[n - 1].src, cuts->quants[n - 1].spec,
                           src, spec) < 0)
        return insert_at(cuts, n, src, spec, diag);
    size_t i = find_pair(cuts, src, spec, &found);
    return found ? RS_OK : insert_at(cuts, i, src, spec, diag);
}

rs_status_t rs_cuts_add_quant(rs_cuts_h cuts, const char *src,
                              const char *spec, rs_diag_t *diag)
{
    if (cuts == NULL || src == NULL || spec == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: NULL set, "
                            "source or spec");
    if (!rs__cuts_check_spec(src, spec, diag))
        return RS_ERR_INPUT;
    return add_pair(cuts, src, spec, diag);
}

rs_status_t rs__cuts_append_quant(rs_cuts_h cuts, const char *src,
                                  const char *spec, rs_diag_t *diag)
{
    return insert_at(cuts, cuts->quants_len, src, spec, diag);
}

size_t rs_cuts_num_quants(rs_cuts_h cuts)
{
    return cuts == NULL ? 0 : cuts->quants_len;
}

int rs_cuts_quant(rs_cuts_h cuts, size_t index, const char **src_p,
                  const char **spec_p)
{
    if (cuts == NULL || index >= cuts->quants_len)
        return 0;
    *src_p = cuts->quants[index].src;
    *spec_p = cuts->quants[index].spec;
    return 1;
}

rs_status_t rs__cuts_merge_quants(rs_cuts_h into, rs_cuts_h from,
                                  rs_diag_t *diag)
{
    rs_status_t st = RS_OK;
    for (size_t i = 0; st == RS_OK && i < from->quants_len; i++)
        st = add_pair(into, from->quants[i].src, from->quants[i].spec, diag);
    return st;
}

/* Sorts the requests and drops repeats (a capture adds one per copy, in
 * copy order). */
static void normalize(rs_cuts_h cuts)
{
    size_t n = cuts->quants_len, kept = 0;
    if (n < 2)
        return;
    qsort(cuts->quants, n, sizeof(rs__cut_quant_t), by_pair);
    for (size_t i = 0; i < n; i++) {
        rs__cut_quant_t *q = &cuts->quants[i];
        if (kept > 0 && by_pair(&cuts->quants[kept - 1], q) == 0) {
            free(q->src);
            free(q->spec);
            continue;
        }
        cuts->quants[kept++] = *q;
    }
    cuts->quants_len = kept;
}

/* One quantized copy's request, appended unsorted to `tmp`. */
static rs_status_t copy_request(rs_cuts_h tmp, rs_capture_h cap, size_t i,
                                rs_diag_t *diag)
{
    rs_quant_desc_t q;
    rs_copy_desc_t c;
    char spec[128];
    uint32_t ignored;
    if (!rs_capture_copy_quant(cap, i, &q))
        return RS_OK;
    rs_capture_copy(cap, i, &c);
    if (rs__strmap_get(&cap->unsupported_index, c.src, &ignored))
        return RS_OK; /* the planner reports it; nothing to ask for */
    size_t n = rs_quant_spec_format(&q, spec, sizeof(spec));
    if (n == 0 || n >= sizeof(spec))
        return RS_OK; /* refused when added; the planner reports it */
    return rs__cuts_append_quant(tmp, c.src, spec, diag);
}

rs_status_t rs__cuts_add_capture_quants(rs_cuts_h cuts, rs_capture_h cap,
                                        rs_diag_t *diag)
{
    rs_cuts_h tmp = NULL;
    rs_status_t st = rs_cuts_create(diag, &tmp);
    for (size_t i = 0; st == RS_OK && i < cap->copies_len; i++)
        st = copy_request(tmp, cap, i, diag);
    if (st == RS_OK) {
        normalize(tmp);
        st = rs__cuts_merge_quants(cuts, tmp, diag);
    }
    rs_cuts_destroy(tmp);
    return st;
}
