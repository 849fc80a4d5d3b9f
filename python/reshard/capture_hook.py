"""Interception of a weight loader's tensor calls during capture.

A `Placeholder` (_placeholder) is a `torch.Tensor` subclass on the `meta`
device with a source's full shape and dtype and no storage. Every torch
call that touches one, and reshard.quant.quantize_fp8 of one (capture_quant),
reaches `Recorder.handle` through `__torch_function__`: metadata queries
are answered, view ops extend the placeholder's op chain (a reshape that
copies makes it pieces, capture_pieces), an explicit cast is remembered, a
`copy_`, `__setitem__`, `fill_` of an `.item()` or `param.data =` into a
parameter becomes recorded copies, a query for the values themselves
(`bool`, `tolist`, `torch.equal`, ...) stops the capture, and anything else
marks the source unsupported (with the op and the loader's file:line) while
handing back a placeholder so that the loader keeps running. When the
loader is done, fills that overlap an earlier copy and copies that overlap
an earlier one are refused (capture_order).

`WriteGuard`, a `TorchFunctionMode`, sees the calls that involve no
placeholder: in-place writes into a parameter's storage (vLLM zeroes padded
vocabulary rows with `param[n:].data.fill_(0)`) are recorded as fills or
counted as unattributed and are never performed, so capturing on a live
model leaves every parameter's bytes unchanged.
"""
import inspect

import torch
from torch.overrides import TorchFunctionMode

from . import capture_ops, capture_order, capture_pieces, capture_quant, quant
from ._placeholder import (IDENTITY, PIECED, Placeholder, is_pieced, location,
                           make_placeholder, placeholders_in, target_dtype,
                           to_meta, unwrap)
from .dtypes import name_of
from .errors import InputError


def func_name(func):
    """The name capture reports for a torch callable: `narrow` for both
    Tensor.narrow and torch.narrow, `shape` for the property getter."""
    name = getattr(func, "__name__", None) or repr(func)
    if name in ("__get__", "__set__"):
        prop = getattr(getattr(func, "__self__", None), "__name__", "?")
        return prop if name == "__get__" else prop + ".__set__"
    return name


def storage_key(t):
    """What identifies a tensor's storage (also for meta tensors, whose
    data pointers are all 0): the address of its StorageImpl."""
    with torch._C.DisableTorchFunction():
        if hasattr(t, "untyped_storage"):
            return t.untyped_storage()._cdata
        return t.storage()._cdata


def extent(t):
    """(first, last) element of a view within its storage."""
    first = t.storage_offset()
    if t.numel() == 0:
        return first, first - 1
    last = first + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return first, last


# Calls answered from the meta tensor, result returned unchanged.
METADATA = {
    "shape", "size", "dim", "ndimension", "ndim", "dtype", "numel",
    "nelement", "device", "stride", "is_contiguous", "storage_offset",
    "element_size", "__len__", "layout", "requires_grad", "is_leaf",
    "is_cuda", "is_meta", "is_cpu", "is_floating_point", "is_complex",
    "is_signed", "names", "is_sparse", "is_quantized", "is_mkldnn",
    "nbytes", "itemsize", "grad", "grad_fn", "output_nr", "_version",
    "get_device", "is_nested", "is_inference", "has_names", "_base",
    "is_shared", "is_pinned", "type",
}

_INPLACE_DUNDER = {
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
    "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__",
    "__ilshift__", "__irshift__", "__imatmul__"}

# Calls whose answer is the data itself, as a Python value: a capture has
# none, and a made-up answer could steer the loader into other writes.
VALUE_QUERIES = {
    "__bool__", "__float__", "__int__", "__index__", "__complex__",
    "tolist", "numpy", "equal", "allclose", "is_nonzero", "__array__",
    "__contains__",
    # where the data lives: placeholders have none, and a made-up pointer
    # (0 for all) would make a loader that dedups by pointer skip weights
    "data_ptr", "storage", "untyped_storage", "_storage"}

# Factories that read only their first argument's metadata.
LIKE_FACTORIES = {
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
    "randn_like", "randint_like", "new_empty", "new_zeros", "new_ones",
    "new_full", "new_empty_strided"}

_NOT_WRITES = {"requires_grad_", "retain_grad", "share_memory_", "rename_"}


def is_write(name):
    """Whether a call of this name modifies its first argument."""
    if name in _NOT_WRITES:
        return False
    if name == "__setitem__" or name in _INPLACE_DUNDER:
        return True
    return name.endswith("_") and not name.startswith("_")


_QUANTIZE_FP8 = inspect.signature(quant.quantize_fp8)


