/* Which manifest tensors an FP8 checkpoint stores in FP8, and the block
 * spec their copies are quantized with: one rule shared by the vllm
 * captures (what the loader quantizes) and the trainer tables (what a
 * publisher serves quantized), so both name the same "<src>#<spec>". */
#ifndef RS_LAYOUT_QUANT_IMPL_H
#define RS_LAYOUT_QUANT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/quant.h"
#include "reshard_layout/model.h"

/* The spec of the model's FP8 block quantization: fp8_block with the
 * config's weight_block_size (rows x columns) in its fmt. `block` (two
 * entries) backs q->block. RS_OK with q->scheme RS_QUANT_NONE when the
 * model has no quantization_config; RS_ERR_UNSUPPORTED (diag naming
 * quantization_config.weight_block_size) for one scale per tensor, which
 * the layouts do not express. */
rs_status_t rs__layout_fp8_spec(rs_model_h model, int64_t *block,
                                rs_diag_t *diag, rs_quant_desc_t *q);

/* 1 when the checkpoint stores manifest tensor `name` in FP8: a 2-D
 * ".weight" of a decoder layer's linear projections (attention, dense
 * MLPs, routed and shared experts), not the router (mlp.gate) nor a
 * shared-expert gate, and not named by modules_to_not_convert; 0 for
 * everything else (embeddings, LM head, norms, biases) and for a model
 * without FP8 quantization. O(name length x entries). */
int rs__layout_fp8_tensor(rs_model_h model, const char *name);

/* "<src>#<spec>" (scale 0) or "<src>#<spec>#scale" (scale 1) into out;
 * 0 when it does not fit in cap. */
int rs__layout_quant_name(const rs_quant_desc_t *q, const char *src,
                          int scale, char *out, size_t cap);

#endif
