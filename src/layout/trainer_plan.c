/* Classifies a manifest's tensors for trainer layouts: which megatron split
 * each gets (from its Hugging Face module name, as a conversion-aware
 * trainer adapter maps them) and which pipeline stage holds it. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "layout/quant_impl.h"
#include "layout/trainer_impl.h"

/* Shards of rank r live at (r + 1) << 44, so ranks must stay below this for
 * every address to fit in the int64 range plans carry. */
#define TRAINER_MAX_WORLD (((int64_t)1 << 19) - 1)

int64_t rs__layout_stage_of_layer(int64_t layers, int64_t pp, int64_t layer)
{
    int64_t base = layers / pp, rem = layers % pp;
    int64_t big = rem * (base + 1); /* layers on the stages with an extra */
    if (layer < big)
        return layer / (base + 1);
    return rem + (layer - big) / base;
}

/* The module a parameter belongs to: "q_proj" in
 * "model.layers.0.self_attn.q_proj.weight". */
static void module_of(const char *name, const char **mod_p, size_t *len_p)
{
    size_t len = strlen(name);
    if (len > 7 && strcmp(name + len - 7, ".weight") == 0)
        len -= 7;
    else if (len > 5 && strcmp(name + len - 5, ".bias") == 0)
        len -= 5;
    size_t start = len;
    while (start > 0 && name[start - 1] != '.')
        start--;
    *mod_p = name + start;
    *len_p = len - start;
}

/* Whether the module is one of a NULL-terminated list. */
static int module_in(const char *mod, size_t len, const char *const *list)
{
    for (; *list != NULL; list++)
        if (strlen(*list) == len && memcmp(*list, mod, len) == 0)
            return 1;
    return 0;
}

static const char *const expert_column[] = {"gate_proj", "up_proj", NULL};
static const char *const expert_row[] = {"down_proj", NULL};
static const char *const vocab[] = {"embed_tokens", "lm_head", NULL};
static const char *const kv[] = {"k_proj", "v_proj", NULL};
/* Shared experts' gate/up and deepseek's up-projections (split by heads)
 * are column-parallel like the dense ones. */
static const char *const column[] = {"q_proj", "q_b_proj", "kv_b_proj",
                                     "gate_proj", "up_proj", NULL};
static const char *const row[] = {"o_proj", "down_proj", NULL};

static rs__tensor_role_t classify(const rs_tensor_info_t *t)
{
    const char *mod;
    size_t len;

    module_of(t->name, &mod, &len);
    if (t->expert >= 0) {
        if (t->ndim == 2 && module_in(mod, len, expert_column))
            return RS_ROLE_EXPERT_COLUMN;
        if (t->ndim == 2 && module_in(mod, len, expert_row))
            return RS_ROLE_EXPERT_ROW;
        return RS_ROLE_EXPERT_WHOLE;
    }
    if (t->ndim == 2 && module_in(mod, len, vocab))
        return RS_ROLE_VOCAB;
    if (t->ndim >= 1 && module_in(mod, len, kv))
        return RS_ROLE_KV;
    if (t->ndim >= 1 && module_in(mod, len, column))
        return RS_ROLE_COLUMN;
    /* A row-parallel bias is added once after the reduction: replicated. */
    if (t->ndim == 2 && module_in(mod, len, row))
        return RS_ROLE_ROW;
    return RS_ROLE_REPLICATED;
}

/* Embeddings on the first stage; decoder layers by the even split; the
 * final norm, the head and anything past the last layer on the last. */
static int64_t stage_of(const rs_model_config_t *cfg, int64_t pp,
                        const rs_tensor_info_t *t)
{
    if (t->layer >= 0 && t->layer < cfg->layers)
        return rs__layout_stage_of_layer(cfg->layers, pp, t->layer);
    if (t->layer < 0 && strstr(t->name, "embed_tokens") != NULL)
        return 0;
    return pp - 1;
}

static rs_status_t check_trainer_layout(const rs_layout_t *l, rs_diag_t *diag)
{
    if (l->kind != RS_LAYOUT_FSDP && l->kind != RS_LAYOUT_MEGATRON)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "trainer shards need a "
                            "fsdp or megatron layout, not vllm");
    if (l->world > TRAINER_MAX_WORLD)
        return rs__diag_set(diag, RS_ERR_INPUT, "trainer layout has %lld "
                            "ranks; at most %lld fit the address plan",
                            (long long)l->world, (long long)TRAINER_MAX_WORLD);
    return RS_OK;
}

rs_status_t rs__trainer_plan_init(rs__trainer_plan_t *plan, rs_model_h model,
                                  const rs_layout_t *layout, rs_cuts_h cuts,
                                  unsigned flags, rs_diag_t *diag)
{
    rs_layout_t l;
    rs_status_t st;

    if (plan == NULL || model == NULL || layout == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    l = *layout;
    if ((st = check_trainer_layout(&l, diag)) != RS_OK ||
        (st = rs_layout_check(&l, model, diag)) != RS_OK ||
        (st = check_trainer_layout(&l, diag)) != RS_OK)
        return st;
    size_t n = rs_model_num_tensors(model);
    rs__trainer_tensor_t *tensors = calloc(n ? n : 1, sizeof(*tensors));
    if (tensors == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    const rs_model_config_t *cfg = rs_model_config(model);
    for (size_t i = 0; i < n; i++) {
        rs_tensor_info_t t;
        rs_model_tensor(model, i, &t);
        tensors[i].role = (uint8_t)classify(&t);
        tensors[i].fp8 = (uint8_t)rs__layout_fp8_tensor(model, t.name);
        tensors[i].stage = (int32_t)stage_of(cfg, l.pp, &t);
    }
    plan->model = model;
    plan->layout = l;
    plan->tensors = tensors;
    plan->num_tensors = n;
    plan->cuts = cuts;
    plan->flags = flags;
    memset(&plan->quant, 0, sizeof(plan->quant));
    if (!(flags & RS_LAYOUT_FP8_COPIES))
        return RS_OK;
    st = rs__layout_fp8_spec(model, plan->quant_block, diag, &plan->quant);
    if (st != RS_OK)
        rs__trainer_plan_free(plan);
    return st;
}

void rs__trainer_plan_free(rs__trainer_plan_t *plan)
{
    if (plan == NULL)
        return;
    free(plan->tensors);
    plan->tensors = NULL;
    plan->num_tensors = 0;
}
