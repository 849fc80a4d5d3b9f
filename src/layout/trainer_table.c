/* Writes one trainer rank's mx.reshard.shard_table.v1 blob through the
 * library's one shard-table writer (rs_table_writer_*, beside its reader). */
#include <stdio.h>

#include "core/diag.h"
#include "layout/trainer_impl.h"

/* The writer's own failure (I/O, memory) is told apart from the walk's
 * (a bad layout or manifest, already described in diag). */
typedef struct table_ctx {
    rs_table_writer_h w;
    rs_status_t write_st;
} table_ctx_t;

static rs_status_t put_shard(void *ctx, const rs_shard_desc_t *d)
{
    table_ctx_t *c = ctx;
    c->write_st = rs_table_writer_add(c->w, d, NULL);
    return c->write_st;
}

rs_status_t rs_layout_write_table(rs_model_h model, const rs_layout_t *layout,
                                  int64_t rank, FILE *out, rs_diag_t *diag)
{
    return rs_layout_write_table_cut(model, layout, rank, NULL, out, diag);
}

rs_status_t rs_layout_write_table_cut(rs_model_h model,
                                      const rs_layout_t *layout, int64_t rank,
                                      rs_cuts_h cuts, FILE *out,
                                      rs_diag_t *diag)
{
    return rs_layout_write_table_ex(model, layout, rank, cuts, 0, out, diag);
}

rs_status_t rs_layout_write_table_ex(rs_model_h model,
                                     const rs_layout_t *layout, int64_t rank,
                                     rs_cuts_h cuts, unsigned flags, FILE *out,
                                     rs_diag_t *diag)
{
    rs__trainer_plan_t plan;
    table_ctx_t c = {NULL, RS_OK};
    rs_table_info_t info = {0};
    char session[32];
    rs_status_t st;

    if (out == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL output");
    if ((st = rs__trainer_plan_init(&plan, model, layout, cuts, flags,
                                    diag)) != RS_OK)
        return st;
    rs_layout_trainer_session(rank, session, sizeof(session));
    info.agent_name = session;
    info.publisher_step = 0;
    if ((st = rs_table_writer_open(out, &info, diag, &c.w)) != RS_OK) {
        rs__trainer_plan_free(&plan);
        return st;
    }
    st = rs__trainer_plan_walk(&plan, rank, put_shard, &c, diag);
    rs__trainer_plan_free(&plan);
    if (st != RS_OK) {
        rs_table_writer_discard(c.w);
        if (c.write_st == RS_OK)
            return st;
    } else {
        st = rs_table_writer_close(c.w, NULL);
    }
    if (st != RS_OK)
        return rs__diag_set(diag, st, "shard table of trainer rank %lld: "
                            "write failed", (long long)rank);
    return RS_OK;
}
