/* The waves of a pipelined run, built once at prepare: the plan's reads
 * in item order (full pulls, then converts, then direct segments), cut
 * after whole items into waves of about wave_bytes, each grouped by
 * session; and which shards each wave completes, so their digests are
 * checked while the next wave is on the wire. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "exec/exec_impl.h"

#define WAVE_MIN ((uint64_t)4 << 20)
#define WAVE_MAX ((uint64_t)256 << 20)
#define WAVES_AUTO 16

int rs__exec_pipelined(const rs_exec_params_t *p)
{
    return !p->serial && !p->phased && p->progress == NULL;
}

static uint64_t wave_target(const rs_exec_h x)
{
    if (x->params.wave_bytes > 0)
        return x->params.wave_bytes;
    uint64_t t = x->plan_bytes / WAVES_AUTO;
    return t < WAVE_MIN ? WAVE_MIN : t > WAVE_MAX ? WAVE_MAX : t;
}

/* Cutting state: where reads and waves go (the executor's arrays, held
 * here so the cut never reloads them through the executor), reads copied
 * so far and the running totals. */
typedef struct cutter {
    rs_exec_h x;
    rs_read_t *out;
    rs__wave_t *waves;
    size_t nwaves;
    uint64_t target, bytes;
    size_t nreads, replays, casts, quants;
} cutter_t;

static void close_wave(cutter_t *c)
{
    /* waves is non-NULL (checked after its malloc); the analyzer assumes a
     * read copied through c->out may have overwritten the cutter itself */
    c->waves[c->nwaves++] = // NOLINT(clang-analyzer-core.NullDereference)
        (rs__wave_t){c->nreads, c->replays, c->casts, 0, c->quants};
    c->bytes = 0;
}

static void add_item(cutter_t *c, size_t first, size_t n, size_t replays,
                     size_t casts)
{
    const rs_read_t *reads = c->x->reads;
    for (size_t i = first; i < first + n; i++) {
        c->out[c->nreads++] = reads[i];
        c->bytes += reads[i].nbytes;
    }
    c->replays += replays;
    c->casts += casts;
    if (c->bytes >= c->target)
        close_wave(c);
}

static void cut_waves(cutter_t *c)
{
    rs_exec_h x = c->x;
    size_t n, at = x->phase_end[0];
    const rs_staged_read_t *fp = rs_plan_staged_reads(x->plan, &n);
    for (size_t i = 0; i < n; at += fp[i].nsegments, i++)
        add_item(c, at, fp[i].nsegments, fp[i].ncopies, 0);
    /* quantized boxes: quantized in their wave; their two replays are
     * ordered, so they run at the end, after every box is quantized */
    for (size_t i = 0; i < rs__exec_quant_count(x); i++) {
        c->quants++;
        add_item(c, at, rs__exec_quant_nreads(x, i), 2, 0);
        at += rs__exec_quant_nreads(x, i);
    }
    const rs_convert_t *cv = rs_plan_converts(x->plan, &n);
    for (size_t i = 0; i < n; at += cv[i].nsegments, i++)
        add_item(c, at, cv[i].nsegments, 0, 1);
    for (size_t i = 0; i < x->phase_end[0]; i++)
        add_item(c, i, 1, 0, 0);
    const rs__wave_t *last = c->nwaves ? &c->waves[c->nwaves - 1] : NULL;
    if (last == NULL || last->reads_end < c->nreads ||
        last->replays_end < c->replays || last->casts_end < c->casts ||
        last->quants_end < c->quants)
        close_wave(c);
    x->nwaves = c->nwaves;
}

rs_status_t rs__exec_prepare_waves(rs_exec_h x, rs_diag_t *diag)
{
    size_t nfp, ncv;
    rs_plan_staged_reads(x->plan, &nfp);
    rs_plan_converts(x->plan, &ncv);
    x->nwaves = 0;
    if (!rs__exec_pipelined(&x->params))
        return RS_OK;
    x->wave_reads = malloc((x->nreads + 1) * sizeof(rs_read_t));
    x->waves = malloc((nfp + ncv + rs__exec_quant_count(x) + x->phase_end[0] +
                       1) * sizeof(rs__wave_t));
    if (x->wave_reads == NULL || x->waves == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    cutter_t c = {x, x->wave_reads, x->waves, 0, wave_target(x), 0, 0, 0, 0, 0};
    cut_waves(&c);
    size_t nsess = rs_plan_num_sessions(x->plan);
    for (size_t w = 0, begin = 0; w < x->nwaves; w++) {
        if (!rs__exec_group_reads(x->wave_reads, begin, x->waves[w].reads_end,
                                  nsess))
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
        begin = x->waves[w].reads_end;
    }
    if (x->nwaves < 2) /* nothing to overlap: a serial run */
        rs__exec_release_waves(x);
    return RS_OK;
}

/* The wave of every piece group's last piece, or nwaves (after every
 * wave) when a piece is late; -1 for groups not fully read. */
static long group_wave(const rs_exec_h x, size_t i, size_t end)
{
    if (x->bounded) /* rounds: where its staged pieces are (rounds.c) */
        return rs__exec_group_round(x, i, end);
    size_t ns;
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    const rs__piece_t *p = x->pieces;
    if (rs__pieces_covered(p, i, end) != sh[p[i].shard].nbytes)
        return -1;
    uint32_t w = 0;
    for (size_t k = i; k < end; k++) {
        if (p[k].late)
            return (long)x->nwaves;
        w = p[k].wave > w ? p[k].wave : w;
    }
    return (long)w;
}

/* verify_at: the fully read groups by completing wave (a counting sort),
 * and each wave's end into it. */
rs_status_t rs__exec_schedule_verify(rs_exec_h x, rs_diag_t *diag)
{
    if (x->nwaves == 0)
        return RS_OK;
    size_t *count = calloc(x->nwaves + 2, sizeof(size_t));
    x->verify_at = malloc((x->pieces_len + 1) * sizeof(size_t));
    if (count == NULL || x->verify_at == NULL) {
        free(count);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    size_t n = x->pieces_len;
    for (size_t i = 0; i < n; i = rs__piece_group_end(x->pieces, n, i)) {
        long w = group_wave(x, i, rs__piece_group_end(x->pieces, n, i));
        if (w >= 0)
            count[w + 1]++;
    }
    for (size_t w = 1; w <= x->nwaves + 1; w++)
        count[w] += count[w - 1];
    x->nverify = count[x->nwaves + 1];
    for (size_t w = 0; w < x->nwaves; w++)
        x->waves[w].verify_end = count[w + 1];
    for (size_t i = 0; i < n; i = rs__piece_group_end(x->pieces, n, i)) {
        long w = group_wave(x, i, rs__piece_group_end(x->pieces, n, i));
        if (w >= 0)
            x->verify_at[count[w]++] = i;
    }
    free(count);
    return RS_OK;
}

void rs__exec_release_waves(rs_exec_h x)
{
    free(x->wave_reads);
    free(x->wave_late);
    free(x->waves);
    free(x->verify_at);
    x->wave_reads = NULL;
    x->wave_late = NULL;
    x->waves = NULL;
    x->verify_at = NULL;
    x->nwaves = x->nverify = 0;
}
