"""Parameter-free transformer math both model copies share.

The trainer copy and the inference copy compute the same function with
differently stored weights; sharing these pieces means the only numeric
difference between their logits is the order of the tensor-parallel sums.
"""
import math

import torch


def rms_norm(x, weight, eps):
    """RMSNorm as Llama and Qwen define it (normalize in f32)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rotary_tables(seq_len, head_dim, theta, dtype):
    """cos and sin of shape [seq_len, head_dim] (halves repeated, the
    Hugging Face "rotate_half" convention)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(seq_len).float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x, cos, sin):
    """Rotates x [batch, heads, seq, head_dim] by the position tables."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def causal_attention(q, k, v):
    """Causal grouped-query attention. q [b, hq, s, d]; k, v [b, hkv, s, d]
    with hq a multiple of hkv: query head j reads KV head j // (hq / hkv).
    Returns [b, s, hq * d]."""
    b, hq, s, d = q.shape
    group = hq // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    out = scores.softmax(dim=-1) @ v
    return out.transpose(1, 2).reshape(b, s, hq * d)


def split_heads(x, heads, head_dim):
    """[b, s, heads * d] -> [b, heads, s, d]."""
    b, s, _ = x.shape
    return x.view(b, s, heads, head_dim).transpose(1, 2)
