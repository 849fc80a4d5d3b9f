"""Loader patterns of particular model families, written the way engines
write them (zoo.py holds the common tensor-parallel layers).

Each `Case` builds one tensor-parallel rank of a small model whose
`load_weights(iterable of (checkpoint name, full tensor))` is the family's
loading code, declares the checkpoint (`specs`: {name: (shape, dtype)},
in checkpoint order) and says what capture must make of it: `expect` is
None (captured whole) or (kind, {source or "": words}) with kind
"unsupported" (those sources refused, with those words in the reason),
"unattributed" (the capture is refused as a whole) or "stopped" (capture
raises: the loader asked a source for its values).

- GPT-2: `Conv1D` checkpoints are [in, out]; the loader transposes them
  (`w.t()`) before the column/row-parallel loaders narrow them.
- Phi-3 style fused checkpoints split by the loader with `torch.split`,
  `torch.chunk` and `torch.tensor_split` into the QKV and gate/up bands.
- DeepSeek MLA: kv_b_proj viewed per head, split into its k_nope and v
  parts, heads narrowed per rank, v flattened with a copying `reshape`.
- Fused MoE, expert-parallel: global expert ids (Python ints) mapped to
  this rank's experts through an `expert_map` tensor; experts held by
  other ranks are skipped.
- Llama-4: stacked experts [E, H, 2I] transposed, chunked into gate and up,
  indexed per expert; the down projection moved with `movedim`.
- GPT-OSS: stacked experts with interleaved gate/up columns, narrowed,
  `permute(0, 2, 1).contiguous()` and copied.
- moe_wna16 (GPTQ): scales transposed and narrowed (captured); packed
  qweight `.T.contiguous().view(torch.uint8)` and arithmetic on qzeros
  (refused).
- FP8 kv-cache scales through vLLM's default loader: scalars by
  `param.data.fill_(w.item())`, vectors by `copy_`.
- Mamba2 `composed_weight_loader`: `A = -exp(A_log)` computed from the
  parameter after the copy (unattributed).
- verl: `param.data = loaded` (and `loaded.to(param.dtype)`).
- GPT-NeoX: per-head interleaved QKV reordered with
  `view(h, 3, d, H).transpose(0, 1).reshape(3 * h * d, H)`.
- Explicit casts to the parameter's dtype before `copy_`; a cast through a
  third dtype (refused).
- Writes in order: zeroing then copying over it (right), copying then
  zeroing part of it (refused).
- Value queries: `.item()` used in arithmetic (refused), a branch on a
  source's values (stopped).
"""
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from torch import nn

import zoo
from zoo import _param, divide

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16


@dataclass
class Case:
    name: str
    make: Callable                 # (tp, rank, device) -> nn.Module
    specs: dict
    expect: Optional[tuple] = None
    tps: tuple = (1, 2)
    notes: dict = field(default_factory=dict)


def _params(module):
    return dict(module.named_parameters())


class _Model(nn.Module):
    def __init__(self, tp, rank):
        super().__init__()
        self.tp, self.rank = tp, rank


# ---------------------------------------------------------------- GPT-2

class GPT2(_Model):
    """One GPT-2 block: c_attn (fused qkv), c_fc column-parallel, c_proj
    row-parallel; Conv1D checkpoints are [in, out]."""
    conv1d = ("c_attn", "c_fc", "c_proj")

    def __init__(self, tp, rank, device="cpu", hidden=8):
        super().__init__(tp, rank)
        H = hidden
        self.h = H
        self.c_attn = zoo.QKVParallelLinear(H, H // 2, 2, 2, tp, rank,
                                            bias=True, dtype=F32,
                                            device=device)
        self.c_fc = zoo.ColumnParallelLinear(H, 4 * H, tp, rank, bias=True,
                                             dtype=F32, device=device)
        self.c_proj = zoo.RowParallelLinear(4 * H, H, tp, rank, dtype=F32,
                                            device=device)

    def load_weights(self, weights):
        params = _params(self)
        for name, w in weights:
            short = name.split(".")[-2] + "." + name.split(".")[-1]
            if any(c in name for c in self.conv1d) and name.endswith("weight"):
                w = w.t()
            param = params[short]
            if short.startswith("c_attn"):
                # the fused checkpoint holds q, k, v one after the other
                for i, shard in enumerate("qkv"):
                    part = w.narrow(0, i * self.h, self.h)
                    param.weight_loader(param, part, shard)
            else:
                param.weight_loader(param, w)


