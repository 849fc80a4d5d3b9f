/* `reshard pull --check`: what every parameter of the rank must hold,
 * rebuilt independently of the transfer (each source filled whole with the
 * demo contents, the capture's copies of it replayed over it with the local
 * transport; no directory, no publisher, no wire), compared byte for byte
 * with what the pull installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* What the check reads: the rank's capture, its live parameters, and the
 * buffers the expected contents are built in. */
typedef struct check {
    rs_model_h model;
    rs_capture_h cap;
    size_t nparams;
    unsigned char **param;
    unsigned char **expected;
    int64_t version;
    uint64_t fraction_q; /* the changed fraction (rs_cli_fill_box), 0 none */
} check_t;

/* A copy of the capture keyed by its source: copies are replayed source by
 * source, each source filled once. */
typedef struct src_copy {
    const char *src;
    size_t copy;
} src_copy_t;

static int by_src(const void *a, const void *b)
{
    const src_copy_t *x = a, *y = b;
    int c = strcmp(x->src, y->src);
    return c != 0 ? c : (x->copy > y->copy) - (x->copy < y->copy);
}

/* Adds parameter `name` of cap to sub (once), recording its index in
 * map. */
static rs_status_t sub_param(rs_capture_h cap, rs_capture_h sub,
                             const char *name, size_t *map, size_t *nmap,
                             rs_diag_t *diag)
{
    rs_param_info_t p;
    if (rs_capture_find_param(sub, name) >= 0)
        return RS_OK;
    size_t gp = (size_t)rs_capture_find_param(cap, name);
    rs_capture_param(cap, gp, &p);
    map[(*nmap)++] = gp;
    return rs_capture_add_param(sub, p.name, p.ndim, p.shape, p.dtype, diag);
}

/* The copies of g (one source) in a capture of their own, with the
 * parameters they land in (map[i]: sub-parameter i's index in the full
 * capture; room for two parameters per copy); a quantized copy stays
 * quantized, with its scale parameter. */
static rs_status_t sub_capture(rs_capture_h cap, const src_copy_t *g, size_t n,
                               size_t *map, size_t *nmap, rs_diag_t *diag,
                               rs_capture_h *sub_p)
{
    rs_capture_h sub;
    rs_status_t st = rs_capture_create(&sub);
    *nmap = 0;
    for (size_t i = 0; st == RS_OK && i < n; i++) {
        rs_copy_desc_t c;
        rs_quant_desc_t q;
        rs_capture_copy(cap, g[i].copy, &c);
        int quant = rs_capture_copy_quant(cap, g[i].copy, &q);
        st = sub_param(cap, sub, c.param, map, nmap, diag);
        if (st == RS_OK && quant)
            st = sub_param(cap, sub, q.scale_param, map, nmap, diag);
        if (st == RS_OK)
            st = quant ? rs_capture_add_quant_copy(sub, &c, &q, diag)
                       : rs_capture_add_copy(sub, &c, diag);
    }
    if (st != RS_OK) {
        rs_capture_destroy(sub);
        return st;
    }
    *sub_p = sub;
    return RS_OK;
}

/* The whole source tensor, filled with the demo contents the check
 * expects, as one shard at its own address. */
static rs_status_t whole_source(const check_t *c, const char *src,
                                rs_diag_t *diag,
                                unsigned char **buf_p, uint64_t *nbytes_p,
                                rs_sources_h *sources_p)
{
    rs_model_h model = c->model;
    long t = rs_model_find(model, src);
    rs_tensor_info_t info;
    int64_t zero[RS_MAX_DIMS] = {0};
    uint64_t numel = 1;
    if (t < 0) {
        snprintf(diag->msg, sizeof(diag->msg), "source '%s' is not a tensor "
                 "of the model", src);
        return RS_ERR_INPUT;
    }
    rs_model_tensor(model, (size_t)t, &info);
    for (int d = 0; d < info.ndim; d++)
        numel *= (uint64_t)info.shape[d];
    uint64_t nbytes = numel * rs_dtype_size(info.dtype);
    unsigned char *buf = malloc(nbytes ? nbytes : 1);
    if (buf == NULL)
        return RS_ERR_NO_MEMORY;
    rs_status_t st = rs_cli_fill_box(src, info.dtype, c->version,
                                     c->fraction_q, info.ndim, info.shape,
                                     zero, info.shape, buf);
    rs_shard_desc_t sh = {src, info.dtype, rs_dtype_size(info.dtype),
                          info.ndim, info.shape, "check", 0,
                          (uint64_t)(uintptr_t)buf, zero, info.shape, NULL};
    rs_sources_h s = NULL;
    if (st == RS_OK)
        st = rs_sources_create(&s);
    if (st == RS_OK)
        st = rs_sources_add_shard(s, &sh, diag);
    if (st != RS_OK) {
        rs_sources_destroy(s);
        free(buf);
        return st;
    }
    *buf_p = buf;
    *nbytes_p = nbytes;
    *sources_p = s;
    return RS_OK;
}

/* Plans the sub-capture against the one-shard source and runs it with the
 * local transport into the expected parameters. */
