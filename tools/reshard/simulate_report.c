/* `reshard simulate`'s human summary: the model and its checkpoint, a
 * per-rank table (min, median, max), the trainers' load, and the counts a
 * reader cannot interpret alone, each with its meaning beside it; then
 * whether every rank fits its device and is fully covered. Also the figures
 * the JSON report shares (memory, totals). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simulate.h"

uint64_t rs_sim_memory(const receiver_t *r)
{
    return r->param_bytes + r->staging_peak;
}

int rs_sim_fits(const sim_t *s, const receiver_t *r)
{
    return rs_sim_memory(r) <= s->device_bytes;
}

int64_t rs_sim_num_unfit(const sim_t *s)
{
    int64_t n = 0;
    for (int64_t r = 0; r < s->infer.world; r++)
        n += !rs_sim_fits(s, &s->recv[r]);
    return n;
}

sim_totals_t rs_sim_totals(const sim_args_t *a, const sim_t *s)
{
    sim_totals_t t;
    uint64_t sum = 0;
    memset(&t, 0, sizeof(t));
    for (size_t k = 0; k < s->nsess; k++) {
        if (s->served[k] == 0)
            continue;
        t.serving++;
        sum += s->served[k];
        if (s->served[k] > t.max_served)
            t.max_served = s->served[k];
    }
    for (int64_t i = 0; i < s->infer.world; i++) {
        const receiver_t *r = &s->recv[i];
        t.max_in = r->bytes > t.max_in ? r->bytes : t.max_in;
        t.est_max = r->est_seconds > t.est_max ? r->est_seconds : t.est_max;
        t.padding += r->padding;
        t.unbounded += r->unbounded;
        t.needed += r->needed;
    }
    t.mean_served = t.serving ? (double)sum / (double)t.serving : 0;
    t.imbalance = t.mean_served > 0 ? (double)t.max_served / t.mean_served : 0;
    uint64_t worst = t.max_in > t.max_served ? t.max_in : t.max_served;
    t.wire_bound = (double)worst * 8 / (a->nic_gbps * 1e9);
    return t;
}

/* ---- the per-rank table ------------------------------------------------ */

enum { AS_SECONDS, AS_BYTES, AS_COUNT };

typedef double (*field_fn)(const sim_t *s, const receiver_t *r);

static double f_params(const sim_t *s, const receiver_t *r)
{ (void)s; return (double)r->param_bytes; }
static double f_staging(const sim_t *s, const receiver_t *r)
{ (void)s; return (double)r->staging_peak; }
static double f_staging_all(const sim_t *s, const receiver_t *r)
{ (void)s; return (double)r->staging_bytes; }
static double f_rounds(const sim_t *s, const receiver_t *r)
{ (void)s; return (double)r->staging_rounds; }
static double f_memory(const sim_t *s, const receiver_t *r)
{ (void)s; return (double)rs_sim_memory(r); }
static double f_needed(const sim_t *s, const receiver_t *r)
{ (void)s; return (double)r->needed; }
static double f_wire(const sim_t *s, const receiver_t *r)
{ (void)s; return (double)r->bytes; }
static double f_descriptors(const sim_t *s, const receiver_t *r)
{ (void)s; return (double)r->descriptors; }
static double f_sources(const sim_t *s, const receiver_t *r)
{ (void)s; return (double)r->sources; }
static double f_plan(const sim_t *s, const receiver_t *r)
{ (void)s; return r->plan_seconds; }
static double f_est(const sim_t *s, const receiver_t *r)
{ (void)s; return r->est_seconds; }

typedef struct row {
    const char *label;
    field_fn get;
    int unit;
    const char *meaning;
} row_t;

