"""The trainer's copy of the model: unfused, tensor-parallel, Hugging Face
names.

Each rank holds only its own shard of every sharded weight, as a contiguous
parameter of its own (q/k/v/gate/up split on the output dim, o/down on the
input dim, embedding and head split on the vocabulary), and a full copy of
the norms. Every parameter carries `tp_dim` (None when replicated) and
`full_shape`, which is all a publisher needs to describe it. The weights
start from one seeded full initialization (`init_full_weights`) that every
rank computes and slices with torch.chunk, so a one-rank model is the
reference for a many-rank one.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import ops
from config import checkpoint_tensors
from tensor_parallel import (all_gather_dim, copy_to_tp, gather_from_tp,
                             reduce_from_tp, tp_world)

# Training hyperparameters: plain SGD with momentum keeps the update linear
# in the gradient, so a TP run stays within rounding of a one-rank run.
LR, MOMENTUM, BATCH, SEQ = 0.1, 0.9, 4, 16


def tp_dim_of(name):
    """The dim TrainerModel splits checkpoint tensor `name` on (None:
    replicated), for code that lays out shards without building the
    model."""
    if name.endswith("norm.weight"):
        return None
    if ".o_proj." in name or ".down_proj." in name:
        return 1
    return 0


def init_full_weights(cfg, seed):
    """The full checkpoint tensors of a freshly initialized model."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in checkpoint_tensors(cfg):
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith(".bias"):
            t = 0.02 * torch.randn(shape, generator=gen)
        else:
            t = torch.randn(shape, generator=gen) / shape[-1] ** 0.5
        out[name] = t.to(cfg.dtype)
    return out


def _shard_param(full, tp_dim):
    """This rank's torch.chunk of full along tp_dim (a full copy when
    tp_dim is None), as its own contiguous parameter."""
    rank, world = tp_world()
    data = full if tp_dim is None else full.chunk(world, tp_dim)[rank]
    p = nn.Parameter(data.clone().contiguous())
    p.tp_dim, p.full_shape = tp_dim, tuple(full.shape)
    return p


class ColumnParallelLinear(nn.Module):
    """y = x W^T (+ b) with W's output rows split over ranks."""

    def __init__(self, full_weight, full_bias=None):
        super().__init__()
        self.weight = _shard_param(full_weight, 0)
        if full_bias is not None:
            self.bias = _shard_param(full_bias, 0)
        else:
            self.bias = None

    def forward(self, x):
        return F.linear(copy_to_tp(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """y = x W^T with W's input columns split over ranks; x is already this
    rank's slice of the features, the partial products are summed."""

    def __init__(self, full_weight):
        super().__init__()
        self.weight = _shard_param(full_weight, 1)

    def forward(self, x):
        return reduce_from_tp(F.linear(x, self.weight))


class VocabParallelEmbedding(nn.Module):
    """Rows of the embedding split over ranks; each rank looks up the ids
    in its range, zeroes the others, and the partial rows are summed."""

    def __init__(self, full_weight):
        super().__init__()
        self.weight = _shard_param(full_weight, 0)
        rank, _ = tp_world()
        self.start = rank * self.weight.shape[0]

    def forward(self, ids):
        local = ids - self.start
        outside = (local < 0) | (local >= self.weight.shape[0])
        rows = F.embedding(local.masked_fill(outside, 0), self.weight)
        return reduce_from_tp(rows.masked_fill(outside.unsqueeze(-1), 0.0))


class RMSNorm(nn.Module):
    def __init__(self, full_weight, eps):
        super().__init__()
        self.weight = _shard_param(full_weight, None)
        self.eps = eps

    def forward(self, x):
        return ops.rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg, w, p):
        super().__init__()
        _, world = tp_world()
        if cfg.num_kv_heads % world:
            raise ValueError(f"trainer TP {world} does not divide "
                             f"{cfg.num_kv_heads} KV heads")
        self.heads = cfg.num_heads // world
        self.kv_heads = cfg.num_kv_heads // world
        self.head_dim = cfg.head_dim
        for n in ("q", "k", "v"):
            setattr(self, f"{n}_proj", ColumnParallelLinear(
                w[f"{p}{n}_proj.weight"], w.get(f"{p}{n}_proj.bias")))
        self.o_proj = RowParallelLinear(w[p + "o_proj.weight"])

    def forward(self, x, cos, sin):
        d = self.head_dim
        q = ops.split_heads(self.q_proj(x), self.heads, d)
        k = ops.split_heads(self.k_proj(x), self.kv_heads, d)
        v = ops.split_heads(self.v_proj(x), self.kv_heads, d)
        q, k = ops.apply_rotary(q, cos, sin), ops.apply_rotary(k, cos, sin)
        return self.o_proj(ops.causal_attention(q, k, v))


class MLP(nn.Module):
    def __init__(self, w, p):
        super().__init__()
        self.gate_proj = ColumnParallelLinear(w[p + "gate_proj.weight"])
        self.up_proj = ColumnParallelLinear(w[p + "up_proj.weight"])
        self.down_proj = RowParallelLinear(w[p + "down_proj.weight"])

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, w, i):
        super().__init__()
        p = f"model.layers.{i}."
        self.input_layernorm = RMSNorm(w[p + "input_layernorm.weight"],
                                       cfg.rms_eps)
        self.self_attn = Attention(cfg, w, p + "self_attn.")
        self.post_attention_layernorm = RMSNorm(
            w[p + "post_attention_layernorm.weight"], cfg.rms_eps)
        self.mlp = MLP(w, p + "mlp.")

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg, w):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(
            w["model.embed_tokens.weight"])
        self.layers = nn.ModuleList(DecoderLayer(cfg, w, i)
                                    for i in range(cfg.num_layers))
        self.norm = RMSNorm(w["model.norm.weight"], cfg.rms_eps)


