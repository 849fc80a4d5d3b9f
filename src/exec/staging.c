/* The staging layout of a plan under a budget: every staged box (staged
 * reads and full pulls, receiver-path quantized boxes, converts, in plan
 * order) gets a round and an offset in one shared buffer. Boxes are packed
 * greedily in plan order, so a round is a run of consecutive boxes and the
 * rounds replay in the order a serial run does; the buffer is as large as
 * the largest round. A plan whose staging fits the budget is one round,
 * laid out as before budgets existed. Computed from the plan alone, so the
 * simulator and a dry run report what a run will hold without holding it. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "core/params.h"
#include "exec/exec_impl.h"
#include "reshard/units.h"

#define PAGE ((uint64_t)4096)

static uint64_t whole_pages(uint64_t n) { return (n + PAGE - 1) & ~(PAGE - 1); }

/* The plan's quantized records and which of them the executor stages. */
typedef struct quant {
    const rs_quantized_t *q;
    size_t *at; /* indices into q of the staged ones, in plan order */
} quant_t;

/* Box k's bytes, in whole pages (quantized boxes: source, FP8 and scales). */
static rs_status_t item_bytes(rs_plan_h plan, const rs__staging_layout_t *l,
                              size_t k, const quant_t *quant,
                              uint64_t *bytes_p, rs_diag_t *diag)
{
    size_t n;
    if (k < l->nfp) {
        *bytes_p = whole_pages(rs_plan_staged_reads(plan, &n)[k].staging_bytes);
        return RS_OK;
    }
    if (k < l->nfp + l->nquant)
        return rs__exec_quant_box_bytes(rs_plan_capture(plan),
                                        &quant->q[quant->at[k - l->nfp]],
                                        bytes_p, diag);
    *bytes_p = whole_pages(
        rs_plan_converts(plan, &n)[k - l->nfp - l->nquant].staging_bytes);
    return RS_OK;
}

/* "the staged read of copy 3 of 'w'": box k, for a refusal. */
static void name_item(rs_plan_h plan, const rs__staging_layout_t *l, size_t k,
                      const quant_t *quant, char *out, size_t cap)
{
    size_t n, copy = 0;
    const char *kind = "staged read";
    if (k < l->nfp) {
        const rs_staged_read_t *fp = &rs_plan_staged_reads(plan, &n)[k];
        copy = fp->ncopies > 0 ? fp->copies[0] : 0;
    } else if (k < l->nfp + l->nquant) {
        copy = quant->q[quant->at[k - l->nfp]].copy;
        kind = "receiver-side quantized box";
    } else {
        copy = rs_plan_converts(plan, &n)[k - l->nfp - l->nquant].copy;
        kind = "convert staging";
    }
    rs_copy_desc_t c;
    rs_capture_copy(rs_plan_capture(plan), copy, &c);
    snprintf(out, cap, "the %s of copy %zu of '%s' into '%s'", kind, copy,
             c.src, c.param);
}

static rs_status_t too_big(rs_plan_h plan, const rs__staging_layout_t *l,
                           size_t k, const quant_t *quant,
                           uint64_t bytes, uint64_t budget, rs_diag_t *diag)
{
    char what[RS_DIAG_MSG_MAX / 2], b[RS_UNITS_TEXT_MAX], g[RS_UNITS_TEXT_MAX];
    name_item(plan, l, k, quant, what, sizeof(what));
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "staging budget of %s "
                        "(%llu bytes) is below %s, %s (%llu bytes) staged "
                        "whole: raise the staging budget to at least %llu "
                        "bytes", rs_format_bytes(g, sizeof(g), budget),
                        (unsigned long long)budget, what,
                        rs_format_bytes(b, sizeof(b), bytes),
                        (unsigned long long)bytes, (unsigned long long)bytes);
}

/* Packs the boxes greedily in plan order into rounds of at most `budget`. */
static void pack(rs__staging_layout_t *l, const uint64_t *bytes,
                 uint64_t budget)
{
    uint64_t cur = 0;
    uint32_t round = 0;
    l->need.bytes = 0;
    for (size_t k = 0; k < l->nitems; k++) {
        if (cur > 0 && bytes[k] > budget - cur) {
            round++;
            cur = 0;
        }
        l->at[k] = cur;
        l->round[k] = round;
        cur += bytes[k];
        if (cur > l->need.bytes)
            l->need.bytes = cur;
    }
    l->need.rounds = l->nitems > 0 ? (uint64_t)round + 1 : 0;
}

/* Rounds in two halves of the budget, odd rounds in the second half, so
 * one round can be read while the one before is replayed: only when the
 * staging exceeds the budget and every box fits half of it. */
