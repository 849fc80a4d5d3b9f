/* vLLM's weight loaders rebuilt with plain loops, independent of the layout
 * code: every parameter an inference rank holds under a vllm layout, filled
 * from deterministic full tensors (value = f(tensor name, element index)).
 * Tests of captures and of whole refits compare against it. */
#ifndef RS_TEST_VLLM_DIRECT_H
#define RS_TEST_VLLM_DIRECT_H

#include <stddef.h>
#include <stdint.h>
#include "reshard_layout/layout.h"
#include "reshard_layout/model.h"
#include "reshard/sources.h"

#define VD_NAME_MAX 160

typedef struct vd_param {
    char name[VD_NAME_MAX];
    int ndim;
    int64_t shape[3];
    rs_dtype_t dtype;
    int64_t numel;
    uint8_t *bytes;  /* the fill byte where nothing is written */
    int64_t padding; /* elements deliberately left unwritten */
} vd_param_t;

typedef struct vd_expect {
    rs_model_h model;
    const rs_model_config_t *g;
    int64_t T, P, D, E;   /* the vllm layout */
    int64_t tp, pp, dp;   /* coordinates of the rank being built */
    uint8_t fill;         /* prefill of every expected parameter */
    /* FP8 checkpoints (a quantization_config with weight_block_size): the
     * block, the FP8 dtype and modules_to_not_convert; bn 0 without. An
     * FP8 tensor "X.weight" is modelled as its FP8 values (vd_put_value in
     * the FP8 dtype, hashed by name "X.weight") and its scales, the tensor
     * "X.weight_scale_inv" over the block grid (float32, hashed by that
     * name); vLLM's FP8 loaders copy both into "P" and "P_scale_inv". */
    int64_t bn, bk;
    rs_dtype_t fp8;
    const char *const *skip;
    size_t nskip;
    vd_param_t *p;
    size_t n, cap;
} vd_expect_t;

/* Hash of a full tensor's name: the first argument of vd_put_value. */
uint64_t vd_name_hash(const char *s);

/* Writes element idx of the full tensor whose name hashes to h: bytes that
 * are a finite value of dtype (never NaN or infinity). */
void vd_put_value(uint8_t *dst, rs_dtype_t dtype, uint64_t h, int64_t idx);

/* Elements idx .. idx + n - 1 of that tensor, back to back from dst. */
void vd_put_run(uint8_t *dst, rs_dtype_t dtype, uint64_t h, int64_t idx,
                int64_t n);

/* The shard box `s` of its full tensor, row-major from dst: the values
 * vd_put_value gives each element by its global index, so every replica of
 * a box holds the same bytes. */
void vd_fill_box(uint8_t *dst, const rs_shard_desc_t *s);

/* Prepares a builder for a checked vllm layout; parameters start as `fill`. */
void vd_init(vd_expect_t *x, rs_model_h model, const rs_layout_t *vllm,
             uint8_t fill);

/* Builds every parameter of vllm rank `rank` (after vd_free of the last). */
void vd_expect_rank(vd_expect_t *x, int64_t rank);

/* The expected parameter called name, or NULL. */
const vd_param_t *vd_find(const vd_expect_t *x, const char *name);

/* Frees the parameters; the builder may build another rank. */
void vd_free(vd_expect_t *x);

#endif
