/* Model manifests: loads a Hugging Face config.json, picks the architecture
 * from model_type, builds the tensor list in checkpoint order (names in an
 * arena, an O(1) name index) and answers the public accessors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "layout/model_impl.h"

/* A config is a few KB; anything near this is not a config. */
#define RS_MODEL_CONFIG_MAX_BYTES ((size_t)16 << 20)

typedef struct rs__model_family {
    const char *model_type;
    rs_arch_t arch;
    unsigned flags;
    rs_status_t (*keys)(rs__json_ctx_t *, const json_t *, rs_model_h);
    rs_status_t (*layer)(rs_model_h, int64_t);
} rs__model_family_t;

static const rs__model_family_t families[] = {
    {"llama", RS_ARCH_DENSE, 0, rs__model_dense_keys, rs__model_dense_layer},
    {"qwen2", RS_ARCH_DENSE, RS_FAM_QKV_BIAS, rs__model_dense_keys,
     rs__model_dense_layer},
    {"qwen3", RS_ARCH_DENSE, RS_FAM_QK_NORM, rs__model_dense_keys,
     rs__model_dense_layer},
    {"qwen2_moe", RS_ARCH_QWEN_MOE, RS_FAM_QKV_BIAS | RS_FAM_SHARED_EXPERT,
     rs__model_moe_keys, rs__model_moe_layer},
    {"qwen3_moe", RS_ARCH_QWEN_MOE, RS_FAM_QK_NORM, rs__model_moe_keys,
     rs__model_moe_layer},
    {"deepseek_v3", RS_ARCH_DEEPSEEK, 0, rs__model_deepseek_keys,
     rs__model_deepseek_layer},
    {"kimi_k2", RS_ARCH_DEEPSEEK, 0, rs__model_deepseek_keys,
     rs__model_deepseek_layer},
};

#define RS_MODEL_SUPPORTED \
    "llama, qwen2, qwen3, qwen2_moe, qwen3_moe, deepseek_v3, kimi_k2"

static const rs__model_family_t *find_family(const char *model_type)
{
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        if (strcmp(families[i].model_type, model_type) == 0)
            return &families[i];
    }
    return NULL;
}

void rs_model_destroy(rs_model_h m)
{
    if (m == NULL)
        return;
    free(m->tensors);
    rs__strmap_free(&m->index);
    rs__arena_free(&m->arena);
    free(m);
}

rs_status_t rs__model_add(rs_model_h m, int64_t layer, int64_t expert,
                          rs_dtype_t dtype, int ndim, int64_t d0, int64_t d1,
                          const char *fmt, ...)
{
    char name[256];
    int64_t shape[2] = {d0, d1}, numel, bytes;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    if (ndim != 1 && ndim != 2) /* shape[] holds two dims */
        return rs__diag_set(m->ctx->diag, RS_ERR_INVALID_ARG, "%s: tensor "
                            "%s: %d dims, not 1 or 2", m->ctx->origin, name,
                            ndim);
    size_t elsize = rs_dtype_size(dtype);
    if (!rs__numel(shape, ndim, &numel) ||
        !rs__mul_i64(numel, (int64_t)elsize, &bytes) ||
        !rs__add_u64(m->bytes, (uint64_t)bytes, &m->bytes) ||
        !rs__add_u64(m->params, (uint64_t)numel, &m->params))
        return rs__diag_set(m->ctx->diag, RS_ERR_INPUT, "%s: tensor %s of "
                            "shape [%lld, %lld] makes the manifest's size "
                            "overflow 64 bits", m->ctx->origin, name,
                            (long long)d0, ndim > 1 ? (long long)d1 : 1LL);
    uint32_t dup;
    if (rs__strmap_get(&m->index, name, &dup))
        return rs__diag_set(m->ctx->diag, RS_ERR_INPUT, "%s: tensor %s "
                            "appears twice in the manifest", m->ctx->origin,
                            name);
    rs__model_record_t rec = {rs__arena_strdup(&m->arena, name), {d0, ndim > 1 ? d1 : 0},
                          (int32_t)layer, (int32_t)expert, (uint8_t)ndim,
                          (uint8_t)dtype};
    if (rec.name == NULL ||
        !rs__strmap_put(&m->index, rec.name, (uint32_t)m->tensors_len) ||
        !RS_VEC_PUSH(m, tensors, rec))
        return rs__diag_set(m->ctx->diag, RS_ERR_NO_MEMORY, "%s: out of "
                            "memory building the manifest", m->ctx->origin);
    return RS_OK;
}

