"""Element types: torch dtypes and the names reshard's formats use.

The short names are what reshard.capture.v1 and the shard tables write
(docs/formats.md, "Dtype names"); the codes are rs_dtype_t's values
(include/reshard/dtype.h), which the ctypes layer passes to the library.

A torch without float8 dtypes (1.13) stands the FP8 formats in with their
short names, F8E4M3 = "f8e4m3" and F8E5M2 = "f8e5m2": a capture's
quantized parameters carry them, and uint8 tensors hold their bits
(`storage_dtype`). On a torch with them (2.x) F8E4M3 and F8E5M2 are
torch.float8_e4m3fn and torch.float8_e5m2, and tensors of those dtypes
hold FP8 values; uint8 tensors holding the bits are accepted there too.
"""
import torch

F8E4M3 = getattr(torch, "float8_e4m3fn", None) or "f8e4m3"
F8E5M2 = getattr(torch, "float8_e5m2", None) or "f8e5m2"
FP8 = (F8E4M3, F8E5M2)

# (torch dtype, short name, rs_dtype_t value), in rs_dtype_t order.
_TABLE = [
    (torch.float32, "f32", 1),
    (torch.bfloat16, "bf16", 2),
    (torch.float16, "f16", 3),
    (F8E4M3, "f8e4m3", 4),
    (F8E5M2, "f8e5m2", 5),
    (torch.float64, "f64", 6),
    (torch.int8, "i8", 7),
    (torch.uint8, "u8", 8),
    (torch.int16, "i16", 9),
    (torch.int32, "i32", 10),
    (torch.int64, "i64", 11),
    (torch.bool, "bool", 12),
]

_BY_TORCH = {t: (name, code) for t, name, code in _TABLE if t is not None}
_BY_NAME = {name: (t, code) for t, name, code in _TABLE}
_ALIASES = {
    "float32": "f32", "bfloat16": "bf16", "float16": "f16", "half": "f16",
    "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2", "float64": "f64",
    "int8": "i8", "uint8": "u8", "int16": "i16", "int32": "i32",
    "int64": "i64",
}


def short_name(name):
    """The short name of any accepted spelling, unchecked ("bfloat16" ->
    "bf16")."""
    return _short(str(name))


def storage_dtype(dtype):
    """The torch dtype whose tensors hold values of `dtype`: uint8 for an
    FP8 format torch has no dtype for, else `dtype`."""
    return torch.uint8 if isinstance(dtype, str) else dtype


def _short(name):
    if name.startswith("torch."):
        name = name[len("torch."):]
        if name == "bool":
            return "bool"
    return _ALIASES.get(name, name)


def name_of(dtype):
    """The short name of a torch dtype ("bf16"); ValueError for a dtype
    reshard does not move (complex, quantized, ...)."""
    try:
        return _BY_TORCH[dtype][0]
    except (KeyError, TypeError):
        raise ValueError(f"dtype {dtype} is not supported by reshard") from None


def code_of(dtype):
    """rs_dtype_t value of a torch dtype."""
    name_of(dtype)
    return _BY_TORCH[dtype][1]


def is_fp8(dtype):
    """Whether `dtype` is one of the FP8 formats (a torch float8 dtype, or
    the short name standing in for one)."""
    return any(dtype is f or dtype == f for f in FP8)


def holds(tensor_dtype, code):
    """Whether tensors of `tensor_dtype` hold values of the rs_dtype_t
    `code`: the same dtype, or uint8 holding the bits of an FP8 format
    (on every torch: the only way on one without float8 dtypes)."""
    for t, _, c in _TABLE:
        if c == code:
            return tensor_dtype == storage_dtype(t) or (
                is_fp8(t) and tensor_dtype == torch.uint8)
    return False


def name_of_code(code):
    """The short name of an rs_dtype_t value ("dtype 99" for none)."""
    for _, name, c in _TABLE:
        if c == code:
            return name
    return f"dtype {code}"


def from_name(name):
    """The torch dtype of any spelling the formats accept ("bf16",
    "bfloat16", "torch.bfloat16"); ValueError naming the spelling."""
    entry = _BY_NAME.get(_short(str(name)))
    if entry is None or entry[0] is None:
        raise ValueError(f"unknown dtype '{name}'")
    return entry[0]


def size_of(dtype):
    """Bytes per element."""
    return torch.empty((), dtype=storage_dtype(dtype)).element_size()
