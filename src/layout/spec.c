/* Layout specs ("fsdp:4", "megatron:tp=8,pp=16,ep=16", "vllm:tp=8,ep=8,dp=16"):
 * parsing, validation against a model (divisibility of heads, experts and
 * layers; megatron's derived dp) and trainer session names. */
#include <stdio.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "reshard_layout/layout.h"

/* Larger parallel degrees than this are surely typos, and the cap keeps
 * world = tp * pp * dp far from overflow. */
#define SPEC_MAX_DEGREE ((int64_t)1 << 20)

/* A positive decimal integer spanning exactly [s, s+n). */
static int parse_degree(const char *s, size_t n, int64_t *out)
{
    int64_t v = 0;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (s[i] - '0');
        if (v > SPEC_MAX_DEGREE)
            return 0;
    }
    if (v < 1)
        return 0;
    *out = v;
    return 1;
}

static rs_status_t bad_value(rs_diag_t *diag, const char *spec,
                             const char *key, size_t klen, const char *val,
                             size_t vlen)
{
    return rs__diag_set(diag, RS_ERR_INPUT, "layout '%s': %.*s must be a "
                        "positive integer (at most %lld), got '%.*s'", spec,
                        (int)klen, key, (long long)SPEC_MAX_DEGREE, (int)vlen,
                        val);
}

/* Index of a key in `keys`, or -1 for a key `l->kind` does not take (etp
 * is megatron's only). */
static const char *const keys[] = {"tp", "pp", "ep", "dp", "etp"};

static int key_index(const rs_layout_t *l, const char *key, size_t n)
{
    int count = l->kind == RS_LAYOUT_MEGATRON ? 5 : 4;
    for (int i = 0; i < count; i++)
        if (strlen(keys[i]) == n && memcmp(keys[i], key, n) == 0)
            return i;
    return -1;
}

/* One "key=value" item of a megatron or vllm spec. */
static rs_status_t parse_item(const char *spec, const char *item, size_t n,
                              unsigned *seen, rs_layout_t *l, rs_diag_t *diag)
{
    const char *kind = l->kind == RS_LAYOUT_MEGATRON ? "megatron" : "vllm";
    const char *eq = memchr(item, '=', n);
    if (eq == NULL)
        return rs__diag_set(diag, RS_ERR_INPUT, "layout '%s': '%.*s' is not "
                            "key=value", spec, (int)n, item);
    size_t klen = (size_t)(eq - item), vlen = n - klen - 1;
    int64_t *fields[] = {&l->tp, &l->pp, &l->ep, &l->dp, &l->etp};
    int k = key_index(l, item, klen);
    if (k < 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "layout '%s': unknown key "
                            "'%.*s' for %s (expected tp, pp, ep, dp%s)", spec,
                            (int)klen, item, kind,
                            l->kind == RS_LAYOUT_MEGATRON ? ", etp" : "");
    unsigned bit = 1u << k;
    if (*seen & bit)
        return rs__diag_set(diag, RS_ERR_INPUT, "layout '%s': key '%.*s' "
                            "given twice", spec, (int)klen, item);
    *seen |= bit;
    if (!parse_degree(eq + 1, vlen, fields[k]))
        return bad_value(diag, spec, item, klen, eq + 1, vlen);
    return RS_OK;
}

static rs_status_t parse_keys(const char *spec, const char *params,
                              rs_layout_t *l, rs_diag_t *diag)
{
    unsigned seen = 0;
    const char *p = params;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == 0)
            return rs__diag_set(diag, RS_ERR_INPUT, "layout '%s': empty "
                                "parameter (expected key=value items "
                                "separated by commas)", spec);
        rs_status_t st = parse_item(spec, p, n, &seen, l, diag);
        if (st != RS_OK)
            return st;
        if (comma == NULL)
            return RS_OK;
        p = comma + 1;
    }
}

