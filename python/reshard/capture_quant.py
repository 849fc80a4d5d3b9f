"""Capture of reshard.quant.quantize_fp8: a loader that quantizes a view of a
source and copies the values and the scales into parameter regions makes
one quantized copy (docs/formats.md, "quant").

The library quantizes by blocks of the full source tensor, while the loader
quantized the view it was handed. The two agree exactly when the view is a
box of the source in the source's own dim order, starts and ends on the
source's block boundaries (or at its end), and the view's blocks are the
source's blocks seen through it; `quant_spec` checks that and says in the
source's terms which spec it is. Anything else (a transposed or strided
view, a view that cuts a block, an op on the quantized values, values
copied without their scales) marks the source unsupported: never a copy
that would install other bytes than the loader's.
"""
import torch

from . import dtypes, quant
from ._placeholder import (CASTS, IDENTITY, is_pieced, location,
                           make_placeholder, target_dtype, unwrap)


class NotQuantizable(Exception):
    """The quantization cannot be expressed; the message says why."""


def view_box(ops, shape):
    """(lo, length) per source dim of the box the op chain selects, and for
    each view dim the source dim it runs along (None for an inserted dim
    of extent 1). NotQuantizable for a view that is no box in the source's
    dim order."""
    lo, ln, kept = [0] * len(shape), list(shape), list(range(len(shape)))

    def size(i):
        return ln[kept[i]] if kept[i] is not None else 1

    def cut(i, start, length):
        if start < 0:
            start += size(i)
        if kept[i] is None:
            if (start, length) != (0, 1):
                raise NotQuantizable("of a view that cuts an inserted dim")
            return
        lo[kept[i]] += start
        ln[kept[i]] = length

    def drop(i, index):
        cut(i, index, 1)
        del kept[i]

    for op in ops:
        name, a = op[0], op[1:]
        if name == "narrow":
            cut(a[0], a[1], a[2])
        elif name == "slice":
            step = a[3] if len(a) > 3 and a[3] is not None else 1
            start = a[1] if a[1] is not None else 0
            stop = a[2] if a[2] is not None else size(a[0])
            if step != 1:
                raise NotQuantizable("of a strided slice")
            cut(a[0], start, stop - start)
        elif name in ("select", "unbind"):
            drop(a[0], a[1])
        elif name == "chunk":
            chunks, dim, i = a
            piece = -(-size(dim) // chunks)
            cut(dim, i * piece, max(0, min(piece, size(dim) - i * piece)))
        elif name == "split":
            sizes, dim, i = a
            if isinstance(sizes, list):
                cut(dim, sum(sizes[:i]), sizes[i])
            else:
                cut(dim, i * sizes, min(sizes, size(dim) - i * sizes))
        elif name == "unsqueeze":
            kept.insert(a[0], None)
        elif name == "squeeze":
            dims = [a[0]] if a else list(range(len(kept)))
            for i in sorted((d for d in dims if size(d) == 1), reverse=True):
                del kept[i]
        elif name == "getitem":
            _getitem(a[0], cut, drop, size, kept)
        elif name != "contiguous":
            raise NotQuantizable(
                f"of a view made with '{name}' (a quantized view must be a "
                f"box of the source in its own dim order)")
    return lo, ln, kept


def _getitem(keys, cut, drop, size, kept):
    d = 0
    for k in keys:
        if k is None:
            d += 1
        elif isinstance(k, list):
            start, stop, step = (k + [None, None, None])[:3]
            if step not in (None, 1):
                raise NotQuantizable("of a strided slice")
            start = 0 if start is None else start
            stop = size(d) if stop is None else stop
            cut(d, start, stop - start)
            d += 1
        else:
            drop(d, k)
    return kept


def quant_spec(ops, shape, scheme, view_blocks, fmt):
    """The quant object (scheme, format, block) in the source's terms for
    quantizing the view the ops select from a source of `shape` with the
    view's blocks `view_blocks`; NotQuantizable when the library's
    blocks of the full source would differ from the loader's."""
    lo, ln, kept = view_box(ops, shape)
    n = len(shape)
    spec = {"scheme": scheme, "format": fmt}
    if scheme == "fp8_block":
        src_blocks = [1] * n
        for i, d in enumerate(kept):
            if d is not None:
                src_blocks[d] = view_blocks[i]
        first = next((d for d in range(n) if src_blocks[d] != 1), n - 1)
        spec["block"] = src_blocks[max(first, 0):] or [1]
        src_blocks = quant.block_shape(shape, scheme, spec["block"])
    else:
        src_blocks = quant.block_shape(shape, scheme)
    for i, d in enumerate(kept):
        if d is None:
            continue
        vb, sb = view_blocks[i], src_blocks[d]
        if vb != sb and not (ln[d] <= vb and ln[d] <= sb):
            raise NotQuantizable(
                f"of a view whose blocks are not the source's: dim {d} has "
                f"blocks of {vb} in the view, {sb} in the source")
    for d in range(n):
        end, b = lo[d] + ln[d], src_blocks[d]
        if lo[d] % b or (end % b and end != shape[d]):
            raise NotQuantizable(
                f"of a view not on block boundaries: source dim {d} is read "
                f"at [{lo[d]}, {end}) with blocks of {b}")
    return spec


def _reinterprets(x, args):
    """Whether `view(args[1])` on quantize_fp8 values x reads their bits as
    uint8 or as the float8 dtype of their format (torch 2.x)."""
    if len(args) != 2 or not isinstance(args[1], torch.dtype):
        return False
    fmt = dtypes.from_name(x._rs_quant[0]["quant"]["format"])
    return args[1] in (torch.uint8, fmt)


def _values_hint(dtype, entry):
    """How a loader gets values of `dtype` from quantize_fp8, if it can."""
    if dtype == torch.uint8:
        return f" (fmt='{entry['quant']['format']}' returns uint8 bits)"
    if dtypes.is_fp8(dtype):
        return f" (fmt={dtype} returns {dtype} values)"
    return ""


def _non_unit(shape):
    return [s for s in shape if s != 1]


# Calls that only add or drop dims of extent 1 on the scales, which keeps
# them expressible (the scale region's shape is compared without them).
_SCALE_RESHAPES = {"view", "reshape", "squeeze", "unsqueeze", "flatten",
                   "contiguous", "view_as", "reshape_as", "unflatten"}


class QuantRecorder:
    """The quantize_fp8 calls of one capture: each hands out placeholders
    of its values and scales, and becomes a quantized copy once both are
    copied whole into parameters."""

    def __init__(self, rec):
        self.rec = rec
        self.pending = []

    def quantize(self, x, scheme, block, fmt):
        quant.format_name(fmt)                # bad arguments raise as
        blocks = quant.block_shape(x.shape, scheme, block)  # eagerly
        if x._rs_raw.dtype not in (torch.bfloat16, torch.float16,
                                   torch.float32):
            raise ValueError(f"quantize_fp8: tensor '{x._rs_srcs[0]}' is "
                             f"{x._rs_raw.dtype}, not bf16, f16 or f32")
        raws = (torch.empty(tuple(x.shape), dtype=quant.values_dtype(fmt),
                            device="meta"),
                torch.empty(quant.grid_shape(x.shape, blocks),
                            dtype=torch.float32, device="meta"))
        if x._rs_ops is not None and (is_pieced(x) or x._rs_cast is not None):
            self.rec.mark([x], "quantize_fp8 of a cast or of a copy "
                               "(the library quantizes the source itself)")
            x = make_placeholder(self.rec, x._rs_raw, x._rs_srcs, None)
        if x._rs_ops is None:
            return self._outputs(raws, x, None, why=x._rs_why)
        src, where = x._rs_srcs[0], location()
        try:
            spec = quant_spec(x._rs_ops, self.rec.source_shapes[src], scheme,
                              blocks, quant.format_name(fmt))
        except NotQuantizable as e:
            self.rec.mark([x], f"quantize_fp8 {e}")
            return self._outputs(raws, x, None)
        self.rec.viewed.setdefault(src, f"'quantize_fp8' at {where}")
        entry = {"src": src, "ops": [list(op) for op in x._rs_ops],
                 "quant": spec, "values": None, "scales": None,
                 "where": where}
        self.pending.append(entry)
        q, s = self._outputs(raws, x, [])
        q._rs_quant, s._rs_quant = (entry, "values"), (entry, "scales")
        return q, s

    def _outputs(self, raws, x, ops, why=None):
        """Placeholders of the values and the scales (meta tensors `raws`)
        of quantizing x."""
        return tuple(make_placeholder(self.rec, raw, x._rs_srcs, ops, why=why)
                     for raw in raws)

    def handle(self, name, func, x, args, kwargs):
        """A call on the values or scales of a quantize_fp8: identity calls
        and contiguous pass, the scales may gain or lose dims of extent 1,
        anything else makes the source unsupported."""
        part = x._rs_quant[1]
        if name == "contiguous":            # both are contiguous already
            return x
        if name in IDENTITY and name not in CASTS:
            target = target_dtype(name, x, args[1:], kwargs)
            if target is None or target == x._rs_raw.dtype:
                return x
        if part == "values" and name == "view" and _reinterprets(x, args):
            # Bits seen as the format's float8 dtype or as uint8: the same
            # values.
            with torch._C.DisableTorchFunction():
                raw = x._rs_raw.view(args[1])
            out = make_placeholder(self.rec, raw, x._rs_srcs, [])
            out._rs_quant = x._rs_quant
            return out
        if part == "scales" and name in _SCALE_RESHAPES:
            try:
                with torch._C.DisableTorchFunction():
                    result = func(*unwrap(args), **unwrap(kwargs))
            except Exception:
                result = None
            if isinstance(result, torch.Tensor) and \
                    _non_unit(result.shape) == _non_unit(x._rs_raw.shape):
                out = make_placeholder(self.rec, result, x._rs_srcs, [])
                out._rs_quant = x._rs_quant
                return out
        return self.rec.refuse(
            name, func, args, kwargs,
            f"op '{name}' on the {part} of quantize_fp8 (they are captured "
            f"only when copied whole into a parameter)")

    def copied(self, name, dst, ph, where):
        """The values or scales copied into `dst`."""
        entry, part = ph._rs_quant
        src = entry["src"]
        if tuple(ph.shape) != tuple(dst.shape):
            torch.broadcast_shapes(tuple(ph.shape), tuple(dst.shape))
            self.rec.unsupported.setdefault(
                src, f"op '{name}' broadcasts the {part} of quantize_fp8 at "
                     f"{where}")
            return
        fmt = dtypes.from_name(entry["quant"]["format"])
        if part == "values" and dst.dtype != ph._rs_raw.dtype:
            self.rec.unsupported.setdefault(
                src, f"op '{name}' at {where} converts the values of "
                     f"quantize_fp8 ({ph._rs_raw.dtype}) to {dst.dtype} as "
                     f"numbers{_values_hint(dst.dtype, entry)}")
            return
        ok = (ph._rs_raw.dtype,) if part == "values" else (torch.float32,)
        region = self.rec.attribute(dst, ok)
        if region is not None and region[1] is None:
            region = None        # a parameter laid out otherwise, merged
        if region is None:
            self.rec.unattributed_details.append(
                f"'{name}' of the {part} of quantize_fp8 of '{src}' at "
                f"{where} writes into a tensor that is no parameter")
            return
        if entry[part] is not None:
            self.rec.unsupported.setdefault(
                src, f"the {part} of quantize_fp8 at {entry['where']} are "
                     f"copied twice (again at {where})")
            return
        entry[part] = {"param": region[0], "dest_offset": region[1],
                       "dest_shape": list(dst.shape),
                       "dest_stride": list(region[2])}
        if entry["values"] is not None and entry["scales"] is not None:
            self._emit(entry, fmt)

    def _emit(self, entry, fmt):
        values, scales = entry["values"], entry["scales"]
        q = dict(entry["quant"])
        q["scale"] = scales
        self.rec.copies.append({
            "src": entry["src"], "ops": entry["ops"],
            "param": values["param"], "dest_offset": values["dest_offset"],
            "dest_shape": values["dest_shape"],
            "dest_stride": values["dest_stride"], "dest_dtype": fmt,
            "quant": q, "_where": f"quantize_fp8 at {entry['where']}"})
        self.rec.quant_params[values["param"]] = fmt

    def finish(self):
        """Values without scales (or scales without values) and parameters
        that receive both quantized and plain copies are unsupported."""
        for entry in self.pending:
            for part, other in (("values", "scales"), ("scales", "values")):
                if entry[part] is not None and entry[other] is None:
                    self.rec.unsupported.setdefault(
                        entry["src"],
                        f"quantize_fp8 at {entry['where']}: its {part} were "
                        f"copied into a parameter but not its {other}")
        for c in self.rec.copies:
            if "quant" not in c and c["param"] in self.rec.quant_params:
                self.rec.unsupported.setdefault(
                    c["src"], f"writes into parameter '{c['param']}', which "
                              f"also receives quantized values")
