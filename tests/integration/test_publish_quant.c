/* Publisher-side quantization over cma and ucx (UCX_TLS=sm). One publisher
 * (arena staging) holds "w" bf16 [300, 260] as two row halves cut at row
 * 150, "u" f32 [200, 300] as two column halves cut at column 150, "v" bf16
 * [96, 64] whole, and two tensors no spec fits ("n" i32, "norm" 1-D).
 * Its rules quantize w to 128x128 blocks of f8e4m3, u to 64x128 blocks of
 * f8e5m2, and v per channel (f8e4m3) and per tensor (f8e5m2). The table
 * holds exactly the boxes of whole blocks inside each shard (ragged last
 * blocks included where a shard reaches the tensor's end; block row 1 of w
 * and block column 1 of u straddle the halves and are served by no one),
 * and receivers reading them through the table get the bytes of a
 * reference quantization computed here (its own FP8 encoder: nearest of
 * the format's codes, ties to the even code, saturation; its own block
 * walk over the full tensor), every value and scale, at two versions with
 * the trainer scribbling over its tensors after each publish. Replicas
 * publish identical quantized entries and share the slot; bad GLOB=SPEC
 * entries and a wrong staging are refused naming the entry; a NaN or an
 * infinity in a served block fails the publish naming tensor and block,
 * nothing of that version published, while one in a straddling block does
 * not; a publisher with quantize_wanted serves what the cuts records ask
 * for, from the version after the record is written, and stops when it is
 * dropped; with cut_aligned as well the shards are cut and the quantized
 * boxes are cut only at the cuts on block boundaries, all exact, and a
 * receiver quantizing a slice reads one piece's bytes and installs the
 * reference's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dir_env.h"
#include "reshard/reshard.h"
#include "assert_status.h"

#define MODEL "pubq"
#define B128 "fp8_block:128x128:f8e4m3"
#define B64 "fp8_block:64x128:f8e5m2"
#define CH4 "fp8_channel:f8e4m3"
#define T5 "fp8_tensor:f8e5m2"
#define CH5 "fp8_channel:f8e5m2"

enum { E4M3 = 0, E5M2 = 1 };

/* ---- the reference: plain loops, written apart from the library ---- */

/* The value of a non-negative FP8 code. */
static double f8_value(int code, int fmt)
{
    int mbits = fmt == E4M3 ? 3 : 2, bias = fmt == E4M3 ? 7 : 15;
    int e = code >> mbits, m = code & ((1 << mbits) - 1);
    double frac = (double)m / (double)(1 << mbits);
    return e == 0 ? ldexp(frac, 1 - bias) : ldexp(1.0 + frac, e - bias);
}

static int f8_top(int fmt) /* the largest finite code */
{
    return fmt == E4M3 ? 0x7E : 0x7B;
}

/* x to the nearest code, ties to the even code, saturating; sign kept. */
static uint8_t ref_encode(float x, int fmt)
{
    uint8_t sign = signbit(x) ? 0x80 : 0;
    double a = fabs((double)x);
    int top = f8_top(fmt), c = 0;
    if (a >= f8_value(top, fmt))
        return (uint8_t)(sign | top);
    while (c < top && f8_value(c + 1, fmt) <= a)
        c++;
    double lo = a - f8_value(c, fmt), hi = f8_value(c + 1, fmt) - a;
    if (lo < hi || (lo == hi && (c & 1) == 0))
        return (uint8_t)(sign | c);
    return (uint8_t)(sign | (c + 1));
}

static float bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint16_t float_to_bf16(float f) /* truncation: the values are ours */
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return (uint16_t)(u >> 16);
}

/* A reference quantization of a whole 2-D tensor x [rows, cols] in blocks
 * [br, bc]: q (rows * cols codes) and scales (the grid, row-major). */
typedef struct ref {
    int64_t rows, cols, br, bc, grows, gcols;
    uint8_t *q;
    float *scale;
} ref_t;

static void ref_quantize(const float *x, int64_t rows, int64_t cols,
                         int64_t br, int64_t bc, int fmt, ref_t *r)
{
    float fmax = (float)f8_value(f8_top(fmt), fmt);
    r->rows = rows;
    r->cols = cols;
    r->br = br;
    r->bc = bc;
    r->grows = (rows + br - 1) / br;
    r->gcols = (cols + bc - 1) / bc;
    r->q = malloc((size_t)(rows * cols));
    r->scale = malloc((size_t)(r->grows * r->gcols) * sizeof(float));
    assert_non_null(r->q);
    assert_non_null(r->scale);
    for (int64_t gi = 0; gi < r->grows; gi++) {
        for (int64_t gj = 0; gj < r->gcols; gj++) {
            int64_t i1 = gi * br + br < rows ? gi * br + br : rows;
            int64_t j1 = gj * bc + bc < cols ? gj * bc + bc : cols;
            float amax = 0;
            for (int64_t i = gi * br; i < i1; i++)
                for (int64_t j = gj * bc; j < j1; j++)
                    amax = fmaxf(amax, fabsf(x[i * cols + j]));
            float s = amax / fmax;
            if (s == 0.0f)
                s = 1.0f;
            r->scale[gi * r->gcols + gj] = s;
            for (int64_t i = gi * br; i < i1; i++)
                for (int64_t j = gj * bc; j < j1; j++)
                    r->q[i * cols + j] = ref_encode(x[i * cols + j] / s, fmt);
        }
    }
}

static void ref_free(ref_t *r)
{
    free(r->q);
    free(r->scale);
}

/* ---- the trainer's tensors ---- */