def gpt2_specs(H=8):
    return {"h.0.attn.c_attn.weight": ((H, 3 * H), F32),
            "h.0.attn.c_attn.bias": ((3 * H,), F32),
            "h.0.mlp.c_fc.weight": ((H, 4 * H), F32),
            "h.0.mlp.c_fc.bias": ((4 * H,), F32),
            "h.0.mlp.c_proj.weight": ((4 * H, H), F32)}


# ---------------------------------------------------------------- fused splits

class FusedSplits(_Model):
    """Phi-3 style: a fused qkv and gate_up checkpoint, split by the loader
    (`torch.split` with sizes, `chunk`, `tensor_split`)."""

    def __init__(self, tp, rank, device="cpu", how="split"):
        super().__init__(tp, rank)
        self.how = how
        self.qkv_proj = zoo.QKVParallelLinear(8, 2, 4, 2, tp, rank,
                                              dtype=BF16, device=device)
        self.gate_up_proj = zoo.MergedColumnParallelLinear(
            8, [12, 12], tp, rank, dtype=BF16, device=device)

    def load_weights(self, weights):
        for name, w in weights:
            if "qkv" in name:
                p = self.qkv_proj.weight
                if self.how == "split":
                    q, k, v = torch.split(w, [8, 4, 4], dim=0)
                elif self.how == "tensor_split":
                    q, k, v = torch.tensor_split(w, [8, 12], dim=0)
                else:
                    q, k, v = w.split([8, 4, 4])
                for shard, part in zip("qkv", (q, k, v)):
                    p.weight_loader(p, part, shard)
            else:
                p = self.gate_up_proj.weight
                gate, up = w.chunk(2, dim=0)
                p.weight_loader(p, gate, 0)
                p.weight_loader(p, up, 1)


FUSED_SPECS = {"qkv_proj.weight": ((16, 8), BF16),
               "gate_up_proj.weight": ((24, 8), BF16)}


# ---------------------------------------------------------------- MLA

class MLA(_Model):
    """DeepSeek MLA's kv_b_proj [heads * (nope + v), rank]: the heads of
    this rank whole, their k_nope part per head, their v part flattened."""
    heads, nope, v, lora = 4, 3, 2, 5

    def __init__(self, tp, rank, device="cpu"):
        super().__init__(tp, rank)
        hp = divide(self.heads, tp)
        self.hp = hp
        dim = self.nope + self.v
        self.kv_b_proj = nn.Parameter(torch.empty(hp * dim, self.lora,
                                                  device=device),
                                      requires_grad=False)
        self.w_kc = nn.Parameter(torch.empty(hp, self.nope, self.lora,
                                             device=device),
                                 requires_grad=False)
        self.w_vc = nn.Parameter(torch.empty(hp * self.v, self.lora,
                                             device=device),
                                 requires_grad=False)

    def load_weights(self, weights):
        for _, w in weights:
            per_head = w.view(self.heads, self.nope + self.v, self.lora)
            mine = per_head[self.rank * self.hp:(self.rank + 1) * self.hp]
            self.kv_b_proj.data.copy_(mine.reshape(-1, self.lora))
            k_nope, v = mine.split([self.nope, self.v], dim=1)
            self.w_kc.data.copy_(k_nope)
            self.w_vc.data.copy_(v.reshape(self.hp * self.v, self.lora))


MLA_SPECS = {"self_attn.kv_b_proj.weight": ((4 * 5, 5), F32)}


# ---------------------------------------------------------------- MoE, EP