class TrainerModel(nn.Module):
    """Causal LM whose named_parameters() are Hugging Face names bound to
    this rank's shards."""

    def __init__(self, cfg, full_weights):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg, full_weights)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Module()
            self.lm_head.weight = _shard_param(full_weights["lm_head.weight"],
                                               0)

    def head_weight(self):
        if self.cfg.tie_word_embeddings:
            return self.model.embed_tokens.weight
        return self.lm_head.weight

    def forward(self, ids):
        """Full-vocabulary logits [batch, seq, vocab], on every rank."""
        cfg = self.cfg
        cos, sin = ops.rotary_tables(ids.shape[1], cfg.head_dim,
                                     cfg.rope_theta, cfg.dtype)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        return gather_from_tp(F.linear(copy_to_tp(x), self.head_weight()))

    def full_weights(self):
        """Every checkpoint tensor gathered from the ranks' shards (a
        collective: every rank must call it)."""
        out = {}
        for name, p in self.named_parameters():
            data = p.detach()
            out[name] = data.clone() if p.tp_dim is None \
                else all_gather_dim(data, p.tp_dim)
        return out


def sync_replicated(model):
    """Makes every rank's replicated parameters bitwise those of rank 0.
    Their gradients are equal on every rank up to the all-reduce's
    summation order; a receiver may read any rank's copy, so they must
    not drift apart even by an ulp."""
    if tp_world()[1] == 1:
        return
    for p in model.parameters():
        if p.tp_dim is None:
            dist.broadcast(p.data, src=0)


def make_batches(cfg, steps, batch, seq, seed):
    """Seeded token batches, one per optimizer step (the same on every
    rank: tensor parallelism splits the model, not the data)."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(cfg.vocab_size, (batch, seq + 1), generator=gen)
            for _ in range(steps)]


def eval_input(cfg, seed, batch=2, seq=12):
    """The fixed prompt both sides compute logits on."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(cfg.vocab_size, (batch, seq), generator=gen)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)


def train_step(model, optimizer, tokens):
    """One next-token-prediction step; returns the loss."""
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           tokens[:, 1:].reshape(-1))
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    optimizer.step()
    return loss.item()
