/* Internal layout of a cut set, shared by the set (cuts.c), the capture
 * deriver (cuts_capture.c) and the JSON reader and writer. */
#ifndef RS_PLAN_CUTS_IMPL_H
#define RS_PLAN_CUTS_IMPL_H

#include "core/strmap.h"
#include "core/vec.h"
#include "reshard/cuts.h"
#include "reshard/view.h"

/* The cuts of one dim: sorted, unique, strictly inside (0, shape). */
typedef struct rs__cut_dim {
    RS_VEC(int64_t, at);
} rs__cut_dim_t;

typedef struct rs__cut_tensor {
    char *name;
    int ndim;
    int64_t shape[RS_MAX_DIMS];
    rs__cut_dim_t dims[RS_MAX_DIMS];
} rs__cut_tensor_t;

/* A quantized copy the set's receiver wants served: source tensor and
 * canonical spec text (rs_quant_spec_format). */
typedef struct rs__cut_quant {
    char *src;
    char *spec;
} rs__cut_quant_t;

struct rs_cuts {
    RS_VEC(rs__cut_tensor_t, tensors); /* in insertion order */
    rs__strmap_t index;                /* name -> tensors[] */
    /* tensors[] indices in name order; entries from `sorted` on were
     * appended since the last rs__cuts_sort and are not in order yet. */
    RS_VEC(uint32_t, order);
    size_t sorted;
    char *model; /* NULL when no model is named */
    /* Quantized copies wanted (cuts_quant.c), sorted by (src, spec) and
     * unique. */
    RS_VEC(rs__cut_quant_t, quants);
};

/* The tensor of that name, or NULL. */
rs__cut_tensor_t *rs__cuts_find(rs_cuts_h cuts, const char *name);

/* The tensor of that name, created without cuts when absent (appended to
 * `order` unsorted: the caller ends with rs__cuts_sort). RS_ERR_INPUT when
 * it is held with another shape, RS_ERR_INVALID_ARG for a rank outside
 * 0..RS_MAX_DIMS or a negative size, RS_ERR_NO_MEMORY. */
rs_status_t rs__cuts_tensor_for(rs_cuts_h cuts, const char *name, int ndim,
                                const int64_t *shape, rs_diag_t *diag,
                                rs__cut_tensor_t **t_p);

/* Inserts cut `at` into dim `dim` of t (0 < at < shape[dim] checked by the
 * caller); a cut already there is a no-op. 0 on exhaustion. */
int rs__cuts_insert(rs__cut_tensor_t *t, int dim, int64_t at);

/* Brings `order` back into name order after tensors were appended: one
 * insertion for a single new tensor, else a sort of the whole order (in
 * place, so it cannot fail). */
void rs__cuts_sort(rs_cuts_h cuts);

/* 1 when the shapes agree; else writes an RS_ERR_INPUT naming the tensor
 * and both shapes into diag and returns 0. */
int rs__cuts_same_shape(const rs__cut_tensor_t *t, int ndim,
                        const int64_t *shape, rs_diag_t *diag);

/* Frees the quantization requests (rs_cuts_destroy). */
void rs__cuts_free_quants(rs_cuts_h cuts);

/* Adds every request of `from` into `into` (a sorted merge). Only
 * RS_ERR_NO_MEMORY; `into` may then hold part of `from`. */
rs_status_t rs__cuts_merge_quants(rs_cuts_h into, rs_cuts_h from,
                                  rs_diag_t *diag);

/* Appends (src, spec) after the last request, which must sort before it
 * (the JSON reader's order check); RS_ERR_NO_MEMORY. */
rs_status_t rs__cuts_append_quant(rs_cuts_h cuts, const char *src,
                                  const char *spec, rs_diag_t *diag);

/* 1 when `spec` is a spec in its canonical spelling; else writes an
 * RS_ERR_INPUT naming `src` and the spec into diag and returns 0. */
int rs__cuts_check_spec(const char *src, const char *spec, rs_diag_t *diag);

/* The capture's quantized copies as requests (cuts_capture.c calls it). */
rs_status_t rs__cuts_add_capture_quants(rs_cuts_h cuts, rs_capture_h cap,
                                        rs_diag_t *diag);

#endif
