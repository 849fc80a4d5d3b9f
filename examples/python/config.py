"""Model shapes shared by the trainer copy and the inference copy.

Both copies agree only on what a Hugging Face checkpoint would say: the
hyperparameters below and the names and full shapes of the checkpoint's
tensors (`checkpoint_tensors`). How each side stores them (tensor-parallel
shards on the trainer, fused and padded parameters on the inference
engine) is each side's own business; reshard maps one onto the other.
"""
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    rms_eps: float = 1e-6
    rope_theta: float = 10000.0
    dtype: torch.dtype = torch.float32


# The example's model: small enough to train in seconds on two cores, with
# grouped-query attention (two query heads per KV head) so the fused QKV
# layout is not trivially the concatenation of equal bands.
EXAMPLE = ModelConfig(vocab_size=96, hidden_size=64, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=16, ffn_size=128)

# Qwen2.5-0.5B's shapes (its config.json), for the benchmark.
QWEN25_05B = ModelConfig(vocab_size=151936, hidden_size=896, num_layers=24,
                         num_heads=14, num_kv_heads=2, head_dim=64,
                         ffn_size=4864, tie_word_embeddings=True,
                         qkv_bias=True, rope_theta=1000000.0,
                         dtype=torch.bfloat16)


def layer_tensors(cfg, i):
    """(name, full shape) of layer i's checkpoint tensors."""
    p = f"model.layers.{i}."
    h, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, \
        cfg.num_kv_heads * cfg.head_dim
    out = [
        (p + "input_layernorm.weight", (h,)),
        (p + "self_attn.q_proj.weight", (q, h)),
        (p + "self_attn.k_proj.weight", (kv, h)),
        (p + "self_attn.v_proj.weight", (kv, h)),
    ]
    if cfg.qkv_bias:
        out += [(p + "self_attn.q_proj.bias", (q,)),
                (p + "self_attn.k_proj.bias", (kv,)),
                (p + "self_attn.v_proj.bias", (kv,))]
    out += [
        (p + "self_attn.o_proj.weight", (h, q)),
        (p + "post_attention_layernorm.weight", (h,)),
        (p + "mlp.gate_proj.weight", (cfg.ffn_size, h)),
        (p + "mlp.up_proj.weight", (cfg.ffn_size, h)),
        (p + "mlp.down_proj.weight", (h, cfg.ffn_size)),
    ]
    return out


def checkpoint_tensors(cfg):
    """(name, full shape) of every tensor of the model's checkpoint, in
    checkpoint order: what trainers publish and the engine's loader reads.
    A tied head has no tensor of its own (it is the embedding)."""
    out = [("model.embed_tokens.weight", (cfg.vocab_size, cfg.hidden_size))]
    for i in range(cfg.num_layers):
        out += layer_tensors(cfg, i)
    out.append(("model.norm.weight", (cfg.hidden_size,)))
    if not cfg.tie_word_embeddings:
        out.append(("lm_head.weight", (cfg.vocab_size, cfg.hidden_size)))
    return out


def sources(cfg):
    """The capture's sources: name -> (full shape, dtype)."""
    return {name: (shape, cfg.dtype)
            for name, shape in checkpoint_tensors(cfg)}