/* A deterministic value of (tensor seed, version, row, column): a spread
 * of magnitudes per block (so scales differ), tiny values that quantize to
 * subnormals or to zero, negative zeros, and one block of zeros. */
static float value_at(int seed, int64_t v, int64_t i, int64_t j)
{
    uint64_t h = (uint64_t)seed * 0x9E3779B97F4A7C15ull ^
                 (uint64_t)v * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)(i * 7919 + j) * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    if (seed == 1 && i < 128 && j >= 128 && j < 256)
        return 0.0f; /* w: block (0, 1) all zero, scale 1 */
    if (h % 89 == 0)
        return -0.0f;
    double m = (double)((int64_t)(h % 20001) - 10000) / 10000.0;
    int e = (int)((i / 64 + j / 128 + v) % 9) - 4;
    if (h % 53 == 0)
        e -= 14; /* far below the block's amax */
    return (float)ldexp(m, e);
}

typedef struct tensor {
    const char *name;
    rs_dtype_t dtype;
    int seed;
    int64_t rows, cols;
    int split;            /* 0: rows in halves, 1: columns, -1: whole */
    int64_t at;           /* where the halves meet */
    float *full;          /* the values of the current version */
    void *part[2];        /* the trainer's shards */
} tensor_t;

#define NT 3

typedef struct world {
    dir_env_t env;
    const char *backend;
    tensor_t t[NT];
    int32_t n[16];
    uint16_t norm[64];
    int cut_aligned; /* publishers open cut-aligned too */
    int notices;
    char notice[8][RS_DIAG_MSG_MAX + 512];
} world_t;

static size_t elsize(const tensor_t *t)
{
    return rs_dtype_size(t->dtype);
}

/* Shard h's box. */
static void shard_box(const tensor_t *t, int h, int64_t *off, int64_t *shape)
{
    off[0] = off[1] = 0;
    shape[0] = t->rows;
    shape[1] = t->cols;
    if (t->split < 0)
        return;
    int64_t extent = t->split == 0 ? t->rows : t->cols;
    off[t->split] = h == 0 ? 0 : t->at;
    shape[t->split] = h == 0 ? t->at : extent - t->at;
}

static int nshards(const tensor_t *t)
{
    return t->split < 0 ? 1 : 2;
}

/* Writes value x at (i, j) into the full array and the shard holding it. */
static void put_value(tensor_t *t, int64_t i, int64_t j, float x)
{
    int64_t off[2], shape[2];
    uint16_t b = float_to_bf16(x);
    if (t->dtype == RS_DTYPE_BF16)
        x = bf16_to_float(b);
    t->full[i * t->cols + j] = x;
    for (int h = 0; h < nshards(t); h++) {
        shard_box(t, h, off, shape);
        if (i < off[0] || i >= off[0] + shape[0] || j < off[1] ||
            j >= off[1] + shape[1])
            continue;
        int64_t k = (i - off[0]) * shape[1] + (j - off[1]);
        if (t->dtype == RS_DTYPE_BF16)
            ((uint16_t *)t->part[h])[k] = b;
        else
            ((float *)t->part[h])[k] = x;
    }
}

static void fill(world_t *w, int64_t v)
{
    for (int k = 0; k < NT; k++) {
        tensor_t *t = &w->t[k];
        for (int64_t i = 0; i < t->rows; i++)
            for (int64_t j = 0; j < t->cols; j++)
                put_value(t, i, j, value_at(t->seed, v, i, j));
    }
}

static void scribble(world_t *w)
{
    for (int k = 0; k < NT; k++) {
        tensor_t *t = &w->t[k];
        for (int h = 0; h < nshards(t); h++) {
            int64_t off[2], shape[2];
            shard_box(t, h, off, shape);
            memset(t->part[h], 0x5A, (size_t)(shape[0] * shape[1]) *
                                         elsize(t));
        }
    }
}

static void on_notice(void *ctx, const char *msg)
{
    world_t *w = ctx;
    if (strstr(msg, "not quantized") == NULL &&
        strstr(msg, "cuts record") == NULL)
        return;
    if (w->notices < 8)
        snprintf(w->notice[w->notices], sizeof(w->notice[0]), "%s", msg);
    w->notices++;
}

static world_t *world_open(const char *backend)
{
    world_t *w = calloc(1, sizeof(*w));
    const tensor_t shapes[NT] = {
        {"w", RS_DTYPE_BF16, 1, 300, 260, 0, 150, NULL, {NULL, NULL}},
        {"u", RS_DTYPE_F32, 2, 200, 300, 1, 150, NULL, {NULL, NULL}},
        {"v", RS_DTYPE_BF16, 3, 96, 64, -1, 0, NULL, {NULL, NULL}},
    };
    assert_non_null(w);
    assert_int_equal(dir_env_setup(&w->env, "pubq"), 0);
    w->backend = backend;
    if (strcmp(backend, "ucx") == 0)
        setenv("UCX_TLS", "sm", 1);
    for (int k = 0; k < NT; k++) {
        tensor_t *t = &w->t[k];
        *t = shapes[k];
        t->full = calloc((size_t)(t->rows * t->cols), sizeof(float));
        assert_non_null(t->full);
        for (int h = 0; h < nshards(t); h++) {
            t->part[h] = calloc((size_t)(t->rows * t->cols), elsize(t));
            assert_non_null(t->part[h]);
        }
    }
    return w;
}

static void world_close(world_t *w)
{
    for (int k = 0; k < NT; k++) {
        free(w->t[k].full);
        free(w->t[k].part[0]);
        free(w->t[k].part[1]);
    }
    dir_env_teardown(&w->env);
    unsetenv("UCX_TLS");
    free(w);
}