rs_status_t rs__model_add_layer(rs_model_h m, int64_t layer, const char *suffix,
                                int ndim, int64_t d0, int64_t d1)
{
    return rs__model_add(m, layer, -1, m->cfg.dtype, ndim, d0, d1,
                         "model.layers.%lld.%s", (long long)layer, suffix);
}

/* Embedding, the decoder layers, the final norm and (untied) LM head. */
static rs_status_t build_manifest(rs_model_h m, const rs__model_family_t *fam)
{
    const rs_model_config_t *g = &m->cfg;
    rs_status_t st = rs__model_add(m, -1, -1, g->dtype, 2, g->vocab, g->hidden,
                                   "model.embed_tokens.weight");
    for (int64_t i = 0; st == RS_OK && i < g->layers; i++)
        st = fam->layer(m, i);
    if (st == RS_OK)
        st = rs__model_add(m, -1, -1, g->dtype, 1, g->hidden, 0,
                           "model.norm.weight");
    if (st == RS_OK && !g->tie_embeddings)
        st = rs__model_add(m, -1, -1, g->dtype, 2, g->vocab, g->hidden,
                           "lm_head.weight");
    return st;
}

/* Upper bound of the tensor count, refused past RS_MODEL_MAX_TENSORS before
 * anything is built (a typo like 3840000 experts must not eat the RAM). */
static rs_status_t check_size(rs__json_ctx_t *c, rs_model_h m, size_t *bound_p)
{
    const rs_model_config_t *g = &m->cfg;
    int64_t per_layer, all;

    if (!rs__mul_i64(g->experts, 3, &per_layer) ||
        !rs__add_i64(per_layer, 32, &per_layer) ||
        !rs__mul_i64(per_layer, g->layers, &all) || !rs__add_i64(all, 3, &all) ||
        all > RS_MODEL_MAX_TENSORS)
        return rs__diag_set(c->diag, RS_ERR_INPUT, "%s: %lld layers of %lld "
                            "experts make more than the %lld tensors a "
                            "manifest may hold", c->origin,
                            (long long)g->layers, (long long)g->experts,
                            (long long)RS_MODEL_MAX_TENSORS);
    *bound_p = (size_t)all;
    return RS_OK;
}

static rs_status_t read_model_type(rs__json_ctx_t *c, const json_t *root,
                                   rs_model_h m,
                                   const rs__model_family_t **fam_p)
{
    const char *type = NULL;
    rs_status_t st = rs__json_field_string(c, root, "model_type", 1, &type);
    if (st != RS_OK)
        return st;
    const rs__model_family_t *fam = find_family(type);
    if (fam == NULL)
        return rs__model_unsupported(c, "model_type", "unsupported "
                                     "model_type \"%s\" (supported: "
                                     RS_MODEL_SUPPORTED ")", type);
    m->cfg.model_type = fam->model_type;
    m->cfg.arch = fam->arch;
    m->flags = fam->flags;
    *fam_p = fam;
    return RS_OK;
}

