/* The boxes one trainer rank holds under fsdp or megatron, and their packed
 * addresses: rank r's shards follow one another from (r + 1) << 44 in
 * manifest order, each starting on a 256-byte boundary; a cut-aligned
 * shard's sub-boxes follow one another from there, each on a 64-byte
 * boundary, as a publisher's arena stages them. */
#include <stdio.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "layout/trainer_impl.h"

#define RANK_SPAN ((uint64_t)1 << 44)
#define SHARD_ALIGN ((uint64_t)256)
/* A cut-aligned shard's sub-boxes each start a fresh 64-byte line, as the
 * publisher's arena slots do (src/refit/publisher_arena.c), so that runs the
 * planner could merge across sub-boxes here would be merged there too. */
#define SUB_BOX_ALIGN ((uint64_t)64)

/* One rank's coordinates and where its next shard goes. */
typedef struct walk {
    const rs__trainer_plan_t *plan;
    const rs_model_config_t *cfg;
    int64_t rank, tp_rank, dp_rank, pp_rank, ep_rank, etp_rank;
    char session[32];
    uint64_t cursor, limit;
    rs_shard_cb cb;
    void *ctx;
    rs_diag_t *diag;
} walk_t;

static void walk_init(walk_t *w, const rs__trainer_plan_t *plan, int64_t rank)
{
    const rs_layout_t *l = &plan->layout;
    memset(w, 0, sizeof(*w));
    w->plan = plan;
    w->cfg = rs_model_config(plan->model);
    w->rank = rank;
    if (l->kind == RS_LAYOUT_MEGATRON) {
        int64_t k; /* position in the stage's tp x dp plane */
        w->tp_rank = rank % l->tp;
        w->dp_rank = (rank / l->tp) % l->dp;
        w->pp_rank = rank / (l->tp * l->dp);
        k = w->tp_rank + l->tp * w->dp_rank;
        w->etp_rank = k % l->etp;
        w->ep_rank = (k / l->etp) % l->ep;
    }
    rs_layout_trainer_session(rank, w->session, sizeof(w->session));
    w->cursor = (uint64_t)(rank + 1) << 44;
    w->limit = w->cursor + RANK_SPAN;
}

/* Narrows dim `d` of the box to part `i` of `parts` equal parts. */
static rs_status_t split_equal(const walk_t *w, const rs_tensor_info_t *t,
                               int d, int64_t parts, int64_t i, int64_t *off,
                               int64_t *shape)
{
    if (shape[d] % parts != 0)
        return rs__diag_set(w->diag, RS_ERR_INPUT, "tensor '%s': dim %d (%lld) "
                            "does not split into %lld equal parts", t->name, d,
                            (long long)shape[d], (long long)parts);
    shape[d] /= parts;
    off[d] += i * shape[d];
    return RS_OK;
}

/* Part i of a vocab-parallel tensor: near-equal contiguous parts of the
 * real vocab, the first V % T parts one row larger. */
static void split_vocab(int64_t parts, int64_t i, int64_t *off, int64_t *shape)
{
    int64_t base = shape[0] / parts, rem = shape[0] % parts;
    off[0] = i * base + (i < rem ? i : rem);
    shape[0] = base + (i < rem ? 1 : 0);
}

/* k and v: split by tp when kv heads >= tp; otherwise each tp rank holds
 * the whole kv head its query heads use (head r / (tp / kv)). */
static rs_status_t split_kv(const walk_t *w, const rs_tensor_info_t *t,
                            int64_t *off, int64_t *shape)
{
    int64_t tp = w->plan->layout.tp, kv = w->cfg->kv_heads;
    if (kv <= 0 || kv >= tp)
        return split_equal(w, t, 0, tp, w->tp_rank, off, shape);
    return split_equal(w, t, 0, kv, w->tp_rank / (tp / kv), off, shape);
}

/* A routed expert: held by one ep rank of the plane, split by etp. */
static rs_status_t expert_box(const walk_t *w, const rs_tensor_info_t *t,
                              int role, int64_t *off, int64_t *shape,
                              int *have_p)
{
    const rs_layout_t *l = &w->plan->layout;
    int64_t experts = w->cfg->experts;
    if (t->expert >= experts)
        return rs__diag_set(w->diag, RS_ERR_INPUT, "tensor '%s': expert %lld "
                            "outside the model's %lld routed experts", t->name,
                            (long long)t->expert, (long long)experts);
    *have_p = t->expert / (experts / l->ep) == w->ep_rank;
    if (!*have_p || l->etp == 1 || role == RS_ROLE_EXPERT_WHOLE)
        return RS_OK;
    return split_equal(w, t, role == RS_ROLE_EXPERT_COLUMN ? 0 : 1, l->etp,
                       w->etp_rank, off, shape);
}