static const char *const rules[] = {
    "w=" B128, "u=" B64, "v=" CH4, "v=" T5, "n*=" B128,
};

static void register_all(world_t *w, rs_publisher_h pub)
{
    rs_diag_t d;
    for (int k = 0; k < NT; k++) {
        const tensor_t *t = &w->t[k];
        const int64_t full[2] = {t->rows, t->cols};
        for (int h = 0; h < nshards(t); h++) {
            int64_t off[2], shape[2];
            shard_box(t, h, off, shape);
            ASSERT_ST(rs_publisher_register(pub, t->name, t->dtype, 2, full,
                                            off, shape, t->part[h],
                                            RS_MEM_HOST, &d), RS_OK, d);
        }
    }
    const int64_t n16[1] = {16}, n64[1] = {64}, zero[1] = {0};
    ASSERT_ST(rs_publisher_register(pub, "n", RS_DTYPE_I32, 1, n16, zero,
                                    n16, w->n, RS_MEM_HOST, &d), RS_OK, d);
    ASSERT_ST(rs_publisher_register(pub, "norm", RS_DTYPE_BF16, 1, n64, zero,
                                    n64, w->norm, RS_MEM_HOST, &d), RS_OK, d);
}

static rs_publisher_h open_publisher(world_t *w, int64_t replica,
                                     const char *const *q, size_t nq,
                                     int wanted)
{
    rs_publisher_params_t pp;
    rs_publisher_h pub;
    rs_diag_t d;
    rs_publisher_params_init(&pp);
    pp.directory = w->env.url;
    pp.model = MODEL;
    pp.world = 1;
    pp.replica = replica;
    pp.backend = w->backend;
    pp.heartbeat_s = 0.2;
    pp.staging = RS_STAGING_ARENA;
    pp.quantize = q;
    pp.num_quantize = nq;
    pp.quantize_wanted = wanted;
    pp.cut_aligned = w->cut_aligned;
    pp.notice = on_notice;
    pp.notice_ctx = w;
    ASSERT_ST(rs_publisher_create(&pp, &d, &pub), RS_OK, d);
    register_all(w, pub);
    return pub;
}

/* ---- what the table must hold ---- */

/* One derived entry: a box of "<src>#<spec>" or of its scales. */
typedef struct want {
    char name[96];
    rs_dtype_t dtype;
    int64_t full[2], off[2], shape[2];
    const tensor_t *t;
    const char *spec;
    int scale;
} want_t;

typedef struct wants {
    want_t e[32];
    size_t n;
} wants_t;

/* The block of spec on t (2-D). */
static void spec_block(const tensor_t *t, const char *spec, int64_t *b)
{
    if (strcmp(spec, B128) == 0) {
        b[0] = b[1] = 128;
    } else if (strcmp(spec, B64) == 0) {
        b[0] = 64;
        b[1] = 128;
    } else if (strncmp(spec, "fp8_channel", 11) == 0) {
        b[0] = 1;
        b[1] = t->cols;
    } else {
        b[0] = t->rows;
        b[1] = t->cols;
    }
}

static int spec_fmt(const char *spec)
{
    return strstr(spec, "f8e5m2") != NULL ? E5M2 : E4M3;
}

/* The boxes spec serves of t: per shard, its whole blocks (computed here
 * the plain way: a block is in when its every index lies in the shard). */
static void add_wants(wants_t *ws, const tensor_t *t, const char *spec)
{
    int64_t b[2], g[2];
    spec_block(t, spec, b);
    g[0] = (t->rows + b[0] - 1) / b[0];
    g[1] = (t->cols + b[1] - 1) / b[1];
    for (int h = 0; h < nshards(t); h++) {
        int64_t off[2], shape[2], lo[2] = {-1, -1}, hi[2] = {-1, -1};
        const int64_t full[2] = {t->rows, t->cols};
        shard_box(t, h, off, shape);
        for (int d = 0; d < 2; d++)
            for (int64_t k = 0; k < g[d]; k++) {
                int64_t s = k * b[d], e = s + b[d] < full[d] ? s + b[d]
                                                             : full[d];
                if (s >= off[d] && e <= off[d] + shape[d]) {
                    lo[d] = lo[d] < 0 ? k : lo[d];
                    hi[d] = k + 1;
                }
            }
        if (lo[0] < 0 || lo[1] < 0)
            continue;
        for (int sc = 0; sc < 2; sc++) {
            want_t *x = &ws->e[ws->n++];
            snprintf(x->name, sizeof(x->name), "%s#%s%s", t->name, spec,
                     sc ? "#scale" : "");
            x->dtype = sc ? RS_DTYPE_F32
                          : spec_fmt(spec) == E5M2 ? RS_DTYPE_F8E5M2
                                                   : RS_DTYPE_F8E4M3;
            x->t = t;
            x->spec = spec;
            x->scale = sc;
            for (int d = 0; d < 2; d++) {
                x->full[d] = sc ? g[d] : full[d];
                x->off[d] = sc ? lo[d] : lo[d] * b[d];
                int64_t end = hi[d] * b[d] < full[d] ? hi[d] * b[d] : full[d];
                x->shape[d] = sc ? hi[d] - lo[d] : end - lo[d] * b[d];
            }
        }
    }
}

static void rule_wants(world_t *w, wants_t *ws)
{
    ws->n = 0;
    add_wants(ws, &w->t[0], B128);
    add_wants(ws, &w->t[1], B64);
    add_wants(ws, &w->t[2], CH4);
    add_wants(ws, &w->t[2], T5);
}

