"""Checks of the settings vLLM hands the reshard engine as plain dicts
(init and update info): each wrong field is refused where it is parsed,
naming the info, the field and the value. Imports no vLLM."""
import dataclasses
import math

from ..dtypes import from_name, name_of
from ..errors import InvalidArgument

# What the directory URLs of reshard start with (docs/directory.md).
DIRECTORY_SCHEMES = ("file:", "redis://")


def fail(what, field, problem):
    """InvalidArgument (a ValueError) naming the info and the field."""
    return InvalidArgument(f"{what}: field '{field}' {problem}")


def check_keys(what, cls, data):
    """`data` as keyword arguments of dataclass `cls`: a dict whose keys
    are fields of `cls` and hold every field without a default."""
    if not isinstance(data, dict):
        raise InvalidArgument(f"{what}: expected a dict of fields, got "
                              f"{type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(k for k in data if k not in fields)
    if unknown:
        raise fail(what, unknown[0], f"is not a setting (known: "
                   f"{', '.join(sorted(fields))})")
    missing = [n for n, f in fields.items() if n not in data
               and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise fail(what, missing[0], "is required")
    return dict(data)


def text(what, field, value, optional=False):
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise fail(what, field, f"must be a non-empty string, got {value!r}")
    return value


def directory(what, field, value):
    text(what, field, value)
    if not value.startswith(DIRECTORY_SCHEMES):
        raise fail(what, field, f"must be a directory URL starting with "
                   f"{' or '.join(DIRECTORY_SCHEMES)}, got {value!r}")
    return value


def integer(what, field, value, low=0, optional=False):
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise fail(what, field, f"must be an integer >= {low}, got {value!r}")
    return value


def seconds(what, field, value):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0:
        raise fail(what, field, f"must be a number of seconds >= 0, got "
                   f"{value!r}")
    return float(value)


def flag(what, field, value, optional=False):
    if value is None and optional:
        return None
    if not isinstance(value, bool):
        raise fail(what, field, f"must be true or false, got {value!r}")
    return value


def choice(what, field, value, allowed):
    if value not in allowed:
        raise fail(what, field, f"must be one of {', '.join(allowed)}, got "
                   f"{value!r}")
    return value


def patterns(what, field, value):
    """None, one glob or a list of globs, as a list (or None)."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items or \
            not all(isinstance(p, str) and p for p in items):
        raise fail(what, field, f"must be a glob or a list of globs, got "
                   f"{value!r}")
    return list(items)


def sources(what, field, value):
    """The checkpoint's tensors in loader order as {name: (shape, torch
    dtype)}, from a list of [name, shape, dtype] (JSON-friendly, what the
    trainer side sends) or a dict {name: [shape, dtype]}."""
    items = value.items() if isinstance(value, dict) else value
    if not isinstance(items, (list, tuple, type({}.items()))) or not items:
        raise fail(what, field, "must be a non-empty list of [name, shape, "
                   f"dtype], got {value!r}")
    out = {}
    for i, item in enumerate(items):
        entry = item
        if isinstance(value, dict):   # name: [shape, dtype]
            ok = isinstance(item[1], (list, tuple)) and len(item[1]) == 2
            entry = (item[0], *item[1]) if ok else (item[0], item[1])
        out.update([_source(what, f"{field}[{i}]", entry, out)])
    return out


def _source(what, where, entry, seen):
    if not isinstance(entry, (list, tuple)) or len(entry) != 3:
        raise fail(what, where, f"must be [name, shape, dtype], got {entry!r}")
    name, shape, dtype = entry
    text(what, where + " name", name)
    if name in seen:
        raise fail(what, where, f"names '{name}' a second time")
    if not isinstance(shape, (list, tuple)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0
            for d in shape):
        raise fail(what, where, f"'{name}': shape must be a list of sizes, "
                   f"got {shape!r}")
    try:
        dt = from_name(dtype)
    except ValueError:
        raise fail(what, where, f"'{name}': unknown dtype {dtype!r}") from None
    return name, (tuple(shape), dt)


def source_list(specs):
    """{name: (shape, dtype)} as the JSON-friendly [name, shape, dtype
    name] list `sources` accepts."""
    return [[n, [int(d) for d in s], name_of(dt)] for n, (s, dt) in
            specs.items()]
