/* The answers of the quantized-copy analysis that plans of the same
 * sources share: which path a copy takes, why, and which FP8 and scale
 * tensors serve it. Every rank of a MoE model checks the same attention and
 * shared-expert copies against the same published tensors (a Kimi-K2 rank's
 * 485 of 1,028 quantized copies are the view of 16 to 128 ranks), and each
 * check reads the shards of three tensors; kept with the sources, it is
 * made once. Plans of the same sources may be built concurrently: the memo
 * is locked per lookup and per answer kept. */
#ifndef RS_PLAN_QUANT_MEMO_H
#define RS_PLAN_QUANT_MEMO_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/limits.h"
#include "reshard/plan.h"
#include "reshard/quant.h"

/* Everything the answer is a function of, given the sources: the source
 * tensor, the spec, the source's shape and dtype as the copy sees them,
 * the block shape, the view's box and the cost model's two rates. */
#define RS_QUANT_MEMO_WORDS (8 + 5 * RS_MAX_DIMS)

typedef struct rs__quant_memo_key {
    int64_t w[RS_QUANT_MEMO_WORDS]; /* the first n are the key */
    int n;
    uint64_t hash;
} rs__quant_memo_key_t;

/* The analysis's answer for a copy that passed its checks. */
typedef struct rs__quant_answer {
    rs_quant_path_t path;
    int served;      /* the publisher path (assembly writes its reason) */
    const char *why; /* the receiver path's reason (the memo's copy, alive
                      * until the sources change; NULL on the publisher
                      * path) */
    uint32_t q, s;   /* "<src>#<spec>" and its scales as published, by
                      * index in the sources (UINT32_MAX: not published) */
} rs__quant_answer_t;

/* The key of a copy of source tensor `src` (its index) with spec q, the
 * source's ndim, shape and dtype, the block shape, and the view's box
 * [vlo, vhi), planned under params. O(ndim). */
void rs__quant_memo_key(rs__quant_memo_key_t *k, uint32_t src,
                        const rs_quant_desc_t *q, int ndim,
                        const int64_t *shape, rs_dtype_t src_dtype,
                        const int64_t *block, const int64_t *vlo,
                        const int64_t *vhi, const rs_plan_params_t *params);

/* 1 with *a set when the sources' memo holds an answer for key k (kept
 * since the sources last changed), else 0. O(key) expected. */
int rs__quant_memo_get(rs_sources_h sources, const rs__quant_memo_key_t *k,
                       rs__quant_answer_t *a);

/* Keeps answer a for key k. Only a hint: on exhaustion, or once the memo
 * holds RS_QUANT_MEMO_MAX answers, nothing is kept and a later plan
 * analyzes the copy again. O(key) expected. */
void rs__quant_memo_put(rs_sources_h sources, const rs__quant_memo_key_t *k,
                        const rs__quant_answer_t *a);

#define RS_QUANT_MEMO_MAX ((size_t)1 << 16)

/* The answers kept for the sources as they are now: 0 when no plan kept
 * one, or every one kept is stale (the shards changed since). O(1). */
size_t rs__quant_memo_size(rs_sources_h sources);

#endif
