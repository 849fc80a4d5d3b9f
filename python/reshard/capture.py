"""Capture: record what an engine's weight loader really reads.

`capture()` runs a loader (a model's `load_weights`, or any callable) over
placeholder tensors that have each source's full shape and dtype but no
storage, and returns a `Capture`: the destination parameters, the sources,
every copy (the view ops applied to the full source and the strided region
of the parameter written), the constant fills, the sources the loader used
in a way the format cannot express, and the writes that could not be tied
to a source. `Capture.to_json()` is the reshard.capture.v1 document the
library plans from (docs/formats.md); `Capture.replay()` performs the same
copies in pure torch, which is how tests check a capture byte for byte.
"""
import fnmatch
import json
import math
import time

import torch

from . import capture_hook, capture_ops, capture_order, capture_quant, quant
from .dtypes import code_of, from_name, holds, name_of
from .errors import InputError, InvalidArgument, UnsupportedReshard

SCHEMA = "reshard.capture.v1"


class Capture:
    """What one inference rank's loader reads and writes.

    Attributes: `params` {name: (shape, torch dtype)}, `sources` {name:
    (shape, torch dtype)}, `copies` [dict(src, ops (JSON form lists), param,
    dest_offset, dest_shape, dest_stride, dest_dtype (torch dtype), and for
    a quantized copy quant (the JSON object of docs/formats.md))],
    `fills` [dict(param, dest_offset,
    dest_shape, dest_stride, value, at)] in the loader's order,
    where `at` is the number of copies performed before the fill,
    `unsupported` {src: reason}, `unsupported_params` {src: [parameters
    it would have written]}, `unattributed_details` [str], `unattributed`
    (their count), `seconds` (time the capture took) and, on a Capture
    made by `select`, `left_out` (the parameters that lose writes by it).
    An FP8 dtype torch lacks is its short name (reshard.dtypes.F8E4M3),
    held in uint8 tensors; where torch has it (2.x) it is torch's float8
    dtype, and a parameter holds it as that dtype or as uint8 bits.

    A fill that overlaps a copy made before it is refused (InputError
    naming both): a receiver applies fills before copies."""

    def __init__(self, params, sources, copies=(), fills=(),
                 unsupported=None, unattributed_details=(), seconds=0.0,
                 unattributed=None, unsupported_params=None):
        self.params = dict(params)
        self.sources = dict(sources)
        self.copies = list(copies)
        self.fills = list(fills)
        self.unsupported = dict(unsupported or {})
        self.unsupported_params = {k: list(v) for k, v in
                                   (unsupported_params or {}).items()}
        self.unattributed_details = list(unattributed_details)
        self._unattributed = unattributed
        self.seconds = seconds
        self.left_out = []
        for i in range(1, len(self.fills)):
            if self.fills[i].get("at", 0) < self.fills[i - 1].get("at", 0):
                raise InputError(
                    f"capture: fills[{i}]: at {self.fills[i].get('at', 0)} "
                    f"after at {self.fills[i - 1].get('at', 0)}: fills are "
                    f"listed in the loader's order")
        for fi, ci in capture_order.late_fills(self.copies, self.fills):
            raise InputError(
                f"capture: fills[{fi}] after copies[{ci}]: "
                + capture_order.late_fill_text(self.fills[fi],
                                               self.copies[ci]))

    @property
    def unattributed(self):
        """Writes (and viewed sources) not tied to a source and parameter."""
        if self._unattributed is not None:
            return max(self._unattributed, len(self.unattributed_details))
        return len(self.unattributed_details)

    def __repr__(self):
        return (f"Capture({len(self.params)} params, {len(self.sources)} "
                f"sources, {len(self.copies)} copies, {len(self.fills)} "
                f"fills, {len(self.unsupported)} unsupported, "
                f"{self.unattributed} unattributed)")

    def refusal(self):
        """Why the library refuses this capture (None when it plans it):
        unattributed writes (every consumer refuses the capture), copies
        that overlap, else the unsupported sources, every one named with
        its reason."""
        if self.unattributed:
            details = "; ".join(self.unattributed_details[:8])
            return InputError(
                f"the capture has {self.unattributed} unattributed "
                f"write(s) (loader writes not tied to a source): {details}")
        pairs = capture_order.overlapping_copies(self.copies)
        if pairs:
            return InputError("; ".join(
                f"copies[{j}]: " + capture_order.overlapping_copy_text(
                    self.copies[j], self.copies[i]) for i, j in pairs[:8]))
        unsupported = dict(self.unsupported)
        for i, c in enumerate(self.copies):
            spec = self.sources.get(c["src"])
            why = None if spec is None or "quant" in c else \
                capture_hook.cast_refusal(spec[1], c["dest_dtype"])
            if why is not None:
                unsupported.setdefault(
                    c["src"], f"copies[{i}] into '{c['param']}' {why}")
        if unsupported:
            return UnsupportedReshard(
                f"{len(unsupported)} source(s) read in a way the "
                f"capture cannot express: " + "; ".join(
                    f"'{s}': {why}" for s, why in unsupported.items()))
        return None

    def select(self, only=None, skip=None):
        """A Capture without the writes of the sources left out: those not
        matching any `only` pattern (when given) or matching a `skip`
        pattern (fnmatch, case-sensitive, as the CLI's --only; a string or
        a list of them). Their copies, unsupported entries and
        declarations go; `left_out` on the result lists, sorted, the
        parameters that lose writes by it (those keep the bytes they
        hold). A pattern that matches no source raises InvalidArgument."""
        only, skip = _patterns(only, "only"), _patterns(skip, "skip")
        for kind, pats in (("only", only), ("skip", skip)):
            for pat in pats:
                if not any(fnmatch.fnmatchcase(s, pat) for s in self.sources):
                    raise InvalidArgument(
                        f"capture.select: {kind} pattern '{pat}' matches no "
                        f"source of the capture ({len(self.sources)} "
                        f"sources)")

        def kept(src):
            return (not only or any(fnmatch.fnmatchcase(src, p)
                                    for p in only)) and \
                not any(fnmatch.fnmatchcase(src, p) for p in skip)

        copies = [c for c in self.copies if kept(c["src"])]
        left = set(self.left_out)
        left.update(c["param"] for c in self.copies if not kept(c["src"]))
        for src, names in self.unsupported_params.items():
            if not kept(src):
                left.update(names)
        out = Capture(
            self.params, {n: v for n, v in self.sources.items() if kept(n)},
            copies, capture_order.renumber(self.fills, self.copies, copies),
            {s: r for s, r in self.unsupported.items() if kept(s)},
            self.unattributed_details, self.seconds, self._unattributed,
            {s: v for s, v in self.unsupported_params.items() if kept(s)})
        out.left_out = sorted(left)
        return out

    # ------------------------------------------------------------ building

    def add_quant_copy(self, src, ops, param, dest_offset, dest_shape,
                       dest_stride, *, scheme, fmt="f8e4m3", block=None,
                       scale_param, scale_offset=0, scale_shape=(),
                       scale_stride=()):
        """Append a copy whose view of `src` is quantized to FP8 on the way
        (rs_capture_add_quant_copy): the values land in `param` (an FP8
        parameter of format `fmt`), the scales of the blocks the view
        touches in scale_param.as_strided(scale_shape, scale_stride,
        scale_offset) (a float32 parameter). InputError naming the copy
        and the field, as the library's checks."""
        fmt = quant.format_name(fmt)
        where = (f"copy {len(self.copies)} ('{src}' into '{param}')")
        try:
            quant.check_spec(scheme, block)
        except ValueError as e:
            raise InputError(f"{where}: quant: {e}") from None
        _check_quant_params(self.params, where, param, fmt, scale_param)
        if len(scale_shape) != len(scale_stride) or scale_offset < 0 or \
                any(int(v) < 0 for v in list(scale_shape) + list(scale_stride)):
            raise InputError(f"{where}: quant.scale: a region of "
                             f"non-negative offset, shape and stride of one "
                             f"rank")
        spec = {"scheme": scheme, "format": fmt}
        if scheme == "fp8_block":
            spec["block"] = [int(b) for b in block]
        spec["scale"] = {"param": scale_param, "dest_offset": int(scale_offset),
                         "dest_shape": [int(v) for v in scale_shape],
                         "dest_stride": [int(v) for v in scale_stride]}
        self.copies.append({
            "src": src, "ops": [list(op) for op in ops], "param": param,
            "dest_offset": int(dest_offset),
            "dest_shape": [int(v) for v in dest_shape],
            "dest_stride": [int(v) for v in dest_stride],
            "dest_dtype": from_name(fmt), "quant": spec})

    # ------------------------------------------------------------ JSON

    def to_dict(self):
        """The reshard.capture.v1 document as Python objects."""
        return {
            "schema": SCHEMA,
            "params": _specs_to_json(self.params),
            "sources": _specs_to_json(self.sources),
            "copies": [_copy_to_json(c) for c in self.copies],
            "unsupported": dict(self.unsupported),
            "unattributed": self.unattributed,
            "unattributed_details": list(self.unattributed_details),
            "fills": [_fill_to_json(f) for f in self.fills],
            "unsupported_params": dict(self.unsupported_params),
            "seconds": self.seconds,
        }

    def to_json(self, indent=None):
        """reshard.capture.v1 text (`fills`, `unattributed_details`,
        `unsupported_params` and `seconds` are extra keys the library
        ignores)."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json(indent=1))
            f.write("\n")

    @classmethod
    def from_json(cls, text, origin="capture"):
        """A Capture from reshard.capture.v1 text; InputError naming the
        field that is wrong."""
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise InputError(f"{origin}: malformed JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise InputError(f"{origin}: schema: expected '{SCHEMA}'")
        return cls(
            params=_specs_from_json(doc, "params", origin),
            sources=_specs_from_json(doc, "sources", origin),
            copies=[_copy_from_json(c, f"{origin}: copies[{i}]")
                    for i, c in enumerate(_list(doc, "copies", origin))],
            fills=[_fill_from_json(f, f"{origin}: fills[{i}]")
                   for i, f in enumerate(_list(doc, "fills", origin))],
            unsupported=doc.get("unsupported") or {},
            unattributed_details=doc.get("unattributed_details") or [],
            unattributed=doc.get("unattributed") or 0,
            seconds=doc.get("seconds") or 0.0,
            unsupported_params=doc.get("unsupported_params") or {})

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            return cls.from_json(f.read(), origin=path)

    # ------------------------------------------------------------ replay

    def replay(self, full_tensors, params, partial=False):
        """Perform the copies and fills in pure torch, in the loader's
        order: read each copy's view of `full_tensors[src]` and write it
        into `params[param]`. A capture the library refuses (see
        `refusal`) raises the same error class, naming every source;
        `partial=True` replays what it holds instead (unsupported sources
        have no copies and are left alone)."""
        refused = None if partial else self.refusal()
        if refused is not None:
            raise refused
        steps = _ordered(self.copies, self.fills)
        # Regions address a parameter's elements in row-major order: one
        # laid out otherwise is written through a contiguous copy.
        work = dict(params)
        staged = {n: t.detach().contiguous() for n, t in params.items()
                  if n in self.params and not t.is_contiguous()}
        work.update(staged)
        with torch.no_grad():
            for kind, item in steps:
                dest = self._region(work, item)
                if kind == "fill":
                    dest.fill_(item["value"])
                    continue
                if "quant" in item:
                    self._replay_quant(full_tensors, work, item, dest)
                    continue
                view = self._source_view(full_tensors, item)
                if tuple(view.shape) != tuple(dest.shape):
                    raise InputError(
                        f"copy of '{item['src']}' into '{item['param']}': "
                        f"ops give {list(view.shape)}, destination is "
                        f"{list(dest.shape)}")
                dest.copy_(view)
            for name, t in staged.items():
                params[name].copy_(t)

    def _replay_quant(self, full_tensors, params, copy, dest):
        """A quantized copy as the library performs it: the full source
        quantized by blocks of its own, the view's values and the scales
        of the blocks it touches written into their regions."""
        spec = copy["quant"]
        self._source_view(full_tensors, copy)          # checks the shape
        full = full_tensors[copy["src"]]
        q, scale = quant.quantize_fp8(full, spec["scheme"],
                                      block=spec.get("block"),
                                      fmt=spec["format"], name=copy["src"])
        values = capture_ops.apply_ops(q, copy["ops"])
        lo, ln, _ = capture_quant.view_box(copy["ops"], tuple(full.shape))
        blocks = quant.block_shape(full.shape, spec["scheme"],
                                   spec.get("block"))
        touched = scale[tuple(slice(a // b, -(-(a + n) // b))
                              for a, n, b in zip(lo, ln, blocks))]
        region = self._region(params, dict(spec["scale"]))
        if tuple(values.shape) != tuple(dest.shape) or \
                _non_unit(touched.shape) != _non_unit(region.shape):
            raise InputError(
                f"quantized copy of '{copy['src']}' into '{copy['param']}': "
                f"values {list(values.shape)} / scales "
                f"{list(touched.shape)} do not fit {list(dest.shape)} / "
                f"{list(region.shape)}")
        # A float8 parameter takes the bits as they are (copy_ would
        # convert the integers), a uint8 one the bits of a float8 result.
        dest.copy_(values.view(dest.dtype))
        region.copy_(touched.reshape(region.shape))

    def _source_view(self, full_tensors, copy):
        src = copy["src"]
        if src not in full_tensors:
            raise InputError(f"replay: no tensor for source '{src}'")
        full = full_tensors[src]
        spec = self.sources.get(src)
        if spec is not None and tuple(full.shape) != tuple(spec[0]):
            raise InputError(
                f"tensor '{src}': capture assumes shape {list(spec[0])}, "
                f"given {list(full.shape)}")
        try:
            return capture_ops.apply_ops(full, copy["ops"])
        except ValueError as e:
            raise InputError(f"copy of '{src}': {e}") from None

    def _region(self, params, item):
        name = item["param"]
        if name not in params:
            raise InputError(f"replay: no tensor for parameter '{name}'")
        p = params[name]
        shape, dtype = self.params[name]
        if tuple(p.shape) != tuple(shape) or not holds(p.dtype,
                                                         code_of(dtype)):
            raise InputError(
                f"parameter '{name}': capture has {list(shape)} "
                f"{name_of(dtype)}, given {list(p.shape)} {name_of(p.dtype)}")
        return p.as_strided(item["dest_shape"], item["dest_stride"],
                            p.storage_offset() + item["dest_offset"])


def _non_unit(shape):
    return [s for s in shape if s != 1]


def _patterns(value, kind):
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    try:
        pats = list(value)
    except TypeError:
        pats = None
    if pats is None or not all(isinstance(p, str) and p for p in pats):
        raise InvalidArgument(f"capture.select: {kind} must be a pattern or "
                              f"a list of patterns, got {value!r}")
    return pats


def _check_quant_params(params, where, param, fmt, scale_param):
    """The parameters of a quantized copy: `param` (when declared) of the
    format, `scale_param` declared and float32."""
    if param in params and name_of(params[param][1]) != fmt:
        raise InputError(f"{where}: dest_dtype: parameter '{param}' is "
                         f"{name_of(params[param][1])}, not the "
                         f"quantization format {fmt}")
    if scale_param not in params:
        raise InputError(f"{where}: quant.scale_param: '{scale_param}' is "
                         f"not a declared parameter")
    if params[scale_param][1] != torch.float32:
        raise InputError(f"{where}: quant.scale_param: parameter "
                         f"'{scale_param}' is "
                         f"{name_of(params[scale_param][1])}, scales are f32")


def _ordered(copies, fills):
    """Copies and fills in the order the loader made them."""
    steps, fi = [], 0
    fills = sorted(fills, key=lambda f: f.get("at", 0))
    for ci, c in enumerate(copies):
        while fi < len(fills) and fills[fi].get("at", 0) <= ci:
            steps.append(("fill", fills[fi]))
            fi += 1
        steps.append(("copy", c))
    steps.extend(("fill", f) for f in fills[fi:])
    return steps


# ---------------------------------------------------------------- JSON parts

def _specs_to_json(specs):
    return {n: {"shape": list(s), "dtype": name_of(d)}
            for n, (s, d) in specs.items()}


def _copy_to_json(c):
    out = dict(c)
    out["ops"] = [list(op) for op in c["ops"]]
    out["dest_dtype"] = name_of(c["dest_dtype"])
    if "quant" in c:
        out["quant"] = json.loads(json.dumps(c["quant"]))
    return out


def _fill_to_json(f):
    out = dict(f)
    value = f["value"]
    if isinstance(value, float) and not math.isfinite(value):
        out["value"] = str(value)          # JSON has no NaN or infinity
    return out


def _list(doc, key, origin):
    value = doc.get(key) or []
    if not isinstance(value, list):
        raise InputError(f"{origin}: {key}: expected an array")
    return value


def _shape(value, where):
    if not isinstance(value, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0
            for s in value):
        raise InputError(f"{where}: expected an array of non-negative "
                         f"integers")
    return tuple(value)


def _dtype(value, where):
    try:
        return from_name(value)
    except ValueError as e:
        raise InputError(f"{where}: {e}") from None


def _specs_from_json(doc, key, origin):
    specs = doc.get(key) or {}
    if not isinstance(specs, dict):
        raise InputError(f"{origin}: {key}: expected an object")
    out = {}
    for name, spec in specs.items():
        where = f"{origin}: {key}[{name!r}]"
        if not isinstance(spec, dict):
            raise InputError(f"{where}: expected an object")
        out[name] = (_shape(spec.get("shape"), where + ".shape"),
                     _dtype(spec.get("dtype"), where + ".dtype"))
    return out


def _copy_from_json(c, where):
    keys = ("src", "ops", "param", "dest_offset", "dest_shape",
            "dest_stride", "dest_dtype")
    if not isinstance(c, dict) or any(k not in c for k in keys):
        raise InputError(f"{where}: expected an object with {list(keys)}")
    out = {"src": c["src"], "ops": c["ops"], "param": c["param"],
           "dest_offset": c["dest_offset"],
           "dest_shape": list(_shape(c["dest_shape"], where + ".dest_shape")),
           "dest_stride": list(_shape(c["dest_stride"],
                                      where + ".dest_stride")),
           "dest_dtype": _dtype(c["dest_dtype"], where + ".dest_dtype")}
    if c.get("quant") is not None:
        if not isinstance(c["quant"], dict) or \
                not isinstance(c["quant"].get("scale"), dict):
            raise InputError(f"{where}.quant: expected an object with a "
                             f"scale object")
        out["quant"] = c["quant"]
    return out


def _fill_from_json(f, where):
    keys = ("param", "dest_offset", "dest_shape", "dest_stride", "value")
    if not isinstance(f, dict) or any(k not in f for k in keys):
        raise InputError(f"{where}: expected an object with {list(keys)}")
    out = dict(f)
    if isinstance(out["value"], str):
        out["value"] = float(out["value"])
    return out


# ---------------------------------------------------------------- capture()

def _source_specs(sources):
    if not isinstance(sources, dict) or not sources:
        raise InvalidArgument("capture: sources must be a non-empty dict "
                              "name -> (shape, dtype) or tensor")
    specs = {}
    for name, spec in sources.items():
        if isinstance(spec, torch.Tensor):
            shape, dtype = tuple(spec.shape), spec.dtype
        else:
            try:
                shape, dtype = spec
                shape = tuple(int(s) for s in shape)
            except (TypeError, ValueError):
                raise InvalidArgument(
                    f"capture: source '{name}': expected (shape, dtype) or "
                    f"a tensor, got {spec!r}") from None
        if isinstance(dtype, str):
            dtype = from_name(dtype)
        try:
            name_of(dtype)
        except ValueError as e:
            raise InvalidArgument(f"capture: source '{name}': {e}") from None
        specs[name] = (shape, dtype)
    return specs


def _param_tensors(model, params):
    if params is None:
        if model is None:
            raise InvalidArgument("capture: give a model or params")
        params = dict(model.named_parameters())
    for name, p in params.items():
        if not isinstance(p, torch.Tensor):
            raise InvalidArgument(f"capture: parameter '{name}' is not a "
                                  f"tensor")
        try:
            name_of(p.dtype)
        except ValueError as e:
            raise InvalidArgument(f"capture: parameter '{name}': {e}") \
                from None
    shared = capture_hook.shared_memory(params)
    if shared is not None:
        raise InvalidArgument(shared_text("capture", *shared))
    return dict(params)


def shared_text(who, a, b):
    """The refusal of two parameters that share memory."""
    return (f"{who}: parameters '{a}' and '{b}' share memory (one tensor "
            f"under two names, or a view of another parameter): each "
            f"parameter is installed whole, so pass only one of them")


def _slots(model):
    """Every parameter and buffer entry of the model's modules: (module,
    table, key, tensor, full name), to find the ones a loader replaces."""
    if model is None:
        return []
    out = []
    for prefix, module in model.named_modules(remove_duplicate=False):
        for table in ("_parameters", "_buffers"):
            for key, t in getattr(module, table, {}).items():
                full = f"{prefix}.{key}" if prefix else key
                out.append((module, table, key, t, full))
    return out


def _restore(slots):
    """Put back the entries a loader replaced (the live model keeps its
    tensors); returns (full name, old tensor, new object) for each."""
    changed = []
    for module, table, key, t, full in slots:
        entries = getattr(module, table)
        new = entries.get(key)
        if new is not t:
            entries[key] = t
            if t is not None:
                changed.append((full, t, new))
    return changed


def capture(model=None, sources=None, load=None, *, params=None):
    """Run a loader over placeholders and return the Capture.

    `sources`: {name: (shape, dtype) or tensor}, the full checkpoint
    tensors in the order the loader receives them. `load`: callable taking
    an iterable of (name, placeholder); default `model.load_weights`.
    `params`: {name: tensor}; default `model.named_parameters()`. The
    model may live on `meta` or hold live weights: no parameter byte is
    written."""
    start = time.perf_counter()
    specs = _source_specs(sources)
    tensors = _param_tensors(model, params)
    if load is None:
        load = getattr(model, "load_weights", None)
        if load is None:
            raise InvalidArgument("capture: model has no load_weights; "
                                  "pass load=")
    model_tensors = {}
    if model is not None:
        model_tensors = dict(model.named_parameters())
        model_tensors.update(model.named_buffers())
    rec = capture_hook.Recorder(tensors, model_tensors)
    weights = [(n, rec.placeholder(n, s, d)) for n, (s, d) in specs.items()]
    slots = _slots(model)
    try:
        with capture_hook.WriteGuard(rec):
            load(iter(weights))
    finally:
        for full, old, new in _restore(slots):
            rec.replaced(full, old, new)
        rec.finish()
    if rec.stopped is not None:
        # Also when the loader caught it: what it did next may rest on a
        # value it never got.
        raise InputError(rec.stopped)
    return Capture(
        params={n: (tuple(p.shape), rec.quant_params.get(n, p.dtype))
                for n, p in tensors.items()},
        sources=specs, copies=rec.copies, fills=rec.fills,
        unsupported=rec.unsupported,
        unattributed_details=rec.unattributed_details,
        seconds=time.perf_counter() - start,
        unsupported_params=rec.unsupported_params())