static rs_status_t load_root(rs__json_ctx_t *c, const json_t *root,
                             rs_model_h m)
{
    const rs__model_family_t *fam = NULL;
    size_t bound = 0;
    rs_status_t st = rs__json_expect(c, root, JSON_OBJECT);

    if (st == RS_OK)
        st = read_model_type(c, root, m, &fam);
    if (st == RS_OK)
        st = rs__model_read_common(c, root, m);
    if (st == RS_OK)
        st = fam->keys(c, root, m);
    if (st == RS_OK)
        st = rs__model_read_quant(c, root, m);
    if (st == RS_OK)
        st = check_size(c, m, &bound);
    if (st == RS_OK &&
        !rs__vec_reserve((void **)&m->tensors, &m->tensors_cap, bound,
                        sizeof(*m->tensors)))
        st = rs__diag_set(c->diag, RS_ERR_NO_MEMORY, "%s: out of memory "
                          "for %zu tensors", c->origin, bound);
    if (st == RS_OK)
        st = build_manifest(m, fam);
    return st;
}

rs_status_t rs_model_load_string(const char *json, size_t len,
                                 const char *origin, rs_diag_t *diag,
                                 rs_model_h *model_p)
{
    rs__json_ctx_t c;
    json_t *root = NULL;

    if (model_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL model_p");
    rs__json_ctx_init(&c, origin != NULL ? origin : "<config>", diag);
    rs_model_h m = calloc(1, sizeof(*m));
    if (m == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "%s: out of memory",
                            c.origin);
    rs__arena_init(&m->arena);
    rs__strmap_init(&m->index);
    m->ctx = &c;
    rs_status_t st = rs__json_parse(&c, json, len, RS_MODEL_CONFIG_MAX_BYTES,
                                   &root);
    if (st == RS_OK)
        st = load_root(&c, root, m);
    json_decref(root);
    m->ctx = NULL;
    m->moe_layer = NULL; /* arena memory: only the builders need it */
    if (st != RS_OK) {
        rs_model_destroy(m);
        return st;
    }
    *model_p = m;
    return RS_OK;
}

rs_status_t rs_model_load(const char *config_path, rs_diag_t *diag,
                          rs_model_h *model_p)
{
    char *data = NULL;
    size_t len = 0;

    if (model_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL model_p");
    rs_status_t st = rs__json_read_file(config_path, RS_MODEL_CONFIG_MAX_BYTES,
                                       diag, &data, &len);
    if (st != RS_OK)
        return st;
    st = rs_model_load_string(data, len, config_path, diag, model_p);
    free(data);
    return st;
}

const rs_model_config_t *rs_model_config(rs_model_h m)
{
    return m != NULL ? &m->cfg : NULL;
}

const rs_model_quant_t *rs_model_quantization(rs_model_h m)
{
    return m != NULL && m->quant.method != RS_MODEL_QUANT_NONE ? &m->quant : NULL;
}

size_t rs_model_num_tensors(rs_model_h m)
{
    return m != NULL ? m->tensors_len : 0;
}

void rs_model_tensor(rs_model_h m, size_t index, rs_tensor_info_t *info_p)
{
    if (info_p == NULL)
        return;
    memset(info_p, 0, sizeof(*info_p));
    if (m == NULL || index >= m->tensors_len)
        return; /* out of range: a zeroed record with a NULL name */
    const rs__model_record_t *r = &m->tensors[index];
    info_p->name = r->name;
    info_p->ndim = r->ndim;
    info_p->shape = r->shape;
    info_p->dtype = (rs_dtype_t)r->dtype;
    info_p->layer = r->layer;
    info_p->expert = r->expert;
}

long rs_model_find(rs_model_h m, const char *name)
{
    uint32_t idx;
    if (m == NULL || name == NULL || !rs__strmap_get(&m->index, name, &idx))
        return -1;
    return (long)idx;
}

uint64_t rs_model_num_params(rs_model_h m)
{
    return m != NULL ? m->params : 0;
}

uint64_t rs_model_num_bytes(rs_model_h m)
{
    return m != NULL ? m->bytes : 0;
}
