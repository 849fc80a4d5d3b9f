/* Deterministic demo contents: every element of a tensor is a function of
 * the tensor's name, the element's row-major index in the full tensor and
 * the version (docs/formats.md, "Demo contents"). `publish` fills its shards
 * with it and `pull --check` rebuilds whole sources with it, so both sides
 * agree on every byte without exchanging any. Also loads a model manifest
 * and a layout for the publish, pull and demo verbs. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL
#define GOLDEN 0x9e3779b97f4a7c15ULL
#define VERSION_MIX 0xd1b54a32d192ed03ULL

uint64_t rs_cli_fill_seed(const char *tensor, int64_t version)
{
    uint64_t h = FNV_OFFSET;
    for (const unsigned char *p = (const unsigned char *)tensor; *p; p++) {
        h ^= *p;
        h *= FNV_PRIME;
    }
    return h ^ ((uint64_t)version * VERSION_MIX);
}

/* splitmix64's finalizer over the element's position in the stream. */
static inline uint64_t mix(uint64_t seed, uint64_t index)
{
    uint64_t z = seed + (index + 1) * GOLDEN;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int rs_cli_fill_supported(rs_dtype_t dtype)
{
    return dtype == RS_DTYPE_BF16 || dtype == RS_DTYPE_F16 ||
           dtype == RS_DTYPE_F32 || dtype == RS_DTYPE_F64;
}

/* Sign from bit 63, a normal exponent picked by bits 58..61 (16 binades
 * around 1), the mantissa from the low bits: always finite, never zero. */
static void fill_run(rs_dtype_t dtype, uint64_t seed, uint64_t start,
                     uint64_t count, unsigned char *dst)
{
    uint64_t i;
    switch (dtype) {
    case RS_DTYPE_BF16:
        for (i = 0; i < count; i++) {
            uint64_t z = mix(seed, start + i);
            uint16_t v = (uint16_t)(((z >> 63) << 15) |
                                    ((120 + ((z >> 58) & 15)) << 7) | (z & 0x7f));
            memcpy(dst + 2 * i, &v, 2);
        }
        break;
    case RS_DTYPE_F16:
        for (i = 0; i < count; i++) {
            uint64_t z = mix(seed, start + i);
            uint16_t v = (uint16_t)(((z >> 63) << 15) |
                                    ((8 + ((z >> 58) & 15)) << 10) | (z & 0x3ff));
            memcpy(dst + 2 * i, &v, 2);
        }
        break;
    case RS_DTYPE_F32:
        for (i = 0; i < count; i++) {
            uint64_t z = mix(seed, start + i);
            uint32_t v = (uint32_t)(((z >> 63) << 31) |
                                    ((120 + ((z >> 58) & 15)) << 23) |
                                    (z & 0x7fffff));
            memcpy(dst + 4 * i, &v, 4);
        }
        break;
    default: /* F64, the only other dtype rs_cli_fill_supported accepts */
        for (i = 0; i < count; i++) {
            uint64_t z = mix(seed, start + i);
            uint64_t v = ((z >> 63) << 63) | ((1016 + ((z >> 58) & 15)) << 52) |
                         (z & 0xfffffffffffffULL);
            memcpy(dst + 8 * i, &v, 8);
        }
        break;
    }
}

rs_status_t rs_cli_fill_box(const char *tensor, rs_dtype_t dtype,
                            int64_t version, int ndim,
                            const int64_t *full_shape, const int64_t *offset,
                            const int64_t *shape, void *dst)
{
    int64_t idx[RS_MAX_DIMS] = {0}, stride[RS_MAX_DIMS];
    int64_t rows = 1;
    if (!rs_cli_fill_supported(dtype))
        return RS_ERR_UNSUPPORTED;
    if (ndim == 0) {
        fill_run(dtype, rs_cli_fill_seed(tensor, version), 0, 1, dst);
        return RS_OK;
    }
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= full_shape[d];
        rows *= d < ndim - 1 ? shape[d] : 1;
    }
    uint64_t seed = rs_cli_fill_seed(tensor, version);
    int64_t len = shape[ndim - 1];
    size_t row_bytes = (size_t)len * rs_dtype_size(dtype);
    unsigned char *out = dst;
    if (len == 0)
        return RS_OK;
    for (int64_t r = 0; r < rows; r++) {
        int64_t start = offset[ndim - 1];
        for (int d = 0; d < ndim - 1; d++)
            start += (offset[d] + idx[d]) * stride[d];
        fill_run(dtype, seed, (uint64_t)start, (uint64_t)len, out);
        out += row_bytes;
        for (int d = ndim - 2; d >= 0 && ++idx[d] == shape[d]; d--)
            idx[d] = 0;
    }
    return RS_OK;
}

int rs_cli_load_layout(const char *verb, const char *opt, const char *config,
                       const char *spec, int want_vllm, rs_model_h *model_p,
                       rs_layout_t *layout_p)
{
    rs_diag_t diag;
    rs_status_t st;
    rs_diag_clear(&diag);
    if ((st = rs_model_load(config, &diag, model_p)) != RS_OK)
        return rs_cli_input_error(verb, &diag, st, config);
    if ((st = rs_layout_parse(spec, &diag, layout_p)) != RS_OK ||
        (st = rs_layout_check(layout_p, *model_p, &diag)) != RS_OK)
        return rs_cli_input_error(verb, &diag, st, opt);
    if (want_vllm != (layout_p->kind == RS_LAYOUT_VLLM)) {
        fprintf(stderr, "reshard %s: %s takes %s layout, got '%s'\n",
                verb, opt, want_vllm ? "a vllm" : "an fsdp or megatron", spec);
        return RS_CLI_USAGE;
    }
    return RS_CLI_OK;
}
