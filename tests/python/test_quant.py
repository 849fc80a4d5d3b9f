"""reshard.quant.quantize_fp8 follows the rule of include/reshard/quant.h bit
for bit: against libreshard's rs_quant_box (through ctypes) and against a
small pure-Python reference written from the rule with exact rational
arithmetic, over adversarial values: FP8 rounding ties, saturation,
subnormal inputs and outputs, zero blocks, negative zero, scales that
underflow, short last blocks; non-finite blocks are refused."""
import ctypes
import math
import random
import struct
from fractions import Fraction

import pytest
import torch

from reshard import _lib, quant
from reshard.dtypes import code_of

# ---------------------------------------------------------------- reference


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _round_f32(fr):
    """An exact non-negative rational rounded to float32, nearest even
    (subnormals included; no overflow in these tests)."""
    if fr == 0:
        return 0.0
    e = fr.numerator.bit_length() - fr.denominator.bit_length()
    if Fraction(2) ** e > fr:
        e -= 1
    e = max(e, -126)                    # subnormal spacing below 2^-126
    ulp = Fraction(2) ** (e - 23)
    k, rem = divmod(fr, ulp)
    if rem > ulp / 2 or (rem == ulp / 2 and k % 2 == 1):
        k += 1
    return float(k * ulp)


def _fp8_table(fmt):
    """(exact value, code) of every finite non-negative code."""
    bias, mbits, _ = quant.FORMATS[fmt]
    out = []
    for code in range(128):
        e, m = code >> mbits, code & ((1 << mbits) - 1)
        if fmt == "f8e4m3" and code == 0x7F:
            continue                    # NaN
        if fmt == "f8e5m2" and e == 31:
            continue                    # inf, NaN
        if e == 0:
            v = Fraction(m, 1 << mbits) * Fraction(2) ** (1 - bias)
        else:
            v = (1 + Fraction(m, 1 << mbits)) * Fraction(2) ** (e - bias)
        out.append((v, code))
    return out


_TABLES = {f: _fp8_table(f) for f in quant.FORMATS}


def _ref_encode(v, fmt):
    table = _TABLES[fmt]
    a = min(Fraction(abs(v)), table[-1][0])       # saturate
    best = min(table, key=lambda vc: (abs(vc[0] - a), vc[1] & 1))
    return (0x80 if math.copysign(1.0, v) < 0 else 0) | best[1]


