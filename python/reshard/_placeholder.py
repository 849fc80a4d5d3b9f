"""The capture's placeholder tensor and what every part of the recorder
reads from it: where a call came from, the calls that keep values, and
arguments with placeholders swapped for meta tensors.

A leaf of the package (it imports no other reshard module), so that the
recorder (capture_hook), the quantize_fp8 recorder (capture_quant) and
reshard.quant share it without importing each other. A placeholder hands
every torch call, and every function that dispatches through
torch.overrides (reshard.quant.quantize_fp8), to its recorder's `handle`.
"""
import os
import sys

import torch

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def location():
    """file:line of the innermost frame outside torch and this package: the
    loader line that made the call."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith((_TORCH_DIR, _OWN_DIR)):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


# Calls that return their input unchanged as far as values go.
IDENTITY = {"detach", "data", "cpu", "cuda", "requires_grad_", "to",
            "float", "double", "half", "bfloat16", "int", "long", "short",
            "bool", "byte", "char", "type_as", "type", "pin_memory"}

# The IDENTITY calls that name their dtype.
CASTS = {"float": torch.float32, "double": torch.float64,
         "half": torch.float16, "bfloat16": torch.bfloat16,
         "int": torch.int32, "long": torch.int64, "short": torch.int16,
         "bool": torch.bool, "byte": torch.uint8, "char": torch.int8}


def target_dtype(name, x, args, kwargs):
    """The dtype an identity-like call converts to, or None."""
    if name in CASTS:
        return CASTS[name]
    if name in ("to", "type"):
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.dtype):
                return a
            if isinstance(a, torch.Tensor):
                return a.dtype
    if name == "type_as":
        return args[0].dtype
    return None


class Placeholder(torch.Tensor):
    """A source tensor (or a view of one) with shape and dtype only.

    `_rs_srcs` names the source(s) it was derived from and `_rs_ops` is
    its op chain from the full source, or None when an unsupported call
    produced it. `_rs_vmeta` is what the op chain gives on a meta tensor
    of the full source (the strides of the values, where `_rs_raw` has
    those the loader sees, after a `contiguous` that copies).
    `_rs_pieces` is set instead of an op chain for values that are no one
    view of the source (capture_pieces); `_rs_cast` is the dtype of an
    explicit cast the values went through, with `_rs_cast_at` saying
    where. `_rs_rec` is the recorder every call goes to."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        rec = placeholders_in(args, kwargs)[0]._rs_rec
        return rec.handle(func, args, kwargs or {})

    def __repr__(self):
        srcs = ",".join(self._rs_srcs)
        return (f"Placeholder({srcs!r}, shape={list(self._rs_raw.shape)}, "
                f"dtype={self._rs_raw.dtype}, ops={self._rs_ops})")


PIECED = "pieced"      # _rs_ops of a placeholder held as pieces


def make_placeholder(rec, raw, srcs, ops, *, vmeta=None, pieces=None,
                     like=None, why=None):
    """A placeholder of meta tensor `raw`; `like` passes on the cast of
    the placeholder it derives from."""
    with torch._C.DisableTorchFunction():
        ph = torch.Tensor._make_subclass(Placeholder, raw)
    ph._rs_rec, ph._rs_raw = rec, raw
    ph._rs_srcs, ph._rs_ops = tuple(srcs), ops
    ph._rs_vmeta = raw if vmeta is None else vmeta
    ph._rs_pieces = pieces
    ph._rs_cast = getattr(like, "_rs_cast", None)
    ph._rs_cast_at = getattr(like, "_rs_cast_at", None)
    ph._rs_why = why          # poisoned (ops None): why, marked when written
    return ph


def is_pieced(ph):
    return ph._rs_ops is PIECED


def _walk(obj):
    """Every object nested in tuples, lists and dict values."""
    if isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _walk(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _walk(o)
    else:
        yield obj


def placeholders_in(args, kwargs):
    return [o for o in _walk((args, kwargs)) if isinstance(o, Placeholder)]


def _replace(obj, leaf):
    """`obj` with every object nested in tuples, lists and dict values
    replaced by leaf(object)."""
    if isinstance(obj, tuple):
        return tuple(_replace(o, leaf) for o in obj)
    if isinstance(obj, list):
        return [_replace(o, leaf) for o in obj]
    if isinstance(obj, dict):
        return {k: _replace(v, leaf) for k, v in obj.items()}
    return leaf(obj)


def _raw(obj):
    return obj._rs_raw if isinstance(obj, Placeholder) else obj


def _meta(obj):
    if isinstance(obj, Placeholder):
        return obj._rs_raw
    if isinstance(obj, torch.Tensor):
        with torch._C.DisableTorchFunction():
            return torch.empty_strided(obj.shape, obj.stride(),
                                       dtype=obj.dtype, device="meta")
    return obj


def unwrap(obj):
    """Placeholders replaced by their meta tensors, other values kept."""
    return _replace(obj, _raw)


def to_meta(obj):
    """Arguments with placeholders unwrapped and other tensors replaced by
    meta tensors of the same geometry, to compute result shapes."""
    return _replace(obj, _meta)
