/* An inference rank pulling from publisher processes (rank_fixture.h):
 * open and close, its prior bytes, and the byte-exact checks on the
 * parameters it has bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "rank_fixture.h"
#include "vllm_direct.h"

static rs_status_t count_install(void *ctx, rs_exec_h exec)
{
    (void)exec;
    ((pfx_rank_t *)ctx)->installs++;
    return RS_OK;
}

static void fill_param(uint8_t *buf, size_t n, size_t p, int fill)
{
    if (fill != PFX_FILL_PATTERN) {
        memset(buf, fill, n);
        return;
    }
    for (size_t b = 0; b < n; b++)
        buf[b] = (uint8_t)(b * 131 + p * 7 + 1);
}

void pfx_rank_open(pfx_rank_t *ir, rs_model_h model, const rs_layout_t *infer,
                   int64_t rank, rs_receiver_params_t *rp, int fill)
{
    rs_diag_t diag;
    uint64_t padding;
    memset(ir, 0, sizeof(*ir));
    assert_int_equal(rs_layout_capture(model, infer, rank, &diag, &ir->cap,
                                       &padding), RS_OK);
    rp->install = count_install;
    rp->install_ctx = ir;
    if (rs_receiver_create(rp, ir->cap, &diag, &ir->recv) != RS_OK)
        fail_msg("receiver: %s", diag.msg);
    ir->nparams = rs_capture_num_params(ir->cap);
    ir->params = calloc(ir->nparams, sizeof(uint8_t *));
    ir->prior = calloc(ir->nparams, sizeof(uint8_t *));
    assert_true(ir->params != NULL && ir->prior != NULL);
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->cap, p, &info);
        size_t n = info.nbytes ? info.nbytes : 1;
        ir->params[p] = malloc(n);
        ir->prior[p] = malloc(n);
        assert_true(ir->params[p] != NULL && ir->prior[p] != NULL);
        fill_param(ir->params[p], n, p, fill);
        memcpy(ir->prior[p], ir->params[p], n);
        assert_int_equal(rs_receiver_bind(ir->recv, p, ir->params[p],
                                          info.nbytes, RS_MEM_HOST, &diag),
                         RS_OK);
    }
}

void pfx_rank_close(pfx_rank_t *ir)
{
    rs_receiver_destroy(ir->recv);
    for (size_t p = 0; p < ir->nparams; p++) {
        free(ir->params[p]);
        free(ir->prior[p]);
    }
    free(ir->params);
    free(ir->prior);
    rs_capture_destroy(ir->cap);
    memset(ir, 0, sizeof(*ir));
}

void pfx_teardown(pfx_rank_t *rank, pfx_proc_t *procs, size_t n,
                  pfx_world_t *w)
{
    if (rank != NULL && rank->cap != NULL)
        pfx_rank_close(rank);
    for (size_t i = 0; i < n; i++)
        pfx_stop(&procs[i], 1);
    pfx_world_close(w);
}

void pfx_rank_fill(pfx_rank_t *ir, uint8_t byte)
{
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->cap, p, &info);
        memset(ir->params[p], byte, info.nbytes);
        memset(ir->prior[p], byte, info.nbytes);
    }
}

void pfx_rank_restore(pfx_rank_t *ir)
{
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->cap, p, &info);
        memcpy(ir->params[p], ir->prior[p], info.nbytes);
    }
}

void pfx_expect_untouched(const pfx_rank_t *ir)
{
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->cap, p, &info);
        if (memcmp(ir->params[p], ir->prior[p], info.nbytes) != 0)
            fail_msg("param %s was written by a failed pull", info.name);
    }
}

static void expect_param(const pfx_rank_t *ir, size_t p, const uint8_t *want,
                         uint8_t pad)
{
    rs_param_info_t info;
    rs_capture_param(ir->cap, p, &info);
    for (uint64_t b = 0; b < info.nbytes; b++) {
        if (want[b] == pad && ir->params[p][b] == ir->prior[p][b])
            continue;
        if (ir->params[p][b] != want[b])
            fail_msg("param %s byte %llu: got 0x%02x, want 0x%02x", info.name,
                     (unsigned long long)b, ir->params[p][b], want[b]);
    }
}

void pfx_expect_installed(const pfx_rank_t *ir, uint8_t *const *want,
                          uint8_t pad)
{
    for (size_t p = 0; p < ir->nparams; p++)
        expect_param(ir, p, want[p], pad);
}

void pfx_expect_direct(const pfx_rank_t *ir, rs_model_h model,
                       const rs_layout_t *infer, int64_t rank)
{
    vd_expect_t x;
    vd_init(&x, model, infer, 0xEE);
    vd_expect_rank(&x, rank);
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->cap, p, &info);
        const vd_param_t *e = vd_find(&x, info.name);
        assert_non_null(e);
        expect_param(ir, p, e->bytes, 0xEE);
    }
    vd_free(&x);
}