static rs_status_t replay_local(rs_capture_h sub, rs_sources_h src,
                                const unsigned char *buf, uint64_t nbytes,
                                unsigned char **targets, rs_diag_t *diag)
{
    rs_plan_params_t pp;
    rs_plan_h plan = NULL;
    rs_transport_h t = NULL;
    rs_exec_h x = NULL;
    rs_region_t region = {(uint64_t)(uintptr_t)buf, nbytes, buf};
    rs_plan_params_init(&pp);
    rs_status_t st = rs_plan_build(sub, src, &pp, diag, &plan);
    if (st == RS_OK && !rs_plan_is_complete(plan)) {
        snprintf(diag->msg, sizeof(diag->msg), "the local replay plan is "
                 "incomplete (unsupported geometry or uncovered copies)");
        st = RS_ERR_INCOMPLETE;
    }
    if (st == RS_OK)
        st = rs_transport_create(NULL, diag, &t);
    for (uint32_t k = 0; st == RS_OK && k < rs_plan_num_sessions(plan); k++) {
        rs_peer_t peer = {rs_plan_session_name(plan, k), 0, &region, 1, NULL, 0};
        st = rs_transport_connect(t, k, &peer, diag);
    }
    if (st == RS_OK)
        st = rs_exec_create(plan, t, NULL, diag, &x);
    for (size_t p = 0; st == RS_OK && p < rs_capture_num_params(sub); p++) {
        rs_param_info_t info;
        rs_capture_param(sub, p, &info);
        st = rs_exec_bind(x, p, targets[p], info.nbytes, RS_MEM_HOST, diag);
    }
    if (st == RS_OK)
        st = rs_exec_run(x, diag);
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    return st;
}

static rs_status_t replay_group(const check_t *s, const src_copy_t *g, size_t n,
                                rs_diag_t *diag)
{
    size_t *map = calloc(2 * n, sizeof(size_t));
    unsigned char **targets = calloc(2 * n, sizeof(unsigned char *));
    size_t nmap = 0;
    rs_capture_h sub = NULL;
    rs_sources_h src = NULL;
    unsigned char *buf = NULL;
    uint64_t nbytes = 0;
    rs_status_t st = map && targets ? RS_OK : RS_ERR_NO_MEMORY;
    if (st == RS_OK)
        st = sub_capture(s->cap, g, n, map, &nmap, diag, &sub);
    if (st == RS_OK)
        st = whole_source(s, g[0].src, diag, &buf, &nbytes, &src);
    for (size_t i = 0; i < nmap; i++)
        targets[i] = s->expected[map[i]];
    if (st == RS_OK)
        st = replay_local(sub, src, buf, nbytes, targets, diag);
    rs_sources_destroy(src);
    rs_capture_destroy(sub);
    free(buf);
    free(targets);
    free(map);
    return st;
}

/* Fills s->expected: 0xEE, then every copy replayed source by source. */
static rs_status_t expected_contents(const check_t *s, rs_diag_t *diag,
                                     const char **failed_p)
{
    size_t n = rs_capture_num_copies(s->cap);
    src_copy_t *order = calloc(n + 1, sizeof(*order));
    rs_status_t st = order ? RS_OK : RS_ERR_NO_MEMORY;
    for (size_t p = 0; p < s->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(s->cap, p, &info);
        memset(s->expected[p], 0xEE, info.nbytes);
    }
    for (size_t i = 0; st == RS_OK && i < n; i++) {
        rs_copy_desc_t c;
        rs_capture_copy(s->cap, i, &c);
        order[i] = (src_copy_t){c.src, i};
    }
    if (st == RS_OK)
        qsort(order, n, sizeof(*order), by_src);
    for (size_t i = 0, j; st == RS_OK && i < n; i = j) {
        for (j = i + 1; j < n && strcmp(order[j].src, order[i].src) == 0; j++)
            ;
        st = replay_group(s, order + i, j - i, diag);
        if (st != RS_OK)
            *failed_p = order[i].src; /* borrowed from the capture */
    }
    free(order);
    return st;
}

/* Byte-for-byte comparison; names the first wrong parameter and byte. */
static int compare(const check_t *s, char *err, size_t errlen)
{
    for (size_t p = 0; p < s->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(s->cap, p, &info);
        if (memcmp(s->param[p], s->expected[p], info.nbytes) == 0)
            continue;
        uint64_t first = UINT64_MAX, bad = 0;
        for (uint64_t b = 0; b < info.nbytes; b++) {
            if (s->param[p][b] != s->expected[p][b]) {
                first = first == UINT64_MAX ? b : first;
                bad++;
            }
        }
        snprintf(err, errlen, "check failed: parameter '%s': %llu of %llu "
                 "bytes differ, first at byte %llu (got 0x%02x, expected "
                 "0x%02x)", info.name, (unsigned long long)bad,
                 (unsigned long long)info.nbytes, (unsigned long long)first,
                 s->param[p][first], s->expected[p][first]);
        return 0;
    }
    return 1;
}

int rs_cli_pull_check(rs_model_h model, rs_capture_h cap,
                      unsigned char **param, unsigned char **expected,
                      int64_t version, uint64_t fraction_q, char *err,
                      size_t errlen)
{
    check_t s = {model, cap, rs_capture_num_params(cap), param, expected,
                 version, fraction_q};
    rs_diag_t diag;
    const char *src = "?";
    rs_diag_clear(&diag);
    rs_status_t st = expected_contents(&s, &diag, &src);
    if (st != RS_OK) {
        snprintf(err, errlen, "check could not replay source '%.200s' "
                 "locally: %.700s", src,
                 diag.msg[0] ? diag.msg : rs_status_str(st));
        return 0;
    }
    return compare(&s, err, errlen);
}