rs_status_t rs_layout_parse(const char *spec, rs_diag_t *diag,
                            rs_layout_t *layout_p)
{
    rs_layout_t l = {0};
    rs_status_t st = RS_OK;

    if (spec == NULL || layout_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    const char *colon = strchr(spec, ':');
    size_t klen = colon ? (size_t)(colon - spec) : strlen(spec);
    l.tp = l.pp = l.ep = l.dp = l.etp = 1;
    if (klen == 4 && memcmp(spec, "fsdp", 4) == 0) {
        l.kind = RS_LAYOUT_FSDP;
        if (colon == NULL || !parse_degree(colon + 1, strlen(colon + 1),
                                           &l.fsdp))
            return rs__diag_set(diag, RS_ERR_INPUT, "layout '%s': fsdp needs "
                                "a positive shard count, as in fsdp:4", spec);
    } else if (klen == 8 && memcmp(spec, "megatron", 8) == 0) {
        l.kind = RS_LAYOUT_MEGATRON;
        l.dp = 0; /* derived by rs_layout_check unless given */
    } else if (klen == 4 && memcmp(spec, "vllm", 4) == 0) {
        l.kind = RS_LAYOUT_VLLM;
    } else {
        return rs__diag_set(diag, RS_ERR_INPUT, "layout '%s': unknown kind "
                            "'%.*s' (expected fsdp, megatron or vllm)", spec,
                            (int)klen, spec);
    }
    if (l.kind != RS_LAYOUT_FSDP && colon != NULL)
        st = parse_keys(spec, colon + 1, &l, diag);
    if (st != RS_OK)
        return st;
    *layout_p = l;
    return RS_OK;
}

/* "megatron:tp=8,pp=16,ep=16,dp=2,etp=1" for messages. */
static void layout_name(const rs_layout_t *l, char *buf, size_t cap)
{
    if (l->kind == RS_LAYOUT_FSDP)
        snprintf(buf, cap, "fsdp:%lld", (long long)l->fsdp);
    else if (l->kind == RS_LAYOUT_MEGATRON)
        snprintf(buf, cap, "megatron:tp=%lld,pp=%lld,ep=%lld,dp=%lld,etp=%lld",
                 (long long)l->tp, (long long)l->pp, (long long)l->ep,
                 (long long)l->dp, (long long)l->etp);
    else
        snprintf(buf, cap, "vllm:tp=%lld,pp=%lld,ep=%lld,dp=%lld",
                 (long long)l->tp, (long long)l->pp, (long long)l->ep,
                 (long long)l->dp);
}

#define CHECK_DIV(what, n, dname, d)                                          \
    do {                                                                      \
        if ((n) % (d) != 0)                                                   \
            return rs__diag_set(diag, RS_ERR_INPUT, "layout %s: %s (%lld) "   \
                                "is not divisible by %s (%lld)", name, what,  \
                                (long long)(n), dname, (long long)(d));       \
    } while (0)

/* Tensor-parallel splits of attention, dense MLPs and shared experts. */
static rs_status_t check_tp(const rs_layout_t *l, const rs_model_config_t *c,
                            const char *name, rs_diag_t *diag)
{
    int64_t tp = l->tp;
    CHECK_DIV("attention heads", c->heads, "tp", tp);
    if (c->arch != RS_ARCH_DEEPSEEK && c->kv_heads > 0 &&
        c->kv_heads % tp != 0 && tp % c->kv_heads != 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "layout %s: kv heads (%lld) "
                            "and tp (%lld) must divide one another", name,
                            (long long)c->kv_heads, (long long)tp);
    if ((c->arch == RS_ARCH_DENSE || c->first_dense > 0) && c->intermediate > 0)
        CHECK_DIV("intermediate size", c->intermediate, "tp", tp);
    /* qwen2_moe sizes its shared expert apart; deepseek's shared experts
     * are fused into one MLP of shared_experts * moe_intermediate. */
    if (c->shared_expert_intermediate > 0)
        CHECK_DIV("shared expert intermediate size",
                  c->shared_expert_intermediate, "tp", tp);
    else if (c->shared_experts > 0 && c->moe_intermediate > 0)
        CHECK_DIV("shared experts' intermediate size",
                  c->shared_experts * c->moe_intermediate, "tp", tp);
    return RS_OK;
}

/* Layers across stages, experts across expert-parallel ranks and the
 * tensor split of each expert (etp for megatron, tp for vllm without ep). */
static rs_status_t check_pp_ep(const rs_layout_t *l, const rs_model_config_t *c,
                               const char *name, rs_diag_t *diag)
{
    if (c->layers < l->pp)
        return rs__diag_set(diag, RS_ERR_INPUT, "layout %s: %lld layers cannot "
                            "fill pp (%lld) pipeline stages", name,
                            (long long)c->layers, (long long)l->pp);
    if (c->experts == 0 && (l->ep > 1 || l->etp > 1))
        return rs__diag_set(diag, RS_ERR_INPUT, "layout %s: ep (%lld) and etp "
                            "(%lld) need routed experts, and the model has "
                            "none", name, (long long)l->ep, (long long)l->etp);
    if (c->experts == 0)
        return RS_OK;
    CHECK_DIV("routed experts", c->experts, "ep", l->ep);
    if (l->kind == RS_LAYOUT_MEGATRON)
        CHECK_DIV("moe intermediate size", c->moe_intermediate, "etp", l->etp);
    else if (l->ep == 1)
        CHECK_DIV("moe intermediate size", c->moe_intermediate, "tp", l->tp);
    return RS_OK;
}

/* Megatron's expert plane (ep x etp) tiles its tp x dp plane: dp, when not
 * given, is the smallest that makes it so. */
static rs_status_t check_dp(rs_layout_t *l, char *name, size_t cap,
                            rs_diag_t *diag)
{
    int64_t experts_plane = l->ep * l->etp, plane;
    if (l->kind == RS_LAYOUT_MEGATRON && l->dp == 0) {
        int64_t a = experts_plane, b = l->tp;
        while (b != 0) {
            int64_t t = a % b;
            a = b;
            b = t;
        }
        l->dp = experts_plane / a;
        layout_name(l, name, cap);
    }
    if (!rs__mul_i64(l->tp, l->dp, &plane))
        return rs__diag_set(diag, RS_ERR_INPUT, "layout %s: tp * dp overflows",
                            name);
    if (l->kind == RS_LAYOUT_MEGATRON && plane % experts_plane != 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "layout %s: ep * etp (%lld) "
                            "does not divide tp * dp (%lld)", name,
                            (long long)experts_plane, (long long)plane);
    if (l->kind == RS_LAYOUT_VLLM && plane % l->ep != 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "layout %s: ep (%lld) does "
                            "not divide tp * dp (%lld)", name,
                            (long long)l->ep, (long long)plane);
    return RS_OK;
}

static rs_status_t check_parallel(rs_layout_t *l, const rs_model_config_t *c,
                                  rs_diag_t *diag, int64_t *world_p)
{
    char name[160];
    rs_status_t st;

    layout_name(l, name, sizeof(name));
    if (l->tp < 1 || l->pp < 1 || l->ep < 1 || l->etp < 1 || l->dp < 0 ||
        (l->dp == 0 && l->kind != RS_LAYOUT_MEGATRON))
        return rs__diag_set(diag, RS_ERR_INPUT, "layout %s: degrees must be "
                            "positive", name);
    if ((st = check_dp(l, name, sizeof(name), diag)) != RS_OK ||
        (st = check_tp(l, c, name, diag)) != RS_OK ||
        (st = check_pp_ep(l, c, name, diag)) != RS_OK)
        return st;
    if (!rs__mul_i64(l->tp * l->dp, l->pp, world_p))
        return rs__diag_set(diag, RS_ERR_INPUT, "layout %s: tp * pp * dp "
                            "overflows", name);
    return RS_OK;
}

rs_status_t rs_layout_check(rs_layout_t *layout, rs_model_h model,
                            rs_diag_t *diag)
{
    rs_layout_t l;
    int64_t world = 0;

    if (layout == NULL || model == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    l = *layout;
    if (l.kind == RS_LAYOUT_FSDP) {
        if (l.fsdp < 1)
            return rs__diag_set(diag, RS_ERR_INPUT, "layout fsdp:%lld: the "
                                "shard count must be positive",
                                (long long)l.fsdp);
        world = l.fsdp;
    } else if (l.kind == RS_LAYOUT_MEGATRON || l.kind == RS_LAYOUT_VLLM) {
        rs_status_t st = check_parallel(&l, rs_model_config(model), diag,
                                        &world);
        if (st != RS_OK)
            return st;
    } else {
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "unknown layout kind %d",
                            (int)l.kind);
    }
    l.world = world;
    *layout = l;
    return RS_OK;
}

void rs_layout_trainer_session(int64_t rank, char *out, size_t outlen)
{
    if (out != NULL && outlen > 0)
        snprintf(out, outlen, "trainer-%lld", (long long)rank);
}