class Recorder:
    """Collects copies, fills, unsupported sources and unattributed writes
    while one loader runs."""

    def __init__(self, params, protected=()):
        self.params = params                  # name -> tensor
        self.by_storage = {}                  # storage key -> [names]
        for name, p in params.items():
            self.by_storage.setdefault(storage_key(p), []).append(name)
        # Storages no write may reach: the params and whatever else the
        # model holds (parameters left out of `params`, buffers).
        self.protected = set(self.by_storage)
        # protected: tensors, or {name: tensor} (named in messages)
        named = protected if isinstance(protected, dict) else {}
        self.model_names = {storage_key(t): n for n, t in named.items()}
        self.protected.update(storage_key(t) for t in (
            named.values() if named else protected))
        self.copies, self.fills = [], []
        self.unsupported = {}                 # src -> reason
        self.unattributed_details = []
        self.viewed = {}                      # src -> first view location
        self.written = set()
        self.source_shapes = {}               # src -> full shape
        self.quant_params = {}                # param -> FP8 format dtype
        self.quant = capture_quant.QuantRecorder(self)
        self.source_meta = {}                 # src -> meta of the full source
        self.touched = {}                     # src -> params it writes into
        self.stopped = None                   # why a value query stopped it
        self.poison_only = set()              # srcs read by refused ops
        self.writes = 0                       # loader writes recorded
        self.closed = False

    # ------------------------------------------------------------ entry

    def placeholder(self, name, shape, dtype):
        raw = torch.empty(shape, dtype=dtype, device="meta")
        self.source_shapes[name] = tuple(raw.shape)
        self.source_meta[name] = raw
        return make_placeholder(self, raw, (name,), [])

    def quantize(self, args, kwargs):
        """reshard.quant.quantize_fp8 of a placeholder, with the arguments
        torch.overrides hands on (capture_quant)."""
        if self.closed:
            raise RuntimeError(f"placeholder quantized after its capture "
                               f"ended at {location()}")
        call = _QUANTIZE_FP8.bind(*args, **kwargs)
        call.apply_defaults()
        a = call.arguments
        return self.quant.quantize(a["weight"], a["scheme"], a["block"],
                                   a["fmt"])

    def handle(self, func, args, kwargs):
        if func is quant.quantize_fp8:
            return self.quantize(args, kwargs)
        name = func_name(func)
        if name in METADATA and not (name == "type" and (args[1:] or kwargs)):
            with torch._C.DisableTorchFunction():
                return func(*unwrap(args), **unwrap(kwargs))
        if name in ("__repr__", "__str__", "__format__"):
            return Placeholder.__repr__(args[0])
        if name == "__hash__":
            return id(args[0])
        if self.closed:
            raise RuntimeError(
                f"placeholder used by '{name}' after its capture ended "
                f"at {location()}")
        if name in VALUE_QUERIES:
            return self._value_query(name, args, kwargs)
        if name in LIKE_FACTORIES and isinstance(args[0], Placeholder) \
                and not placeholders_in(args[1:], kwargs):
            # Only the source's shape and dtype are read: a new tensor
            # whose values come from no source.
            with torch._C.DisableTorchFunction():
                return func(*unwrap(args), **unwrap(kwargs))
        if name == "data.__set__":
            return self._rebind(args)
        if name in ("copy_", "__setitem__", "fill_") and args \
                and not isinstance(args[0], Placeholder):
            return self._write(name, args, kwargs)
        x = args[0] if args else None
        if getattr(x, "_rs_quant", None) is not None:
            return self.quant.handle(name, func, x, args, kwargs)
        if isinstance(x, Placeholder) and name == "item":
            return self._item(x)
        if isinstance(x, Placeholder) and x._rs_ops is not None:
            if name == "clone":
                return self._clone(func, x, args, kwargs)
            if name in capture_ops.SINGLE or name in capture_ops.MULTI:
                return self._view(name, func, x, args, kwargs)
            if name in IDENTITY:
                return self._identity(name, func, x, args, kwargs)
        return self.refuse(name, func, args, kwargs,
                                 f"op '{name}'")

    def _value_query(self, name, args, kwargs):
        """A call that would hand the loader the data: the capture stops
        (also if the loader catches the error: capture() raises it)."""
        srcs = dict.fromkeys(s for p in placeholders_in(args, kwargs)
                             for s in p._rs_srcs)
        msg = (f"capture: '{name}' at {location()} asks source "
               f"{', '.join(repr(s) for s in srcs)} for its values, which "
               f"a capture cannot answer without data")
        if self.stopped is None:
            self.stopped = msg
        raise InputError(msg)

    def _item(self, x):
        """`.item()`: a 0-dim placeholder of the element, which a `fill_`
        into a parameter records as a copy of that element; any other use
        is a call on a placeholder like any other."""
        raw = x._rs_raw
        if raw.numel() != 1:
            raise RuntimeError(f"a Tensor with {raw.numel()} elements "
                               f"cannot be converted to Scalar")
        out = capture_pieces.meta_of((), raw.dtype)
        if x._rs_ops is None:
            return make_placeholder(self, out, x._rs_srcs, None,
                                    why=x._rs_why)
        sel = [["select", 0, 0]] * raw.dim()
        ops = (x._rs_pieces[0][2] if is_pieced(x) else x._rs_ops) + sel
        self.viewed.setdefault(x._rs_srcs[0], f"'item' at {location()}")
        vmeta = capture_ops.apply_ops(self.source_meta[x._rs_srcs[0]], ops)
        return make_placeholder(self, out, x._rs_srcs, ops, vmeta=vmeta,
                                like=x)

    # ------------------------------------------------------------ views

    def _view(self, name, func, x, args, kwargs):
        try:
            with torch._C.DisableTorchFunction():
                result = func(*unwrap(args), **unwrap(kwargs))
        except Exception:
            # Advanced indexing may not compute on meta; a genuine argument
            # error reaches the loader as torch raised it.
            try:
                capture_ops.translate(name, x._rs_raw, args[1:], kwargs)
            except capture_ops.NotAView as e:
                return self.refuse(name, func, args, kwargs,
                                         f"op '{name}' {e}")
            raise
        try:
            ops = capture_ops.translate(name, x._rs_raw, args[1:], kwargs)
        except capture_ops.NotAView as e:
            return self._poison(name, args, kwargs, result,
                                f"op '{name}' {e}")
        self.viewed.setdefault(x._rs_srcs[0], f"'{name}' at {location()}")
        if name in capture_ops.MULTI:
            return tuple(self._derive(name, x, piece, ops(i))
                         for i, piece in enumerate(result))
        return self._derive(name, x, result, ops)

    def _derive(self, name, x, result, ops):
        """The placeholder of `result`, made from x by the JSON `ops`."""
        if is_pieced(x):
            return self._derive_pieces(name, x, result, ops)
        try:
            vmeta = capture_ops.apply_ops(x._rs_vmeta, ops)
            copies = name in capture_ops.MUST_VIEW and vmeta.numel() and \
                storage_key(vmeta) != storage_key(x._rs_vmeta)
        except ValueError:
            vmeta, copies = None, True
        if not copies:
            return make_placeholder(self, result, x._rs_srcs,
                                    x._rs_ops + ops, vmeta=vmeta, like=x)
        if name == "contiguous":
            # The copy holds the same values: nothing to record.
            return make_placeholder(self, result, x._rs_srcs, x._rs_ops,
                                    vmeta=x._rs_vmeta, like=x)
        if name in capture_ops.RESHAPES:
            return self._carve(name, x, result)
        self.mark([x], f"op '{name}' copies here (not a view)")
        return self._wrap_poisoned(result, [x])

    def _derive_pieces(self, name, x, result, ops):
        try:
            done = capture_pieces.apply_all(x._rs_pieces,
                                            list(x._rs_raw.shape), ops)
        except capture_pieces.NotPieceable as e:
            self.mark([x], f"op '{name}' {e}")
            return self._wrap_poisoned(result, [x])
        if done is None:
            return self._carve(name, x, result)
        return make_placeholder(self, result, x._rs_srcs, PIECED,
                                pieces=done[0], like=x)

    def _carve(self, name, x, result):
        """`result`, a reshape of x that is no view of the source, as
        pieces that are (capture_pieces)."""
        shape = list(x._rs_raw.shape)
        if is_pieced(x):
            ops_of_box = capture_pieces.ops_in_pieces(x._rs_pieces)
        else:
            def ops_of_box(lo, ln):
                return x._rs_ops + capture_pieces.box_ops(shape, lo, ln)
        try:
            items = capture_pieces.carve(result.shape, shape, ops_of_box,
                                         self.source_meta[x._rs_srcs[0]])
        except capture_pieces.NotPieceable as e:
            self.mark([x], f"op '{name}' copies and {e}")
            return self._wrap_poisoned(result, [x])
        return make_placeholder(self, result, x._rs_srcs, PIECED,
                                pieces=items, like=x)

    def _clone(self, func, x, args, kwargs):
        """`clone()`: a copy holding the same values, like a `contiguous`
        that copies: the op chain (or pieces) stays, the loader sees the
        clone's own strides."""
        with torch._C.DisableTorchFunction():
            result = func(*unwrap(args), **unwrap(kwargs))
        return make_placeholder(self, result, x._rs_srcs, x._rs_ops,
                                vmeta=x._rs_vmeta, pieces=x._rs_pieces,
                                like=x)

    def _identity(self, name, func, x, args, kwargs):
        if name == "type" and any(
                not isinstance(a, torch.dtype)
                for a in list(args[1:]) + list(kwargs.values())
                if not isinstance(a, bool)):
            return self.refuse(name, func, args, kwargs,
                                     f"op '{name}' converts by type name")
        target = target_dtype(name, x, args[1:], kwargs)
        if target is None or target == x._rs_raw.dtype:
            return x
        why = (f"op '{name}' casts {name_of(x._rs_raw.dtype)} to "
               f"{_dtype_text(target)}")
        if x._rs_cast is not None:
            return self.refuse(name, func, args, kwargs,
                                     f"{why} after {x._rs_cast_at}")
        raw = x._rs_raw
        with torch._C.DisableTorchFunction():
            out = torch.empty_strided(raw.shape, raw.stride(), dtype=target,
                                      device="meta")
        ph = make_placeholder(self, out, x._rs_srcs, x._rs_ops,
                              vmeta=x._rs_vmeta, pieces=x._rs_pieces)
        ph._rs_cast, ph._rs_cast_at = target, f"{why} at {location()}"
        return ph

    # ------------------------------------------------------------ failures

    def mark(self, placeholders, why):
        where = location()
        for ph in placeholders:
            for src in ph._rs_srcs:
                self.unsupported.setdefault(src, f"{why} at {where}")

    def refuse(self, name, func, args, kwargs, why):
        """Return something the loader can keep working with: a poisoned
        placeholder that makes its sources unsupported once it is written
        somewhere (arithmetic whose result is only logged or dropped
        refuses nothing); an in-place op on a source marks it now."""
        phs = placeholders_in(args, kwargs)
        if is_write(name) and isinstance(args[0], Placeholder):
            # The source's own values change: poison that object in place.
            self.mark(phs, why)
            args[0]._rs_ops = None
            return args[0] if name != "__setitem__" else None
        why = next((p._rs_why for p in phs if p._rs_why is not None),
                   f"{why} at {location()}")
        self.poison_only.update(s for p in phs for s in p._rs_srcs)
        try:
            with torch._C.DisableTorchFunction():
                result = func(*to_meta(args), **to_meta(kwargs))
        except Exception:
            return make_placeholder(self, phs[0]._rs_raw, phs[0]._rs_srcs,
                                    None, why=why)
        return self._wrap_poisoned(result, phs, why)

    def _poison(self, name, args, kwargs, result, why):
        phs = placeholders_in(args, kwargs)
        self.mark(phs, why)
        return self._wrap_poisoned(result, phs)

    def _wrap_poisoned(self, result, phs, why=None):
        srcs = tuple(dict.fromkeys(s for p in phs for s in p._rs_srcs))
        if isinstance(result, torch.Tensor):
            return make_placeholder(self, _meta_like(result), srcs, None,
                                    why=why)
        if isinstance(result, (tuple, list)):
            return type(result)(self._wrap_poisoned(r, phs, why)
                                for r in result)
        return result

    # ------------------------------------------------------------ writes

    def _write(self, name, args, kwargs):
        dst, value = _write_parts(name, args, kwargs)
        phs = placeholders_in((value,), {})
        if name == "__setitem__" and placeholders_in((args[1],), {}):
            # Where the write lands depends on a source's values.
            return self._value_query("__index__", (args[1],), {})
        if name == "__setitem__":
            try:
                capture_ops.index_keys(args[1])
            except capture_ops.NotAView as e:
                self.mark(phs, f"op '__setitem__' {e}")
                return None
            with torch._C.DisableTorchFunction():
                dst = dst[unwrap(args[1])]
        result = None if name == "__setitem__" else dst
        if name == "fill_" and isinstance(value, Placeholder) and \
                value.dim() != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value "
                               f"tensor but got tensor with {value.dim()} "
                               f"dimensions.")
        if not isinstance(value, Placeholder):
            # A placeholder hidden in the key or elsewhere: not a copy.
            self.mark(phs, f"op '{name}' uses a source as an index")
            return result
        self._copy(name, dst, value)
        return result

    def _copy(self, name, dst, ph, where=None):
        _no_internal_overlap(dst)
        src, where = ph._rs_srcs[0], where or location()
        for s in ph._rs_srcs:
            self.written.add(s)
        region = self.attribute(dst)
        if region is not None:
            for s in ph._rs_srcs:
                self.touched.setdefault(s, set()).add(region[0])
        if ph._rs_ops is None:
            if ph._rs_why is not None:
                for s in ph._rs_srcs:
                    self.unsupported.setdefault(s, ph._rs_why)
            return
        if getattr(ph, "_rs_quant", None) is not None:
            self.quant.copied(name, dst, ph, where)
            return
        shape, dshape = tuple(ph._rs_raw.shape), tuple(dst.shape)
        stride = list(dst.stride())
        if shape != dshape and name == "copy_":
            # copy_ raises where its destination is not the broadcast
            # shape (a [1] source into a 0-dim parameter), as torch does.
            full = tuple(torch.broadcast_shapes(shape, dshape))
            if full != dshape:
                raise RuntimeError(
                    f"output with shape {list(dshape)} doesn't match the "
                    f"broadcast shape {list(full)}")
        if shape != dshape:
            if ph._rs_raw.numel() != 1 or dst.numel() != 1:
                torch.broadcast_shapes(shape, dshape)   # raise like torch
                what = "one element" if ph._rs_raw.numel() == 1 \
                    else list(shape)
                self.unsupported.setdefault(
                    src, f"op '{name}' broadcasts {what} into "
                         f"{list(dshape)} at {where}")
                return
            # One element into one element: the region in the source's
            # shape (every stride is as good as any other there).
            dshape, stride = shape, [1] * len(shape)
        if region is None:
            self.unattributed_details.append(
                f"'{name}' of source '{src}' at {where} writes "
                f"{list(dshape)} into {self.not_a_param(dst)}")
            return
        param, offset = region[0], region[1]
        # one element written in the source's shape (its one element
        # always has a logical offset)
        one = dshape != tuple(dst.shape)
        pdtype = self.params[param].dtype
        if ph._rs_cast is not None and ph._rs_cast != pdtype:
            self.unsupported.setdefault(
                src, f"op '{name}' into {name_of(pdtype)} parameter "
                     f"'{param}' at {where} casts again after "
                     f"{ph._rs_cast_at}")
            return
        why = cast_refusal(self.source_meta[src].dtype, pdtype)
        if why is not None:
            self.unsupported.setdefault(
                src, f"op '{name}' into parameter '{param}' at {where} "
                     f"{why}")
            return
        pieces = ph._rs_pieces if is_pieced(ph) else [
            ([0] * len(dshape), list(dshape), ph._rs_ops)]
        try:
            pieces = self._boxes(src, pieces)
        except capture_pieces.NotPieceable as e:
            self.unsupported.setdefault(
                src, f"op '{name}' into parameter '{param}' at {where} "
                     f"reads a view the library cannot read as boxes: {e}")
            return
        if one:
            regions = [(offset + sum(a * s for a, s in zip(lo, stride)), ln,
                        stride, ops) for lo, ln, ops in pieces]
        else:
            try:
                regions = self._dest_regions(src, param, dst, pieces)
            except capture_pieces.NotPieceable as e:
                self.unsupported.setdefault(
                    src, f"op '{name}' into parameter '{param}' at {where} "
                         f"writes a view of it that is no strided region of "
                         f"its elements: {e}")
                return
        self.writes += 1
        for dest_offset, ln, dstride, ops in regions:
            self.copies.append({
                "src": src, "ops": [list(op) for op in ops],
                "param": param, "dest_offset": dest_offset,
                "dest_shape": list(ln), "dest_stride": list(dstride),
                "dest_dtype": pdtype, "_where": f"'{name}' at {where}",
                "_write": self.writes})

    def _dest_regions(self, src, param, dst, pieces):
        """(dest_offset, shape, strides, ops) of each piece written into
        view `dst` of parameter `param`, in the parameter's row-major
        element order. A piece whose elements are no one strided region
        there (a view merging dims of a parameter laid out otherwise) is
        cut into boxes that are."""
        p = self.params[param]
        base = dst.storage_offset() - p.storage_offset()
        st = list(dst.stride())
        meta = self.source_meta[src]
        out = []
        for lo, ln, ops in pieces:
            off = base + sum(a * s for a, s in zip(lo, st))
            reg = logical_region(p, off, ln, st)
            if reg is not None:
                out.append((reg[0], ln, reg[1], ops))
                continue

            def ops_of_box(blo, bln, ops=ops, ln=ln, off=off):
                at = off + sum(a * s for a, s in zip(blo, st))
                if logical_region(p, at, bln, st) is None:
                    return None
                return ops + capture_pieces.box_ops(ln, blo, bln)
            for slo, sln, sops in capture_pieces.carve(ln, ln, ops_of_box,
                                                       meta):
                at = off + sum(a * s for a, s in zip(slo, st))
                reg = logical_region(p, at, sln, st)
                out.append((reg[0], sln, reg[1], sops))
            if len(out) > capture_pieces.MAX_PIECES:
                raise capture_pieces.NotPieceable(
                    f"needs more than {capture_pieces.MAX_PIECES} copies")
        return out

    def _boxes(self, src, pieces):
        """The pieces with each one the library cannot read as one strided
        box of the source (a torch view that regroups dims across source
        dims, capture_pieces.box_refusal) cut into pieces that it can."""
        meta = self.source_meta[src]
        out = []
        for lo, ln, ops in pieces:
            why = capture_pieces.view_refusal(meta, ops)
            if why is None:
                out.append((lo, ln, ops))
                continue

            def ops_of_box(blo, bln, ops=ops, ln=ln):
                return ops + capture_pieces.box_ops(ln, blo, bln)
            try:
                sub = capture_pieces.carve(ln, ln, ops_of_box, meta)
            except capture_pieces.NotPieceable as e:
                raise capture_pieces.NotPieceable(f"{why}, and it {e}") \
                    from None
            out.extend(([a + b for a, b in zip(lo, slo)], sln, sops)
                       for slo, sln, sops in sub)
            if len(out) > capture_pieces.MAX_PIECES:
                raise capture_pieces.NotPieceable(
                    f"{why}, and it needs more than "
                    f"{capture_pieces.MAX_PIECES} copies")
        return out

    def _rebind(self, args, op="data.__set__", where=None):
        """`param.data = source`: a copy of the whole parameter when shape
        and dtype agree; the rebind itself is never performed."""
        dst, value = args[0], args[1]
        phs = placeholders_in((dst,), {})
        if phs or not isinstance(value, Placeholder):
            self.mark(phs + placeholders_in((value,), {}),
                       f"op '{op}' on a source")
            return None
        src, where = value._rs_srcs[0], where or location()
        region = self.attribute(dst)
        p = self.params.get(region[0]) if region is not None else None
        if p is None or region[1] != 0 or tuple(dst.shape) != tuple(p.shape):
            for s in value._rs_srcs:
                self.written.add(s)
            self.unattributed_details.append(
                f"'{op}' of source '{src}' at {where} rebinds a "
                f"tensor that is no captured parameter")
            return None
        if value._rs_ops is not None and (
                tuple(value.shape) != tuple(p.shape)
                or value._rs_raw.dtype != p.dtype):
            self.written.update(value._rs_srcs)
            self.touched.setdefault(src, set()).add(region[0])
            self.unsupported.setdefault(
                src, f"op '{op}' rebinds parameter '{region[0]}' "
                     f"({list(p.shape)} {name_of(p.dtype)}) to a "
                     f"{list(value.shape)} "
                     f"{_dtype_text(value._rs_raw.dtype)} tensor at {where}")
            return None
        self._copy(op, dst, value, where)
        return None

    def replaced(self, full, old, new):
        """The loader replaced model tensor `old` (named `full`) by `new`
        (`module.weight = nn.Parameter(w)`, `module._parameters[n] = ...`,
        as transformers' meta-device loading does); capture() has put
        `old` back. From a source it is `old.data = new`; else the
        tensor's new values come from no source."""
        where = (f"the end of the loader (model tensor '{full}' replaced "
                 f"by another object)")
        if isinstance(new, Placeholder):
            return self._rebind((old, new), "replace", where)
        self.unattributed_details.append(
            f"the loader replaced model tensor '{full}' by "
            f"{'nothing' if new is None else 'a tensor'} whose data comes "
            f"from no source")
        return None

    def attribute(self, view, dtypes=None):
        """(parameter name, element offset, element strides) of a view
        lying inside one parameter, or None. Offset and strides address
        the parameter's elements in row-major order (the format's
        parameter storage), also for a parameter whose own storage is laid
        out otherwise (created transposed, or strided). The parameter's
        dtype is the view's, or one of `dtypes` when given."""
        names = self.by_storage.get(storage_key(view))
        if not names:
            return None
        lo, hi = extent(view)
        dtypes = dtypes or (view.dtype,)
        for name in names:
            p = self.params[name]
            plo, phi = extent(p)
            if p.dtype in dtypes and plo <= lo and hi <= phi \
                    and (view.numel() == 0 or lo <= hi):
                region = logical_region(p, lo - p.storage_offset(),
                                        view.shape, view.stride())
                return (name,) + (region or (None, None))
        return None

    def not_a_param(self, t):
        """How a message names a written tensor that is no captured
        parameter (a model buffer, a parameter left out of params=)."""
        name = self.model_names.get(storage_key(t))
        if name is None:
            return "a tensor that is no parameter"
        return (f"model tensor '{name}', which is no captured parameter "
                f"(pass it in params= to move it)")

    def owns(self, t):
        return isinstance(t, torch.Tensor) and \
            storage_key(t) in self.protected

    def guarded_write(self, name, args, kwargs):
        """A write into a parameter that involves no source: recorded as a
        fill when it writes a constant, else counted unattributed; never
        performed."""
        dst, value = _write_parts(name, args, kwargs)
        if name == "__setitem__":
            with torch._C.DisableTorchFunction():
                dst = dst[args[1]]
            if setitem_refuses_overlap():
                _no_internal_overlap(dst)
        if name == "zero_":
            value = 0
        const = _constant(value) if name in ("fill_", "zero_",
                                             "__setitem__") else None
        if const is not None:
            # A value the dtype cannot hold raises here as in the loader.
            with torch._C.DisableTorchFunction():
                torch.empty((), dtype=dst.dtype).fill_(const)
        region = self.attribute(dst)
        where = location()
        if region is None:
            self.unattributed_details.append(
                f"'{name}' at {where} writes {list(dst.shape)} into "
                f"{self.not_a_param(dst)}")
        elif region[1] is None:
            self.unattributed_details.append(
                f"'{name}' at {where} writes into parameter '{region[0]}' "
                f"through a view that is no strided region of its elements")
        elif const is None:
            self.unattributed_details.append(
                f"'{name}' at {where} writes into parameter '{region[0]}' "
                f"data that comes from no source")
        else:
            # torch fills an expanded view (elements sharing memory): the
            # dims of stride 0 write one element each.
            self.fills.append({
                "param": region[0], "dest_offset": region[1],
                "dest_shape": [1 if st == 0 else n for n, st in
                               zip(dst.shape, dst.stride())],
                "dest_stride": list(region[2]), "value": const,
                "at": len(self.copies), "_where": f"'{name}' at {where}"})
        return None if name == "__setitem__" else args[0]

    # ------------------------------------------------------------ end

    def finish(self):
        """Close the recorder: refuse fills that overwrite an earlier copy,
        drop copies of unsupported sources (renumbering the fills' `at`)
        and count sources that were viewed but never written."""
        self.closed = True
        self.quant.finish()
        for fi, ci in capture_order.late_fills(self.copies, self.fills):
            f, c = self.fills[fi], self.copies[ci]
            self.unsupported.setdefault(c["src"], capture_order.late_fill_text(
                f, c, f.get("_where"), c.get("_where")))
        for ci, cj in capture_order.overlapping_copies(self.copies):
            a, b = self.copies[ci], self.copies[cj]
            self.unsupported.setdefault(
                b["src"], capture_order.overlapping_copy_text(
                    b, a, b.get("_where"), a.get("_where")))
        kept = []
        for c in self.copies:
            if c["src"] in self.unsupported:
                self.touched.setdefault(c["src"], set()).add(c["param"])
            else:
                kept.append(c)
        self.fills = capture_order.renumber(self.fills, self.copies, kept)
        self.copies = kept
        for item in self.copies + self.fills:
            item.pop("_where", None)
            item.pop("_write", None)
        for src, where in self.viewed.items():
            if src not in self.written and src not in self.unsupported \
                    and src not in self.poison_only:
                self.unattributed_details.append(
                    f"source '{src}' was viewed ({where}) but never "
                    f"written into a parameter")

    def unsupported_params(self):
        """{unsupported source: sorted parameters it would write}."""
        return {src: sorted(self.touched.get(src, ()))
                for src in self.unsupported}


