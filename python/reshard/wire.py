"""The dtype a publisher serves a tensor in: its wire dtype.

A trainer holding fp32 master weights can publish them as bf16: the
publisher keeps one copy of the box in the wire dtype, refreshed from the
live tensor by torch's own cast at every publish, and registers that copy,
so the published table declares the wire dtype. Casts go between floating
dtypes only (f64, f32, f16, bf16); FP8 needs scales (publisher-side
quantization, `quantize=`).
"""
import torch

from . import dtypes, errors, layouts

CASTABLE = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _names():
    return ", ".join(dtypes.name_of(d) for d in CASTABLE)


def parse(spec, what):
    """The torch dtype of a wire_dtype argument (a torch dtype or a name:
    "bf16", "bfloat16", "torch.bfloat16"), None for None; InvalidArgument
    naming `what` for an unknown or non-floating dtype."""
    if spec is None:
        return None
    dtype = spec
    if not isinstance(spec, torch.dtype):
        try:
            dtype = dtypes.from_name(spec)
        except ValueError:
            raise errors.InvalidArgument(
                f"{what}: unknown wire dtype {spec!r} (one of "
                f"{_names()})") from None
    if dtype not in CASTABLE:
        fp8 = " (FP8 needs scales: use quantize=)" if dtype in dtypes.FP8 \
            else ""
        raise errors.InvalidArgument(
            f"{what}: wire dtype {spec!r} is not a floating dtype a cast "
            f"can serve{fp8}; use one of {_names()}")
    return dtype


def served(name, tensor_dtype, default, explicit):
    """The dtype tensor `name` of `tensor_dtype` is served in: `explicit`
    (its registration's wire_dtype; the tensor must be floating), else the
    publisher's `default` for a floating tensor, else its own dtype."""
    if explicit is not None:
        if tensor_dtype not in CASTABLE:
            raise errors.InvalidArgument(
                f"publisher: tensor '{name}' is "
                f"{layouts.dtype_text(tensor_dtype)}: wire_dtype "
                f"casts only floating tensors ({_names()})")
        return explicit
    if default is not None and tensor_dtype in CASTABLE:
        return default
    return tensor_dtype
