/* `reshard simulate --changed-fraction F`: the refit of a receiver that
 * holds the previous version, reading each run of its plan either as a
 * delta against what it holds or in full, whichever the cost model finds
 * faster (docs/simulator.md#deltas). The expected size of a run's delta
 * and the choice come from libreshard_layout (reshard_layout/delta.h), the
 * codec's own rule; this file maps each run to its shard, element size and
 * changed share, sums per rank and per trainer, and prints the bound. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard_layout/delta.h"
#include "simulate.h"

enum { CLS_BF16 = 0, CLS_CODES, CLS_SCALES, NCLS };

typedef struct sim_delta {
    sim_shares_t shares;
    rs_delta_estimator_h est[NCLS][3]; /* by class, element size 1, 2, 4 */
    double *served;                    /* bytes per trainer session */
    size_t nserved;
} sim_delta_t;

/* The measured changed shares (docs/delta.md, changed elements per step,
 * means over steps 9 to 16 at lr 1e-6, 1e-5, 1e-4), bounded by nothing
 * changed and everything changed: bf16, FP8 codes, FP8 scales. */
static const double measured[][3] = {
    {0, 0, 0},
    {0.0213, 0.00199, 0.00082},
    {0.130, 0.0145, 0.0098},
    {0.462, 0.0768, 0.0732},
    {1, 1, 1},
};

/* The measured steps of the changed elements at the same rows
 * (docs/delta.md, "Steps of the changed elements"): per bf16, FP8 codes,
 * FP8 scales, the share of changes by +-1 as an integer of the element's
 * bytes, and of the other changes the share whose step passes a signed
 * byte. Nothing changed takes the lowest rate's; everything changed is
 * taken as every element rewritten (no step of one). */
static const double measured_steps[][6] = {
    {0.8869, 0.0116, 0.9367, 0.0217, 0, 1},
    {0.8869, 0.0116, 0.9367, 0.0217, 0, 1},
    {0.8195, 0.0116, 0.8996, 0.0020, 0, 1},
    {0.6159, 0.0122, 0.8492, 0.0013, 0, 1},
    {0, 1, 0, 1, 0, 1},
};

/* Where bf16 share f falls between the measured rows: row *i_p (> 0)
 * and the weight of it against row *i_p - 1. */
static double row_at(double f, size_t *i_p)
{
    const size_t n = sizeof(measured) / sizeof(measured[0]);
    for (size_t i = 1; i < n; i++) {
        if (f <= measured[i][0]) {
            *i_p = i;
            return (f - measured[i - 1][0]) /
                   (measured[i][0] - measured[i - 1][0]);
        }
    }
    *i_p = n - 1;
    return 1;
}

/* a, then b, weighted w against it. */
static double lerp(double a, double b, double w) { return a + (b - a) * w; }

/* Column col of the measured table at bf16 share f, linear between the
 * measured rows. */
static double from_bf16(double f, int col)
{
    size_t i;
    const double w = row_at(f, &i);
    return lerp(measured[i - 1][col], measured[i][col], w);
}

/* Column col of the measured steps at bf16 share f, likewise. */
static double steps_at(double f, int col)
{
    size_t i;
    const double w = row_at(f, &i);
    return lerp(measured_steps[i - 1][col], measured_steps[i][col], w);
}

sim_shares_t rs_sim_delta_shares(const sim_args_t *a)
{
    sim_shares_t sh;
    sh.bf16 = a->changed;
    if (a->changed_fp8 >= 0) {
        sh.codes = sh.scales = a->changed_fp8;
    } else {
        sh.codes = from_bf16(a->changed, 1);
        sh.scales = from_bf16(a->changed, 2);
    }
    for (int c = 0; c < 3; c++) {
        sh.step1[c] = steps_at(a->changed, 2 * c);
        sh.escape[c] = steps_at(a->changed, 2 * c + 1);
    }
    return sh;
}

static int esize_slot(size_t esize)
{
    return esize == 1 ? 0 : esize == 2 ? 1 : esize == 4 ? 2 : -1;
}

int rs_sim_delta_init(const sim_args_t *a, sim_t *s)
{
    if (a->delta <= 0 || a->changed < 0)
        return RS_CLI_OK;
    sim_delta_t *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return rs_cli_usage_error("simulate", "%s", "out of memory");
    s->delta = d;
    d->shares = rs_sim_delta_shares(a);
    const double share[NCLS] = {d->shares.bf16, d->shares.codes,
                                d->shares.scales};
    static const uint32_t esizes[3] = {1, 2, 4};
    for (int c = 0; c < NCLS; c++) {
        for (int k = 0; k < 3; k++) {
            rs_diag_t diag;
            rs_diag_clear(&diag);
            rs_status_t st = rs_delta_estimator_create(esizes[k], share[c],
                                                       &diag, &d->est[c][k]);
            if (st == RS_OK)
                st = rs_delta_estimator_set_steps(d->est[c][k],
                                                  d->shares.step1[c],
                                                  d->shares.escape[c], &diag);
            if (st != RS_OK)
                return rs_cli_input_error("simulate", &diag, st,
                                          "--changed-fraction");
        }
    }
    return RS_CLI_OK;
}

