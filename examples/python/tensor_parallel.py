"""Megatron-style tensor-parallel communication as autograd functions.

A column-parallel layer needs its input replicated on every rank and the
gradient of that input summed over ranks (`copy_to_tp`); a row-parallel
layer's partial outputs are summed in the forward pass and its output
gradient is already replicated (`reduce_from_tp`); a vocabulary-parallel
head's logits are concatenated in the forward pass and each rank keeps its
own slice of the gradient (`gather_from_tp`). With one rank they are
identities, so the same model code runs single-process as a reference.
"""
import torch
import torch.distributed as dist


def tp_world():
    """(rank, world) of the default process group, (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class _GatherFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        rank, world = tp_world()
        ctx.rank, ctx.world = rank, world
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        return grad.chunk(ctx.world, dim=-1)[ctx.rank].contiguous()


def copy_to_tp(x):
    """Identity forward; all-reduce of the gradient."""
    return _CopyToTP.apply(x) if tp_world()[1] > 1 else x


def reduce_from_tp(x):
    """All-reduce forward; identity gradient."""
    return _ReduceFromTP.apply(x) if tp_world()[1] > 1 else x


def gather_from_tp(x):
    """Concatenation over ranks on the last dim; each rank's gradient slice."""
    return _GatherFromTP.apply(x) if tp_world()[1] > 1 else x


def all_gather_dim(shard, dim):
    """The full tensor from every rank's equal shard along dim (no
    autograd: used to check and to record weights)."""
    rank, world = tp_world()
    if world == 1:
        return shard.clone()
    parts = [torch.empty_like(shard) for _ in range(world)]
    dist.all_gather(parts, shard.contiguous())
    return torch.cat(parts, dim=dim)
