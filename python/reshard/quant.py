"""FP8 quantization in PyTorch by the one rule of include/reshard/quant.h.

`quantize_fp8(weight, scheme, block=..., fmt=...)` is what a loader calls to
turn a bf16/f16/f32 weight into FP8 values and float32 scales. Per block of
the tensor it is given (blocks tile it from element 0, the last one along a
dim may be shorter):

    amax  = max |x|                       (exact)
    scale = amax / fmax in float32        (448 for f8e4m3, 57344 for f8e5m2;
                                           a scale of 0 becomes 1.0)
    q     = x / scale in float32, rounded to the format to nearest even,
            saturating at +-fmax, the sign of zero kept

The scale is the dequantization multiplier (x ~ q * scale), as FP8
checkpoints' weight_scale_inv tensors are. A block holding NaN or an
infinity is refused. PyTorch 1.13 has no float8 dtype, so values come back
as uint8 tensors holding the FP8 bit patterns (`decode` reads them back);
on torch 2.x, `fmt=torch.float8_e4m3fn` (or float8_e5m2) returns them as
that dtype instead, the same bits. Every step is float32 arithmetic and
integer bit manipulation, so the result is bit for bit what libreshard's
rs_quant_box computes (and what torch's own cast of x / scale to the
float8 dtype gives).

During capture (reshard.capture) the weight is a placeholder and the call
is recorded instead: quantize_fp8 dispatches through torch.overrides, so the
placeholder's __torch_function__ sees it as it sees torch's own functions,
and copying the returned values and scales into parameter regions makes
one quantized copy of the capture.
"""
import math

import torch
from torch.overrides import handle_torch_function, has_torch_function

from . import dtypes

SCHEMES = ("fp8_block", "fp8_channel", "fp8_tensor")

# format -> (exponent bias, mantissa bits, largest finite value)
FORMATS = {"f8e4m3": (7, 3, 448.0), "f8e5m2": (15, 2, 57344.0)}

_SOURCE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def format_name(fmt):
    """"f8e4m3" or "f8e5m2" for any spelling of the two formats (the dtype
    names of docs/formats.md, or a torch float8 dtype where torch has one);
    ValueError for anything else."""
    try:
        name = dtypes.short_name(fmt) if isinstance(fmt, str) \
            else dtypes.name_of(fmt)
    except ValueError:
        name = None
    if name not in FORMATS:
        raise ValueError(f"quantize_fp8: format {fmt!r} is not f8e4m3 or "
                         f"f8e5m2")
    return name


def values_dtype(fmt):
    """The dtype of quantize_fp8's values for `fmt`: the torch float8 dtype
    when fmt is one, uint8 bit patterns for a name."""
    format_name(fmt)
    return fmt if isinstance(fmt, torch.dtype) else torch.uint8


def check_spec(scheme, block):
    """The block extents of a spec as a tuple (empty for fp8_channel and
    fp8_tensor); ValueError naming what is wrong."""
    if scheme not in SCHEMES:
        raise ValueError(f"quantize_fp8: scheme {scheme!r} is not one of "
                         f"{', '.join(SCHEMES)}")
    if scheme != "fp8_block":
        if block is not None:
            raise ValueError(f"quantize_fp8: {scheme} takes no block")
        return ()
    if block is None:
        raise ValueError("quantize_fp8: fp8_block needs block=")
    block = tuple(int(b) for b in block)
    if not block or any(b < 1 for b in block):
        raise ValueError(f"quantize_fp8: block {list(block)} needs at least "
                         f"one extent, each positive")
    return block


def block_shape(shape, scheme, block=None):
    """The block extent per dim of a tensor of `shape` (rs_quant_block_shape):
    fp8_block's extents for the trailing dims with leading 1s, [1, shape[1],
    ...] for fp8_channel, `shape` for fp8_tensor; a dim of extent 0 gets 1."""
    block = check_spec(scheme, block)
    shape = tuple(int(s) for s in shape)
    n = len(shape)
    if scheme == "fp8_block":
        if len(block) > n:
            raise ValueError(f"quantize_fp8: block {list(block)} has more "
                             f"dims than the tensor's {list(shape)}")
        return (1,) * (n - len(block)) + block
    if scheme == "fp8_channel" and n < 1:
        raise ValueError("quantize_fp8: fp8_channel needs a tensor of at "
                         "least 1 dim")
    out = tuple(s if s > 0 else 1 for s in shape)
    return out if scheme == "fp8_tensor" else (1,) + out[1:]