static rs_status_t megatron_box(const walk_t *w, size_t index,
                                const rs_tensor_info_t *t, int64_t *off,
                                int64_t *shape, int *have_p)
{
    const rs__trainer_tensor_t *tt = &w->plan->tensors[index];
    int64_t tp = w->plan->layout.tp;

    *have_p = tt->stage == w->pp_rank;
    if (!*have_p)
        return RS_OK;
    switch ((rs__tensor_role_t)tt->role) {
    case RS_ROLE_COLUMN:
        return split_equal(w, t, 0, tp, w->tp_rank, off, shape);
    case RS_ROLE_KV:
        return split_kv(w, t, off, shape);
    case RS_ROLE_ROW:
        return split_equal(w, t, 1, tp, w->tp_rank, off, shape);
    case RS_ROLE_VOCAB:
        split_vocab(tp, w->tp_rank, off, shape);
        return RS_OK;
    case RS_ROLE_EXPERT_WHOLE:
    case RS_ROLE_EXPERT_COLUMN:
    case RS_ROLE_EXPERT_ROW:
        return expert_box(w, t, tt->role, off, shape, have_p);
    case RS_ROLE_REPLICATED:
        break;
    }
    return RS_OK;
}

/* FSDP2's dim-0 chunks (torch.chunk): ceil(dim0 / N) rows each, the last
 * ranks shorter or empty. A 0-d tensor stays whole on rank 0. */
static void fsdp_box(const walk_t *w, const rs_tensor_info_t *t, int64_t *off,
                     int64_t *shape, int *have_p)
{
    int64_t n = w->plan->layout.fsdp, rows, chunk, start;
    if (t->ndim == 0) {
        *have_p = w->rank == 0;
        return;
    }
    rows = shape[0];
    chunk = rows / n + (rows % n != 0);
    *have_p = rs__mul_i64(w->rank, chunk, &start) && start < rows;
    if (!*have_p)
        return;
    off[0] = start;
    shape[0] = rows - start < chunk ? rows - start : chunk;
}

/* Places a non-empty box at the rank's cursor and hands it to the
 * callback; the caller aligns the cursor after it. */
static rs_status_t place(walk_t *w, const rs_tensor_info_t *t,
                         const int64_t *off, const int64_t *shape)
{
    size_t elsize = rs_dtype_size(t->dtype);
    int64_t numel = 0, nbytes;
    rs_shard_desc_t d = {0};

    if (!rs__numel(shape, t->ndim, &numel) ||
        !rs__mul_i64(numel, (int64_t)elsize, &nbytes))
        return rs__diag_set(w->diag, RS_ERR_INPUT, "tensor '%s': shard size "
                            "overflows", t->name);
    if ((uint64_t)nbytes > RANK_SPAN || w->cursor + (uint64_t)nbytes > w->limit)
        return rs__diag_set(w->diag, RS_ERR_INPUT, "rank %lld: shards exceed "
                            "the rank's 2^44-byte address range at tensor '%s'",
                            (long long)w->rank, t->name);
    d.tensor = t->name;
    d.dtype = t->dtype;
    d.elsize = elsize;
    d.ndim = t->ndim;
    d.full_shape = t->shape;
    d.session = w->session;
    d.device_id = w->rank % 8;
    d.addr = w->cursor;
    d.offset = off;
    d.shape = shape;
    w->cursor += (uint64_t)nbytes;
    return w->cb(w->ctx, &d);
}

typedef struct place_ctx {
    walk_t *w;
    const rs_tensor_info_t *t;
} place_ctx_t;

/* rs_cuts_box_fn: one sub-box of a cut-aligned shard. */
static rs_status_t place_sub(void *ctx, const int64_t *off,
                             const int64_t *shape)
{
    place_ctx_t *p = ctx;
    rs_status_t st = place(p->w, p->t, off, shape);
    p->w->cursor = (p->w->cursor + SUB_BOX_ALIGN - 1) & ~(SUB_BOX_ALIGN - 1);
    return st;
}

