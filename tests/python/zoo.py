"""A zoo of tensor-parallel weight loaders written the way vLLM writes them.

Each layer owns its parameters and a `weight_loader(param, loaded_weight,
...)` set as an attribute of the parameter, and narrows the full Hugging
Face checkpoint tensor on the rank's slice before `param.data.copy_()`:

- ColumnParallelLinear: narrow on the output dim (dim 0).
- RowParallelLinear: narrow on the input dim (dim 1).
- QKVParallelLinear: q, k and v written into bands of one fused
  parameter by shard_id "q" / "k" / "v"; KV heads are replicated when the
  TP degree exceeds their number (several ranks load the same KV head).
- MergedColumnParallelLinear: gate and up into one parameter, shard_id 0/1.
- VocabParallelEmbedding / ParallelLMHead: vocabulary padded to a multiple
  of `vocab_pad`, this rank's rows copied, padding rows zeroed.
- FusedMoE: per-expert gate/up into `w13_weight[e]` and down into
  `w2_weight[e]`, called with keyword `param=`, `loaded_weight=`,
  `weight_name=`, `shard_id=`, `expert_id=`.
- RMSNorm through the default loader (`param.data.copy_(w)`).
- MambaA: `A = -exp(A_log)`, a loader doing arithmetic on its input.

`ZooModel(cfg, tp_size, tp_rank)` assembles them into a small decoder whose
`load_weights(iterable of (name, tensor))` maps Hugging Face names onto the
fused parameters with a stacked-params mapping, like vLLM's models.
`source_specs(cfg)` gives the full checkpoint shapes and dtypes and
`make_weights(cfg, seed)` deterministic full tensors for them.
"""
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

__all__ = [
    "ZooConfig", "QWEN2_5_0_5B", "ZooModel", "source_specs", "make_weights",
    "reference_model", "fill_params", "default_weight_loader",
    "ColumnParallelLinear", "RowParallelLinear", "QKVParallelLinear",
    "MergedColumnParallelLinear", "VocabParallelEmbedding",
    "ParallelLMHead", "FusedMoE", "RMSNorm", "ReplicatedLinear", "MambaA",
]


@dataclass(frozen=True)
class ZooConfig:
    """Shapes of the zoo model (Hugging Face config names in comments).

    `dtype` is the parameters' dtype, `src_dtype` the checkpoint's (default
    the same; another one makes every copy_ cast). `experts` > 0 replaces
    the dense MLP by a fused MoE with `moe_ffn` per expert. `arith` adds a
    Mamba-style `A` parameter whose loader does arithmetic."""
    hidden: int = 16            # hidden_size
    heads: int = 4              # num_attention_heads
    kv_heads: int = 2           # num_key_value_heads
    head_dim: int = 4
    ffn: int = 24               # intermediate_size
    vocab: int = 50             # vocab_size
    experts: int = 0            # num_experts
    moe_ffn: int = 8            # moe_intermediate_size
    layers: int = 1             # num_hidden_layers
    dtype: torch.dtype = torch.bfloat16
    src_dtype: Optional[torch.dtype] = None
    qkv_bias: bool = True       # Qwen2 has q/k/v biases
    vocab_pad: int = 16         # vLLM pads the vocabulary to 64
    arith: bool = False

    @property
    def checkpoint_dtype(self):
        return self.src_dtype or self.dtype


# The shapes of Qwen2.5-0.5B (its config.json; embeddings untied here).
QWEN2_5_0_5B = ZooConfig(hidden=896, heads=14, kv_heads=2, head_dim=64,
                         ffn=4864, vocab=151936, layers=24, vocab_pad=64)


def divide(a, b):
    assert a % b == 0, f"{a} is not divisible by {b}"
    return a // b


def _param(shape, dtype, device, **attrs):
    """A parameter the way vLLM makes them: no grad, attributes telling the
    loaders which dims are sharded."""
    p = nn.Parameter(torch.empty(shape, dtype=dtype, device=device),
                     requires_grad=False)
    for k, v in attrs.items():
        setattr(p, k, v)
    return p


def default_weight_loader(param, loaded_weight):
    """The loader of parameters without one (norms, routers)."""
    if param.numel() == 1 and loaded_weight.numel() == 1:
        param.data.fill_(loaded_weight.item())
    else:
        assert param.size() == loaded_weight.size(), (
            f"shape {tuple(loaded_weight.shape)} does not match "
            f"{tuple(param.shape)}")
        param.data.copy_(loaded_weight)


