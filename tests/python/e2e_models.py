"""A small vLLM-style model for the end-to-end tests: its parameters, its
weight loaders and the deterministic full Hugging Face tensors of each
version.

The loaders are written the way vLLM writes them (column- and
row-parallel linears, QKV with shard_id "q"/"k"/"v" and KV heads
replicated when there are fewer than the TP degree, merged gate/up with
shard_id 0/1, vocabulary-parallel embedding and head with zeroed padding
rows, fused MoE w13/w2 loaded with keyword expert_id/shard_id, norms through
the default loader), because the tests check that a capture of these very
loaders, replayed by reshard from trainer processes, writes the same bytes
as the loaders themselves run by torch on real tensors. The trainer
processes import this module too, so both sides build the same full
tensors from the same seed.
"""
import torch
from torch import nn

# The trainer's master weights; the model's parameters are bf16 (norms
# f32), so every linear copy is also a cast reshard must do like torch.
SOURCE_DTYPE = torch.float32
PARAM_DTYPE = torch.bfloat16
NORM_DTYPE = torch.float32
VOCAB_PAD = 64


def config(**over):
    """The model config (JSON-able, passed to trainer processes)."""
    cfg = dict(vocab=101, hidden=16, heads=4, kv_heads=1, head_dim=4,
               intermediate=24, experts=2, moe_intermediate=8, arith=False)
    cfg.update(over)
    return cfg


# -- the Hugging Face checkpoint --------------------------------------------
def hf_shapes(cfg):
    """{name: full shape} of every checkpoint tensor, in checkpoint order.
    Layer 0 is dense, layer 1 a mixture of experts."""
    h, hd, v = cfg["hidden"], cfg["head_dim"], cfg["vocab"]
    q_rows, kv_rows = cfg["heads"] * hd, cfg["kv_heads"] * hd
    out = {"model.embed_tokens.weight": (v, h)}
    for i in range(2):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "self_attn.q_proj.weight"] = (q_rows, h)
        out[p + "self_attn.k_proj.weight"] = (kv_rows, h)
        out[p + "self_attn.v_proj.weight"] = (kv_rows, h)
        out[p + "self_attn.q_proj.bias"] = (q_rows,)
        out[p + "self_attn.k_proj.bias"] = (kv_rows,)
        out[p + "self_attn.v_proj.bias"] = (kv_rows,)
        out[p + "self_attn.o_proj.weight"] = (h, q_rows)
        out[p + "post_attention_layernorm.weight"] = (h,)
    inter, mi = cfg["intermediate"], cfg["moe_intermediate"]
    out["model.layers.0.mlp.gate_proj.weight"] = (inter, h)
    out["model.layers.0.mlp.up_proj.weight"] = (inter, h)
    out["model.layers.0.mlp.down_proj.weight"] = (h, inter)
    out["model.layers.1.mlp.gate.weight"] = (cfg["experts"], h)
    for e in range(cfg["experts"]):
        p = f"model.layers.1.mlp.experts.{e}."
        out[p + "gate_proj.weight"] = (mi, h)
        out[p + "up_proj.weight"] = (mi, h)
        out[p + "down_proj.weight"] = (h, mi)
    out["model.norm.weight"] = (h,)
    out["lm_head.weight"] = (v, h)
    return out


def full_tensors(cfg, seed):
    """The full checkpoint tensors of one version (f32, seeded)."""
    g = torch.Generator().manual_seed(int(seed))
    return {n: torch.randn(s, generator=g, dtype=SOURCE_DTYPE)
            for n, s in hf_shapes(cfg).items()}


def sources(cfg):
    """{name: (shape, dtype)} as reshard.capture takes them."""
    return {n: (s, SOURCE_DTYPE) for n, s in hf_shapes(cfg).items()}


def version_seed(base, version):
    """The seed of a version's contents: new bytes every version."""
    return base * 1000 + version


# -- vLLM-style layers -------------------------------------------------------
def _param(shape, dtype, loader=None):
    p = nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)
    if loader is not None:
        p.weight_loader = loader
    return p


def default_weight_loader(param, loaded_weight):
    assert param.size() == loaded_weight.size(), \
        f"{tuple(param.size())} != {tuple(loaded_weight.size())}"
    param.data.copy_(loaded_weight)


def offset_norm_loader(param, loaded_weight):
    """A loader that computes on its input (a norm stored as 1 + w): the
    capture cannot express it as views, so it must refuse that source."""
    param.data.copy_(loaded_weight + 1.0)


class ColumnParallelLinear(nn.Module):
    """Output dim split over TP ranks: narrow of the loaded weight on dim 0."""

    def __init__(self, inp, out, tp, bias=False):
        super().__init__()
        self.tp_rank, self.tp_size = tp
        rows = out // self.tp_size
        self.weight = _param((rows, inp), PARAM_DTYPE, self.weight_loader)
        if bias:
            self.bias = _param((rows,), PARAM_DTYPE, self.weight_loader)

    def weight_loader(self, param, loaded_weight):
        size = param.data.shape[0]
        loaded_weight = loaded_weight.narrow(0, self.tp_rank * size, size)
        param.data.copy_(loaded_weight)


