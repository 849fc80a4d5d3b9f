"""The checkpoint a Hugging Face config describes: every tensor's name and
full shape, in the order the model's modules hold them, for the decoder
families reshard knows (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Mixtral).

`model_shape(config)` reads a config (a dict, a transformers config object,
or a path to config.json or its folder) into a `ModelShape`, which names
each tensor (the Megatron mapping and `sources_from_hf_config` both ask it,
so the two cannot disagree about a name or a shape).
"""
import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from .dtypes import from_name

# model_type -> how its layers are named and which biases it has.
_FAMILIES = {
    "llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
    "qwen3_moe": "qwen3", "mixtral": "llama",
}
_MIXTRAL_EXPERT = {"gate": "w1", "down": "w2", "up": "w3"}


class ConfigError(ValueError):
    """A config that does not describe a known decoder (names the field)."""


@dataclass(frozen=True)
class ModelShape:
    """A decoder's checkpoint geometry. `sparse_layers` lists the layers
    whose MLP is routed experts (None: every layer when num_experts > 0);
    `moe_naming` is "qwen" (mlp.gate, mlp.experts.E.gate_proj/up_proj/
    down_proj) or "mixtral" (block_sparse_moe.gate, experts.E.w1/w3/w2)."""
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    num_experts: int = 0
    moe_intermediate_size: int = 0
    sparse_layers: Optional[Tuple[int, ...]] = None
    moe_naming: str = "qwen"
    dtype: torch.dtype = torch.float32

    # -- names ---------------------------------------------------------
    def is_sparse(self, layer):
        if self.num_experts <= 0:
            return False
        return self.sparse_layers is None or layer in self.sparse_layers

    def _moe(self, layer):
        block = "block_sparse_moe" if self.moe_naming == "mixtral" else "mlp"
        return f"model.layers.{layer}.{block}."

    def router(self, layer):
        """The router's weight [experts, hidden]."""
        return self._moe(layer) + "gate.weight"

    def expert(self, layer, e, which):
        """Expert e's "gate", "up" or "down" weight."""
        proj = _MIXTRAL_EXPERT[which] if self.moe_naming == "mixtral" \
            else f"{which}_proj"
        return self._moe(layer) + f"experts.{e}.{proj}.weight"

    # -- the checkpoint ------------------------------------------------
    def _attention(self, p):
        h, hd = self.hidden_size, self.head_dim
        q, kv = self.num_heads * hd, self.num_kv_heads * hd
        out = []
        for proj, rows in (("q", q), ("k", kv), ("v", kv)):
            out.append((f"{p}self_attn.{proj}_proj.weight", (rows, h)))
            if self.qkv_bias:
                out.append((f"{p}self_attn.{proj}_proj.bias", (rows,)))
        out.append((f"{p}self_attn.o_proj.weight", (h, q)))
        if self.o_bias:
            out.append((f"{p}self_attn.o_proj.bias", (h,)))
        if self.qk_norm:
            out += [(f"{p}self_attn.q_norm.weight", (hd,)),
                    (f"{p}self_attn.k_norm.weight", (hd,))]
        return out

    def _dense_mlp(self, p):
        h, f = self.hidden_size, self.intermediate_size
        out = []
        for proj, shape in (("gate", (f, h)), ("up", (f, h)),
                            ("down", (h, f))):
            out.append((f"{p}mlp.{proj}_proj.weight", shape))
            if self.mlp_bias:
                out.append((f"{p}mlp.{proj}_proj.bias", (shape[0],)))
        return out

    def _experts(self, i):
        h, f = self.hidden_size, self.moe_intermediate_size
        out = [(self.router(i), (self.num_experts, h))]
        order = ("gate", "down", "up") if self.moe_naming == "mixtral" \
            else ("gate", "up", "down")
        for e in range(self.num_experts):
            out += [(self.expert(i, e, w), (h, f) if w == "down" else (f, h))
                    for w in order]
        return out

    def layer_tensors(self, i):
        """(name, full shape) of layer i's tensors, in module order."""
        p = f"model.layers.{i}."
        mlp = self._experts(i) if self.is_sparse(i) else self._dense_mlp(p)
        return self._attention(p) + mlp + [
            (p + "input_layernorm.weight", (self.hidden_size,)),
            (p + "post_attention_layernorm.weight", (self.hidden_size,))]

    def tensors(self):
        """(name, full shape) of every checkpoint tensor, in module order:
        the embedding, each layer (attention, MLP, its two norms), the final
        norm, and the head unless it is tied to the embedding."""
        h = self.hidden_size
        out = [("model.embed_tokens.weight", (self.vocab_size, h))]
        for i in range(self.num_layers):
            out += self.layer_tensors(i)
        out.append(("model.norm.weight", (h,)))
        if not self.tie_word_embeddings:
            out.append(("lm_head.weight", (self.vocab_size, h)))
        return out


