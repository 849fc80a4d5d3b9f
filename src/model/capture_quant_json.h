/* The "quant" object of a reshard.capture.v1 copy: its reader (used by
 * capture_json.c) and its writer (used by capture_write.c), side by side
 * in capture_quant_json.c. docs/formats.md, "quant", is the contract. */
#ifndef RS_PLAN_CAPTURE_QUANT_JSON_H
#define RS_PLAN_CAPTURE_QUANT_JSON_H

#include <stdio.h>

#include "core/json.h"
#include "model/capture_impl.h"

/* A parsed quant object and the arrays its descriptor points into. */
typedef struct rs__quant_in {
    rs_quant_desc_t q;
    int64_t block[RS_MAX_DIMS];
    int64_t scale_shape[RS_MAX_DIMS];
    int64_t scale_stride[RS_MAX_DIMS];
} rs__quant_in_t;

/* Reads the optional "quant" member of the copy object `copy` (the JSON
 * path at the copy): *given_p is 0 when it is absent or null, else 1 and
 * *in filled. Refuses, naming the JSON path, unknown keys, wrong types,
 * unknown scheme or format names, a block that is absent on fp8_block,
 * present on another scheme, non-positive or longer than RS_MAX_DIMS, and
 * a scale region whose shape and stride differ in length. */
rs_status_t rs__capture_json_quant(rs__json_ctx_t *c, const json_t *copy,
                                   rs__quant_in_t *in, int *given_p);

/* Fails with the message already in c->diag (from rs__capture_check_quant)
 * prefixed with the origin, the JSON path of `field` under the copy at the
 * current path, and the copy's source and parameter. */
rs_status_t rs__capture_json_quant_fail(rs__json_ctx_t *c,
                                        const rs_copy_desc_t *copy,
                                        rs__quant_field_t field);

/* Writes ", \"quant\": {...}" for a quantized copy, in the order the
 * reader's documentation lists the keys. */
void rs__capture_put_quant(FILE *out, const rs_quant_desc_t *q);

#endif
