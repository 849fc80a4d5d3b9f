/* Parallel layouts: which shards each trainer rank publishes (fsdp,
 * megatron) and what each inference rank's weight loaders capture (vllm),
 * generated from a model manifest. Used by `reshard simulate`, the demo and
 * the tests; docs/layouts.md says what each layout does and why.
 * Threads: as model.h: one thread at a time per model. */
#ifndef RESHARD_LAYOUT_H
#define RESHARD_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "reshard/capture.h"
#include "reshard/cuts.h"
#include "reshard_layout/model.h"
#include "reshard/sources.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rs_layout_kind {
    RS_LAYOUT_FSDP = 1, /* fsdp:N */
    RS_LAYOUT_MEGATRON, /* megatron:tp=T,pp=P,ep=E,dp=D,etp=X */
    RS_LAYOUT_VLLM,     /* vllm:tp=T,pp=P,ep=E,dp=D */
} rs_layout_kind_t;

typedef struct rs_layout {
    rs_layout_kind_t kind;
    int64_t tp, pp, ep, dp, etp; /* 1 when not given; dp 0 = derive */
    int64_t fsdp;                /* fsdp:N */
    int64_t world;               /* ranks, set by rs_layout_check */
} rs_layout_t;

/* Parses "fsdp:4", "megatron:tp=8,pp=16,ep=16", "vllm:tp=8,ep=8,dp=16".
 * RS_ERR_INPUT names the bad part. */
RS_API rs_status_t rs_layout_parse(const char *spec, rs_diag_t *diag,
                                   rs_layout_t *layout_p);

/* Validates a layout against a model (divisibility of heads, experts,
 * layers; megatron's ep*etp dividing tp*dp) and fills world (and dp when
 * derived). RS_ERR_INPUT says which constraint fails. */
RS_API rs_status_t rs_layout_check(rs_layout_t *layout, rs_model_h model,
                                   rs_diag_t *diag);

/* Session name of a trainer rank: "trainer-<rank>". */
RS_API void rs_layout_trainer_session(int64_t rank, char *out, size_t outlen);

/* Receives one shard of a trainer rank. A non-RS_OK return stops the walk
 * and is returned. */
typedef rs_status_t (*rs_shard_cb)(void *ctx, const rs_shard_desc_t *shard);

/* The shards trainer `rank` publishes under a fsdp or megatron layout, in
 * Hugging Face names and shapes, packed in one address range per rank. */
RS_API rs_status_t rs_layout_trainer_shards(rs_model_h model,
                                            const rs_layout_t *layout,
                                            int64_t rank, rs_shard_cb cb,
                                            void *ctx, rs_diag_t *diag);

/* Cut-aligned tables (docs/cut-aligned.md): as
 * rs_layout_trainer_shards, with every shard published as its sub-boxes
 * at `cuts` (rs_cuts_split, in row-major order of the grid), each a
 * row-major box of its own, laid one after another from where the whole
 * shard would start, each on a 64-byte boundary, as a publisher's arena
 * stages them. NULL cuts, or a tensor
 * the set does not hold, publishes whole shards. RS_ERR_INPUT when the set
 * holds a tensor with another shape than the model's. The set is only
 * read. Cost: the sub-boxes, one callback each. */
RS_API rs_status_t rs_layout_trainer_shards_cut(rs_model_h model,
                                                const rs_layout_t *layout,
                                                int64_t rank, rs_cuts_h cuts,
                                                rs_shard_cb cb, void *ctx,
                                                rs_diag_t *diag);

/* What a trainer table carries besides its shards. RS_LAYOUT_FP8_COPIES:
 * publisher-side FP8 copies (docs/quantized-refit.md): after
 * each shard of a tensor the model's quantization_config stores in FP8
 * (the vllm layout's rule: decoder-layer linear weights but the routers,
 * less modules_to_not_convert), the FP8 values of the blocks lying wholly
 * inside the shard as "<src>#<spec>" (reshard/quant.h; full shape of src,
 * dtype the config's fmt) and their scales as "<src>#<spec>#scale"
 * (float32, full shape the block grid), each a row-major box of its own
 * laid after the shard. A shard holding no whole block gets no copy. A
 * model without quantization_config publishes no copies;
 * RS_ERR_UNSUPPORTED for one without weight_block_size. */
