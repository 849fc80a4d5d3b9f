"""The `sources` a capture needs ({name: (full shape, dtype)}), from what
trainers published or from a Hugging Face config, instead of a dict
written by hand.

`sources_from_directory` reads the shard tables of one READY version
through the library (its reader of mx.reshard.shard_table.v1);
`sources_from_hf_config` lists the checkpoint a config describes
(reshard.hf_config).
"""
import ctypes
import re

from . import _lib, dtypes
from ._lib import DIAG
from .directory import Directory
from .errors import InvalidArgument
from .hf_config import model_shape

_ORDERS = ("published", "name")


def _natural(name):
    """Sort key comparing the numbers in a name as numbers (layer 2 before
    layer 10)."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p)
            for p in re.split(r"(\d+)", name)]


def _tensors(tables):
    """{tensor: (full shape, dtype)} of shard tables merged by the library,
    tensor by tensor in the order they first appear."""
    h = ctypes.c_void_p()
    _lib.call("rs_sources_create", ctypes.byref(h))
    try:
        for origin, text in tables:
            _lib.call("rs_sources_load_string", h, text, len(text),
                      _lib.enc(origin), DIAG)
        out = {}
        d = _lib.ShardDesc()
        for i in range(_lib.lib().rs_sources_num_shards(h)):
            _lib.lib().rs_sources_shard(h, i, ctypes.byref(d))
            name = d.tensor.decode()
            if name not in out:
                out[name] = (tuple(d.full_shape[k] for k in range(d.ndim)),
                             dtypes.from_name(dtypes.name_of_code(d.dtype)))
        return out
    finally:
        _lib.lib().rs_sources_destroy(h)


def sources_from_directory(directory, model, version=None, timeout_s=60.0,
                           order="published"):
    """{name: (full shape, dtype)} of every tensor the trainers published
    for `version` of `model` (None: the newest READY version, waited for up
    to timeout_s; ReshardTimeout after). The dtype is the one served. Order
    "published": slot 0's table first, each table in its publisher's
    registration order, each tensor where it first appears; "name": sorted
    by name with numbers compared as numbers. The publisher-side quantized
    copies ("<name>#<spec>", "<name>#<spec>#scale") are not sources of a
    capture and are left out."""
    if order not in _ORDERS:
        raise InvalidArgument(f"sources: order must be one of "
                              f"{', '.join(_ORDERS)}, got {order!r}")
    with Directory(directory) as d:
        info = d.wait_ready(model, -1 if version is None else version,
                            timeout_s)
        tables = [(f"version {info.version} slot {s}",
                   d.table(model, info.version, s))
                  for s in range(info.slots)]
    out = {n: spec for n, spec in _tensors(tables).items() if "#" not in n}
    if order == "name":
        out = {n: out[n] for n in sorted(out, key=_natural)}
    return out


def sources_from_hf_config(config, dtype=None):
    """{name: (full shape, dtype)} of the checkpoint a Hugging Face config
    describes (a dict, a transformers config, or a path to config.json or
    its folder), in the model's module order: the embedding, each layer's
    attention, MLP (router then experts for MoE layers) and norms, the final
    norm, the head unless tied. `dtype` overrides the config's torch_dtype.
    reshard.hf_config.ConfigError (a ValueError) names a missing or bad
    field."""
    shape = model_shape(config, dtype)
    return {name: (full, shape.dtype) for name, full in shape.tensors()}