def _no_internal_overlap(dst):
    """Raise as torch's in-place writes do into a tensor whose elements
    share memory (an `expand`ed view of a parameter)."""
    with torch._C.DisableTorchFunction():
        if torch._debug_has_internal_overlap(dst) == 1:
            raise RuntimeError(
                "unsupported operation: more than one element of the "
                "written-to tensor refers to a single memory location. "
                "Please clone() the tensor before performing the operation.")


_SETITEM_OVERLAP = []


def setitem_refuses_overlap():
    """Whether this torch's `t[...] = value` raises for a destination whose
    elements share memory, as copy_ does (torch 2.x; 1.13 writes it like
    fill_, which every version allows). Asked of torch once, on a
    two-element CPU tensor, since meta tensors never raise."""
    if not _SETITEM_OVERLAP:
        with torch._C.DisableTorchFunction():
            try:
                torch.zeros(1).expand(2)[...] = 0.0
                _SETITEM_OVERLAP.append(False)
            except RuntimeError:
                _SETITEM_OVERLAP.append(True)
    return _SETITEM_OVERLAP[0]


def shared_memory(tensors):
    """(name, name) of the first two tensors of {name: tensor} that write
    a common element of memory (one tensor under two names, a view and
    the tensor it views), or None. Tensors of one storage at disjoint
    elements (views of a fused buffer) share nothing."""
    groups = {}
    for i, (name, t) in enumerate(tensors.items()):
        if isinstance(t, torch.Tensor) and t.numel():
            lo, hi = extent(t)
            size = t.element_size()
            groups.setdefault(storage_key(t), []).append(
                (lo * size, (hi + 1) * size, i, name, t))
    found = []
    for items in groups.values():
        # swept by byte extent: only tensors whose extents meet are
        # compared (a flat buffer of many parameters is no n^2 loop)
        items.sort(key=lambda x: x[:3])
        active = []
        for lo, hi, i, name, t in items:
            active = [a for a in active if a[1] > lo]
            found.extend((min(i, j), max(i, j)) for _, _, j, _, u in active
                         if _share(u, t))
            active.append((lo, hi, i, name, t))
    if not found:
        return None
    names = list(tensors)
    i, j = min(found)
    return names[i], names[j]