static const row_t rows[] = {
    {"parameters held", f_params, AS_BYTES,
     "what its loaders fill (its capture's parameters)"},
    {"staging (peak)", f_staging, AS_BYTES,
     "staged boxes held at once under the staging budget"},
    {"staging unbounded", f_staging_all, AS_BYTES,
     "every staged read, convert and quantized box at once"},
    {"staging rounds", f_rounds, AS_COUNT,
     "rounds the staged boxes take under the budget"},
    {"memory needed", f_memory, AS_BYTES,
     "parameters + staging, against --device-memory"},
    {"bytes needed", f_needed, AS_BYTES,
     "what its copies read, each byte once"},
    {"bytes on the wire", f_wire, AS_BYTES,
     "what its plan reads (above needed: staged reads)"},
    {"descriptors", f_descriptors, AS_COUNT,
     "one-sided reads its plan issues"},
    {"sources", f_sources, AS_COUNT, "trainer ranks it reads from"},
    {"planning time", f_plan, AS_SECONDS, "building its plan, one thread"},
    {"estimated transfer", f_est, AS_SECONDS,
     "the planner's cost model (0: not estimated)"},
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* min, median (the upper one of an even count) and max over the ranks. */
static int spread(const sim_t *s, field_fn get, double out[3])
{
    size_t n = (size_t)s->infer.world;
    double *v = malloc((n + 1) * sizeof(double));
    if (v == NULL || n == 0) {
        free(v);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = get(s, &s->recv[i]);
    qsort(v, n, sizeof(double), cmp_double);
    out[0] = v[0];
    out[1] = v[n / 2];
    out[2] = v[n - 1];
    free(v);
    return 1;
}

/* 10,489,137: counts in the millions read at a glance. */
static const char *group_digits(char *buf, size_t len, uint64_t n)
{
    char digits[32];
    int nd = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)n);
    size_t at = 0;
    for (int i = 0; i < nd && at + 2 < len; i++) {
        if (i > 0 && (nd - i) % 3 == 0)
            buf[at++] = ',';
        buf[at++] = digits[i];
    }
    buf[at] = '\0';
    return buf;
}

static const char *format_value(char *buf, size_t len, double v, int unit)
{
    if (unit == AS_BYTES)
        return rs_format_bytes(buf, len, (uint64_t)v);
    if (unit == AS_SECONDS)
        return rs_format_seconds(buf, len, v);
    return group_digits(buf, len, (uint64_t)v);
}

static void print_table(const sim_t *s)
{
    char cell[3][RS_UNITS_TEXT_MAX];
    printf("\n  %-22s %10s %10s %10s\n", "per inference rank", "min",
           "median", "max");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        double v[3];
        if (!spread(s, rows[i].get, v))
            return;
        for (int k = 0; k < 3; k++)
            format_value(cell[k], sizeof(cell[k]), v[k], rows[i].unit);
        printf("  %-22s %10s %10s %10s   %s\n", rows[i].label, cell[0],
               cell[1], cell[2], rows[i].meaning);
    }
}

/* ---- the header: model, checkpoint, layouts ------------------------------ */