def grid_shape(shape, blocks):
    """Blocks per dim: ceil(shape[d] / blocks[d])."""
    return tuple(-(-int(s) // int(b)) for s, b in zip(shape, blocks))


def encode(x, fmt):
    """FP8 bit patterns (uint8) of the finite float32 tensor `x`: rounded to
    nearest even, saturating at +-fmax, the sign of zero kept."""
    bias, mbits, fmax = FORMATS[format_name(fmt)]
    bits = x.contiguous().view(torch.int32)
    sign = (bits >> 24) & 0x80              # bit 31 to bit 7
    fmax_bits = int(torch.tensor(fmax, dtype=torch.float32)
                    .view(torch.int32).item())
    a = torch.clamp(bits & 0x7FFFFFFF, max=fmax_bits)    # saturate
    # Normal results: round the float32 mantissa to mbits, carrying into
    # the exponent, then rebias the exponent (no int32 overflow: a is at
    # most fmax's bits).
    shift = 23 - mbits
    code = ((a + ((1 << (shift - 1)) - 1) + ((a >> shift) & 1)) >> shift) \
        - ((127 - bias) << mbits)
    sub = a < ((128 - bias) << 23)          # below the format's min normal
    if bool(sub.any()):
        code[sub] = _encode_subnormal(a[sub].to(torch.int64), bias, mbits)
    return (sign | code).to(torch.uint8)


def _encode_subnormal(a, bias, mbits):
    """Codes of magnitudes (float32 bits, int64) below the format's least
    normal: the value in units of 2^(1 - bias - mbits), rounded to nearest
    even (a carry into the least normal code is right)."""
    e32 = a >> 23
    m = (a & 0x7FFFFF) | ((e32 > 0).to(torch.int64) << 23)
    s = torch.clamp(151 - bias - mbits - torch.clamp(e32, min=1), 1, 40)
    k = m >> s
    rem = m & ((torch.ones_like(s) << s) - 1)
    half = torch.ones_like(s) << (s - 1)
    k = k + ((rem > half) | ((rem == half) & ((k & 1) == 1))).to(torch.int64)
    return k.to(torch.int32)


def decode(codes, fmt):
    """float32 values of FP8 bit patterns (uint8): the inverse of encode
    for every finite code."""
    bias, mbits, _ = FORMATS[format_name(fmt)]
    c = codes.to(torch.int64)
    e = (c >> mbits) & ((1 << (7 - mbits)) - 1)
    m = (c & ((1 << mbits) - 1)).to(torch.float64)
    mag = torch.where(e > 0, (1 + m / (1 << mbits)) * torch.pow(
        2.0, (e - bias).to(torch.float64)), m * 2.0 ** (1 - bias - mbits))
    return torch.where((c >> 7) == 1, -mag, mag).to(torch.float32)


def _block_amax(x, blocks):
    """max |x| per block (x float32), shaped as the block grid."""
    grid = grid_shape(x.shape, blocks)
    pad = []
    for s, g, b in reversed(list(zip(x.shape, grid, blocks))):
        pad += [0, g * b - s]
    a = torch.nn.functional.pad(x.abs(), pad) if any(pad) else x.abs()
    inter = [v for g, b in zip(grid, blocks) for v in (g, b)]
    if a.numel() == 0:
        return torch.zeros(grid, dtype=torch.float32)
    return a.reshape(inter).amax(dim=tuple(range(1, 2 * len(grid), 2))) \
        if grid else a


def _refuse_non_finite(x, blocks, name):
    bad = ~torch.isfinite(x)
    if not bool(bad.any()):
        return
    first = [int(i) for i in bad.nonzero()[0]]
    where = [i // b for i, b in zip(first, blocks)]
    raise ValueError(f"quantize_fp8: tensor '{name}': block {where} holds "
                     f"NaN or an infinity")


def quantize_fp8(weight, scheme="fp8_block", block=None, fmt="f8e4m3",
                 name="weight"):
    """(q, scale): the FP8 values (weight's shape; uint8 bit patterns, or
    the float8 dtype passed as `fmt` on torch 2.x: `values_dtype`) and
    float32 scales (the block grid, ceil(shape[d] / block[d]) per dim) of
    a bf16, f16 or f32 tensor under the rule above. `block` is fp8_block's
    extents for the trailing dims (e.g. (128, 128)). ValueError for a bad
    spec, an unsupported dtype or a block holding NaN or an infinity
    (`name` names the tensor in messages)."""
    if has_torch_function((weight,)):
        # A tensor subclass or a torch function mode takes the call (the
        # capture's placeholder records it).
        return handle_torch_function(quantize_fp8, (weight,), weight,
                                     scheme=scheme, block=block, fmt=fmt,
                                     name=name)
    out_dtype, fmt = values_dtype(fmt), format_name(fmt)
    if weight.dtype not in _SOURCE_DTYPES:
        raise ValueError(f"quantize_fp8: tensor '{name}' is "
                         f"{weight.dtype}, not bf16, f16 or f32")
    blocks = block_shape(weight.shape, scheme, block)
    with torch.no_grad():
        x = weight.detach().to(device="cpu", dtype=torch.float32)
        _refuse_non_finite(x, blocks, name)
        amax = _block_amax(x, blocks)
        # Full tensors on both sides: a broadcast scalar operand may be
        # divided as a multiplication by its reciprocal, which rounds
        # differently from one IEEE division.
        scale = amax / torch.full_like(amax, FORMATS[fmt][2])
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        per_elem = _expand_scale(scale, x.shape, blocks)
        q = encode(x / per_elem, fmt) if x.numel() else \
            torch.zeros(x.shape, dtype=torch.uint8)
    return q.view(out_dtype), scale


def _expand_scale(scale, shape, blocks):
    """Each element's block scale, as a full contiguous float32 tensor."""
    out = scale
    for d, b in enumerate(blocks):
        out = out.repeat_interleave(int(b), dim=d).narrow(d, 0, shape[d]) \
            if shape[d] else out.narrow(d, 0, 0)
    return out.contiguous().clone()


def scale_count(shape, scheme, block=None):
    """Number of scales of a tensor of `shape`."""
    return math.prod(grid_shape(shape, block_shape(shape, scheme, block)))