def _share(a, b):
    size_a, size_b = a.element_size(), b.element_size()
    (lo_a, hi_a), (lo_b, hi_b) = extent(a), extent(b)
    if (hi_a + 1) * size_a <= lo_b * size_b or \
            (hi_b + 1) * size_b <= lo_a * size_a:
        return False
    if a.dtype != b.dtype or (a.is_contiguous() and b.is_contiguous()):
        return True
    region = [{"dest_offset": t.storage_offset(), "dest_shape": list(t.shape),
               "dest_stride": list(t.stride())} for t in (a, b)]
    return capture_order.overlaps(*region)


def logical_region(p, offset, shape, stride):
    """(offset, strides) in `p`'s row-major element order of the region
    `shape` / `stride` at element `offset` of p's storage (relative to
    p's storage offset), or None when its elements are not p's."""
    if p.is_contiguous():
        return offset, list(stride)
    rm = capture_pieces.row_major(p.shape)
    dims = sorted((d for d in range(p.dim()) if p.shape[d] > 1),
                  key=lambda d: -p.stride(d))
    for a, b in zip(dims, dims[1:]):
        if p.stride(a) < p.stride(b) * p.shape[b]:
            return None                      # dims interleave: no unique map

    def coords(n):
        out = {}
        for d in dims:
            out[d], n = divmod(n, p.stride(d))
        return out if n == 0 else None
    start = coords(offset)
    if start is None:
        return None
    if any(int(n) == 0 for n in shape):
        return sum(c * rm[d] for d, c in start.items()), [0] * len(shape)
    hi = dict(start)
    out = []
    for n, st in zip(shape, stride):
        if n == 1:
            out.append(0)
            continue
        step = coords(st)
        if step is None:
            return None
        for d, c in step.items():
            hi[d] += (n - 1) * c
        out.append(sum(c * rm[d] for d, c in step.items()))
    if any(hi[d] >= p.shape[d] for d in dims):
        return None
    return sum(c * rm[d] for d, c in start.items()), out