class ExpertParallelMoE(_Model):
    """FusedMoE with experts split over `tp` expert-parallel ranks: global
    expert ids map to local ones through `expert_map` (-1: not here)."""
    experts, hidden, ffn = 4, 6, 4

    def __init__(self, tp, rank, device="cpu"):
        super().__init__(tp, rank)
        local = divide(self.experts, tp)
        self.expert_map = torch.full((self.experts,), -1, dtype=torch.int32)
        self.expert_map[rank * local:(rank + 1) * local] = torch.arange(
            local, dtype=torch.int32)
        self.w13_weight = _param((local, 2 * self.ffn, self.hidden), F32,
                                 device, weight_loader=self.weight_loader)
        self.w2_weight = _param((local, self.hidden, self.ffn), F32, device,
                                weight_loader=self.weight_loader)

    def weight_loader(self, param, loaded_weight, weight_name, shard_id,
                      expert_id):
        local = int(self.expert_map[expert_id].item())
        if local == -1:
            return
        expert = param.data[local]
        if shard_id == "w2":
            expert.copy_(loaded_weight)
        else:
            half = 0 if shard_id == "w1" else self.ffn
            expert.narrow(0, half, self.ffn).copy_(loaded_weight)

    def load_weights(self, weights):
        mapping = zoo.FusedMoE.make_expert_params_mapping(self.experts)
        params = {"experts.w13_weight": self.w13_weight,
                  "experts.w2_weight": self.w2_weight}
        for name, w in weights:
            for pname, wname, expert_id, shard_id in mapping:
                if wname in name:
                    param = params[pname + "weight"]
                    param.weight_loader(param, w, weight_name=name,
                                        shard_id=shard_id,
                                        expert_id=expert_id)
                    break


def ep_specs():
    m = ExpertParallelMoE
    out = {}
    for e in range(m.experts):
        out[f"experts.{e}.gate_proj.weight"] = ((m.ffn, m.hidden), F32)
        out[f"experts.{e}.up_proj.weight"] = ((m.ffn, m.hidden), F32)
        out[f"experts.{e}.down_proj.weight"] = ((m.hidden, m.ffn), F32)
    return out


# ---------------------------------------------------------------- Llama-4

class Llama4MoE(_Model):
    """Stacked experts: gate_up_proj [E, H, 2I] and down_proj [E, I, H],
    turned into the FusedMoE layout expert by expert."""
    experts, hidden, ffn = 3, 4, 6

    def __init__(self, tp, rank, device="cpu"):
        super().__init__(tp, rank)
        self.moe = zoo.FusedMoE(self.experts, self.hidden, self.ffn, tp,
                                rank, dtype=BF16, device=device)

    def load_weights(self, weights):
        w13, w2 = self.moe.w13_weight, self.moe.w2_weight
        for name, w in weights:
            if name.endswith("gate_up_proj"):
                w = w.transpose(-1, -2)                 # [E, 2I, H]
                gate, up = w.chunk(2, dim=-2)
                for expert_id in range(self.experts):
                    for shard_id, part in (("w1", gate), ("w3", up)):
                        w13.weight_loader(w13, part[expert_id], name,
                                          shard_id, expert_id)
            else:
                w = w.movedim(-1, -2)                   # [E, H, I]
                for expert_id in range(self.experts):
                    w2.weight_loader(w2, w[expert_id], name, "w2", expert_id)


LLAMA4_SPECS = {"experts.gate_up_proj": ((3, 4, 12), BF16),
                "experts.down_proj": ((3, 6, 4), BF16)}


# ---------------------------------------------------------------- GPT-OSS

class GptOssMoE(_Model):
    """GPT-OSS experts: gate_up_proj [E, H, 2I] with gate and up columns
    interleaved, narrowed per rank, permuted and made contiguous."""
    experts, hidden, ffn = 2, 4, 6

    def __init__(self, tp, rank, device="cpu"):
        super().__init__(tp, rank)
        per = divide(self.ffn, tp)
        self.per = per
        E, H = self.experts, self.hidden
        self.w13_weight = _param((E, 2 * per, H), BF16, device)
        self.w13_bias = _param((E, 2 * per), BF16, device)
        self.w2_weight = _param((E, H, per), BF16, device)

    def load_weights(self, weights):
        start, end = self.rank * self.per, (self.rank + 1) * self.per
        for name, w in weights:
            if name.endswith("gate_up_proj"):
                narrow = w[:, :, 2 * start:2 * end]
                narrow = narrow.permute(0, 2, 1).contiguous()
                self.w13_weight.copy_(narrow)
            elif name.endswith("gate_up_proj_bias"):
                self.w13_bias.copy_(w[:, 2 * start:2 * end])
            else:
                narrow = w[:, start:end, :]
                narrow = narrow.permute(0, 2, 1).contiguous()
                self.w2_weight.copy_(narrow)


GPT_OSS_SPECS = {"mlp.experts.gate_up_proj": ((2, 4, 12), BF16),
                 "mlp.experts.gate_up_proj_bias": ((2, 12), BF16),
                 "mlp.experts.down_proj": ((2, 6, 4), BF16)}