void rs_sim_delta_free(sim_t *s)
{
    sim_delta_t *d = s->delta;
    if (d == NULL)
        return;
    for (int c = 0; c < NCLS; c++)
        for (int k = 0; k < 3; k++)
            rs_delta_estimator_destroy(d->est[c][k]);
    free(d->served);
    free(d);
    s->delta = NULL;
}

/* The shard of a plan that holds byte addr of session (shards are sorted
 * by session, then address); NULL when none does. */
static const rs_shard_ref_t *shard_of(const rs_shard_ref_t *sh, size_t n,
                                      uint32_t session, uint64_t addr)
{
    size_t lo = 0, hi = n; /* the first shard past (session, addr) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sh[mid].session < session ||
            (sh[mid].session == session && sh[mid].addr <= addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const rs_shard_ref_t *x = &sh[lo - 1];
    return x->session == session && addr - x->addr < x->nbytes ? x : NULL;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Which share a shard's elements change at: the scales and codes a
 * publisher quantizes, or the bf16 (and any other) weights. */
static int share_class(rs_dtype_t dtype, const rs_shard_ref_t *shard)
{
    if (shard->tensor != NULL && ends_with(shard->tensor, "#scale"))
        return CLS_SCALES;
    if (dtype == RS_DTYPE_F8E4M3 || dtype == RS_DTYPE_F8E5M2)
        return CLS_CODES;
    return CLS_BF16;
}

typedef struct walk {
    const sim_args_t *a;
    sim_delta_t *d;
    const rs_shard_ref_t *shards;
    size_t nshards;
    receiver_t *r;
} walk_t;

/* One run: the delta's expected bytes if its shard can serve one, the
 * choice, and the sums. */
static void one_run(walk_t *w, const rs_segment_t *g, rs_dtype_t dtype)
{
    const size_t es = rs_dtype_size(dtype);
    const int slot = esize_slot(es);
    const rs_shard_ref_t *sh =
        shard_of(w->shards, w->nshards, g->session, g->src_addr);
    double bytes = (double)g->nbytes, dbytes = 0;
    w->r->runs++;
    if (slot >= 0 && sh != NULL && g->nbytes > 0 &&
        g->nbytes <= sh->addr + sh->nbytes - g->src_addr &&
        (g->src_addr - sh->addr) % es == 0 && g->nbytes % es == 0) {
        const uint64_t a = (g->src_addr - sh->addr) / es;
        dbytes = rs_delta_estimate_range(
            w->d->est[share_class(dtype, sh)][slot], sh->nbytes / es, a,
            a + g->nbytes / es);
    }
    if (dbytes > 0 && rs_delta_pays(g->nbytes, dbytes, w->a->nic_gbps,
                                    w->a->descriptor_ns)) {
        bytes = dbytes;
        w->r->delta_bytes += dbytes;
        w->r->delta_runs++;
        w->r->delta_descriptors += rs_delta_range_reads();
    } else {
        w->r->delta_descriptors++;
    }
    w->r->delta_wire += bytes;
    if (g->session < w->d->nserved)
        w->d->served[g->session] += bytes;
}

static void runs(walk_t *w, const rs_segment_t *g, size_t n, rs_dtype_t dtype)
{
    for (size_t i = 0; i < n; i++)
        one_run(w, &g[i], dtype);
}

void rs_sim_delta_rank(const sim_args_t *a, sim_t *s, rs_plan_h plan,
                       receiver_t *r)
{
    sim_delta_t *d = s->delta;
    if (d == NULL)
        return;
    if (d->served == NULL && s->nsess > 0) {
        d->served = calloc(s->nsess, sizeof(double));
        d->nserved = d->served != NULL ? s->nsess : 0;
    }
    walk_t w = {a, d, NULL, 0, r};
    w.shards = rs_plan_shards(plan, &w.nshards);
    rs_capture_h cap = rs_plan_capture(plan);
    size_t n;
    const rs_segment_t *seg = rs_plan_segments(plan, &n);
    for (size_t i = 0; i < n; i++) {
        rs_param_info_t p;
        rs_capture_param(cap, seg[i].param, &p);
        one_run(&w, &seg[i], p.dtype);
    }
    const rs_convert_t *cv = rs_plan_converts(plan, &n);
    for (size_t i = 0; i < n; i++)
        runs(&w, cv[i].segments, cv[i].nsegments, cv[i].src_dtype);
    const rs_staged_read_t *sr = rs_plan_staged_reads(plan, &n);
    for (size_t i = 0; i < n; i++)
        runs(&w, sr[i].segments, sr[i].nsegments, sr[i].dtype);
    const rs_quantized_t *q = rs_plan_quantized(plan, &n);
    for (size_t i = 0; i < n; i++)
        if (q[i].path == RS_QUANT_PATH_RECEIVER)
            runs(&w, q[i].segments, q[i].nsegments, q[i].src_dtype);
}

int rs_sim_delta_totals(const sim_args_t *a, const sim_t *s,
                        sim_delta_totals_t *t)
{
    memset(t, 0, sizeof(*t));
    const sim_delta_t *d = s->delta;
    if (d == NULL)
        return 0;
    for (int64_t i = 0; i < s->infer.world; i++) {
        const receiver_t *r = &s->recv[i];
        t->max_in = r->delta_wire > t->max_in ? r->delta_wire : t->max_in;
        t->delta_bytes += r->delta_bytes;
        t->wire += r->delta_wire;
        t->full_bytes += r->bytes;
        t->runs += r->runs;
        t->delta_runs += r->delta_runs;
    }
    for (size_t k = 0; k < d->nserved; k++)
        t->max_served = d->served[k] > t->max_served ? d->served[k]
                                                      : t->max_served;
    const double worst = t->max_in > t->max_served ? t->max_in : t->max_served;
    t->wire_bound = worst * 8 / (a->nic_gbps * 1e9);
    return 1;
}

void rs_sim_print_delta(const sim_args_t *a, const sim_t *s)
{
    sim_delta_totals_t t;
    if (!rs_sim_delta_totals(a, s, &t))
        return;
    const sim_shares_t *sh = &s->delta->shares;
    char b1[RS_UNITS_TEXT_MAX], b2[RS_UNITS_TEXT_MAX], b3[RS_UNITS_TEXT_MAX];
    printf("  with deltas            changed share %.4g %% of bf16 elements",
           sh->bf16 * 100);
    if (s->fp8 != 0)
        printf(", %.4g %% of FP8 codes, %.4g %% of scales", sh->codes * 100,
               sh->scales * 100);
    printf("\n                         (a receiver holding the previous "
           "version; each run read as a delta\n                         or "
           "in full, whichever the cost model finds faster)\n");
    printf("  wire bound, deltas     %s (full: the bound above), busiest "
           "NIC %s\n",
           rs_format_seconds(b1, sizeof(b1), t.wire_bound),
           rs_format_bytes(b2, sizeof(b2),
                           (uint64_t)llround(t.max_in > t.max_served
                                                 ? t.max_in : t.max_served)));
    printf("  delta bytes            %s of %s on the wire, all ranks (%s "
           "without deltas);\n                         %llu of %llu runs "
           "take a delta\n",
           rs_format_bytes(b1, sizeof(b1), (uint64_t)llround(t.delta_bytes)),
           rs_format_bytes(b2, sizeof(b2), (uint64_t)llround(t.wire)),
           rs_format_bytes(b3, sizeof(b3), t.full_bytes),
           (unsigned long long)t.delta_runs, (unsigned long long)t.runs);
}

void rs_sim_print_delta_json(const sim_args_t *a, const sim_t *s)
{
    sim_delta_totals_t t;
    if (!rs_sim_delta_totals(a, s, &t)) {
        printf("null");
        return;
    }
    const sim_shares_t *sh = &s->delta->shares;
    const sim_totals_t full = rs_sim_totals(a, s);
    printf("{\"changed_fraction\": %.9g, \"changed_fraction_fp8_codes\": "
           "%.9g, \"changed_fraction_fp8_scales\": %.9g, "
           "\"wire_bound_seconds\": %.9f, \"full_wire_bound_seconds\": %.9f, "
           "\"max_receiver_bytes\": %llu, "
           "\"max_served_bytes\": %llu, \"delta_bytes\": %llu, "
           "\"wire_bytes\": %llu, \"full_wire_bytes\": %llu, \"runs\": %llu, "
           "\"delta_runs\": %llu}",
           sh->bf16, sh->codes, sh->scales, t.wire_bound, full.wire_bound,
           (unsigned long long)llround(t.max_in),
           (unsigned long long)llround(t.max_served),
           (unsigned long long)llround(t.delta_bytes),
           (unsigned long long)llround(t.wire),
           (unsigned long long)t.full_bytes, (unsigned long long)t.runs,
           (unsigned long long)t.delta_runs);
}