# What the library casts between (src/core/convert.c): floating-point
# dtypes, FP8 formats included; integers and bools move only unchanged.
_FLOATS = {torch.float32, torch.float64, torch.bfloat16, torch.float16,
           "f8e4m3", "f8e5m2"}


def cast_refusal(src_dtype, dest_dtype):
    """Why the library cannot cast a source of `src_dtype` into a
    parameter of `dest_dtype` (copy_ would: integers wrap, floats
    truncate), or None."""
    if src_dtype == torch.float64 and dest_dtype in (torch.bfloat16,
                                                     torch.float16):
        # torch converts f64 to these through f32 (rounding twice), the
        # library rounds once: their bytes differ (1 + 2^-8 + 2^-30 is
        # 1.0 in torch's bf16, 1.0078125 in the library's).
        return (f"casts f64 to {_dtype_text(dest_dtype)}, which torch "
                f"rounds through f32 and the library rounds once (their "
                f"bytes differ)")
    if src_dtype == dest_dtype or (
            _float_like(src_dtype) and _float_like(dest_dtype)):
        return None
    return (f"casts {_dtype_text(src_dtype)} to {_dtype_text(dest_dtype)}, "
            f"a cast the library does not perform (it casts between "
            f"floating-point dtypes only)")


def _float_like(dtype):
    return dtype in _FLOATS or _dtype_text(dtype) in _FLOATS


