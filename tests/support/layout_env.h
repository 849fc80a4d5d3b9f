/* Models and layouts for the tests of the layout library: small model
 * configs written here, example models from examples/models, and layout
 * specs parsed and checked against a model, each failing the test with
 * the library's message when it does not load. */
#ifndef RS_TEST_LAYOUT_ENV_H
#define RS_TEST_LAYOUT_ENV_H

#include "reshard_layout/layout.h"
#include "reshard_layout/model.h"

/* Dense qwen2 with q/k/v biases: 4 heads of 16, 2 kv heads, intermediate
 * 128, 5 layers, an odd vocab so vocab parts differ by one row. */
extern const char lx_dense_cfg[];
/* qwen3_moe: 8 experts of intermediate 32, 4 heads, 2 kv heads. */
extern const char lx_moe_cfg[];

/* A model from its config text. */
rs_model_h lx_model_json(const char *json);

/* examples/models/<file> under RESHARD_SOURCE_DIR (or "."). */
rs_model_h lx_model_file(const char *file);

/* The text of examples/models/<file> (malloc'd: the caller frees it). */
char *lx_read_model_file(const char *file);

/* `spec` parsed and checked against m. */
rs_layout_t lx_layout(rs_model_h m, const char *spec);

#endif