class _TP(nn.Module):
    def __init__(self, tp_size, tp_rank):
        super().__init__()
        assert 0 <= tp_rank < tp_size
        self.tp_size, self.tp_rank = tp_size, tp_rank

    def load_rank_slice(self, param, loaded_weight, dim):
        """This rank's slice of `loaded_weight` along `dim` (the whole of
        it when dim is None) copied into param, as vLLM's column- and
        row-parallel loaders do."""
        param_data = param.data
        if dim is not None:
            shard_size = param_data.shape[dim]
            start_idx = self.tp_rank * shard_size
            loaded_weight = loaded_weight.narrow(dim, start_idx, shard_size)
        if len(loaded_weight.shape) == 0:
            loaded_weight = loaded_weight.reshape(1)
        assert param_data.shape == loaded_weight.shape
        param_data.copy_(loaded_weight)


class ColumnParallelLinear(_TP):
    """Output features split over ranks: weight [out / tp, in]."""

    def __init__(self, in_f, out_f, tp_size, tp_rank, bias=False,
                 dtype=torch.float32, device="cpu"):
        super().__init__(tp_size, tp_rank)
        out_per = divide(out_f, tp_size)
        self.weight = _param((out_per, in_f), dtype, device, output_dim=0,
                             input_dim=1, weight_loader=self.weight_loader)
        self.bias = _param((out_per,), dtype, device, output_dim=0,
                           weight_loader=self.weight_loader) if bias else None

    def weight_loader(self, param, loaded_weight):
        self.load_rank_slice(param, loaded_weight,
                             getattr(param, "output_dim", None))


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel outputs (gate, up) in one parameter; each
    rank holds its chunk of every output, in order."""

    def __init__(self, in_f, output_sizes, tp_size, tp_rank, bias=False,
                 dtype=torch.float32, device="cpu"):
        self.output_sizes = list(output_sizes)
        super().__init__(in_f, sum(output_sizes), tp_size, tp_rank, bias,
                         dtype, device)

    def weight_loader(self, param, loaded_weight, loaded_shard_id=None):
        if loaded_shard_id is None:
            return super().weight_loader(param, loaded_weight)
        output_dim = param.output_dim
        shard_offset = sum(self.output_sizes[:loaded_shard_id]) // self.tp_size
        shard_size = self.output_sizes[loaded_shard_id] // self.tp_size
        param_data = param.data.narrow(output_dim, shard_offset, shard_size)
        start_idx = self.tp_rank * shard_size
        loaded_weight = loaded_weight.narrow(output_dim, start_idx, shard_size)
        assert param_data.shape == loaded_weight.shape
        param_data.copy_(loaded_weight)


class QKVParallelLinear(ColumnParallelLinear):
    """q, k and v projections fused on dim 0 as [q heads, k heads, v heads]
    of this rank; KV heads replicated when fewer than the TP degree."""

    def __init__(self, hidden, head_dim, total_heads, total_kv_heads,
                 tp_size, tp_rank, bias=False, dtype=torch.float32,
                 device="cpu"):
        self.head_size = head_dim
        self.num_heads = divide(total_heads, tp_size)
        if tp_size >= total_kv_heads:
            self.num_kv_heads = 1
            self.num_kv_head_replicas = divide(tp_size, total_kv_heads)
        else:
            self.num_kv_heads = divide(total_kv_heads, tp_size)
            self.num_kv_head_replicas = 1
        out_f = (self.num_heads + 2 * self.num_kv_heads) * tp_size * head_dim
        super().__init__(hidden, out_f, tp_size, tp_rank, bias, dtype, device)

    def weight_loader(self, param, loaded_weight, loaded_shard_id=None):
        if loaded_shard_id is None:
            return super().weight_loader(param, loaded_weight)
        assert loaded_shard_id in ("q", "k", "v")
        q_size = self.num_heads * self.head_size
        kv_size = self.num_kv_heads * self.head_size
        if loaded_shard_id == "q":
            shard_offset, shard_size = 0, q_size
        elif loaded_shard_id == "k":
            shard_offset, shard_size = q_size, kv_size
        else:
            shard_offset, shard_size = q_size + kv_size, kv_size
        output_dim = param.output_dim
        param_data = param.data.narrow(output_dim, shard_offset, shard_size)
        if loaded_shard_id == "q":
            shard_id = self.tp_rank
        else:
            shard_id = self.tp_rank // self.num_kv_head_replicas
        start_idx = shard_id * shard_size
        loaded_weight = loaded_weight.narrow(output_dim, start_idx, shard_size)
        assert param_data.shape == loaded_weight.shape
        param_data.copy_(loaded_weight)


class RowParallelLinear(_TP):
    """Input features split over ranks: weight [out, in / tp]."""

    def __init__(self, in_f, out_f, tp_size, tp_rank, dtype=torch.float32,
                 device="cpu"):
        super().__init__(tp_size, tp_rank)
        self.weight = _param((out_f, divide(in_f, tp_size)), dtype, device,
                             output_dim=0, input_dim=1,
                             weight_loader=self.weight_loader)

    def weight_loader(self, param, loaded_weight):
        self.load_rank_slice(param, loaded_weight,
                             getattr(param, "input_dim", None))


class ReplicatedLinear(nn.Module):
    """The full weight on every rank (MoE router)."""

    def __init__(self, in_f, out_f, dtype=torch.float32, device="cpu"):
        super().__init__()
        self.weight = _param((out_f, in_f), dtype, device,
                             weight_loader=self.weight_loader)

    def weight_loader(self, param, loaded_weight):
        assert param.size() == loaded_weight.size()
        param.data.copy_(loaded_weight)


def pad_vocab_size(vocab, pad):
    return (vocab + pad - 1) // pad * pad


class VocabParallelEmbedding(_TP):
    """Rows of the vocabulary split over ranks after padding it to a
    multiple of `pad`; rows past the real vocabulary are zeros."""

    def __init__(self, vocab, hidden, tp_size, tp_rank, pad=64,
                 dtype=torch.float32, device="cpu"):
        super().__init__(tp_size, tp_rank)
        self.org_vocab_size = vocab
        padded = pad_vocab_size(vocab, pad)
        per_partition = divide(padded, tp_size)
        start = tp_rank * per_partition
        self.org_vocab_start_index = min(start, vocab)
        self.org_vocab_end_index = min(start + per_partition, vocab)
        self.weight = _param((per_partition, hidden), dtype, device,
                             output_dim=0, weight_loader=self.weight_loader)

    def weight_loader(self, param, loaded_weight):
        output_dim = getattr(param, "output_dim", None)
        if output_dim is None:
            param.data.copy_(loaded_weight)
            return
        start_idx = self.org_vocab_start_index
        shard_size = self.org_vocab_end_index - start_idx
        assert loaded_weight.shape[output_dim] == self.org_vocab_size
        loaded_weight = loaded_weight.narrow(output_dim, start_idx, shard_size)
        param[:loaded_weight.shape[0]].data.copy_(loaded_weight)
        param[loaded_weight.shape[0]:].data.fill_(0)


class ParallelLMHead(VocabParallelEmbedding):
    """The output head, split and padded like the embedding."""


class FusedMoE(_TP):
    """All experts of a layer in two parameters: w13 [E, 2 * ffn / tp,
    hidden] (gate rows, then up rows) and w2 [E, hidden, ffn / tp]."""

    def __init__(self, experts, hidden, ffn, tp_size, tp_rank,
                 dtype=torch.float32, device="cpu"):
        super().__init__(tp_size, tp_rank)
        ffn_per = divide(ffn, tp_size)
        self.w13_weight = _param((experts, 2 * ffn_per, hidden), dtype,
                                 device, weight_loader=self.weight_loader)
        self.w2_weight = _param((experts, hidden, ffn_per), dtype, device,
                                weight_loader=self.weight_loader)

    @staticmethod
    def make_expert_params_mapping(num_experts, gate="gate_proj",
                                   down="down_proj", up="up_proj"):
        """(param name part, checkpoint name part, expert_id, shard_id)."""
        return [("experts.w13_" if w in (gate, up) else "experts.w2_",
                 f"experts.{e}.{w}.", e, shard_id)
                for e in range(num_experts)
                for shard_id, w in (("w1", gate), ("w2", down), ("w3", up))]

    def weight_loader(self, param, loaded_weight, weight_name, shard_id,
                      expert_id):
        if shard_id not in ("w1", "w2", "w3"):
            raise ValueError(f"shard_id must be w1, w2 or w3, got {shard_id}")
        shard_dim = {"w1": 0, "w2": 1, "w3": 0}[shard_id]
        expert_data = param.data[expert_id]
        if shard_id == "w2":
            self._load_w2(expert_data, shard_dim, loaded_weight)
        else:
            self._load_w13(expert_data, shard_dim, shard_id, loaded_weight)

    def _load_w13(self, expert_data, shard_dim, shard_id, loaded_weight):
        shard_size = expert_data.shape[shard_dim] // 2
        loaded_weight = loaded_weight.narrow(
            shard_dim, shard_size * self.tp_rank, shard_size)
        half = 0 if shard_id == "w1" else shard_size
        expert_data = expert_data.narrow(shard_dim, half, shard_size)
        expert_data.copy_(loaded_weight)

    def _load_w2(self, expert_data, shard_dim, loaded_weight):
        shard_size = expert_data.shape[shard_dim]
        loaded_weight = loaded_weight.narrow(
            shard_dim, shard_size * self.tp_rank, shard_size)
        expert_data.copy_(loaded_weight)


class RMSNorm(nn.Module):
    """A replicated weight without a loader of its own."""

    def __init__(self, hidden, dtype=torch.float32, device="cpu"):
        super().__init__()
        self.weight = _param((hidden,), dtype, device)


class MambaA(_TP):
    """Mamba's A = -exp(A_log), computed by the loader from the checkpoint
    tensor: arithmetic on the loaded weight, which capture cannot express."""

    def __init__(self, heads, tp_size, tp_rank, device="cpu"):
        super().__init__(tp_size, tp_rank)
        self.A = _param((divide(heads, tp_size),), torch.float32, device,
                        weight_loader=self.weight_loader)

    def weight_loader(self, param, loaded_weight):
        shard_size = param.data.shape[0]
        loaded_weight = loaded_weight.narrow(0, self.tp_rank * shard_size,
                                             shard_size)
        param.data.copy_(-torch.exp(loaded_weight.float()))


class _Attention(nn.Module):
    def __init__(self, cfg, tp_size, tp_rank, device):
        super().__init__()
        d = dict(dtype=cfg.dtype, device=device)
        self.qkv_proj = QKVParallelLinear(
            cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads, tp_size,
            tp_rank, bias=cfg.qkv_bias, **d)
        self.o_proj = RowParallelLinear(cfg.heads * cfg.head_dim, cfg.hidden,
                                        tp_size, tp_rank, **d)


class _MLP(nn.Module):
    def __init__(self, cfg, tp_size, tp_rank, device):
        super().__init__()
        d = dict(dtype=cfg.dtype, device=device)
        if cfg.experts:
            self.gate = ReplicatedLinear(cfg.hidden, cfg.experts, **d)
            self.experts = FusedMoE(cfg.experts, cfg.hidden, cfg.moe_ffn,
                                    tp_size, tp_rank, **d)
        else:
            self.gate_up_proj = MergedColumnParallelLinear(
                cfg.hidden, [cfg.ffn, cfg.ffn], tp_size, tp_rank, **d)
            self.down_proj = RowParallelLinear(cfg.ffn, cfg.hidden, tp_size,
                                               tp_rank, **d)


class _Layer(nn.Module):
    def __init__(self, cfg, tp_size, tp_rank, device):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.dtype, device)
        self.self_attn = _Attention(cfg, tp_size, tp_rank, device)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.dtype, device)
        self.mlp = _MLP(cfg, tp_size, tp_rank, device)
        if cfg.arith:
            self.mixer = MambaA(cfg.heads, tp_size, tp_rank, device)


class _Body(nn.Module):
    def __init__(self, cfg, tp_size, tp_rank, device):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(
            cfg.vocab, cfg.hidden, tp_size, tp_rank, cfg.vocab_pad,
            cfg.dtype, device)
        self.layers = nn.ModuleList(_Layer(cfg, tp_size, tp_rank, device)
                                    for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.dtype, device)


class ZooModel(nn.Module):
    """A decoder with vLLM's fused parameter names, one TP rank of it.

    Parameters (per layer i): model.embed_tokens.weight,
    model.layers.i.{input,post_attention}_layernorm.weight,
    model.layers.i.self_attn.qkv_proj.{weight,bias}, ...o_proj.weight,
    model.layers.i.mlp.gate_up_proj.weight, ...down_proj.weight (dense) or
    model.layers.i.mlp.gate.weight, ...experts.w13_weight,
    ...experts.w2_weight (MoE), model.layers.i.mixer.A (arith),
    model.norm.weight, lm_head.weight. `device="meta"` builds it without
    storage, for capture."""

    stacked_params_mapping = [
        # (fused parameter, checkpoint name part, shard_id)
        ("qkv_proj", "q_proj", "q"),
        ("qkv_proj", "k_proj", "k"),
        ("qkv_proj", "v_proj", "v"),
        ("gate_up_proj", "gate_proj", 0),
        ("gate_up_proj", "up_proj", 1),
    ]

    def __init__(self, cfg, tp_size=1, tp_rank=0, device="cpu"):
        super().__init__()
        self.cfg, self.tp_size, self.tp_rank = cfg, tp_size, tp_rank
        self.model = _Body(cfg, tp_size, tp_rank, device)
        self.lm_head = ParallelLMHead(cfg.vocab, cfg.hidden, tp_size, tp_rank,
                                      cfg.vocab_pad, cfg.dtype, device)

    def load_weights(self, weights):
        """Load (Hugging Face name, full tensor) pairs; returns the names of
        the parameters loaded."""
        params = dict(self.named_parameters())
        expert_mapping = FusedMoE.make_expert_params_mapping(self.cfg.experts)
        loaded = set()
        for name, loaded_weight in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            for param_name, weight_name, shard_id in \
                    self.stacked_params_mapping:
                if weight_name not in name or "mlp.experts" in name:
                    continue
                name = name.replace(weight_name, param_name)
                param = params[name]
                param.weight_loader(param, loaded_weight, shard_id)
                break
            else:
                for param_name, weight_name, expert_id, shard_id in \
                        expert_mapping:
                    if weight_name not in name:
                        continue
                    name = name.replace(weight_name, param_name)
                    param = params[name]
                    param.weight_loader(param=param,
                                        loaded_weight=loaded_weight,
                                        weight_name=name, shard_id=shard_id,
                                        expert_id=expert_id)
                    break
                else:
                    if name.endswith(".A_log"):
                        name = name[:-len("_log")]
                    param = params[name]
                    loader = getattr(param, "weight_loader",
                                     default_weight_loader)
                    loader(param, loaded_weight)
            loaded.add(name)
        return loaded


def source_specs(cfg):
    """{Hugging Face name: (full shape, checkpoint dtype)}, in checkpoint
    order: what the publisher serves and what capture is given."""
    h, hd, dt = cfg.hidden, cfg.head_dim, cfg.checkpoint_dtype
    specs = {"model.embed_tokens.weight": ((cfg.vocab, h), dt)}
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        specs[p + "input_layernorm.weight"] = ((h,), dt)
        for proj, heads in (("q", cfg.heads), ("k", cfg.kv_heads),
                            ("v", cfg.kv_heads)):
            specs[p + f"self_attn.{proj}_proj.weight"] = ((heads * hd, h), dt)
            if cfg.qkv_bias:
                specs[p + f"self_attn.{proj}_proj.bias"] = ((heads * hd,), dt)
        specs[p + "self_attn.o_proj.weight"] = ((h, cfg.heads * hd), dt)
        specs[p + "post_attention_layernorm.weight"] = ((h,), dt)
        if cfg.experts:
            specs[p + "mlp.gate.weight"] = ((cfg.experts, h), dt)
            for e in range(cfg.experts):
                q = p + f"mlp.experts.{e}."
                specs[q + "gate_proj.weight"] = ((cfg.moe_ffn, h), dt)
                specs[q + "up_proj.weight"] = ((cfg.moe_ffn, h), dt)
                specs[q + "down_proj.weight"] = ((h, cfg.moe_ffn), dt)
        else:
            specs[p + "mlp.gate_proj.weight"] = ((cfg.ffn, h), dt)
            specs[p + "mlp.up_proj.weight"] = ((cfg.ffn, h), dt)
            specs[p + "mlp.down_proj.weight"] = ((h, cfg.ffn), dt)
        if cfg.arith:
            specs[p + "mixer.A_log"] = ((cfg.heads,), dt)
    specs["model.norm.weight"] = ((h,), dt)
    specs["lm_head.weight"] = ((cfg.vocab, h), dt)
    return specs


def make_weights(cfg, seed=0):
    """Deterministic full checkpoint tensors {name: tensor} for
    `source_specs(cfg)`, drawn from one seeded generator in that order."""
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=g).to(dtype)
            for name, (shape, dtype) in source_specs(cfg).items()}


def fill_params(model, value):
    """Set every parameter to `value` (a sentinel that shows bytes a loader
    did not write)."""
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)


def reference_model(cfg, tp_size, tp_rank, weights, sentinel=-7.0):
    """The ground truth: a CPU model for one rank, parameters preset to
    `sentinel`, loaded by its own loaders from the real full tensors."""
    model = ZooModel(cfg, tp_size, tp_rank)
    fill_params(model, sentinel)
    model.load_weights(iter(weights.items()))
    return model