/* The table of version v (publisher `who`, or the slot's first) holds
 * exactly the entries of ws among its derived ones ('#' in the name),
 * each at a 64-byte aligned address; `digests` gets each entry's digest in
 * ws order when not NULL. */
static void expect_table(world_t *w, int64_t v, const char *who,
                         const wants_t *ws, char (*digests)[64])
{
    rs_dir_h dir;
    rs_dir_entry_t *e = NULL;
    size_t n = 0, k = 0, derived = 0;
    rs_diag_t d;
    rs_sources_h src;
    ASSERT_ST(rs_dir_open(w->env.url, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_read_slot(dir, MODEL, v, 0, &d, &e, &n), RS_OK, d);
    while (who != NULL && k < n && strcmp(e[k].publisher, who) != 0)
        k++;
    assert_true(k < n);
    assert_int_equal(rs_sources_create(&src), RS_OK);
    ASSERT_ST(rs_sources_load_string(src, e[k].table, e[k].len, "t", &d),
              RS_OK, d);
    rs_dir_entries_free(e, n);
    rs_dir_close(dir);
    for (size_t i = 0; i < rs_sources_num_shards(src); i++) {
        rs_shard_desc_t sh;
        rs_sources_shard(src, i, &sh);
        if (strchr(sh.tensor, '#') == NULL)
            continue;
        derived++;
        size_t j = 0;
        for (; j < ws->n; j++) {
            const want_t *x = &ws->e[j];
            if (strcmp(x->name, sh.tensor) == 0 && sh.ndim == 2 &&
                sh.dtype == x->dtype && sh.full_shape[0] == x->full[0] &&
                sh.full_shape[1] == x->full[1] && sh.offset[0] == x->off[0] &&
                sh.offset[1] == x->off[1] && sh.shape[0] == x->shape[0] &&
                sh.shape[1] == x->shape[1])
                break;
        }
        if (j == ws->n)
            fail_msg("version %lld: unexpected entry '%s' [%lld, %lld] + "
                     "[%lld, %lld]", (long long)v, sh.tensor,
                     (long long)sh.offset[0], (long long)sh.offset[1],
                     (long long)sh.shape[0], (long long)sh.shape[1]);
        assert_int_equal(sh.addr % 64, 0);
        assert_non_null(sh.digest);
        if (digests != NULL)
            snprintf(digests[j], 64, "%s", sh.digest);
    }
    assert_int_equal(derived, ws->n);
    rs_sources_destroy(src);
}

/* ---- reading them back ---- */

/* The reference bytes of want x (a box of values or scales). */
static void expect_bytes(const want_t *x, const ref_t *r, const uint8_t *got,
                         int64_t v)
{
    for (int64_t i = 0; i < x->shape[0]; i++)
        for (int64_t j = 0; j < x->shape[1]; j++) {
            int64_t gi = x->off[0] + i, gj = x->off[1] + j;
            int64_t k = i * x->shape[1] + j;
            if (x->scale) {
                float want = r->scale[gi * r->gcols + gj], have;
                memcpy(&have, got + 4 * k, 4);
                if (memcmp(&want, &have, 4) != 0)
                    fail_msg("version %lld %s[%lld][%lld] = %a, want %a",
                             (long long)v, x->name, (long long)gi,
                             (long long)gj, (double)have, (double)want);
            } else if (got[k] != r->q[gi * r->cols + gj]) {
                float s = r->scale[(gi / r->br) * r->gcols + gj / r->bc];
                float in = x->t->full[gi * r->cols + gj];
                fail_msg("version %lld %s[%lld][%lld] = 0x%02x, want 0x%02x "
                         "(value %a, scale %a, value / scale %a)",
                         (long long)v, x->name, (long long)gi, (long long)gj,
                         got[k], r->q[gi * r->cols + gj], (double)in,
                         (double)s, (double)(in / s));
            }
        }
}

static rs_capture_h wants_capture(const wants_t *ws)
{
    rs_capture_h cap;
    rs_diag_t d;
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    for (size_t i = 0; i < ws->n; i++) {
        const want_t *x = &ws->e[i];
        char pname[128];
        int declared = 0;
        for (size_t j = 0; j < i; j++)
            declared |= strcmp(ws->e[j].name, x->name) == 0;
        if (!declared)
            ASSERT_ST(rs_capture_declare_source(cap, x->name, 2, x->full,
                                                x->dtype, &d), RS_OK, d);
        snprintf(pname, sizeof(pname), "p%zu", i);
        ASSERT_ST(rs_capture_add_param(cap, pname, 2, x->shape, x->dtype,
                                       &d), RS_OK, d);
        rs_op_t ops[2] = {{.kind = RS_OP_NARROW, .arg = {0, x->off[0],
                                                         x->shape[0]}},
                          {.kind = RS_OP_NARROW, .arg = {1, x->off[1],
                                                         x->shape[1]}}};
        const int64_t stride[2] = {x->shape[1], 1};
        rs_copy_desc_t c = {x->name, pname, ops, 2, 0, 2, x->shape, stride,
                            x->dtype};
        ASSERT_ST(rs_capture_add_copy(cap, &c, &d), RS_OK, d);
    }
    return cap;
}

/* The receivers' params: this world's directory, model and backend. */
static void receiver_params(const world_t *w, rs_receiver_params_t *rp)
{
    rs_receiver_params_init(rp);
    rp->directory = w->env.url;
    rp->model = MODEL;
    rp->backend = w->backend;
    rp->discover_timeout_s = 10;
    rp->timeout_s = 20;
    rp->announce_cuts = 0;
}

/* A receiver reads every entry of ws from version v through the table
 * (salt picks the replica) and each byte is checked against the reference
 * quantization of the full tensors. */
static void pull_exact(world_t *w, const wants_t *ws, int64_t v,
                       uint64_t salt, int release)
{
    rs_receiver_params_t rp;
    rs_receiver_h r;
    rs_pull_result_t res;
    rs_diag_t d;
    uint8_t *dest[32];
    rs_capture_h cap = wants_capture(ws);
    receiver_params(w, &rp);
    rp.salt = salt;
    rp.release_after = release;
    ASSERT_ST(rs_receiver_create(&rp, cap, &d, &r), RS_OK, d);
    for (size_t i = 0; i < ws->n; i++) {
        const want_t *x = &ws->e[i];
        uint64_t nbytes = (uint64_t)(x->shape[0] * x->shape[1]) *
                          rs_dtype_size(x->dtype);
        dest[i] = calloc(1, (size_t)nbytes);
        ASSERT_ST(rs_receiver_bind(r, i, dest[i], nbytes, RS_MEM_HOST, &d),
                  RS_OK, d);
    }
    ASSERT_ST(rs_receiver_pull(r, v, &d, &res), RS_OK, d);
    assert_int_equal(res.version, v);
    rs_receiver_destroy(r);
    rs_capture_destroy(cap);
    for (size_t i = 0; i < ws->n; i++) {
        const want_t *x = &ws->e[i];
        int64_t b[2];
        ref_t ref;
        spec_block(x->t, x->spec, b);
        ref_quantize(x->t->full, x->t->rows, x->t->cols, b[0], b[1],
                     spec_fmt(x->spec), &ref);
        expect_bytes(x, &ref, dest[i], v);
        ref_free(&ref);
        free(dest[i]);
    }
}

static void publish(world_t *w, rs_publisher_h pub, int64_t v)
{
    rs_diag_t d;
    fill(w, v);
    ASSERT_ST(rs_publisher_publish(pub, v, &d), RS_OK, d);
    scribble(w); /* the trainer goes on: the arena holds v */
}

static void release(world_t *w, rs_publisher_h pub, int64_t v)
{
    dir_env_release(&w->env, MODEL, v, pub);
}

/* Two versions under the rules; scribble overwrites the shards after each
 * publish (not `full`, the reference's input). */
static void rules_two_versions(const char *backend)
{
    world_t *w = world_open(backend);
    wants_t ws;
    rule_wants(w, &ws);
    /* w: rows [0, 128) and [256, 300) (block row 1 straddles row 150);
     * u: columns [0, 128) and [256, 300); v: both specs whole */
    assert_int_equal(ws.n, 2 * (2 + 2 + 1 + 1));
    assert_int_equal(ws.e[0].shape[0], 128);
    assert_int_equal(ws.e[2].off[0], 256);
    assert_int_equal(ws.e[2].shape[0], 44);
    rs_publisher_h pub = open_publisher(w, 0, rules, 5, 0);
    for (int64_t v = 1; v <= 2; v++) {
        w->notices = 0;
        publish(w, pub, v);
        expect_table(w, v, NULL, &ws, NULL);
        /* 5 tensors' 7 shards, and each quantized box's values and scales */
        assert_int_equal(rs_publisher_num_served(pub), 7 + ws.n);
        pull_exact(w, &ws, v, 0, 1);
        release(w, pub, v);
        /* n (i32) and norm (rank 1 under a 2-D block): told once each */
        assert_int_equal(w->notices, v == 1 ? 2 : 0);
        if (v == 1) {
            assert_non_null(strstr(w->notice[0], "'n'"));
            assert_non_null(strstr(w->notice[0], "dtype is i32"));
            assert_non_null(strstr(w->notice[1], "'norm'"));
        }
    }
    rs_publisher_destroy(pub);
    world_close(w);
}

static void test_rules_cma(void **state)
{
    (void)state;
    rules_two_versions("cma");
}

static void test_rules_ucx(void **state)
{
    (void)state;
    rules_two_versions("ucx");
}

/* Two replicas of the rank quantize the same bytes: equal boxes and
 * digests, one slot, and receivers reading either are exact. */
static void test_replicas(void **state)
{
    (void)state;
    world_t *w = world_open("cma");
    wants_t ws;
    char dig[2][32][64];
    rule_wants(w, &ws);
    rs_publisher_h a = open_publisher(w, 0, rules, 5, 0);
    rs_publisher_h b = open_publisher(w, 1, rules, 5, 0);
    fill(w, 1);
    rs_diag_t d;
    ASSERT_ST(rs_publisher_publish(a, 1, &d), RS_OK, d);
    ASSERT_ST(rs_publisher_publish(b, 1, &d), RS_OK, d);
    scribble(w);
    expect_table(w, 1, "trainer-0", &ws, dig[0]);
    expect_table(w, 1, "trainer-0-r1", &ws, dig[1]);
    for (size_t i = 0; i < ws.n; i++)
        assert_string_equal(dig[0][i], dig[1][i]);
    pull_exact(w, &ws, 1, 0, 0);
    pull_exact(w, &ws, 1, 1, 1);
    rs_publisher_destroy(a);
    rs_publisher_destroy(b);
    world_close(w);
}

static void expect_create_refused(world_t *w, const char *entry, int staging,
                                  const char *needle)
{
    rs_publisher_params_t pp;
    rs_publisher_h pub = NULL;
    rs_diag_t d;
    const char *q[2] = {"w=" B128, entry};
    rs_publisher_params_init(&pp);
    pp.directory = w->env.url;
    pp.model = MODEL;
    pp.world = 1;
    pp.backend = "cma";
    pp.staging = staging;
    pp.quantize = q;
    pp.num_quantize = 2;
    rs_diag_clear(&d);
    assert_int_equal(rs_publisher_create(&pp, &d, &pub), RS_ERR_INVALID_ARG);
    assert_null(pub);
    ASSERT_MSG_HAS(d, needle);
}

static void test_bad_entries(void **state)
{
    (void)state;
    world_t *w = world_open("cma");
    char want[160];
    const char *bad[] = {"w", ("=" B128), "w=fp8_block:0x128:f8e4m3",
                         "w=fp8_block:128x128:f8e4m9", "w=int8",
                         "w=fp8_block:128x128:f8e4m3:extra"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(want, sizeof(want), "quantize entry 1 '%s'", bad[i]);
        expect_create_refused(w, bad[i], RS_STAGING_ARENA, want);
    }
    expect_create_refused(w, "u=" B64, RS_STAGING_CALLER, "staging arena");
    expect_create_refused(w, "u=" B64, RS_STAGING_IN_PLACE, "quantize");
    /* a count without a list, and quantize_wanted with another staging */
    rs_publisher_params_t pp;
    rs_publisher_h pub = NULL;
    rs_diag_t d;
    rs_publisher_params_init(&pp);
    pp.directory = w->env.url;
    pp.model = MODEL;
    pp.world = 1;
    pp.staging = RS_STAGING_ARENA;
    pp.num_quantize = 3;
    assert_int_equal(rs_publisher_create(&pp, &d, &pub), RS_ERR_INVALID_ARG);
    ASSERT_MSG_HAS(d, "num_quantize");
    pp.num_quantize = 0;
    pp.quantize_wanted = 1;
    pp.staging = RS_STAGING_CALLER;
    assert_int_equal(rs_publisher_create(&pp, &d, &pub), RS_ERR_INVALID_ARG);
    ASSERT_MSG_HAS(d, "quantize_wanted");
    assert_null(pub);
    world_close(w);
}

/* Version v has no table in slot 0. */
static void expect_unpublished(world_t *w, int64_t v)
{
    rs_dir_h dir;
    rs_dir_entry_t *e = NULL;
    size_t n = 0;
    rs_diag_t d;
    ASSERT_ST(rs_dir_open(w->env.url, &d, &dir), RS_OK, d);
    rs_status_t st = rs_dir_read_slot(dir, MODEL, v, 0, &d, &e, &n);
    assert_true(st != RS_OK || n == 0);
    rs_dir_entries_free(e, n);
    rs_dir_close(dir);
}

static void expect_publish_fails(world_t *w, rs_publisher_h pub, int64_t v,
                                 const char *tensor, const char *spec,
                                 const char *block)
{
    rs_diag_t d;
    char want[96];
    rs_diag_clear(&d);
    assert_int_equal(rs_publisher_publish(pub, v, &d), RS_ERR_INPUT);
    snprintf(want, sizeof(want), "quantizing '%s' as %s", tensor, spec);
    ASSERT_MSG_HAS(d, want);
    ASSERT_MSG_HAS(d, block);
    ASSERT_MSG_HAS(d, "NaN or an infinity");
    expect_unpublished(w, v);
}

/* A non-finite value in a served block fails the publish; in a block no
 * shard serves it does not (receivers that quantize it refuse it). */
static void test_non_finite(void **state)
{
    (void)state;
    world_t *w = world_open("cma");
    wants_t ws;
    rule_wants(w, &ws);
    rs_publisher_h pub = open_publisher(w, 0, rules, 5, 0);
    publish(w, pub, 1);
    release(w, pub, 1);
    fill(w, 2);
    put_value(&w->t[0], 5, 7, NAN); /* w block (0, 0) */
    expect_publish_fails(w, pub, 2, "w", B128, "block [0, 0]");
    fill(w, 2);
    put_value(&w->t[1], 199, 299, INFINITY); /* u's ragged corner block */
    expect_publish_fails(w, pub, 2, "u", B64, "block [3, 2]");
    fill(w, 2);
    put_value(&w->t[2], 0, 0, -INFINITY); /* v, both specs */
    expect_publish_fails(w, pub, 2, "v", CH4, "block [0, 0]");
    /* fixed: the same version publishes and is exact */
    publish(w, pub, 2);
    pull_exact(w, &ws, 2, 0, 1);
    release(w, pub, 2);
    /* w row 140 lies in block row 1, which straddles the halves */
    fill(w, 3);
    put_value(&w->t[0], 140, 3, NAN);
    rs_diag_t d;
    ASSERT_ST(rs_publisher_publish(pub, 3, &d), RS_OK, d);
    expect_table(w, 3, NULL, &ws, NULL);
    release(w, pub, 3);
    rs_publisher_destroy(pub);
    world_close(w);
}

static void put_record(world_t *w, const char *holder, rs_cuts_h cuts)
{
    rs_diag_t d;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    ASSERT_ST(rs_cuts_write_json(cuts, f, &d), RS_OK, d);
    fclose(f);
    dir_env_put_cuts(&w->env, MODEL, holder, text, len);
    free(text);
}

static void drop_record(world_t *w, const char *holder)
{
    rs_dir_h dir;
    rs_diag_t d;
    ASSERT_ST(rs_dir_open(w->env.url, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_drop_cuts(dir, MODEL, holder, &d), RS_OK, d);
    rs_dir_close(dir);
}

/* quantize_wanted alone: nothing quantized until a record asks; then what
 * it asks for (a second record adds another spec), until dropped. */
static void test_wanted(void **state)
{
    (void)state;
    world_t *w = world_open("cma");
    wants_t none = {.n = 0}, ws, both;
    rs_publisher_h pub = open_publisher(w, 0, NULL, 0, 1);
    publish(w, pub, 1);
    expect_table(w, 1, NULL, &none, NULL);
    release(w, pub, 1);
    rs_cuts_h rec = NULL, rec2 = NULL;
    rs_diag_t d;
    assert_int_equal(rs_cuts_create(&d, &rec), RS_OK);
    ASSERT_ST(rs_cuts_set_model(rec, MODEL, &d), RS_OK, d);
    ASSERT_ST(rs_cuts_add_quant(rec, "w", B128, &d), RS_OK, d);
    ASSERT_ST(rs_cuts_add_quant(rec, "n", B128, &d), RS_OK, d);
    ASSERT_ST(rs_cuts_add_quant(rec, "absent", B128, &d), RS_OK, d);
    put_record(w, "vllm-0", rec);
    w->notices = 0;
    publish(w, pub, 2);
    ws.n = 0;
    add_wants(&ws, &w->t[0], B128);
    expect_table(w, 2, NULL, &ws, NULL);
    pull_exact(w, &ws, 2, 0, 1);
    release(w, pub, 2);
    assert_int_equal(w->notices, 1); /* n: i32 */
    assert_non_null(strstr(w->notice[0], "'n'"));
    assert_int_equal(rs_cuts_create(&d, &rec2), RS_OK);
    ASSERT_ST(rs_cuts_add_quant(rec2, "w", CH5, &d), RS_OK, d);
    put_record(w, "vllm-1", rec2);
    publish(w, pub, 3);
    both = ws;
    add_wants(&both, &w->t[0], CH5);
    expect_table(w, 3, NULL, &both, NULL);
    pull_exact(w, &both, 3, 0, 1);
    release(w, pub, 3);
    drop_record(w, "vllm-0");
    drop_record(w, "vllm-1");
    publish(w, pub, 4);
    expect_table(w, 4, NULL, &none, NULL);
    release(w, pub, 4);
    rs_cuts_destroy(rec);
    rs_cuts_destroy(rec2);
    rs_publisher_destroy(pub);
    world_close(w);
}

/* Cut-aligned and quantizing at once: the shards are cut at a record's
 * cuts (w's columns at 100, u's rows at 50), the quantized boxes are not
 * (neither cut is on a block boundary), and both read back exactly. */
/* Publishers open cut-aligned, after a record cutting w's columns and u's
 * rows at the given points (n of each); returns the record. */
static rs_cuts_h cut_record(world_t *w, const int64_t *wcols,
                            const int64_t *urows, int n)
{
    rs_cuts_h rec = NULL;
    rs_diag_t d;
    const int64_t wshape[2] = {300, 260}, ushape[2] = {200, 300};
    w->cut_aligned = 1;
    assert_int_equal(rs_cuts_create(&d, &rec), RS_OK);
    for (int i = 0; i < n; i++) {
        ASSERT_ST(rs_cuts_add(rec, "w", 2, wshape, 1, wcols[i], &d), RS_OK, d);
        ASSERT_ST(rs_cuts_add(rec, "u", 2, ushape, 0, urows[i], &d), RS_OK, d);
    }
    put_record(w, "vllm-0", rec);
    return rec;
}

static void test_with_cut_aligned(void **state)
{
    (void)state;
    world_t *w = world_open("cma");
    wants_t ws;
    const int64_t wcols[1] = {100}, urows[1] = {50};
    rule_wants(w, &ws);
    rs_cuts_h rec = cut_record(w, wcols, urows, 1);
    rs_publisher_h pub = open_publisher(w, 0, rules, 5, 0);
    publish(w, pub, 1);
    expect_table(w, 1, NULL, &ws, NULL);
    /* w's halves and u's halves in two sub-boxes each, v, n, norm whole */
    assert_int_equal(rs_publisher_num_served(pub), 4 + 4 + 3 + ws.n);
    pull_exact(w, &ws, 1, 0, 1);
    release(w, pub, 1);
    rs_cuts_destroy(rec);
    rs_publisher_destroy(pub);
    world_close(w);
}


/* Splits every entry of "<src>#<spec>" (values at `at` along dim, scales at
 * at / block) that the cut crosses: where a cut-aligned publisher's FP8
 * boxes must end. */
static void cut_wants(wants_t *ws, const char *src, const char *spec, int dim,
                      int64_t at, int64_t block)
{
    char name[96];
    snprintf(name, sizeof(name), "%s#%s", src, spec);
    for (size_t i = 0, n = ws->n; i < n; i++) {
        want_t *x = &ws->e[i];
        int64_t c = x->scale ? at / block : at;
        if (strncmp(x->name, name, strlen(name)) != 0 ||
            x->name[strlen(name)] != (x->scale ? '#' : '\0') ||
            c <= x->off[dim] || c >= x->off[dim] + x->shape[dim])
            continue;
        want_t *y = &ws->e[ws->n++];
        *y = *x;
        y->off[dim] = c;
        y->shape[dim] = x->off[dim] + x->shape[dim] - c;
        x->shape[dim] = c - x->off[dim];
    }
}

/* A receiver quantizing rows [0, 128) and columns [128, 260) of w (block
 * row 0, block columns 1 and 2: the ragged last one) reads them, on the
 * publisher path, as exactly the bytes of one FP8 piece and its scales,
 * and installs the reference's codes and scales. */
static void pull_quantized_slice(world_t *w, int64_t v)
{
    rs_receiver_params_t rp;
    rs_receiver_h r;
    rs_pull_result_t res;
    rs_diag_t d;
    rs_capture_h cap;
    const tensor_t *t = &w->t[0];
    const int64_t full[2] = {t->rows, t->cols}, ps[2] = {128, 132},
                  pst[2] = {132, 1}, ss[2] = {1, 2}, sst[2] = {2, 1},
                  blk[2] = {128, 128};
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    ASSERT_ST(rs_capture_declare_source(cap, "w", 2, full, RS_DTYPE_BF16, &d),
              RS_OK, d);
    ASSERT_ST(rs_capture_add_param(cap, "wq", 2, ps, RS_DTYPE_F8E4M3, &d),
              RS_OK, d);
    ASSERT_ST(rs_capture_add_param(cap, "wq_scale", 2, ss, RS_DTYPE_F32, &d),
              RS_OK, d);
    rs_op_t ops[2] = {{.kind = RS_OP_NARROW, .arg = {0, 0, 128}, .has = 7},
                      {.kind = RS_OP_NARROW, .arg = {1, 128, 132}, .has = 7}};
    rs_copy_desc_t c = {"w", "wq", ops, 2, 0, 2, ps, pst, RS_DTYPE_F8E4M3};
    rs_quant_desc_t q = {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, blk,
                         "wq_scale", 0, 2, ss, sst};
    ASSERT_ST(rs_capture_add_quant_copy(cap, &c, &q, &d), RS_OK, d);
    receiver_params(w, &rp);
    ASSERT_ST(rs_receiver_create(&rp, cap, &d, &r), RS_OK, d);
    uint8_t codes[128 * 132];
    float scales[2];
    memset(codes, 0xa5, sizeof(codes));
    memset(scales, 0xa5, sizeof(scales));
    ASSERT_ST(rs_receiver_bind(r, 0, codes, sizeof(codes), RS_MEM_HOST, &d),
              RS_OK, d);
    ASSERT_ST(rs_receiver_bind(r, 1, scales, sizeof(scales), RS_MEM_HOST, &d),
              RS_OK, d);
    ASSERT_ST(rs_receiver_pull(r, v, &d, &res), RS_OK, d);
    size_t nq = 0;
    const rs_quantized_t *qr = rs_plan_quantized(rs_receiver_plan(r), &nq);
    assert_int_equal(nq, 1);
    assert_int_equal(qr[0].path, RS_QUANT_PATH_PUBLISHER);
    /* exactly the piece: its codes and two scales, one read each */
    assert_int_equal(res.stages.bytes, sizeof(codes) + sizeof(scales));
    assert_int_equal(res.stages.descriptors, 2);
    rs_receiver_destroy(r);
    rs_capture_destroy(cap);
    ref_t ref;
    ref_quantize(t->full, t->rows, t->cols, 128, 128, E4M3, &ref);
    for (int64_t i = 0; i < 128; i++)
        for (int64_t j = 0; j < 132; j++)
            if (codes[i * 132 + j] != ref.q[i * t->cols + 128 + j])
                fail_msg("version %lld wq[%lld][%lld] = 0x%02x, want 0x%02x",
                         (long long)v, (long long)i, (long long)j,
                         codes[i * 132 + j], ref.q[i * t->cols + 128 + j]);
    for (int k = 0; k < 2; k++)
        if (memcmp(&scales[k], &ref.scale[1 + k], sizeof(float)) != 0)
            fail_msg("version %lld wq_scale[%d] = %a, want %a", (long long)v,
                     k, (double)scales[k], (double)ref.scale[1 + k]);
    ref_free(&ref);
}

/* Cut-aligned with cuts on block boundaries: w's columns at 128 (and 100,
 * inside a block), u's rows at 64 (and 50). The FP8 boxes are cut where
 * the shards are, at the cuts on their blocks' boundaries only (each piece
 * whole blocks, quantized as the whole box would be), their scales at the
 * cut over the block; every piece reads back exactly, and a receiver's
 * quantized copy of one piece reads exactly its bytes. */
static void test_cut_at_blocks(void **state)
{
    (void)state;
    world_t *w = world_open("cma");
    wants_t ws;
    const int64_t wcols[2] = {100, 128}, urows[2] = {50, 64};
    rule_wants(w, &ws);
    cut_wants(&ws, "w", B128, 1, 128, 128);
    cut_wants(&ws, "u", B64, 0, 64, 64);
    /* w's two boxes and u's two boxes each cut in two */
    assert_int_equal(ws.n, 2 * (2 + 2 + 1 + 1) + 2 * 4);
    rs_cuts_h rec = cut_record(w, wcols, urows, 2);
    rs_publisher_h pub = open_publisher(w, 0, rules, 5, 0);
    for (int64_t v = 1; v <= 2; v++) {
        publish(w, pub, v);
        expect_table(w, v, NULL, &ws, NULL);
        pull_exact(w, &ws, v, 0, 0);
        pull_quantized_slice(w, v);
        release(w, pub, v);
    }
    rs_cuts_destroy(rec);
    rs_publisher_destroy(pub);
    world_close(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_cma),
        cmocka_unit_test(test_rules_ucx),
        cmocka_unit_test(test_replicas),
        cmocka_unit_test(test_bad_entries),
        cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_wanted),
        cmocka_unit_test(test_with_cut_aligned),
        cmocka_unit_test(test_cut_at_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