class RowParallelLinear(nn.Module):
    """Input dim split over TP ranks: narrow of the loaded weight on dim 1."""

    def __init__(self, inp, out, tp):
        super().__init__()
        self.tp_rank, self.tp_size = tp
        cols = inp // self.tp_size
        self.weight = _param((out, cols), PARAM_DTYPE, self.weight_loader)

    def weight_loader(self, param, loaded_weight):
        param_data = param.data
        size = param_data.shape[1]
        loaded_weight = loaded_weight.narrow(1, self.tp_rank * size, size)
        param_data.copy_(loaded_weight)


class QKVParallelLinear(nn.Module):
    """Fused q/k/v; KV heads replicated when fewer than the TP degree."""

    def __init__(self, hidden, head_dim, heads, kv_heads, tp):
        super().__init__()
        self.tp_rank, self.tp_size = tp
        self.head_dim = head_dim
        self.num_heads = heads // self.tp_size
        if self.tp_size >= kv_heads:
            self.num_kv_heads = 1
            self.num_kv_head_replicas = self.tp_size // kv_heads
        else:
            self.num_kv_heads = kv_heads // self.tp_size
            self.num_kv_head_replicas = 1
        rows = (self.num_heads + 2 * self.num_kv_heads) * head_dim
        self.weight = _param((rows, hidden), PARAM_DTYPE, self.weight_loader)
        self.bias = _param((rows,), PARAM_DTYPE, self.weight_loader)

    def weight_loader(self, param, loaded_weight, loaded_shard_id):
        q_size = self.num_heads * self.head_dim
        kv_size = self.num_kv_heads * self.head_dim
        if loaded_shard_id == "q":
            shard_offset, shard_size = 0, q_size
        elif loaded_shard_id == "k":
            shard_offset, shard_size = q_size, kv_size
        else:
            shard_offset, shard_size = q_size + kv_size, kv_size
        param_data = param.data.narrow(0, shard_offset, shard_size)
        if loaded_shard_id == "q":
            shard_idx = self.tp_rank
        else:
            shard_idx = self.tp_rank // self.num_kv_head_replicas
        start_idx = shard_idx * shard_size
        loaded_weight = loaded_weight.narrow(0, start_idx, shard_size)
        param_data.copy_(loaded_weight)


class MergedColumnParallelLinear(nn.Module):
    """gate_up_proj: gate (shard_id 0) then up (shard_id 1), each TP-split."""

    def __init__(self, inp, sizes, tp):
        super().__init__()
        self.tp_rank, self.tp_size = tp
        self.output_sizes = list(sizes)
        rows = sum(sizes) // self.tp_size
        self.weight = _param((rows, inp), PARAM_DTYPE, self.weight_loader)

    def weight_loader(self, param, loaded_weight, loaded_shard_id):
        shard_offset = sum(self.output_sizes[:loaded_shard_id]) // self.tp_size
        shard_size = self.output_sizes[loaded_shard_id] // self.tp_size
        param_data = param.data.narrow(0, shard_offset, shard_size)
        start_idx = self.tp_rank * shard_size
        loaded_weight = loaded_weight.narrow(0, start_idx, shard_size)
        param_data.copy_(loaded_weight)