/* Cuts from another model (a file, a directory record) must describe this
 * tensor as the manifest does, or the sub-boxes would be nonsense. */
static rs_status_t check_cut_shape(walk_t *w, const rs_tensor_info_t *t)
{
    int ndim;
    char a[256], b[256];
    const int64_t *held = rs_cuts_shape(w->plan->cuts, t->name, &ndim);
    if (held == NULL ||
        (ndim == t->ndim &&
         (ndim == 0 || memcmp(held, t->shape, (size_t)ndim * 8) == 0)))
        return RS_OK;
    return rs__diag_set(w->diag, RS_ERR_INPUT, "tensor '%s': the cuts are for "
                        "shape %s, the model has %s", t->name,
                        rs__format_dims(a, sizeof(a), held, ndim),
                        rs__format_dims(b, sizeof(b), t->shape, t->ndim));
}

/* Places a shard, whole or as its sub-boxes, then aligns the cursor so the
 * next shard starts on a fresh SHARD_ALIGN boundary. */
rs_status_t rs__trainer_emit(walk_t *w, const rs_tensor_info_t *t,
                             const int64_t *off, const int64_t *shape)
{
    int64_t numel = 0;
    rs_status_t st;

    if (!rs__numel(shape, t->ndim, &numel))
        return rs__diag_set(w->diag, RS_ERR_INPUT, "tensor '%s': shard size "
                            "overflows", t->name);
    if (numel == 0)
        return RS_OK;
    if (w->plan->cuts == NULL) {
        st = place(w, t, off, shape);
    } else {
        place_ctx_t p = {w, t};
        if ((st = check_cut_shape(w, t)) == RS_OK)
            st = rs_cuts_split(w->plan->cuts, t->name, t->ndim, off, shape,
                               place_sub, &p, w->diag);
    }
    w->cursor = (w->cursor + SHARD_ALIGN - 1) & ~(SHARD_ALIGN - 1);
    return st;
}

static rs_status_t walk_tensor(walk_t *w, size_t i)
{
    /* Dims past t.ndim stay 0: the roles (trainer_plan.c) only split dims
     * the tensor has, and a 0-d tensor's box reads none. */
    int64_t off[RS_MAX_DIMS] = {0}, shape[RS_MAX_DIMS] = {0};
    rs_tensor_info_t t;
    int have = 0;
    rs_status_t st = RS_OK;

    rs_model_tensor(w->plan->model, i, &t);
    if (t.ndim < 0 || t.ndim > RS_MAX_DIMS)
        return rs__diag_set(w->diag, RS_ERR_INPUT, "tensor '%s': rank %d "
                            "outside 0..%d", t.name, t.ndim, RS_MAX_DIMS);
    if (t.ndim > 0)
        memcpy(shape, t.shape, (size_t)t.ndim * sizeof(int64_t));
    if (w->plan->layout.kind == RS_LAYOUT_FSDP)
        fsdp_box(w, &t, off, shape, &have);
    else
        st = megatron_box(w, i, &t, off, shape, &have);
    if (st != RS_OK || !have)
        return st;
    st = rs__trainer_emit(w, &t, off, shape);
    if (st == RS_OK && w->plan->tensors[i].fp8 &&
        (w->plan->flags & RS_LAYOUT_FP8_COPIES) &&
        w->plan->quant.scheme != RS_QUANT_NONE)
        st = rs__trainer_emit_fp8(w, w->plan, &t, off, shape, w->diag);
    return st;
}

rs_status_t rs__trainer_plan_walk(const rs__trainer_plan_t *plan, int64_t rank,
                                  rs_shard_cb cb, void *ctx, rs_diag_t *diag)
{
    walk_t w;
    rs_status_t st = RS_OK;

    if (plan == NULL || cb == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    if (rank < 0 || rank >= plan->layout.world)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "trainer rank %lld "
                            "outside 0..%lld", (long long)rank,
                            (long long)plan->layout.world - 1);
    walk_init(&w, plan, rank);
    w.cb = cb;
    w.ctx = ctx;
    w.diag = diag;
    for (size_t i = 0; st == RS_OK && i < plan->num_tensors; i++) {
        /* Skipping other stages here keeps deep pipelines cheap. */
        if (plan->layout.kind == RS_LAYOUT_MEGATRON &&
            plan->tensors[i].stage != w.pp_rank)
            continue;
        st = walk_tensor(&w, i);
    }
    return st;
}
