/* `reshard simulate --json`: the reshard.simulate.v1 report, one JSON object
 * on stdout (every field documented in docs/formats.md). Strings printed
 * here are the model's own names, validated layout specs and trainer session
 * names ("trainer-<k>"), none of which needs escaping. */
#include <math.h>
#include <stdio.h>

#include "simulate.h"

static const char *json_bool(int v)
{
    return v ? "true" : "false";
}

static void print_quant(const sim_t *s)
{
    const rs_model_quant_t *q = rs_model_quantization(s->model);
    if (q == NULL) {
        printf("null");
        return;
    }
    printf("{\"quant_method\": \"%s\", \"fmt\": \"%s\", \"weight_dtype\": "
           "\"%s\", \"activation_scheme\": \"%s\", \"weight_block_size\": ",
           q->method_name, q->fmt, rs_dtype_name(q->weight_dtype),
           q->activation_scheme);
    if (q->weight_block[0] > 0)
        printf("[%lld, %lld]", (long long)q->weight_block[0],
               (long long)q->weight_block[1]);
    else
        printf("null");
    printf(", \"modules_not_converted\": %zu, \"refit_dtype\": \"%s\", "
           "\"quantized_refit\": %s}", q->modules_not_converted,
           rs_dtype_name(rs_model_config(s->model)->dtype),
           json_bool(s->fp8 != 0));
}

static void print_head(const sim_t *s)
{
    const rs_model_config_t *g = rs_model_config(s->model);
    printf("{\"schema\": \"" RS_SIM_SCHEMA "\", \"model_type\": \"%s\", "
           "\"dtype\": \"%s\", \"quantization\": ", g->model_type,
           rs_dtype_name(g->dtype));
    print_quant(s);
    printf(",\n \"params_total\": %llu, \"bytes_total\": %llu, "
           "\"trainer_ranks\": %lld, \"inference_ranks\": %lld, "
           "\"plan_seconds\": %.6f,\n \"device_memory_bytes\": %llu, "
           "\"fits\": %s, \"ranks_not_fitting\": [",
           (unsigned long long)rs_model_num_params(s->model),
           (unsigned long long)rs_model_num_bytes(s->model),
           (long long)s->train.world, (long long)s->infer.world,
           s->plan_seconds, (unsigned long long)s->device_bytes,
           json_bool(rs_sim_num_unfit(s) == 0));
    int first = 1;
    for (int64_t r = 0; r < s->infer.world; r++) {
        if (rs_sim_fits(s, &s->recv[r]))
            continue;
        printf(first ? "%lld" : ", %lld", (long long)r);
        first = 0;
    }
    printf("],\n \"staging_budget_bytes\": ");
    if (s->staging_budget == RS_STAGING_UNBOUNDED)
        printf("null,\n");
    else
        printf("%llu,\n", (unsigned long long)(s->staging_budget > 0
                                                  ? s->staging_budget
                                                  : RS_EXEC_DEFAULT_STAGING_BUDGET));
}

static void print_receiver(const sim_t *s, const receiver_t *x)
{
    printf("\n  {\"rank\": %lld, \"bytes\": %llu, \"needed_bytes\": %llu, "
           "\"descriptors\": %llu, \"sources\": %llu, "
           "\"unbounded_sources\": %llu, \"plan_seconds\": %.6f, "
           "\"est_seconds\": %.9f, \"padding_bytes\": %llu, "
           "\"param_bytes\": %llu, \"staging_bytes\": %llu, "
           "\"memory_bytes\": %llu, \"fits\": %s, \"coverage_ok\": %s, "
           "\"staging_peak_bytes\": %llu, \"staging_rounds\": %llu",
           (long long)x->rank, (unsigned long long)x->bytes,
           (unsigned long long)x->needed, (unsigned long long)x->descriptors,
           (unsigned long long)x->sources, (unsigned long long)x->unbounded,
           x->plan_seconds, x->est_seconds, (unsigned long long)x->padding,
           (unsigned long long)x->param_bytes,
           (unsigned long long)x->staging_bytes,
           (unsigned long long)rs_sim_memory(x), json_bool(rs_sim_fits(s, x)),
           json_bool(x->coverage_ok), (unsigned long long)x->staging_peak,
           (unsigned long long)x->staging_rounds);
    rs_sim_print_fp8_receiver(s, x);
    if (s->delta != NULL)
        printf(", \"delta_wire_bytes\": %llu, \"delta_bytes\": %llu, "
               "\"runs\": %llu, \"delta_runs\": %llu",
               (unsigned long long)llround(x->delta_wire),
               (unsigned long long)llround(x->delta_bytes),
               (unsigned long long)x->runs,
               (unsigned long long)x->delta_runs);
    printf("}");
}

void rs_sim_print_json(const sim_args_t *a, const sim_t *s)
{
    sim_totals_t t = rs_sim_totals(a, s);
    print_head(s);
    printf(" \"receivers\": [");
    for (int64_t r = 0; r < s->infer.world; r++) {
        printf(r ? "," : "");
        print_receiver(s, &s->recv[r]);
    }
    printf("],\n \"sources\": [");
    for (size_t k = 0; k < s->nsess; k++)
        printf("%s\n  {\"session\": \"%s\", \"bytes_served\": %llu, "
               "\"receivers\": %llu}", k ? "," : "", s->names[k],
               (unsigned long long)s->served[k],
               (unsigned long long)s->fan_out[k]);
    printf("],\n \"imbalance\": %.6f, \"redundant_bytes\": %llu, "
           "\"extra_wire_bytes\": %llu, \"needed_bytes\": %llu, "
           "\"padding_bytes\": %llu, \"unbounded_sources\": %llu,\n"
           " \"wire_lower_bound_s\": %.6f, \"est_seconds\": %.9f, "
           "\"nic_gbps\": %.3f, \"coverage_ok\": %s,\n \"fp8\": ",
           t.imbalance, (unsigned long long)s->redundant,
           (unsigned long long)s->extra_wire, (unsigned long long)t.needed,
           (unsigned long long)t.padding, (unsigned long long)t.unbounded,
           t.wire_bound, t.est_max, a->nic_gbps, json_bool(s->coverage_ok));
    rs_sim_print_fp8_json(a, s);
    printf(",\n \"delta\": ");
    rs_sim_print_delta_json(a, s);
    printf("}\n");
}
