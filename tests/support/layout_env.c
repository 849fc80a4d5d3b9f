/* Models and layouts for the layout tests (layout_env.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout_env.h"

const char lx_dense_cfg[] =
    "{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"num_hidden_layers\": 5,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"intermediate_size\": 128, \"vocab_size\": 1001,"
    " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";

const char lx_moe_cfg[] =
    "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"head_dim\": 16,"
    " \"num_hidden_layers\": 4, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"intermediate_size\": 128,"
    " \"moe_intermediate_size\": 32, \"num_experts\": 8,"
    " \"num_experts_per_tok\": 2, \"decoder_sparse_step\": 1,"
    " \"mlp_only_layers\": [], \"vocab_size\": 1000,"
    " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";

rs_model_h lx_model_json(const char *json)
{
    rs_model_h m = NULL;
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_status_t st = rs_model_load_string(json, strlen(json), "cfg.json", &d,
                                          &m);
    if (st != RS_OK)
        fail_msg("model: %s: %s", rs_status_str(st), d.msg);
    return m;
}

static void model_path(char *path, size_t n, const char *file)
{
    const char *dir = getenv("RESHARD_SOURCE_DIR");
    snprintf(path, n, "%.3000s/examples/models/%s", dir ? dir : ".", file);
}

char *lx_read_model_file(const char *file)
{
    char path[4096];
    model_path(path, sizeof(path), file);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot open %s", path);
    char *text = calloc(1, 1 << 20);
    assert_non_null(text);
    size_t n = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    assert_true(n > 0);
    return text;
}

rs_model_h lx_model_file(const char *file)
{
    char path[4096];
    rs_model_h m = NULL;
    rs_diag_t d;
    model_path(path, sizeof(path), file);
    rs_diag_clear(&d);
    rs_status_t st = rs_model_load(path, &d, &m);
    if (st != RS_OK)
        fail_msg("%s: %s: %s", path, rs_status_str(st), d.msg);
    return m;
}

rs_layout_t lx_layout(rs_model_h m, const char *spec)
{
    rs_layout_t l;
    rs_diag_t d;
    rs_diag_clear(&d);
    if (rs_layout_parse(spec, &d, &l) != RS_OK ||
        rs_layout_check(&l, m, &d) != RS_OK)
        fail_msg("%s: %s", spec, d.msg);
    return l;
}
