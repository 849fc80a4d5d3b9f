/* Which tensors a publisher quantizes, and with which specs: the "GLOB=SPEC"
 * entries it was created with (fnmatch over tensor names, checked at create),
 * and with quantize_wanted the (source, spec) requests of the receivers' cuts
 * records it caches (publisher_cut_records.c) and of the cut set and cuts file
 * it was given. Each shard gets every spec that names its tensor
 * (publisher_arena_quant.c drops repeats; docs/quantized-refit.md,
 * "Publisher-side quantization"). */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "refit/publisher_impl.h"
#include "reshard/cuts.h"
#include "reshard/quant.h"

/* The canonical text of `text` into out (RS_PUB_SPEC_MAX bytes). */
static rs_status_t canonical_spec(const char *text, char *out,
                                  rs_diag_t *diag)
{
    int64_t block[RS_MAX_DIMS];
    rs_quant_desc_t q;
    rs_status_t st = rs_quant_spec_parse(text, block, diag, &q);
    if (st != RS_OK)
        return st;
    size_t n = rs_quant_spec_format(&q, out, RS_PUB_SPEC_MAX);
    if (n == 0 || n >= RS_PUB_SPEC_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "spec '%s' has no canonical "
                            "text of at most %d bytes", text,
                            RS_PUB_SPEC_MAX - 1);
    return RS_OK;
}

/* Parses entry `i` ("GLOB=SPEC"; the last '=' splits, a glob may hold
 * one) into *rule. */
static rs_status_t parse_rule(size_t i, const char *entry,
                              rs__publish_quant_rule_t *rule, rs_diag_t *diag)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    const char *eq = entry != NULL ? strrchr(entry, '=') : NULL;
    if (eq == NULL || eq == entry)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: quantize "
                            "entry %zu '%s': want GLOB=SPEC (a tensor-name "
                            "pattern, '=', a spec such as "
                            "fp8_block:128x128:f8e4m3)", i,
                            entry != NULL ? entry : "(null)");
    if (canonical_spec(eq + 1, rule->spec, &d) != RS_OK)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: quantize "
                            "entry %zu '%s': %s", i, entry, d.msg);
    rule->glob = strndup(entry, (size_t)(eq - entry));
    rule->entry = strdup(entry);
    if (rule->glob == NULL || rule->entry == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    return RS_OK;
}

rs_status_t rs__publisher_load_quant_rules(rs_publisher_h p,
                                           const rs_publisher_params_t *pp,
                                           rs_diag_t *diag)
{
    if (pp->num_quantize > 0 && pp->quantize == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: "
                            "num_quantize is %zu but quantize is NULL",
                            pp->num_quantize);
    for (size_t i = 0; i < pp->num_quantize; i++) {
        rs__publish_quant_rule_t rule;
        memset(&rule, 0, sizeof(rule));
        rs_status_t st = parse_rule(i, pp->quantize[i], &rule, diag);
        if (st == RS_OK && !RS_VEC_PUSH(p, qrules, rule))
            st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
        if (st != RS_OK) {
            free(rule.glob);
            free(rule.entry);
            return st;
        }
    }
    return RS_OK;
}

void rs__publisher_free_quant(rs_publisher_h p)
{
    for (size_t i = 0; i < p->qrules_len; i++) {
        free(p->qrules[i].glob);
        free(p->qrules[i].entry);
    }
    free(p->qrules);
    free(p->qpieces);
    free(p->next_qpieces);
    free(p->qscratch);
}

/* The requests of one cut set for `tensor` (none from a set of another
 * model: told by publisher_arena_quant.c, or by the cut union's merge). */
static rs_status_t wanted_in(rs_publisher_h p, rs_cuts_h cuts,
                             const char *tensor, rs__publisher_spec_fn fn,
                             void *ctx)
{
    const char *src, *spec, *model = rs_cuts_model(cuts);
    rs_status_t st = RS_OK;
    if (model != NULL && strcmp(model, p->model) != 0)
        return RS_OK;
    for (size_t i = 0; st == RS_OK && rs_cuts_quant(cuts, i, &src, &spec);
         i++)
        if (strcmp(src, tensor) == 0)
            st = fn(ctx, spec);
    return st;
}

/* The requests for `tensor` of the cached records, the given cut set and
 * the cuts file. */
static rs_status_t wanted(rs_publisher_h p, const char *tensor,
                          rs__publisher_spec_fn fn, void *ctx)
{
    rs_status_t st = RS_OK;
    for (size_t r = 0; st == RS_OK && r < p->records_len; r++)
        st = wanted_in(p, p->records[r].cuts, tensor, fn, ctx);
    if (st == RS_OK && p->params.cuts != NULL)
        st = wanted_in(p, p->params.cuts, tensor, fn, ctx);
    if (st == RS_OK && p->file_cuts != NULL)
        st = wanted_in(p, p->file_cuts, tensor, fn, ctx);
    return st;
}

rs_status_t rs__publisher_specs_of(rs_publisher_h p, size_t shard,
                                   rs__publisher_spec_fn fn, void *ctx)
{
    const char *tensor = p->shards[shard].tensor;
    rs_status_t st = RS_OK;
    for (size_t i = 0; st == RS_OK && i < p->qrules_len; i++)
        if (fnmatch(p->qrules[i].glob, tensor, 0) == 0)
            st = fn(ctx, p->qrules[i].spec);
    if (st == RS_OK && p->params.quantize_wanted)
        st = wanted(p, tensor, fn, ctx);
    return st;
}