enum { RS_LAYOUT_FP8_COPIES = 1u << 0 };

/* As rs_layout_trainer_shards_cut with `flags` (RS_LAYOUT_* above). */
RS_API rs_status_t rs_layout_trainer_shards_ex(rs_model_h model,
                                               const rs_layout_t *layout,
                                               int64_t rank, rs_cuts_h cuts,
                                               unsigned flags, rs_shard_cb cb,
                                               void *ctx, rs_diag_t *diag);

/* Adds every shard of every trainer rank to `sources` (all or nothing). */
RS_API rs_status_t rs_layout_publish_all(rs_model_h model,
                                         const rs_layout_t *layout,
                                         rs_sources_h sources,
                                         rs_diag_t *diag);
/* As rs_layout_publish_all with cut-aligned tables (NULL cuts: whole). */
RS_API rs_status_t rs_layout_publish_all_cut(rs_model_h model,
                                             const rs_layout_t *layout,
                                             rs_cuts_h cuts,
                                             rs_sources_h sources,
                                             rs_diag_t *diag);

/* As rs_layout_publish_all_cut with `flags` (RS_LAYOUT_*). */
RS_API rs_status_t rs_layout_publish_all_ex(rs_model_h model,
                                            const rs_layout_t *layout,
                                            rs_cuts_h cuts, unsigned flags,
                                            rs_sources_h sources,
                                            rs_diag_t *diag);

/* Writes trainer `rank`'s mx.reshard.shard_table.v1 blob. */
RS_API rs_status_t rs_layout_write_table(rs_model_h model,
                                         const rs_layout_t *layout,
                                         int64_t rank, FILE *out,
                                         rs_diag_t *diag);
/* As rs_layout_write_table with cut-aligned tables (NULL cuts: whole). */
RS_API rs_status_t rs_layout_write_table_cut(rs_model_h model,
                                             const rs_layout_t *layout,
                                             int64_t rank, rs_cuts_h cuts,
                                             FILE *out, rs_diag_t *diag);
/* As rs_layout_write_table_cut with `flags` (RS_LAYOUT_*). */
RS_API rs_status_t rs_layout_write_table_ex(rs_model_h model,
                                            const rs_layout_t *layout,
                                            int64_t rank, rs_cuts_h cuts,
                                            unsigned flags, FILE *out,
                                            rs_diag_t *diag);

/* The capture inference `rank` records under a vllm layout: fused qkv and
 * gate_up, vocab-parallel embedding and head padded to a multiple of 64 per
 * rank, fused MoE experts, MLA projections. With an FP8 quantization_config
 * the weights the checkpoint stores in FP8 are quantized copies
 * (rs_capture_add_quant_copy) into FP8 params, each with its float32
 * "<weight>_scale_inv" of one scale per weight_block_size block, as vLLM's
 * FP8 loaders allocate and fill them (docs/layouts.md, "FP8 checkpoints");
 * RS_ERR_INPUT naming the tensor, its dims and the block when a
 * tensor-parallel slice, or a part of a merged weight but the last, is not
 * a whole number of blocks, or when modules_to_not_convert splits a merged
 * weight; RS_ERR_UNSUPPORTED for FP8 without weight_block_size. *padding_bytes_p receives the
 * parameter bytes the loaders never write by design (vocab padding). */
RS_API rs_status_t rs_layout_capture(rs_model_h model,
                                     const rs_layout_t *layout, int64_t rank,
                                     rs_diag_t *diag, rs_capture_h *capture_p,
                                     uint64_t *padding_bytes_p);

/* The cuts every inference rank of a vllm layout reads: the union over
 * ranks of rs_cuts_add_capture of rs_layout_capture, a new set owned by
 * the caller (*cuts_p set only on success). What receivers of that layout
 * announce, and what cut-aligned trainer tables are split at. Errors as
 * rs_layout_capture's; RS_ERR_NO_MEMORY. Cost: one capture per rank. */
RS_API rs_status_t rs_layout_infer_cuts(rs_model_h model,
                                        const rs_layout_t *infer,
                                        rs_diag_t *diag, rs_cuts_h *cuts_p);

#ifdef __cplusplus
}
#endif
#endif
