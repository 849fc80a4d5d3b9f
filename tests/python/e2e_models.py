"""The models of the end-to-end tests: the zoo's vLLM-style loaders
(tests/python/zoo.py) in a few configurations, the deterministic full
Hugging Face tensors of each version, and the ground truth.

Trainer processes import this module too, so both sides build the same
full tensors from the same seed; a config crosses the process boundary as
JSON (`to_json` / `from_json`).
"""
import dataclasses

import torch

import zoo
from reshard import dtypes

# Trainers hold f32 master weights, the inference model is bf16: every
# copy is also a cast, which reshard must do exactly like torch's copy_.
SOURCE_DTYPE = torch.float32
PARAM_DTYPE = torch.bfloat16


def config(**over):
    """A zoo config: two layers, a vocabulary of 101 padded to 128 (rank 1
    of TP 2 holds 37 real rows and 27 zeroed ones), one KV head (replicated
    at inference TP 2) unless told otherwise."""
    base = dict(hidden=16, heads=4, kv_heads=1, head_dim=4, ffn=24,
                vocab=101, vocab_pad=64, layers=2, dtype=PARAM_DTYPE,
                src_dtype=SOURCE_DTYPE, qkv_bias=True)
    base.update(over)
    return zoo.ZooConfig(**base)


DENSE = dict(kv_heads=1)                       # KV replication at TP 2
MOE = dict(kv_heads=2, experts=2, moe_ffn=8)   # Megatron-fusable QKV


def to_json(cfg):
    out = dataclasses.asdict(cfg)
    for k in ("dtype", "src_dtype"):
        if out[k] is not None:
            out[k] = dtypes.name_of(out[k])
    return out


def from_json(d):
    d = dict(d)
    for k in ("dtype", "src_dtype"):
        if d[k] is not None:
            d[k] = dtypes.from_name(d[k])
    return zoo.ZooConfig(**d)


def sources(cfg):
    """{name: (full shape, dtype)}: what trainers publish, what capture is
    told."""
    return zoo.source_specs(cfg)


def hf_shapes(cfg):
    return {n: tuple(s) for n, (s, _) in sources(cfg).items()}


def version_seed(base, version):
    """The seed of a version's contents: new bytes every version."""
    return base * 1000 + version


def full_tensors(cfg, seed):
    """The full checkpoint tensors of one version."""
    return zoo.make_weights(cfg, int(seed))


def build(cfg, tp_rank=0, tp_size=1, fill=None):
    """A model rank whose parameters hold `fill` (a value no loader writes,
    so an untouched byte shows), or uninitialized memory when None."""
    m = zoo.ZooModel(cfg, tp_size, tp_rank)
    if fill is not None:
        zoo.fill_params(m, fill)
    return m


def truth(cfg, tp_rank, tp_size, fulls):
    """The ground truth: the loaders run by torch on the real full tensors
    (those of cfg's checkpoint) into a fresh model's real parameters."""
    names = sources(cfg)
    m = zoo.reference_model(cfg, tp_size, tp_rank,
                            {n: t for n, t in fulls.items() if n in names})
    return {n: p.detach().clone() for n, p in m.named_parameters()}
