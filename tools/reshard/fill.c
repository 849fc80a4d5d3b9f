/* Deterministic demo contents: every element of a tensor is a function of
 * the tensor's name, the element's row-major index in the full tensor and
 * the version (docs/formats.md, "Demo contents"). `publish` fills its shards
 * with it and `pull --check` rebuilds whole sources with it, so both sides
 * agree on every byte without exchanging any; with a changed fraction F
 * (--changed-fraction) each version changes about F of every tensor's
 * elements, the rest keeping their bytes. Also loads a model manifest
 * and a layout for the publish, pull and demo verbs. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL
#define GOLDEN 0x9e3779b97f4a7c15ULL
#define VERSION_MIX 0xd1b54a32d192ed03ULL

/* Seeds of the changed-fraction mode live apart from the plain versions'
 * (CHANGED_SPACE), and its phases apart from every value (PHASE_KEY). */
#define CHANGED_SPACE 0x6a09e667f3bcc909ULL
#define PHASE_KEY 0xbb67ae8584caa73bULL
/* Epochs per drawn value in that mode: of an element's changes, 1 in
 * SEGMENT is a new value, the others a step of one in its lowest bit (the
 * measured share of one-step changes is 89 % for bf16 at lr 1e-6,
 * docs/delta.md). A power of two. */
#define SEGMENT 8u

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = FNV_OFFSET;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= FNV_PRIME;
    }
    return h;
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
static void pack(rs_dtype_t dtype, const uint64_t *zs, uint64_t count,
                 unsigned char *dst)
{
    uint64_t i;
    switch (dtype) {
    case RS_DTYPE_BF16:
        for (i = 0; i < count; i++) {
            uint64_t z = zs[i];
            uint16_t v = (uint16_t)(((z >> 63) << 15) |
                                    ((120 + ((z >> 58) & 15)) << 7) | (z & 0x7f));
            memcpy(dst + 2 * i, &v, 2);
        }
        break;
    case RS_DTYPE_F16:
        for (i = 0; i < count; i++) {
            uint64_t z = zs[i];
            uint16_t v = (uint16_t)(((z >> 63) << 15) |
                                    ((8 + ((z >> 58) & 15)) << 10) | (z & 0x3ff));
            memcpy(dst + 2 * i, &v, 2);
        }
        break;
    case RS_DTYPE_F32:
        for (i = 0; i < count; i++) {
            uint64_t z = zs[i];
            uint32_t v = (uint32_t)(((z >> 63) << 31) |
                                    ((120 + ((z >> 58) & 15)) << 23) |
                                    (z & 0x7fffff));
            memcpy(dst + 4 * i, &v, 4);
        }
        break;
    default: /* F64, the only other dtype rs_cli_fill_supported accepts */
        for (i = 0; i < count; i++) {
            uint64_t z = zs[i];
            uint64_t v = ((z >> 63) << 63) | ((1016 + ((z >> 58) & 15)) << 52) |
                         (z & 0xfffffffffffffULL);
            memcpy(dst + 8 * i, &v, 8);
        }
        break;
    }
}

/* The epoch of an element: floor((v * q + phase) / 2^32) modulo 2^64,
 * exact in 64-bit words by splitting v at bit 32 (the low half's product
 * plus the phase stays below 2^64 since q <= 2^32). */
static inline uint64_t epoch(uint64_t v, uint64_t q, uint64_t phase)
{
    return (v >> 32) * q + (((v & 0xffffffffULL) * q + phase) >> 32);
}

/* Elements start .. start+count-1 of one tensor (name hash `name_h`) at
 * `version`, in chunks small enough to stay in L1 between the two
 * passes; fraction_q 0 is the plain contents. */