static void pack_overlapped(rs__staging_layout_t *l, const uint64_t *bytes)
{
    uint64_t half = l->need.budget / 2 / PAGE * PAGE;
    if (l->need.unbounded <= l->need.budget || l->need.largest > half ||
        half == 0)
        return;
    pack(l, bytes, half);
    if (l->need.rounds < 2) {
        pack(l, bytes, l->need.budget);
        return;
    }
    for (size_t k = 0; k < l->nitems; k++)
        if (l->round[k] % 2)
            l->at[k] += l->need.bytes;
    l->need.bytes *= 2;
    l->overlapped = 1;
}

static rs_status_t sizes(rs_plan_h plan, rs__staging_layout_t *l,
                         const quant_t *quant, uint64_t *bytes,
                         rs_diag_t *diag)
{
    for (size_t k = 0; k < l->nitems; k++) {
        rs_status_t st = item_bytes(plan, l, k, quant, &bytes[k], diag);
        if (st != RS_OK)
            return st;
        if (bytes[k] > UINT64_MAX - l->need.unbounded)
            return rs__diag_set(diag, RS_ERR_INPUT, "staging overflows "
                                "64 bits");
        l->need.unbounded += bytes[k];
        if (bytes[k] > l->need.largest)
            l->need.largest = bytes[k];
    }
    return RS_OK;
}

/* The budget applied: the default resolved; an explicit one checked. */
static rs_status_t resolve(rs_plan_h plan, rs__staging_layout_t *l,
                           const quant_t *quant, const uint64_t *bytes,
                           uint64_t budget, rs_diag_t *diag)
{
    if (budget == 0) {
        l->need.budget = l->need.largest > RS_EXEC_DEFAULT_STAGING_BUDGET
                             ? l->need.largest
                             : RS_EXEC_DEFAULT_STAGING_BUDGET;
        return RS_OK;
    }
    l->need.budget = budget;
    for (size_t k = 0; k < l->nitems; k++)
        if (bytes[k] > budget)
            return too_big(plan, l, k, quant, bytes[k], budget, diag);
    return RS_OK;
}

rs_status_t rs__staging_layout(rs_plan_h plan, uint64_t budget,
                               int overlap, rs_diag_t *diag,
                               rs__staging_layout_t *l)
{
    size_t nq;
    quant_t quant = {rs_plan_quantized(plan, &nq), NULL};
    memset(l, 0, sizeof(*l));
    rs_plan_staged_reads(plan, &l->nfp);
    rs_plan_converts(plan, &l->ncv);
    quant.at = calloc(nq + 1, sizeof(size_t));
    for (size_t i = 0; quant.at != NULL && i < nq; i++)
        if (rs__exec_quant_wanted(&quant.q[i]))
            quant.at[l->nquant++] = i;
    l->nitems = l->nfp + l->nquant + l->ncv;
    uint64_t *bytes = calloc(l->nitems + 1, sizeof(uint64_t));
    l->at = calloc(l->nitems + 1, sizeof(uint64_t));
    l->round = calloc(l->nitems + 1, sizeof(uint32_t));
    rs_status_t st = RS_OK;
    if (quant.at == NULL || bytes == NULL || l->at == NULL || l->round == NULL)
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    if (st == RS_OK)
        st = sizes(plan, l, &quant, bytes, diag);
    if (st == RS_OK)
        st = resolve(plan, l, &quant, bytes, budget, diag);
    if (st == RS_OK)
        pack(l, bytes, l->need.budget);
    if (st == RS_OK && overlap)
        pack_overlapped(l, bytes);
    free(quant.at);
    free(bytes);
    if (st != RS_OK)
        rs__staging_layout_free(l);
    return st;
}

void rs__staging_layout_free(rs__staging_layout_t *l)
{
    free(l->at);
    free(l->round);
    l->at = NULL;
    l->round = NULL;
}

rs_status_t rs_exec_staging_need(rs_plan_h plan, const rs_exec_params_t *params,
                                 rs_diag_t *diag, rs_staging_need_t *need_p)
{
    rs__staging_layout_t l;
    rs_exec_params_t p;
    if (plan == NULL || need_p == NULL || rs_plan_capture(plan) == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    rs_exec_params_init(&p);
    if (params != NULL && rs__exec_params_take(params, diag, &p) != RS_OK)
        return RS_ERR_INVALID_ARG;
    rs_status_t st = rs__staging_layout(plan, p.staging_budget,
                                        rs__exec_pipelined(&p), diag, &l);
    if (st != RS_OK)
        return st;
    *need_p = l.need;
    rs__staging_layout_free(&l);
    return RS_OK;
}
