"""The inference engine's copy of the model, written the way vLLM writes it.

Its parameters do not look like the checkpoint: q/k/v live in one fused
`qkv_proj`, gate and up in one `gate_up_proj`, the embedding and head are
padded to a multiple of 64 rows and split over the engine's own
tensor-parallel ranks. Checkpoint tensors reach them only through the
per-parameter `weight_loader`s and the model's `load_weights`, which narrow
the loaded tensor to this rank's part and copy it into a view of the
parameter. That loader code is what `reshard.capture` records, so refits
land exactly where a checkpoint load would have put the bytes.
"""
import torch
import torch.nn.functional as F
from torch import nn

import ops
from tensor_parallel import copy_to_tp, gather_from_tp, reduce_from_tp, \
    tp_world

VOCAB_PADDING = 64


def pad_vocab(vocab_size, to=VOCAB_PADDING):
    return (vocab_size + to - 1) // to * to


def _param(shape, dtype, loader):
    p = nn.Parameter(torch.zeros(shape, dtype=dtype), requires_grad=False)
    p.weight_loader = loader
    return p


def default_weight_loader(param, loaded_weight):
    """A parameter stored exactly as in the checkpoint (norms)."""
    param.data.copy_(loaded_weight)


class QKVParallelLinear(nn.Module):
    """q, k and v in one output-dim-split weight: this rank's query heads,
    then its KV heads' k, then v. With more ranks than KV heads, each KV
    head is replicated on tp / num_kv_heads ranks."""

    def __init__(self, cfg, bias):
        super().__init__()
        self.tp_rank, tp = tp_world()
        self.head_dim = cfg.head_dim
        self.heads = cfg.num_heads // tp
        self.kv_replicas = max(1, tp // cfg.num_kv_heads)
        self.kv_heads = max(1, cfg.num_kv_heads // tp)
        rows = (self.heads + 2 * self.kv_heads) * cfg.head_dim
        self.weight = _param((rows, cfg.hidden_size), cfg.dtype,
                             self.weight_loader)
        self.bias = _param((rows,), cfg.dtype, self.weight_loader) \
            if bias else None

    def _band(self, shard_id):
        """(offset, size, rank of the source shard) of q, k or v."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        kv_rank = self.tp_rank // self.kv_replicas
        return {"q": (0, q, self.tp_rank), "k": (q, kv, kv_rank),
                "v": (q + kv, kv, kv_rank)}[shard_id]

    def weight_loader(self, param, loaded_weight, loaded_shard_id):
        offset, size, rank = self._band(loaded_shard_id)
        dest = param.data.narrow(0, offset, size)
        dest.copy_(loaded_weight.narrow(0, rank * size, size))

    def forward(self, x):
        out = F.linear(copy_to_tp(x), self.weight, self.bias)
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return out.split([q, kv, kv], dim=-1)


class MergedColumnParallelLinear(nn.Module):
    """gate (shard 0) and up (shard 1) stacked on the output dim, each
    split over the ranks."""

    def __init__(self, cfg):
        super().__init__()
        self.tp_rank, tp = tp_world()
        self.size = cfg.ffn_size // tp
        self.weight = _param((2 * self.size, cfg.hidden_size), cfg.dtype,
                             self.weight_loader)

    def weight_loader(self, param, loaded_weight, loaded_shard_id):
        dest = param.data.narrow(0, loaded_shard_id * self.size, self.size)
        dest.copy_(loaded_weight.narrow(0, self.tp_rank * self.size,
                                        self.size))

    def forward(self, x):
        gate, up = F.linear(copy_to_tp(x), self.weight).chunk(2, dim=-1)
        return F.silu(gate) * up


class RowParallelLinear(nn.Module):
    """Input dim split over ranks; partial products summed."""

    def __init__(self, in_features, out_features, dtype):
        super().__init__()
        self.tp_rank, tp = tp_world()
        self.weight = _param((out_features, in_features // tp), dtype,
                             self.weight_loader)

    def weight_loader(self, param, loaded_weight):
        size = param.data.shape[1]
        param.data.copy_(loaded_weight.narrow(1, self.tp_rank * size, size))

    def forward(self, x):
        return reduce_from_tp(F.linear(x, self.weight))


class VocabParallelEmbedding(nn.Module):
    """Padded vocabulary split over ranks: this rank owns rows
    [start, start + per_rank) of the padded table; rows past the real
    vocabulary are zero."""

    def __init__(self, vocab_size, hidden, dtype):
        super().__init__()
        rank, tp = tp_world()
        self.per_rank = pad_vocab(vocab_size) // tp
        self.start = rank * self.per_rank
        self.real = max(0, min(vocab_size - self.start, self.per_rank))
        self.weight = _param((self.per_rank, hidden), dtype,
                             self.weight_loader)

    def weight_loader(self, param, loaded_weight):
        shard = loaded_weight.narrow(0, self.start, self.real)
        param[:self.real].data.copy_(shard)
        param[self.real:].data.fill_(0)

    def forward(self, ids):
        local = ids - self.start
        outside = (local < 0) | (local >= self.real)
        rows = F.embedding(local.masked_fill(outside, 0), self.weight)
        return reduce_from_tp(rows.masked_fill(outside.unsqueeze(-1), 0.0))


class ParallelLMHead(VocabParallelEmbedding):
    def logits(self, x, vocab_size):
        full = gather_from_tp(F.linear(copy_to_tp(x), self.weight))
        return full[..., :vocab_size]


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps, dtype):
        super().__init__()
        self.weight = _param((hidden,), dtype, default_weight_loader)
        self.eps = eps

    def forward(self, x):
        return ops.rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(cfg, cfg.qkv_bias)
        self.o_proj = RowParallelLinear(cfg.num_heads * cfg.head_dim,
                                        cfg.hidden_size, cfg.dtype)

    def forward(self, x, cos, sin):
        qkv = self.qkv_proj
        q, k, v = qkv(x)
        q = ops.split_heads(q, qkv.heads, qkv.head_dim)
        k = ops.split_heads(k, qkv.kv_heads, qkv.head_dim)
        v = ops.split_heads(v, qkv.kv_heads, qkv.head_dim)
        q, k = ops.apply_rotary(q, cos, sin), ops.apply_rotary(k, cos, sin)
        return self.o_proj(ops.causal_attention(q, k, v))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(cfg)
        self.down_proj = RowParallelLinear(cfg.ffn_size, cfg.hidden_size,
                                           cfg.dtype)

    def forward(self, x):
        return self.down_proj(self.gate_up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps,
                                       cfg.dtype)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps,
                                                cfg.dtype)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size,
                                                   cfg.hidden_size, cfg.dtype)
        self.layers = nn.ModuleList(DecoderLayer(cfg)
                                    for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps, cfg.dtype)


class InferenceModel(nn.Module):
    """Causal LM with vLLM's parameter layout and loading convention."""

    # (fused parameter, checkpoint name part, shard id), as vLLM's Llama
    # and Qwen2 models list them.
    stacked_params_mapping = [
        (".qkv_proj", ".q_proj", "q"),
        (".qkv_proj", ".k_proj", "k"),
        (".qkv_proj", ".v_proj", "v"),
        (".gate_up_proj", ".gate_proj", 0),
        (".gate_up_proj", ".up_proj", 1),
    ]

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        if cfg.tie_word_embeddings:
            self.lm_head = self.model.embed_tokens
        else:
            self.lm_head = ParallelLMHead(cfg.vocab_size, cfg.hidden_size,
                                          cfg.dtype)

    @torch.no_grad()
    def forward(self, ids):
        """Logits over the real vocabulary [batch, seq, vocab]."""
        cfg = self.cfg
        cos, sin = ops.rotary_tables(ids.shape[1], cfg.head_dim,
                                     cfg.rope_theta, cfg.dtype)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return ParallelLMHead.logits(self.lm_head, self.model.norm(x),
                                     cfg.vocab_size)

    def load_weights(self, weights):
        """Loads (checkpoint name, tensor) pairs; returns the names of the
        parameters written."""
        params = dict(self.named_parameters())
        loaded = set()
        for name, loaded_weight in weights:
            if self.cfg.tie_word_embeddings and name == "lm_head.weight":
                continue
            for param_name, weight_name, shard_id in \
                    self.stacked_params_mapping:
                if weight_name not in name:
                    continue
                name = name.replace(weight_name, param_name)
                param = params[name]
                param.weight_loader(param, loaded_weight, shard_id)
                break
            else:
                param = params[name]
                loader = getattr(param, "weight_loader", default_weight_loader)
                loader(param, loaded_weight)
            loaded.add(name)
        return loaded