static void fill_run(rs_dtype_t dtype, uint64_t name_h, int64_t version,
                     uint64_t fraction_q, uint64_t start, uint64_t count,
                     unsigned char *dst)
{
    enum { CHUNK = 256 };
    uint64_t zs[CHUNK];
    uint64_t seed = name_h ^ ((uint64_t)version * VERSION_MIX);
    uint64_t phase_seed = name_h ^ PHASE_KEY;
    size_t elsize = rs_dtype_size(dtype);
    for (uint64_t done = 0; done < count; done += CHUNK) {
        uint64_t n = count - done < CHUNK ? count - done : CHUNK;
        uint64_t i0 = start + done;
        if (fraction_q == 0) {
            for (uint64_t k = 0; k < n; k++)
                zs[k] = mix(seed, i0 + k);
            pack(dtype, zs, n, dst + done * elsize);
            continue;
        }
        for (uint64_t k = 0; k < n; k++) {
            uint64_t i = i0 + k;
            uint64_t ph = mix(phase_seed, i);
            uint64_t e = epoch((uint64_t)version, fraction_q, ph >> 32);
            /* the value is drawn anew once per SEGMENT epochs (at an
             * offset of the element's own), and bit 0 (every dtype's
             * lowest mantissa bit) is the epoch's parity: epochs step by
             * at most 1, so a new epoch always gives new bytes, an element
             * changes exactly when its epoch does, and it changes as an
             * optimizer step changes a weight: by one as an integer of its
             * bytes (the parity alone), but once in SEGMENT moves to a new
             * value. */
            uint64_t seg = (e + (ph & (SEGMENT - 1))) / SEGMENT;
            zs[k] = (mix(name_h ^ (seg * VERSION_MIX) ^ CHANGED_SPACE, i) &
                     ~1ULL) | (e & 1);
        }
        pack(dtype, zs, n, dst + done * elsize);
    }
}

rs_status_t rs_cli_fill_box(const char *tensor, rs_dtype_t dtype,
                            int64_t version, uint64_t fraction_q, int ndim,
                            const int64_t *full_shape, const int64_t *offset,
                            const int64_t *shape, void *dst)
{
    int64_t idx[RS_MAX_DIMS] = {0}, stride[RS_MAX_DIMS];
    int64_t rows = 1;
    uint64_t name_h = fnv1a64(tensor);
    if (!rs_cli_fill_supported(dtype))
        return RS_ERR_UNSUPPORTED;
    if (ndim == 0) {
        fill_run(dtype, name_h, version, fraction_q, 0, 1, dst);
        return RS_OK;
    }
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= full_shape[d];
        rows *= d < ndim - 1 ? shape[d] : 1;
    }
    int64_t len = shape[ndim - 1];
    size_t row_bytes = (size_t)len * rs_dtype_size(dtype);
    unsigned char *out = dst;
    if (len == 0)
        return RS_OK;
    for (int64_t r = 0; r < rows; r++) {
        int64_t start = offset[ndim - 1];
        for (int d = 0; d < ndim - 1; d++)
            start += (offset[d] + idx[d]) * stride[d];
        fill_run(dtype, name_h, version, fraction_q, (uint64_t)start,
                 (uint64_t)len, out);
        out += row_bytes;
        for (int d = ndim - 2; d >= 0 && ++idx[d] == shape[d]; d--)
            idx[d] = 0;
    }
    return RS_OK;
}

/* The decimal text of F as q = floor(F * 2^32), exactly: the digits
 * before and after the point as N / 10^k, then 32 steps of binary long
 * division (the remainder stays below 10^18 < 2^63). */
int rs_cli_parse_fraction(const char *s, uint64_t *q_out)
{
    uint64_t num = 0, den = 1;
    int digits = 0, frac = 0, point = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '.' && !point) {
            point = 1;
            continue;
        }
        if (*p < '0' || *p > '9' || (point && ++frac > 18) ||
            (!point && num > 1))
            return 0; /* not a digit, too many decimals, or above 1 */
        num = num * 10 + (uint64_t)(*p - '0');
        den = point ? den * 10 : den;
        digits++;
    }
    if (digits == 0)
        return 0;
    uint64_t q = num / den, r = num % den;
    if (q > 1 || (q == 1 && r != 0))
        return 0;
    for (int b = 0; b < 32; b++) {
        r *= 2;
        q = q * 2 + (r >= den);
        r -= r >= den ? den : 0;
    }
    if (q == 0)
        return 0; /* below 2^-32 */
    *q_out = q;
    return 1;
}

int rs_cli_take_fraction(const char *verb, const char *arg, uint64_t *q)
{
    if (rs_cli_parse_fraction(arg, q))
        return RS_CLI_OK;
    return rs_cli_usage_error(verb, "--changed-fraction must be a decimal "
                              "number above 0 and at most 1 (at least "
                              "2^-32, at most 18 digits after the point, "
                              "e.g. 0.02), got '%s'", arg);
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
