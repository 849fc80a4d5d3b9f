/* `reshard simulate` for FP8 targets: the FP8 weights and scales each
 * inference rank holds, and the refit with publisher-side quantization
 * (trainer tables carrying FP8 copies of their whole blocks, pulled as
 * FP8 plus scales) against receiver-side quantization only (bf16 tables:
 * every block's bf16 box pulled into staging and quantized there), in the
 * human summary and the reshard.simulate.v1 JSON (docs/formats.md). */
#include <stdio.h>
#include <string.h>

#include "simulate.h"

uint64_t rs_sim_memory_bf16(const receiver_t *r)
{
    return r->param_bytes + r->receiver_only.staging_peak;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* Per path: what every rank's plan moved, the busiest NIC. */
static void path_totals(const sim_args_t *a, const sim_t *s, int bf16,
                        const uint64_t *served, sim_fp8_path_t *t)
{
    memset(t, 0, sizeof(*t));
    t->complete = 1;
    for (int64_t i = 0; i < s->infer.world; i++) {
        const receiver_t *r = &s->recv[i];
        const sim_path_t *p = bf16 ? &r->receiver_only : &r->with_pub;
        t->max_in = max_u64(t->max_in, p->bytes);
        t->bytes += p->bytes;
        t->est_max = p->est_seconds > t->est_max ? p->est_seconds : t->est_max;
        t->max_memory = max_u64(t->max_memory, bf16 ? rs_sim_memory_bf16(r)
                                                    : rs_sim_memory(r));
        t->publisher += p->publisher;
        t->receiver += p->receiver;
        t->complete &= p->complete;
    }
    for (size_t k = 0; served != NULL && k < s->nsess; k++)
        t->max_served = max_u64(t->max_served, served[k]);
    t->wire_bound = (double)max_u64(t->max_in, t->max_served) * 8 /
                    (a->nic_gbps * 1e9);
}

sim_fp8_totals_t rs_sim_fp8_totals(const sim_args_t *a, const sim_t *s)
{
    sim_fp8_totals_t t;
    memset(&t, 0, sizeof(t));
    for (int64_t i = 0; i < s->infer.world; i++) {
        const receiver_t *r = &s->recv[i];
        t.fp8_bytes += r->fp8_bytes;
        t.scale_bytes += r->scale_bytes;
        t.fp8_max = max_u64(t.fp8_max, r->fp8_bytes);
        t.scale_max = max_u64(t.scale_max, r->scale_bytes);
    }
    /* With --no-publisher-quant the one plan is the receiver-only one. */
    path_totals(a, s, 0, s->served, s->fp8 == 2 ? &t.pub : &t.bf16);
    if (s->fp8 == 2)
        path_totals(a, s, 1, s->served_bf16, &t.bf16);
    return t;
}

static void print_path_row(const char *label, const sim_fp8_path_t *p,
                           const char *meaning)
{
    char b[4][RS_UNITS_TEXT_MAX];
    printf("  %-22s %10s %10s %10s %10s   %llu publisher, %llu receiver%s\n",
           label, rs_format_bytes(b[0], sizeof(b[0]), p->max_in),
           rs_format_seconds(b[1], sizeof(b[1]), p->wire_bound),
           rs_format_seconds(b[2], sizeof(b[2]), p->est_max),
           rs_format_bytes(b[3], sizeof(b[3]), p->max_memory),
           (unsigned long long)p->publisher, (unsigned long long)p->receiver,
           meaning);
}

void rs_sim_print_fp8(const sim_args_t *a, const sim_t *s)
{
    char b1[RS_UNITS_TEXT_MAX], b2[RS_UNITS_TEXT_MAX];
    if (s->fp8 == 0)
        return;
    sim_fp8_totals_t t = rs_sim_fp8_totals(a, s);
    printf("\n  FP8 refit              %s: FP8 weights %s and scales %s on "
           "the largest rank\n", s->fp8_spec,
           rs_format_bytes(b1, sizeof(b1), t.fp8_max),
           rs_format_bytes(b2, sizeof(b2), t.scale_max));
    printf("  %-22s %10s %10s %10s %10s   %s\n", "quantized", "wire max",
           "bound", "estimate", "memory", "quantized copies by path (all "
           "ranks)");
    if (s->fp8 == 2)
        print_path_row("by the publishers", &t.pub, "");
    print_path_row("by the receivers", &t.bf16,
                   s->fp8 == 2 ? " (bf16 tables)" : " (--no-publisher-quant)");
    printf("                         wire max: the busiest receiver's bytes; "
           "bound: the busiest NIC at\n                         --nic-gbps; "
           "estimate: the slowest plan; memory: the largest rank's\n"
           "                         parameters + staging (the receiver "
           "path stages bf16 block-rounded boxes)\n");
}

/* The "fp8" object's per-path member. */
static void put_path_json(const char *key, const sim_fp8_path_t *p)
{
    printf("\"%s\": {\"wire_lower_bound_s\": %.6f, \"est_seconds\": %.9f, "
           "\"max_receiver_bytes\": %llu, \"max_served_bytes\": %llu, "
           "\"bytes\": %llu, \"max_memory_bytes\": %llu, "
           "\"publisher_copies\": %llu, \"receiver_copies\": %llu, "
           "\"complete\": %s}", key, p->wire_bound, p->est_max,
           (unsigned long long)p->max_in, (unsigned long long)p->max_served,
           (unsigned long long)p->bytes, (unsigned long long)p->max_memory,
           (unsigned long long)p->publisher, (unsigned long long)p->receiver,
           p->complete ? "true" : "false");
}

void rs_sim_print_fp8_json(const sim_args_t *a, const sim_t *s)
{
    if (s->fp8 == 0) {
        printf("null");
        return;
    }
    sim_fp8_totals_t t = rs_sim_fp8_totals(a, s);
    printf("{\"spec\": \"%s\", \"fp8_bytes\": %llu, \"scale_bytes\": %llu, "
           "\"max_fp8_bytes\": %llu, \"max_scale_bytes\": %llu,\n  ",
           s->fp8_spec, (unsigned long long)t.fp8_bytes,
           (unsigned long long)t.scale_bytes, (unsigned long long)t.fp8_max,
           (unsigned long long)t.scale_max);
    if (s->fp8 == 2)
        put_path_json("publisher_quant", &t.pub);
    else
        printf("\"publisher_quant\": null");
    printf(",\n  ");
    put_path_json("receiver_quant", &t.bf16);
    printf("}");
}

/* A receiver's FP8 members (a leading comma; nothing for other targets). */
void rs_sim_print_fp8_receiver(const sim_t *s, const receiver_t *x)
{
    if (s->fp8 == 0)
        return;
    const sim_path_t *p = &x->with_pub;
    printf(",\n   \"fp8_bytes\": %llu, \"scale_bytes\": %llu, "
           "\"publisher_copies\": %llu, \"receiver_copies\": %llu",
           (unsigned long long)x->fp8_bytes,
           (unsigned long long)x->scale_bytes,
           (unsigned long long)p->publisher, (unsigned long long)p->receiver);
    if (s->fp8 != 2)
        return;
    const sim_path_t *q = &x->receiver_only;
    printf(",\n   \"receiver_quant\": {\"bytes\": %llu, \"est_seconds\": %.9f, "
           "\"staging_bytes\": %llu, \"memory_bytes\": %llu, "
           "\"receiver_copies\": %llu, \"staging_peak_bytes\": %llu}",
           (unsigned long long)q->bytes, q->est_seconds,
           (unsigned long long)q->staging_bytes,
           (unsigned long long)rs_sim_memory_bf16(x),
           (unsigned long long)q->receiver,
           (unsigned long long)q->staging_peak);
}