def _ref_quantize(values, shape, blocks, fmt):
    """values: flat list of float32 values, row-major in `shape`."""
    fmax = Fraction(quant.FORMATS[fmt][2])
    grid = [-(-s // b) for s, b in zip(shape, blocks)]
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]

    def block_of(flat):
        idx = [(flat // st) % s for st, s in zip(strides, shape)]
        return tuple(i // b for i, b in zip(idx, blocks))

    amax = {}
    for i, v in enumerate(values):
        g = block_of(i)
        amax[g] = max(amax.get(g, 0.0), abs(v))
    scales = {}
    for g, a in amax.items():
        s = _round_f32(Fraction(a) / fmax)
        scales[g] = s if s != 0 else 1.0
    q = [_ref_encode(math.copysign(_round_f32(abs(Fraction(v)) /
                                               Fraction(scales[block_of(i)])),
                                    v), fmt)
         for i, v in enumerate(values)]
    flat_grid = []
    for gi in range(math.prod(grid)):
        gs = [math.prod(grid[d + 1:]) for d in range(len(grid))]
        flat_grid.append(scales.get(tuple((gi // st) % n
                                          for st, n in zip(gs, grid)), 1.0))
    return q, flat_grid

# ---------------------------------------------------------------- inputs


def _tie_block(fmt):
    """A block whose amax is fmax (scale exactly 1.0), so its other values
    are rounded as they are: FP8 ties (normal and subnormal), values just
    either side of them, zeros of both signs."""
    bias, mbits, fmax = quant.FORMATS[fmt]
    vals = [fmax, -0.0, 0.0]
    table = _TABLES[fmt]
    for (a, _), (b, _) in zip(table, table[1:]):
        mid = float((a + b) / 2)
        vals += [mid, -mid, math.nextafter(mid, 0), math.nextafter(mid, 1e9)]
    sub = 2.0 ** (1 - bias - mbits)
    vals += [sub / 2, sub / 4, 3 * sub / 2, sub * 0.5000001]
    return [_f32(v) for v in vals]


def _random_f32(rng, n):
    """Finite float32 values from random bit patterns (every exponent,
    subnormals included) mixed with ordinary magnitudes."""
    out = []
    while len(out) < n:
        if rng.random() < 0.5:
            v = struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0]
            if not math.isfinite(v):
                continue
        else:
            v = rng.uniform(-4, 4) * 2.0 ** rng.randint(-20, 20)
        out.append(_f32(v))
    return out


def _cases():
    rng = random.Random(1234)
    cases = []
    for fmt in quant.FORMATS:
        ties = _tie_block(fmt)
        cases.append(("ties", fmt, torch.tensor(ties, dtype=torch.float32)
                      .reshape(1, -1), "fp8_block", (1, len(ties))))
        x = torch.tensor(_random_f32(rng, 37 * 29), dtype=torch.float32)
        cases.append(("f32 bits", fmt, x.reshape(37, 29), "fp8_block",
                      (8, 8)))
        cases.append(("channel", fmt, x.reshape(37, 29), "fp8_channel",
                      None))
        cases.append(("tensor", fmt, x.reshape(37, 29), "fp8_tensor", None))
        z = torch.zeros(6, 10)
        z[0, 0] = -0.0
        z[3:, 5:] = 1e-44              # amax / fmax underflows to 0: scale 1
        z[3, 9] = -2e-45
        cases.append(("zero and tiny", fmt, z, "fp8_block", (3, 5)))
        b = torch.tensor(_random_f32(rng, 5 * 6 * 7)).reshape(5, 6, 7)
        cases.append(("bf16 3d", fmt, b.to(torch.bfloat16), "fp8_block",
                      (4, 3)))
        cases.append(("f16", fmt, torch.tensor(
            [rng.uniform(-60000, 60000) for _ in range(40)]).reshape(4, 10)
            .to(torch.float16), "fp8_block", (3,)))
    return cases


CASES = _cases()


def _ids():
    return [f"{c[0]}-{c[1]}-{c[3]}" for c in CASES]

# ---------------------------------------------------------------- C kernel


def _c_quantize(x, scheme, block, fmt, lo=None, box=None):
    """rs_quant_box over the box (default: all) of the full tensor x."""
    shape = list(x.shape)
    lo = lo or [0] * len(shape)
    box = box or shape
    blk = _lib.ints(block or [])
    desc = _lib.QuantDesc(scheme=_lib.QUANT_SCHEMES[scheme],
                          format=_lib.CONSTANTS["RS_DTYPE_" + fmt.upper()],
                          block_ndim=len(block or []), block=blk)
    src = x[tuple(slice(a, a + n) for a, n in zip(lo, box))].contiguous()
    grid = quant.grid_shape(box, quant.block_shape(shape, scheme, block))
    q = torch.empty(box, dtype=torch.uint8)
    s = torch.empty(grid, dtype=torch.float32)
    diag = _lib.Diag()
    st = _lib.lib().rs_quant_box(
        ctypes.byref(desc), code_of(x.dtype), src.data_ptr(), len(shape),
        _lib.ints(shape), _lib.ints(lo), _lib.ints(box), b"x",
        ctypes.byref(diag), q.data_ptr(), s.data_ptr())
    _lib.check(st, diag)
    return q, s


@pytest.mark.parametrize("case", CASES, ids=_ids())
def test_matches_the_c_kernel(case):
    _, fmt, x, scheme, block = case
    q, s = quant.quantize_fp8(x, scheme, block=block, fmt=fmt)
    cq, cs = _c_quantize(x, scheme, block, fmt)
    assert torch.equal(q, cq)
    assert torch.equal(s.view(torch.int32), cs.view(torch.int32))


@pytest.mark.parametrize("case", CASES, ids=_ids())
def test_matches_the_reference(case):
    _, fmt, x, scheme, block = case
    q, s = quant.quantize_fp8(x, scheme, block=block, fmt=fmt)
    blocks = quant.block_shape(x.shape, scheme, block)
    values = x.float().reshape(-1).tolist()
    rq, rs = _ref_quantize(values, list(x.shape), list(blocks), fmt)
    assert q.reshape(-1).tolist() == rq
    assert s.reshape(-1).tolist() == rs


def test_the_cases_are_adversarial():
    """The inputs reach what they are meant to: ties resolved both ways,
    saturation, subnormal codes, negative zero and scales of 1.0 from
    underflow."""
    _, fmt, x, scheme, block = CASES[0]
    q, s = quant.quantize_fp8(x, scheme, block=block, fmt=fmt)
    assert s.item() == 1.0
    codes = set(q.tolist()[0])
    assert 0x80 in codes and 0x7E in codes and 1 in codes and 2 in codes
    z = [c for c in CASES if c[0] == "zero and tiny"][0]
    q, s = quant.quantize_fp8(z[2], z[3], block=z[4], fmt=z[1])
    assert s.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert q[0, 0].item() == 0x80
    x = CASES[1][2]
    q, _ = quant.quantize_fp8(x, "fp8_tensor", fmt="f8e4m3")
    assert (q & 0x7F).max().item() == 0x7E          # the amax saturates


def test_a_block_aligned_view_quantizes_as_the_full_tensor():
    """Blocks belong to the full tensor: a view starting and ending on
    block boundaries gets the full tensor's values and scales."""
    rng = random.Random(7)
    x = torch.tensor(_random_f32(rng, 40 * 24)).reshape(40, 24)
    full_q, full_s = quant.quantize_fp8(x, "fp8_block", block=(8, 8))
    q, s = quant.quantize_fp8(x[16:40, 8:16], "fp8_block", block=(8, 8))
    assert torch.equal(q, full_q[16:40, 8:16])
    assert torch.equal(s, full_s[2:5, 1:2])
    cq, cs = _c_quantize(x, "fp8_block", (8, 8), "f8e4m3", [16, 8], [24, 8])
    assert torch.equal(q, cq) and torch.equal(s, cs)


def test_refusals():
    x = torch.ones(4, 4)
    x[2, 3] = float("nan")
    with pytest.raises(ValueError, match=r"'w'.*block \[1, 1\]"):
        quant.quantize_fp8(x, "fp8_block", block=(2, 2), name="w")
    x[2, 3] = float("-inf")
    with pytest.raises(ValueError, match="NaN or an infinity"):
        quant.quantize_fp8(x, "fp8_tensor")
    ok = torch.ones(4, 4)
    with pytest.raises(ValueError, match="scheme"):
        quant.quantize_fp8(ok, "fp4")
    with pytest.raises(ValueError, match="positive"):
        quant.quantize_fp8(ok, "fp8_block", block=(0, 2))
    with pytest.raises(ValueError, match="more dims"):
        quant.quantize_fp8(ok, "fp8_block", block=(1, 2, 2))
    with pytest.raises(ValueError, match="takes no block"):
        quant.quantize_fp8(ok, "fp8_channel", block=(1, 4))
    with pytest.raises(ValueError, match="not f8e4m3 or f8e5m2"):
        quant.quantize_fp8(ok, "fp8_tensor", fmt="bf16")
    with pytest.raises(ValueError, match="not bf16, f16 or f32"):
        quant.quantize_fp8(ok.double(), "fp8_tensor")


def test_format_spellings():
    assert quant.format_name("float8_e4m3fn") == "f8e4m3"
    assert quant.format_name("torch.float8_e5m2") == "f8e5m2"
    assert quant.format_name("f8e5m2") == "f8e5m2"


class _Recording(torch.Tensor):
    """A tensor subclass that answers every torch call by recording it,
    as the capture's placeholder does."""
    calls = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append((func, args, kwargs))
        return "recorded"


def test_quantize_fp8_dispatches_through_torch_function():
    """A tensor subclass sees quantize_fp8 itself, with its arguments, as
    it sees torch's own functions (torch.overrides); nothing is computed
    on it."""
    with torch._C.DisableTorchFunction():
        x = torch.Tensor._make_subclass(_Recording, torch.ones(4, 4))
    _Recording.calls.clear()
    out = quant.quantize_fp8(x, "fp8_block", block=(2, 2), fmt="f8e5m2",
                             name="w")
    assert out == "recorded"
    assert len(_Recording.calls) == 1
    func, args, kwargs = _Recording.calls[0]
    assert func is quant.quantize_fp8 and args[0] is x
    assert kwargs == {"scheme": "fp8_block", "block": (2, 2),
                      "fmt": "f8e5m2", "name": "w"}


def test_quantize_fp8_under_a_torch_function_mode():
    """A mode sees the call on a plain tensor too, and the result of
    running it is the plain result."""
    seen = []

    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    x = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    with Mode():
        q, scale = quant.quantize_fp8(x, "fp8_tensor")
    assert quant.quantize_fp8 in seen
    q0, scale0 = quant.quantize_fp8(x, "fp8_tensor")
    assert torch.equal(q, q0) and torch.equal(scale, scale0)