# ---------------------------------------------------------------- moe_wna16

class MoeWNA16(_Model):
    """GPTQ-packed experts: int32 qweight [H / 8, I] and qzeros, f16
    scales [H / group, I]; the loader converts them to its layout."""
    experts, hidden, ffn, group = 2, 16, 4, 8

    def __init__(self, tp, rank, device="cpu"):
        super().__init__(tp, rank)
        E, H, per = self.experts, self.hidden, divide(self.ffn, tp)
        self.per = per
        self.w13_qweight = _param((E, 2 * per, H // 2), torch.uint8, device)
        self.w13_scales = _param((E, 2 * per, H // self.group), F16, device)
        self.w13_qzeros = _param((E, 2 * per, H // self.group),
                                 torch.uint8, device)

    def _convert(self, w, what):
        if what == "qweight":
            return w.T.contiguous().view(torch.uint8)
        if what == "qzeros":
            w = w.view(torch.uint8)
            shifter = torch.tensor([0, 4], dtype=torch.uint8,
                                   device=w.device)
            w = (w[:, :, None] >> shifter) & 0xF
            return (w[:, :, 0] + 1).T
        return w.T

    def load_weights(self, weights):
        params = {"qweight": self.w13_qweight, "scales": self.w13_scales,
                  "qzeros": self.w13_qzeros}
        for name, w in weights:
            what = name.rsplit(".", 1)[-1]
            expert_id = int(name.split(".")[1])
            half = 0 if ".gate_proj." in name else self.per
            w = self._convert(w, what)
            w = w.narrow(0, self.rank * self.per, self.per)
            param = params[what]
            if what == "qzeros":
                param.data[expert_id, half:half + self.per] = w[:, :1]
            else:
                param.data[expert_id, half:half + self.per] = w


def wna16_specs():
    m = MoeWNA16
    out = {}
    for e in range(m.experts):
        for proj in ("gate_proj", "up_proj"):
            p = f"experts.{e}.{proj}."
            out[p + "qweight"] = ((m.hidden // 8, m.ffn), torch.int32)
            out[p + "scales"] = ((m.hidden // m.group, m.ffn), F16)
            out[p + "qzeros"] = ((m.hidden // m.group, m.ffn // 8 or 1),
                                 torch.int32)
    return out


# ---------------------------------------------------------------- kv scales

class KVScales(_Model):
    """An attention layer's FP8 kv-cache scales (0-dim f32 parameters) and
    a per-channel weight scale, all through vLLM's default loader; the
    checkpoint names k_proj.k_scale are remapped to attn.k_scale."""

    def __init__(self, tp, rank, device="cpu"):
        super().__init__(tp, rank)
        self.k_scale = _param((), F32, device)
        self.v_scale = _param((), F32, device)
        self.q_scale = _param((), F32, device)
        self.weight_scale = _param((6,), F32, device)

    def load_weights(self, weights):
        params = _params(self)
        for name, w in weights:
            name = name.replace("k_proj.k_scale", "k_scale").replace(
                "v_proj.v_scale", "v_scale")
            param = params[name]
            loader = getattr(param, "weight_loader",
                             zoo.default_weight_loader)
            loader(param, w)


KV_SPECS = {"k_proj.k_scale": ((), F32), "v_proj.v_scale": ((1,), F32),
            "q_scale": ((), BF16), "weight_scale": ((6,), F32)}


# ---------------------------------------------------------------- Mamba2

def sharded_weight_loader(shard_axis):
    def loader(param, loaded_weight, tp_rank):
        size = param.data.shape[shard_axis]
        loaded_weight = loaded_weight.narrow(shard_axis, tp_rank * size,
                                             size)
        param.data.copy_(loaded_weight)
    return loader


def composed_weight_loader(loader, fn):
    def composed(param, loaded_weight, tp_rank):
        loader(param, loaded_weight, tp_rank)
        param.data.copy_(fn(param))
    return composed


class Mamba2(_Model):
    """Mamba2 mixer parameters: A = -exp(A_log) through a composed loader,
    D and dt_bias sharded by heads."""
    heads = 4

    def __init__(self, tp, rank, device="cpu"):
        super().__init__(tp, rank)
        hp = divide(self.heads, tp)
        self.A = _param((hp,), F32, device,
                        weight_loader=composed_weight_loader(
                            sharded_weight_loader(0),
                            lambda x: -torch.exp(x.float())))
        self.D = _param((hp,), F32, device,
                        weight_loader=sharded_weight_loader(0))
        self.dt_bias = _param((hp,), F32, device,
                              weight_loader=sharded_weight_loader(0))

    def load_weights(self, weights):
        params = _params(self)
        for name, w in weights:
            if name == "A_log":
                name = "A"
            params[name].weight_loader(params[name], w, self.rank)


MAMBA_SPECS = {"A_log": ((4,), F32), "D": ((4,), F32),
               "dt_bias": ((4,), F32)}


# ---------------------------------------------------------------- verl

class Verl(_Model):
    """verl's loading into a replicated model: each parameter's data
    rebound to the loaded tensor (cast to the parameter's dtype)."""

    def __init__(self, tp, rank, device="cpu"):
        super().__init__(tp, rank)
        self.embed = _param((5, 4), BF16, device)
        self.norm = _param((4,), F32, device)

    def load_weights(self, weights):
        params = _params(self)
        for name, w in weights:
            param = params[name]
            if w.dtype == param.dtype:
                param.data = w
            else:
                param.data = w.to(param.dtype)


VERL_SPECS = {"embed": ((5, 4), BF16), "norm": ((4,), BF16)}


# ---------------------------------------------------------------- GPT-NeoX

class GPTNeoX(_Model):
    """query_key_value holds, per head, its q, k and v rows; the loader
    reorders it to all q, all k, all v before the QKV loader narrows this
    rank's heads of each."""
    heads, head_dim, hidden = 4, 2, 6

    def __init__(self, tp, rank, device="cpu"):
        super().__init__(tp, rank)
        self.qkv = zoo.QKVParallelLinear(self.hidden, self.head_dim,
                                         self.heads, self.heads, tp, rank,
                                         bias=True, dtype=F16, device=device)

    def load_weights(self, weights):
        params = {"attention.query_key_value.weight": self.qkv.weight,
                  "attention.query_key_value.bias": self.qkv.bias}
        n = self.heads * self.head_dim
        for name, w in weights:
            shape = w.shape
            w = w.view((self.heads, 3, -1) + tuple(shape[1:]))
            w = w.transpose(0, 1)
            w = w.reshape(shape)
            param = params[name]
            for i, shard in enumerate("qkv"):
                param.weight_loader(param, w.narrow(0, i * n, n), shard)


NEOX_SPECS = {"attention.query_key_value.weight": ((24, 6), F16),
              "attention.query_key_value.bias": ((24,), F16)}


# ---------------------------------------------------------------- casts

class Casts(_Model):
    """A bf16 checkpoint loaded into f32 and f16 parameters with the
    loader's own casts; `double` casts through a third dtype."""

    def __init__(self, tp, rank, device="cpu", double=False):
        super().__init__(tp, rank)
        self.double = double
        self.a = _param((4, 3), F32, device)
        self.b = _param((3, 4), F16, device)
        self.c = _param((4,), F32, device)
        self.d = _param((2, 3), F16, device)

    def load_weights(self, weights):
        params = _params(self)
        for name, w in weights:
            param = params[name]
            if name == "a":
                param.data.copy_(w.to(param.dtype))
            elif name == "b":
                param.data.copy_(w.half().t())
            elif name == "c":
                param.data.copy_(w.float())
            elif self.double:
                param.data.copy_(w.float()[:2])
            else:
                param.data.copy_(w.type(param.dtype)[:2])


CAST_SPECS = {"a": ((4, 3), BF16), "b": ((4, 3), BF16), "c": ((4,), BF16),
              "d": ((3, 3), BF16)}


# ---------------------------------------------------------------- write order

class Embedding(_Model):
    """A padded embedding: `zero_first` zeroes the whole parameter and then
    copies the real rows over it (the copy wins); otherwise it copies a
    padded checkpoint and then zeroes rows past the real vocabulary, rows
    the copy wrote (refused)."""
    vocab, padded, hidden = 5, 8, 3

    def __init__(self, tp, rank, device="cpu", zero_first=True):
        super().__init__(tp, rank)
        self.zero_first = zero_first
        self.weight = _param((self.padded, self.hidden), F32, device)

    def load_weights(self, weights):
        for _, w in weights:
            if self.zero_first:
                self.weight.data.zero_()
                self.weight.data[:self.vocab].copy_(w[:self.vocab])
            else:
                self.weight.data[:w.shape[0]].copy_(w)
                self.weight.data[self.vocab:].fill_(0)


EMBED_SPECS = {"embed.weight": ((7, 3), F32)}


# ---------------------------------------------------------------- values

class ValueQueries(_Model):
    """`arith`: a scale's `.item()` scaled before the fill (refused);
    otherwise a branch on whether a weight is all zeros (stopped)."""

    def __init__(self, tp, rank, device="cpu", arith=True):
        super().__init__(tp, rank)
        self.arith = arith
        self.scale = _param((), F32, device)
        self.w = _param((2, 3), F32, device)

    def load_weights(self, weights):
        for name, w in weights:
            if name == "scale":
                if self.arith:
                    self.scale.data.fill_(w.item() * 2.0)
                else:
                    self.scale.data.fill_(w.item())
            elif self.arith or bool((w == 0).all()):
                self.w.data.copy_(w)
            else:
                self.w.data.copy_(w)


VQ_SPECS = {"scale": ((), F32), "w": ((2, 3), F32)}


def _m(cls, **kw):
    return lambda tp, rank, device="cpu": cls(tp, rank, device, **kw)


CASES = [
    Case("gpt2-conv1d", _m(GPT2), gpt2_specs()),
    Case("split-qkv", _m(FusedSplits, how="split"), FUSED_SPECS),
    Case("split-method-qkv", _m(FusedSplits, how="method"), FUSED_SPECS),
    Case("tensor-split-qkv", _m(FusedSplits, how="tensor_split"),
         FUSED_SPECS),
    Case("mla-per-head", _m(MLA), MLA_SPECS, tps=(1, 2, 4)),
    Case("moe-expert-parallel", _m(ExpertParallelMoE), ep_specs(),
         tps=(1, 2, 4)),
    Case("llama4-stacked-experts", _m(Llama4MoE), LLAMA4_SPECS),
    Case("gpt-oss-experts", _m(GptOssMoE), GPT_OSS_SPECS, tps=(1, 2, 3)),
    Case("moe-wna16", _m(MoeWNA16), wna16_specs(),
         expect=("unsupported", {
             **{f"experts.{e}.{p}.qweight": "'view' reinterprets"
                for e in range(2) for p in ("gate_proj", "up_proj")},
             **{f"experts.{e}.{p}.qzeros": "'view' reinterprets"
                for e in range(2) for p in ("gate_proj", "up_proj")}})),
    Case("fp8-kv-scales", _m(KVScales), KV_SPECS, tps=(1,)),
    Case("mamba2-composed-loader", _m(Mamba2), MAMBA_SPECS,
         expect=("unattributed", {"": "parameter 'A'"})),
    Case("verl-data-rebind", _m(Verl), VERL_SPECS, tps=(1,)),
    Case("gpt-neox-qkv-reorder", _m(GPTNeoX), NEOX_SPECS, tps=(1, 2, 4)),
    Case("explicit-casts", _m(Casts), CAST_SPECS, tps=(1,)),
    Case("double-rounding-cast", _m(Casts, double=True), CAST_SPECS,
         tps=(1,), expect=("unsupported", {
             "d": "casts again after op 'float' casts bf16 to f32"})),
    Case("fill-then-copy", _m(Embedding, zero_first=True), EMBED_SPECS,
         tps=(1,)),
    Case("copy-then-fill", _m(Embedding, zero_first=False), EMBED_SPECS,
         tps=(1,), expect=("unsupported", {
             "embed.weight": "fill of parameter 'weight' with 0"})),
    Case("item-arithmetic", _m(ValueQueries, arith=True), VQ_SPECS,
         tps=(1,), expect=("unsupported", {"scale": "op 'mul'"})),
    Case("value-branch", _m(ValueQueries, arith=False), VQ_SPECS,
         tps=(1,), expect=("stopped", {"w": "'__bool__'"})),
]


def make_weights(specs, seed=0):
    """Deterministic full tensors for `specs`: distinct values for floats
    (exact in bf16), random bits for integers."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, (shape, dtype) in specs.items():
        if dtype.is_floating_point:
            out[name] = (torch.randn(shape, generator=g) * 4).to(dtype)
        else:
            out[name] = torch.randint(-2 ** 31, 2 ** 31 - 1, shape,
                                      generator=g, dtype=torch.int64
                                      ).to(dtype)
    return out