def _write_parts(name, args, kwargs):
    """(destination, value written) of a write call."""
    dst = args[0]
    if name == "__setitem__":
        return dst, args[2] if len(args) > 2 else kwargs.get("value")
    if name == "copy_":
        return dst, args[1] if len(args) > 1 else kwargs.get("src")
    rest = list(args[1:]) + list(kwargs.values())
    return dst, rest[0] if rest else None


def _constant(value):
    """A Python scalar for a constant write value, or None."""
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return value
    if isinstance(value, torch.Tensor) and value.dim() == 0 \
            and not value.is_meta and not isinstance(value, Placeholder):
        return value.item()
    return None


def _meta_like(t):
    if t.is_meta and not isinstance(t, Placeholder):
        return t
    with torch._C.DisableTorchFunction():
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype,
                                   device="meta")


def _dtype_text(dtype):
    try:
        return name_of(dtype)
    except ValueError:
        return str(dtype)


class WriteGuard(TorchFunctionMode):
    """Routes calls with placeholders to the recorder and stops in-place
    writes into parameters that involve none."""

    def __init__(self, rec):
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if placeholders_in(args, kwargs):
            return self.rec.handle(func, args, kwargs)
        name = func_name(func)
        if name == "data.__set__" and args and self.rec.owns(args[0]):
            self.rec.unattributed_details.append(
                f"'data.__set__' at {location()} rebinds a model tensor to "
                f"data that comes from no source")
            return None
        if is_write(name) and args and self.rec.owns(args[0]):
            return self.rec.guarded_write(name, args, kwargs)
        out = kwargs.get("out")
        if out is not None and self.rec.owns(out):
            self.rec.unattributed_details.append(
                f"'{name}' at {location()} writes out= into a parameter "
                f"data that comes from no source")
            return out
        return func(*args, **kwargs)