/* 494 million, 1.03 trillion: the count a reader compares with a model card. */
static const char *short_count(char *buf, size_t len, uint64_t n)
{
    static const char *const names[] = {"thousand", "million", "billion",
                                        "trillion"};
    double v = (double)n;
    int u = -1;
    while (v >= 1000 && u < 3) {
        v /= 1000;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%llu", (unsigned long long)n);
    else
        snprintf(buf, len, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s"
                                                        : "%.0f %s",
                 v, names[u]);
    return buf;
}

static void print_checkpoint(const sim_t *s)
{
    const rs_model_quant_t *q = rs_model_quantization(s->model);
    const char *dtype = rs_dtype_name(rs_model_config(s->model)->dtype);
    if (q == NULL) {
        printf("  checkpoint             %s weights (no quantization_config)\n",
               dtype);
        return;
    }
    printf("  checkpoint             %s %s weights", q->method_name, q->fmt);
    if (q->weight_block[0] > 0)
        printf(", %lldx%lld scale blocks", (long long)q->weight_block[0],
               (long long)q->weight_block[1]);
    else
        printf(", a scale per tensor");
    printf(", %s activations (quantization_config)\n", q->activation_scheme);
    if (s->fp8 != 0)
        printf("                         the inference ranks load FP8 weights "
               "and scales, quantized\n                         from the "
               "trainers' %s weights (torch_dtype)\n", dtype);
}

static void print_header(const sim_args_t *a, const sim_t *s)
{
    char b1[RS_UNITS_TEXT_MAX], n1[64];
    uint64_t params = rs_model_num_params(s->model);
    printf("reshard simulate: %s (%s)\n", rs_model_config(s->model)->model_type,
           a->model);
    printf("  model                  %llu parameters (%s), %s\n",
           (unsigned long long)params, short_count(n1, sizeof(n1), params),
           rs_format_bytes(b1, sizeof(b1), rs_model_num_bytes(s->model)));
    print_checkpoint(s);
    printf("  trainer ranks          %lld (%s)\n", (long long)s->train.world,
           a->train);
    printf("  inference ranks        %lld (%s)\n", (long long)s->infer.world,
           a->infer);
    printf("  planning               %s in all, one rank after another\n",
           rs_format_seconds(b1, sizeof(b1), s->plan_seconds));
}

/* ---- trainers and the counts that need a meaning -------------------------- */

static void print_trainers(const sim_t *s, const sim_totals_t *t)
{
    char b1[RS_UNITS_TEXT_MAX], b2[RS_UNITS_TEXT_MAX];
    uint64_t fan_max = 0, fan_sum = 0, fan_n = 0;
    for (size_t k = 0; k < s->nsess; k++) {
        if (s->fan_out[k] == 0)
            continue;
        fan_n++;
        fan_sum += s->fan_out[k];
        fan_max = s->fan_out[k] > fan_max ? s->fan_out[k] : fan_max;
    }
    printf("\n  receivers per trainer  mean %.2f, max %llu (inference ranks "
           "reading from one trainer rank)\n",
           fan_n ? (double)fan_sum / (double)fan_n : 0.0,
           (unsigned long long)fan_max);
    printf("  bytes served           max %s, mean %s per trainer rank "
           "(imbalance %.3f: max / mean)\n",
           rs_format_bytes(b1, sizeof(b1), t->max_served),
           rs_format_bytes(b2, sizeof(b2), (uint64_t)t->mean_served),
           t->imbalance);
}

static void print_counts(const sim_args_t *a, const sim_t *s,
                         const sim_totals_t *t)
{
    char b1[RS_UNITS_TEXT_MAX], rate[RS_UNITS_TEXT_MAX];
    printf("  redundant bytes        %s (destination bytes written by more "
           "than one read; 0: each once)\n",
           rs_format_bytes(b1, sizeof(b1), s->redundant));
    printf("  extra wire bytes       %s (read beyond the bytes installed, all "
           "ranks: staged reads trading\n                         bytes for "
           "descriptors)\n", rs_format_bytes(b1, sizeof(b1), s->extra_wire));
    printf("  unbounded sources      %llu (copies of a source needing more "
           "runs than --max-segments-per-copy\n                         "
           "that could not be pulled whole: exact, but descriptor-heavy; "
           "summed over ranks)\n", (unsigned long long)t->unbounded);
    printf("  vocab padding          %s (rows vLLM pads its vocabulary "
           "shards with; no trainer holds them\n                         "
           "and nothing writes them; all ranks)\n",
           rs_format_bytes(b1, sizeof(b1), t->padding));
    printf("  wire lower bound       %s at %s per rank (--nic-gbps %g: the "
           "busiest NIC's bytes at line rate)\n",
           rs_format_seconds(b1, sizeof(b1), t->wire_bound),
           rs_format_rate(rate, sizeof(rate), a->nic_gbps * 1e9 / 8),
           a->nic_gbps);
    if (t->est_max > 0)
        printf("  estimated time         %s (the slowest rank's plan, by the "
               "planner's cost model)\n",
               rs_format_seconds(b1, sizeof(b1), t->est_max));
    else
        printf("  estimated time         not estimated (the planner's cost "
               "model gave 0)\n");
}

/* ---- memory and coverage ------------------------------------------------- */

static const receiver_t *largest(const sim_t *s)
{
    const receiver_t *w = &s->recv[0];
    for (int64_t r = 1; r < s->infer.world; r++)
        if (rs_sim_memory(&s->recv[r]) > rs_sim_memory(w))
            w = &s->recv[r];
    return w;
}

/* "parameters + staging = total" of one rank. */
static void put_memory(FILE *out, const receiver_t *r)
{
    char p[RS_UNITS_TEXT_MAX], g[RS_UNITS_TEXT_MAX], m[RS_UNITS_TEXT_MAX];
    fprintf(out, "%s = %s parameters + %s staging",
            rs_format_bytes(m, sizeof(m), rs_sim_memory(r)),
            rs_format_bytes(p, sizeof(p), r->param_bytes),
            rs_format_bytes(g, sizeof(g), r->staging_peak));
}

/* Ranks as ranges ("0-3, 7"), at most `max` ranges then "...". */
static void put_ranks(FILE *out, const sim_t *s, int max)
{
    int printed = 0;
    for (int64_t r = 0; r < s->infer.world; r++) {
        if (rs_sim_fits(s, &s->recv[r]))
            continue;
        int64_t end = r;
        while (end + 1 < s->infer.world && !rs_sim_fits(s, &s->recv[end + 1]))
            end++;
        if (printed == max) {
            fputs(", ...", out);
            return;
        }
        fprintf(out, printed ? ", %lld" : "%lld", (long long)r);
        if (end > r)
            fprintf(out, "-%lld", (long long)end);
        printed++;
        r = end;
    }
}

static void print_memory(const sim_t *s)
{
    char d[RS_UNITS_TEXT_MAX], o[RS_UNITS_TEXT_MAX];
    const receiver_t *w = largest(s);
    rs_format_bytes(d, sizeof(d), s->device_bytes);
    int64_t unfit = rs_sim_num_unfit(s);
    if (unfit == 0) {
        printf("  memory                 every rank fits in %s (largest: rank "
               "%lld with ", d, (long long)w->rank);
        put_memory(stdout, w);
        printf(")\n");
        return;
    }
    printf("  memory                 FAILED: %lld of %lld ranks do not fit in "
           "%s: %s ", (long long)unfit, (long long)s->infer.world, d,
           unfit == 1 ? "rank" : "ranks");
    put_ranks(stdout, s, 8);
    printf("\n                         largest: rank %lld with ",
           (long long)w->rank);
    put_memory(stdout, w);
    printf(", %s over\n", rs_format_bytes(o, sizeof(o),
                                          rs_sim_memory(w) - s->device_bytes));
}

void rs_sim_note_unfit(const sim_t *s)
{
    char d[RS_UNITS_TEXT_MAX], o[RS_UNITS_TEXT_MAX];
    int64_t unfit = rs_sim_num_unfit(s);
    if (unfit == 0)
        return;
    const receiver_t *w = largest(s);
    fprintf(stderr, "reshard simulate: %lld of %lld inference ranks do not fit "
            "in %s of device memory (--device-memory): %s ",
            (long long)unfit, (long long)s->infer.world,
            rs_format_bytes(d, sizeof(d), s->device_bytes),
            unfit == 1 ? "rank" : "ranks");
    put_ranks(stderr, s, 8);
    fprintf(stderr, "; the largest is rank %lld with ", (long long)w->rank);
    put_memory(stderr, w);
    fprintf(stderr, ", %s over\n", rs_format_bytes(o, sizeof(o),
                                                   rs_sim_memory(w) -
                                                   s->device_bytes));
}

void rs_sim_print_summary(const sim_args_t *a, const sim_t *s)
{
    sim_totals_t t = rs_sim_totals(a, s);
    print_header(a, s);
    print_table(s);
    print_trainers(s, &t);
    print_counts(a, s, &t);
    rs_sim_print_delta(a, s);
    print_memory(s);
    rs_sim_print_fp8(a, s);
    if (s->coverage_ok)
        printf("  coverage               every rank complete (vocab padding "
               "excepted)\n");
    else
        printf("  coverage               FAILED: %s\n", s->first_problem);
}
