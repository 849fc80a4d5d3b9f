"""Megatron-Core's per-rank parameters built from full Hugging Face
tensors, the straightforward way (the inverse of reshard.megatron): fused
QKV by KV-head group, [gate; up] in linear_fc1, a vocabulary padded and
split over tensor-parallel ranks, equal pipeline stages, expert-parallel
blocks of experts. The tests' ground truth for the mapping, and the
"megatron" layout of the end-to-end trainer."""
import types

import torch

import zoo
from reshard.hf_config import ModelShape


def shape_of(cfg, tied=False):
    """The ModelShape of a zoo config (Qwen2 naming: q/k/v biases)."""
    return ModelShape(
        hidden_size=cfg.hidden, num_layers=cfg.layers, num_heads=cfg.heads,
        num_kv_heads=cfg.kv_heads, head_dim=cfg.head_dim,
        intermediate_size=cfg.ffn, vocab_size=cfg.vocab,
        tie_word_embeddings=tied, qkv_bias=cfg.qkv_bias,
        num_experts=cfg.experts, moe_intermediate_size=cfg.moe_ffn,
        dtype=cfg.checkpoint_dtype)


def layout_config(shape):
    """What megatron_rank reads of a config, from a ModelShape."""
    return types.SimpleNamespace(
        kv_heads=shape.num_kv_heads, head_dim=shape.head_dim,
        experts=shape.num_experts, layers=shape.num_layers,
        qkv_bias=shape.qkv_bias)


def fulls_of(cfg, tied=False):
    full = zoo.make_weights(cfg, seed=7)
    if tied:
        del full["lm_head.weight"]
    return full


def qkv_shard(q, k, v, cfg, tp, r):
    """Rank r's linear_qkv: groups [q heads of the group, k, v]; with more
    ranks than KV heads, rank r holds its slice of one group's q heads and
    that group's whole k and v."""
    kv, hd = cfg.kv_heads, cfg.head_dim
    rest = q.shape[1:]
    qg = q.reshape(kv, -1, *rest)
    kg, vg = k.reshape(kv, hd, *rest), v.reshape(kv, hd, *rest)
    if kv >= tp:
        groups = torch.cat([qg, kg, vg], dim=1).chunk(tp)[r]
        return groups.reshape(-1, *rest).clone()
    share = tp // kv
    g = r // share
    return torch.cat([qg[g].chunk(share)[r % share], kg[g], vg[g]]).clone()


def vocab_shard(w, tp, r, pad_to):
    padded = -(-w.shape[0] // pad_to) * pad_to
    table = torch.cat([w, torch.zeros(padded - w.shape[0], w.shape[1],
                                         dtype=w.dtype)])
    return table.chunk(tp)[r].clone()


def layer_params(full, cfg, i, tp, r, ep, e_rank, te_names):
    p, out = f"model.layers.{i}.", {}
    a = "self_attention."
    norm1 = a + "linear_qkv.layer_norm_weight" if te_names \
        else "input_layernorm.weight"
    out[norm1] = full[p + "input_layernorm.weight"].clone()
    for kind in ("weight", "bias") if cfg.qkv_bias else ("weight",):
        q, k, v = (full[f"{p}self_attn.{x}_proj.{kind}"] for x in "qkv")
        out[a + "linear_qkv." + kind] = qkv_shard(q, k, v, cfg, tp, r)
    for x in "qk":  # Qwen3's per-head q/k norms
        if f"{p}self_attn.{x}_norm.weight" in full:
            out[f"{a}{x}_layernorm.weight"] = \
                full[f"{p}self_attn.{x}_norm.weight"].clone()
    out[a + "linear_proj.weight"] = \
        full[p + "self_attn.o_proj.weight"].chunk(tp, 1)[r].clone()
    if cfg.experts:
        out["pre_mlp_layernorm.weight"] = \
            full[p + "post_attention_layernorm.weight"].clone()
        out["mlp.router.weight"] = full[p + "mlp.gate.weight"].clone()
        per = cfg.experts // ep
        for j in range(per):
            x = f"{p}mlp.experts.{e_rank * per + j}."
            fc1 = torch.cat([full[x + "gate_proj.weight"],
                             full[x + "up_proj.weight"]])
            fc2 = full[x + "down_proj.weight"].clone()
            if te_names:
                out[f"mlp.experts.linear_fc1.weight{j}"] = fc1
                out[f"mlp.experts.linear_fc2.weight{j}"] = fc2
            else:
                q = f"mlp.experts.local_experts.{j}."
                out[q + "linear_fc1.weight"], out[q + "linear_fc2.weight"] = \
                    fc1, fc2
        return out
    norm2 = "mlp.linear_fc1.layer_norm_weight" if te_names \
        else "pre_mlp_layernorm.weight"
    out[norm2] = full[p + "post_attention_layernorm.weight"].clone()
    out["mlp.linear_fc1.weight"] = torch.cat(
        [full[p + "mlp.gate_proj.weight"].chunk(tp)[r],
         full[p + "mlp.up_proj.weight"].chunk(tp)[r]])
    out["mlp.linear_fc2.weight"] = \
        full[p + "mlp.down_proj.weight"].chunk(tp, 1)[r].clone()
    return out


def megatron_rank(full, cfg, *, tp=1, r=0, stages=1, s=0, ep=1, e_rank=0,
                  tied=False, te_names=False, pad_to=16):
    """Tensor rank r of stage s and expert rank e_rank: its Megatron
    parameters (name -> tensor) and its layer offset. Stage s holds an equal
    block of layers; te_names: Transformer Engine's names (layernorms fused
    into linear_qkv / linear_fc1, TEGroupedMLP experts)."""
    per = cfg.layers // stages
    params = {}
    if s == 0:
        params["embedding.word_embeddings.weight"] = vocab_shard(
            full["model.embed_tokens.weight"], tp, r, pad_to)
    for j in range(per):
        for n, t in layer_params(full, cfg, s * per + j, tp, r, ep, e_rank,
                                 te_names).items():
            params[f"decoder.layers.{j}.{n}"] = t
    if s == stages - 1:
        params["decoder.final_layernorm.weight"] = \
            full["model.norm.weight"].clone()
        head = full["model.embed_tokens.weight"] if tied \
            else full["lm_head.weight"]
        if not (tied and stages == 1):  # pp > 1 keeps a copy on the last
            params["output_layer.weight"] = vocab_shard(head, tp, r, pad_to)
    return params, s * per