class VocabParallelEmbedding(nn.Module):
    """Rows split over TP ranks after padding the vocabulary; a rank's
    padding rows are zeroed."""

    def __init__(self, vocab, hidden, tp):
        super().__init__()
        self.tp_rank, self.tp_size = tp
        padded = -(-vocab // VOCAB_PAD) * VOCAB_PAD
        self.per_partition = padded // self.tp_size
        self.start = self.tp_rank * self.per_partition
        self.end = min(self.start + self.per_partition, vocab)
        self.weight = _param((self.per_partition, hidden), PARAM_DTYPE,
                             self.weight_loader)

    def weight_loader(self, param, loaded_weight):
        loaded_weight = loaded_weight[self.start:self.end]
        param[:loaded_weight.shape[0]].data.copy_(loaded_weight)
        param[loaded_weight.shape[0]:].data.fill_(0)


class ParallelLMHead(VocabParallelEmbedding):
    pass


class FusedMoE(nn.Module):
    """Experts' gate/up fused as w13 [E, 2 * I/tp, H], down as w2
    [E, H, I/tp]; the loader takes expert_id and shard_id by keyword."""

    def __init__(self, experts, hidden, inter, tp):
        super().__init__()
        self.tp_rank, self.tp_size = tp
        part = inter // self.tp_size
        self.w13_weight = _param((experts, 2 * part, hidden), PARAM_DTYPE,
                                 self.weight_loader)
        self.w2_weight = _param((experts, hidden, part), PARAM_DTYPE,
                                self.weight_loader)

    def weight_loader(self, param, loaded_weight, weight_name, shard_id,
                      expert_id):
        expert_data = param.data[expert_id]
        if shard_id == "w2":
            size = expert_data.shape[1]
            loaded_weight = loaded_weight.narrow(1, size * self.tp_rank, size)
            expert_data.copy_(loaded_weight)
            return
        size = expert_data.shape[0] // 2
        loaded_weight = loaded_weight.narrow(0, size * self.tp_rank, size)
        start = 0 if shard_id == "w1" else size
        expert_data.narrow(0, start, size).copy_(loaded_weight)


class RMSNorm(nn.Module):
    def __init__(self, hidden, loader=None):
        super().__init__()
        self.weight = _param((hidden,), NORM_DTYPE, loader)


class Attention(nn.Module):
    def __init__(self, cfg, tp):
        super().__init__()
        h, hd = cfg["hidden"], cfg["head_dim"]
        self.qkv_proj = QKVParallelLinear(h, hd, cfg["heads"],
                                          cfg["kv_heads"], tp)
        self.o_proj = RowParallelLinear(cfg["heads"] * hd, h, tp)


class DenseMLP(nn.Module):
    def __init__(self, cfg, tp):
        super().__init__()
        h, inter = cfg["hidden"], cfg["intermediate"]
        self.gate_up_proj = MergedColumnParallelLinear(h, [inter, inter], tp)
        self.down_proj = RowParallelLinear(inter, h, tp)


class MoE(nn.Module):
    def __init__(self, cfg, tp):
        super().__init__()
        h = cfg["hidden"]
        self.gate = nn.Module()
        self.gate.weight = _param((cfg["experts"], h), PARAM_DTYPE)
        self.experts = FusedMoE(cfg["experts"], h, cfg["moe_intermediate"], tp)


class Layer(nn.Module):
    def __init__(self, cfg, index, tp):
        super().__init__()
        h = cfg["hidden"]
        self.input_layernorm = RMSNorm(h)
        self.self_attn = Attention(cfg, tp)
        post = offset_norm_loader if cfg["arith"] and index == 0 else None
        self.post_attention_layernorm = RMSNorm(h, post)
        self.mlp = DenseMLP(cfg, tp) if index == 0 else MoE(cfg, tp)


class Body(nn.Module):
    def __init__(self, cfg, tp):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(cfg["vocab"], cfg["hidden"],
                                                   tp)
        self.layers = nn.ModuleList(Layer(cfg, i, tp) for i in range(2))
        self.norm = RMSNorm(cfg["hidden"])


STACKED = [("qkv_proj", "q_proj", "q"), ("qkv_proj", "k_proj", "k"),
           ("qkv_proj", "v_proj", "v"), ("gate_up_proj", "gate_proj", 0),
           ("gate_up_proj", "up_proj", 1)]


def expert_mapping(experts):
    """vLLM's FusedMoE.make_expert_params_mapping."""
    out = []
    for e in range(experts):
        for weight_name, shard_id in (("gate_proj", "w1"), ("up_proj", "w3"),
                                      ("down_proj", "w2")):
            prefix = "experts.w2_" if shard_id == "w2" else "experts.w13_"
            out.append((prefix, f"experts.{e}.{weight_name}.", e, shard_id))
    return out


class Model(nn.Module):
    """One inference rank (tp_rank of tp_size) of the model."""

    def __init__(self, cfg, tp_rank=0, tp_size=1):
        super().__init__()
        tp = (tp_rank, tp_size)
        self.cfg = cfg
        self.model = Body(cfg, tp)
        self.lm_head = ParallelLMHead(cfg["vocab"], cfg["hidden"], tp)

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        experts = expert_mapping(self.cfg["experts"])
        for name, loaded_weight in weights:
            for param_name, weight_name, shard_id in STACKED:
                if weight_name not in name or "mlp.experts" in name:
                    continue
                name = name.replace(weight_name, param_name)
                param = params[name]
                param.weight_loader(param, loaded_weight, shard_id)
                break
            else:
                for param_name, weight_name, expert_id, shard_id in experts:
                    if weight_name not in name:
                        continue
                    name = name.replace(weight_name, param_name)
                    param = params[name]
                    param.weight_loader(param, loaded_weight, name,
                                        shard_id=shard_id, expert_id=expert_id)
                    break
                else:
                    param = params[name]
                    loader = getattr(param, "weight_loader",
                                     default_weight_loader)
                    loader(param, loaded_weight)


def build(cfg, tp_rank=0, tp_size=1, fill=None):
    """A model rank whose parameters hold `fill` (a value no loader writes,
    so an untouched byte is visible), or arbitrary bytes when None."""
    m = Model(cfg, tp_rank, tp_size)
    if fill is not None:
        with torch.no_grad():
            for p in m.parameters():
                p.fill_(fill)
    return m


def truth(cfg, tp_rank, tp_size, fulls):
    """The ground truth: the loaders run by torch on the real full tensors
    into a fresh model's real parameters."""
    m = build(cfg, tp_rank, tp_size, fill=-7.0)
    with torch.no_grad():
        m.load_weights(list(fulls.items()))
    return {n: p.detach().clone() for n, p in m.named_parameters()}
