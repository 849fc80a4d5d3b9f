/* Trainer layouts, public side: the shards one rank publishes, and every
 * rank's shards and tables added to a set of sources at once (all or
 * nothing: built in a scratch set, then merged with rs_sources_merge). */
#include "core/diag.h"
#include "layout/trainer_impl.h"

rs_status_t rs_layout_trainer_shards(rs_model_h model,
                                     const rs_layout_t *layout, int64_t rank,
                                     rs_shard_cb cb, void *ctx,
                                     rs_diag_t *diag)
{
    return rs_layout_trainer_shards_cut(model, layout, rank, NULL, cb, ctx,
                                        diag);
}

rs_status_t rs_layout_trainer_shards_cut(rs_model_h model,
                                         const rs_layout_t *layout,
                                         int64_t rank, rs_cuts_h cuts,
                                         rs_shard_cb cb, void *ctx,
                                         rs_diag_t *diag)
{
    return rs_layout_trainer_shards_ex(model, layout, rank, cuts, 0, cb, ctx,
                                       diag);
}

rs_status_t rs_layout_trainer_shards_ex(rs_model_h model,
                                        const rs_layout_t *layout,
                                        int64_t rank, rs_cuts_h cuts,
                                        unsigned flags, rs_shard_cb cb,
                                        void *ctx, rs_diag_t *diag)
{
    rs__trainer_plan_t plan;
    rs_status_t st;

    if (cb == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    if ((st = rs__trainer_plan_init(&plan, model, layout, cuts, flags,
                                    diag)) != RS_OK)
        return st;
    st = rs__trainer_plan_walk(&plan, rank, cb, ctx, diag);
    rs__trainer_plan_free(&plan);
    return st;
}

typedef struct publish_ctx {
    rs_sources_h sources;
    rs_diag_t *diag;
} publish_ctx_t;

static rs_status_t add_one(void *ctx, const rs_shard_desc_t *shard)
{
    publish_ctx_t *p = ctx;
    return rs_sources_add_shard(p->sources, shard, p->diag);
}

/* The rank's shards, then its table (so a rank without shards still has
 * one, as it would after loading the blobs rs_layout_write_table emits). */
static rs_status_t publish_rank(const rs__trainer_plan_t *plan, int64_t rank,
                                publish_ctx_t *p)
{
    char session[32];
    rs_table_info_t info = {0};
    rs_status_t st = rs__trainer_plan_walk(plan, rank, add_one, p, p->diag);

    if (st != RS_OK)
        return st;
    rs_layout_trainer_session(rank, session, sizeof(session));
    info.agent_name = session;
    info.publisher_step = 0;
    return rs_sources_add_table(p->sources, &info, p->diag);
}

rs_status_t rs_layout_publish_all(rs_model_h model, const rs_layout_t *layout,
                                  rs_sources_h sources, rs_diag_t *diag)
{
    return rs_layout_publish_all_cut(model, layout, NULL, sources, diag);
}

rs_status_t rs_layout_publish_all_cut(rs_model_h model,
                                      const rs_layout_t *layout,
                                      rs_cuts_h cuts, rs_sources_h sources,
                                      rs_diag_t *diag)
{
    return rs_layout_publish_all_ex(model, layout, cuts, 0, sources, diag);
}

rs_status_t rs_layout_publish_all_ex(rs_model_h model,
                                     const rs_layout_t *layout, rs_cuts_h cuts,
                                     unsigned flags, rs_sources_h sources,
                                     rs_diag_t *diag)
{
    rs__trainer_plan_t plan;
    rs_sources_h scratch = NULL;
    publish_ctx_t p = {NULL, diag};
    rs_status_t st;

    if (sources == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL sources");
    if ((st = rs__trainer_plan_init(&plan, model, layout, cuts, flags,
                                    diag)) != RS_OK)
        return st;
    if (rs_sources_create(&scratch) != RS_OK) {
        rs__trainer_plan_free(&plan);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    p.sources = scratch;
    for (int64_t r = 0; st == RS_OK && r < plan.layout.world; r++)
        st = publish_rank(&plan, r, &p);
    if (st == RS_OK)
        st = rs_sources_merge(sources, scratch, diag);
    rs_sources_destroy(scratch);
    rs__trainer_plan_free(&plan);
    return st;
}