# -- reading a config -------------------------------------------------------
def _as_dict(config):
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    if isinstance(config, dict):
        return dict(config)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    return dict(vars(config))


def _int(cfg, key, default=None):
    value = cfg.get(key, default)
    if value is None:
        raise ConfigError(f"config: '{key}' is missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"config: '{key}' must be a non-negative integer, "
                          f"got {value!r}")
    return value


def _dtype(cfg, dtype):
    if dtype is None:
        dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return from_name(str(dtype).replace("torch.", ""))
    except ValueError:
        raise ConfigError(f"config: dtype {dtype!r} is not one reshard "
                          f"moves") from None


def _sparse_layers(cfg, layers, experts):
    """Qwen-MoE's dense layers: those in mlp_only_layers, and those off
    the decoder_sparse_step."""
    only = set(cfg.get("mlp_only_layers") or ())
    step = _int(cfg, "decoder_sparse_step", 1) or 1
    if not experts or (not only and step == 1):
        return None
    return tuple(i for i in range(layers)
                 if i not in only and (i + 1) % step == 0)


def model_shape(config, dtype=None):
    """The ModelShape of a Hugging Face config (dict, config object, or a
    path to config.json or its folder). `dtype` overrides the config's
    (torch_dtype / dtype, default float32). ConfigError naming the field
    for a missing or bad one, or an unknown model_type."""
    if isinstance(config, ModelShape):
        return config if dtype is None else \
            dataclasses.replace(config, dtype=_dtype({}, dtype))
    cfg = _as_dict(config)
    kind = cfg.get("model_type")
    family = _FAMILIES.get(kind)
    if family is None:
        raise ConfigError(f"config: model_type {kind!r} is not one of "
                          f"{', '.join(sorted(_FAMILIES))}")
    hidden, heads = _int(cfg, "hidden_size"), _int(cfg, "num_attention_heads")
    if heads == 0 or hidden % heads and cfg.get("head_dim") is None:
        raise ConfigError(f"config: hidden_size {hidden} does not split "
                          f"into {heads} heads and head_dim is missing")
    head_dim = cfg.get("head_dim") or hidden // heads
    experts = _int(cfg, "num_experts", cfg.get("num_local_experts") or 0)
    layers = _int(cfg, "num_hidden_layers")
    bias = bool(cfg.get("attention_bias", False))
    mixtral = kind == "mixtral"
    return ModelShape(
        hidden_size=hidden, num_layers=layers, num_heads=heads,
        num_kv_heads=_int(cfg, "num_key_value_heads", heads),
        head_dim=_int({"head_dim": head_dim}, "head_dim"),
        intermediate_size=_int(cfg, "intermediate_size"),
        vocab_size=_int(cfg, "vocab_size"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=family == "qwen2" or bias,
        o_bias=family != "qwen2" and bias,
        mlp_bias=family == "llama" and bool(cfg.get("mlp_bias", False)),
        qk_norm=family == "qwen3", num_experts=experts,
        moe_intermediate_size=_int(cfg, "intermediate_size") if mixtral
        else _int(cfg, "moe_intermediate_size", 0),
        sparse_layers=_sparse_layers(cfg, layers, experts),
        moe_naming="mixtral" if mixtral else "qwen",
        dtype=_dtype(cfg, dtype))
