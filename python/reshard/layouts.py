"""How trainers hold weights, as boxes of full Hugging Face tensors.

A box is one published shard: a contiguous view of a trainer tensor that
holds the row-major block `[offset, offset + shape)` of a full tensor. The
helpers here turn a tensor-parallel shard, a replicated tensor or Megatron's
fused storage into boxes that point into the trainer's own storage (views,
never copies), or refuse the layout with a message naming the tensor.

Trainers move storage under a tensor object (`param.data = new` after a
CPU offload and reload, an optimizer step that is not in place, FSDP
resharding), and a view taken before keeps the old storage. So a box also
keeps the tensor it was registered from and, when that is a view of a
parameter (p[0:4]), the parameter, with where the box lies in them; its
Source derives the box again from them as they are now.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import torch


class LayoutError(ValueError):
    """A layout that cannot be published as boxes (names the tensor)."""


def _shape(t):
    return tuple(int(s) for s in t)


def dtype_text(dtype):
    """"float32" for torch.float32, for messages."""
    return str(dtype).replace("torch.", "")


def describe(t):
    """"[8, 4] float32 (strides [4, 1]) on cpu", for messages."""
    return (f"{list(t.shape)} {dtype_text(t.dtype)} (strides {list(t.stride())}) on "
            f"{t.device.type}")


def _same_layout(shape, stride, t):
    """t has `shape` and the same strides on every dim of more than one
    element (the strides of a dim of size 1 never address anything)."""
    return _shape(t.shape) == shape and all(
        n == 1 or s == int(ts) for n, s, ts in zip(shape, stride, t.stride()))


@dataclass(frozen=True)
class Place:
    """Where a view lies in a base: the base's shape, strides and dtype
    then, and the view's shape, strides and storage offset relative to the
    base's."""
    base_shape: Tuple[int, ...]
    base_stride: Tuple[int, ...]
    dtype: torch.dtype
    rel_offset: int
    shape: Tuple[int, ...]
    stride: Tuple[int, ...]

    @staticmethod
    def of(view, base):
        return Place(_shape(base.shape), _shape(base.stride()), base.dtype,
                     int(view.storage_offset() - base.storage_offset()),
                     _shape(view.shape), _shape(view.stride()))

    def derive(self, base, name):
        """The view at this place of `base` as it is now (its storage may
        have moved, also to another device); LayoutError naming the tensor
        when the base changed shape, dtype or layout."""
        if base.dtype != self.dtype or not _same_layout(
                self.base_shape, self.base_stride, base):
            raise LayoutError(
                f"tensor '{name}': its storage is now {describe(base)}, it "
                f"was {list(self.base_shape)} "
                f"{dtype_text(self.dtype)} (strides "
                f"{list(self.base_stride)}) when registered: the box cannot "
                "be derived from it; unregister it and register the new "
                "tensor")
        base = base.detach()
        if self.rel_offset == 0 and self.shape == self.base_shape and \
                _same_layout(self.shape, self.stride, base):
            return base
        try:
            return base.as_strided(self.shape, self.stride,
                                   base.storage_offset() + self.rel_offset)
        except RuntimeError as e:
            raise LayoutError(f"tensor '{name}': the box cannot be derived "
                              f"from its storage {describe(base)}: {e}") \
                from e


class Source:
    """How a box derives from the trainer's tensors: `obj`, the tensor
    given to the registration call, and the box's place in it; when `obj`
    is a view (p[0:4], p.narrow(...)), also its autograd base `root` (the
    parameter p) and obj's place there. A trainer rebinds the root's
    `.data` (obj then keeps the old storage: the box is derived from the
    root) or obj's own (obj's data_ptr changes: from then on the box is
    derived from obj)."""

    def __init__(self, box_view, obj):
        self.obj = obj
        self.box = Place.of(box_view, obj)
        root = obj._base
        self.root = root if root is not None and root.dtype == obj.dtype \
            else None
        self.in_root = Place.of(obj, root) if self.root is not None else None
        self.obj_ptr = obj.data_ptr()
        self.dtype = box_view.dtype

    def live(self, name):
        """The box's view derived from the tensors as they are now."""
        t = self.obj
        if self.root is not None:
            if t.data_ptr() != self.obj_ptr:
                self.root = None  # obj was rebound: it is the base now
            else:
                t = self.in_root.derive(self.root, name)
        return self.box.derive(t, name)


def source_of(view, obj=None):
    """The Source of `view`, a view of `obj` (default: the view itself). A
    tensor from `.data` or `.detach()` is no view of its parameter: a
    later `param.data = new` does not move it."""
    return Source(view, view if obj is None else obj)


@dataclass(frozen=True)
class Box:
    name: str                   # the full tensor's name
    view: torch.Tensor          # contiguous view into the trainer's storage
    full_shape: Tuple[int, ...]
    offset: Tuple[int, ...]
    source: Optional[Source] = None  # how `view` derives from the tensors


def chunk_range(size, rank, world):
    """Rank `rank`'s [start, stop) of a dim of `size` split like
    torch.chunk(world): pieces of ceil(size / world), the last shorter, and
    empty for ranks past the last piece."""
    if world < 1 or not 0 <= rank < world:
        raise LayoutError(f"rank {rank} is outside a world of {world}")
    step = -(-size // world) if size else 0
    start = min(size, rank * step)
    return start, min(size, start + step)


def _need(cond, name, what):
    if not cond:
        raise LayoutError(f"tensor '{name}': {what}")


def box(name, view, full_shape=None, offset=None, obj=None):
    """One box: `view` holds full_shape's block at `offset` (default: the
    whole tensor at 0); `obj` is the tensor it was taken from (default:
    the view itself). Refuses non-contiguous views and blocks outside the
    full shape."""
    _need(isinstance(view, torch.Tensor), name, "is not a torch.Tensor")
    _need(view.is_contiguous(), name,
          f"is not contiguous (strides {tuple(view.stride())}); publish a "
          "contiguous tensor")
    shape = _shape(view.shape)
    full = shape if full_shape is None else _shape(full_shape)
    off = (0,) * len(full) if offset is None else _shape(offset)
    _need(len(full) == len(shape) and len(off) == len(shape), name,
          f"shard shape {list(shape)}, full shape {list(full)} and offset "
          f"{list(off)} have different ranks")
    for d, (o, s, f) in enumerate(zip(off, shape, full)):
        _need(o >= 0 and o + s <= f, name,
              f"shard [{o}, {o + s}) of dim {d} is outside the full shape "
              f"{list(full)}")
    return Box(name, view, full, off, source_of(view, obj))


def shard(name, tensor, full_shape, dim, rank, world):
    """A tensor-parallel shard: `tensor` is rank's piece of `full_shape`
    split on `dim` like torch.chunk. Empty pieces give no box."""
    full = _shape(full_shape)
    _need(-len(full) <= dim < len(full), name,
          f"dim {dim} is outside the full shape {list(full)}")
    dim %= len(full)
    start, stop = chunk_range(full[dim], rank, world)
    want = full[:dim] + (stop - start,) + full[dim + 1:]
    _need(_shape(tensor.shape) == want, name,
          f"rank {rank} of {world} on dim {dim} holds {list(want)}, the "
          f"tensor is {list(tensor.shape)}")
    if stop == start:
        return []
    off = [0] * len(full)
    off[dim] = start
    return [box(name, tensor, full, off)]


def replicated(name, tensor):
    """A tensor every rank holds whole."""
    return [box(name, tensor)]


def fused(names, tensor, full_shapes, rank=0, world=1):
    """Megatron-style fused storage on dim 0: rank's torch.chunk piece (on
    dim 0) of each named tensor, stacked in the order of `names` (gate/up
    of a fused MLP: ("...gate_proj.weight", "...up_proj.weight")).
    `full_shapes` is one full shape for every name or one per name."""
    names = list(names)
    if full_shapes and not isinstance(full_shapes[0], (list, tuple, torch.Size)):
        full_shapes = [full_shapes] * len(names)
    full_shapes = [_shape(s) for s in full_shapes]
    label = "+".join(names)
    _need(len(full_shapes) == len(names), label,
          f"{len(names)} names but {len(full_shapes)} full shapes")
    _need(tensor.dim() >= 1, label, "fused storage must have a dim 0")
    rows, boxes = 0, []
    for name, full in zip(names, full_shapes):
        _need(_shape(tensor.shape[1:]) == full[1:], label,
              f"trailing dims {list(tensor.shape[1:])} differ from "
              f"'{name}' {list(full)}")
        start, stop = chunk_range(full[0], rank, world)
        if stop > start and rows + stop - start <= tensor.shape[0]:
            view = tensor.narrow(0, rows, stop - start)
            boxes.append(box(name, view, full,
                             (start,) + (0,) * (len(full) - 1), tensor))
        rows += stop - start
    _need(rows == tensor.shape[0], label,
          f"rank {rank} of {world} holds {rows} rows of the fused names, "
          f"the fused tensor has {tensor.shape[0]}")
    return boxes


def fused_qkv(names, tensor, num_heads, num_kv_heads, head_dim, rank=0,
              world=1):
    """Megatron's fused QKV: dim 0 holds rank's KV-head groups, each group
    `[its q heads, its k head, its v head]` of head_dim rows; trailing dims
    are the hidden size (a weight) or none (a bias). Every group gives a q,
    a k and a v box of the Hugging Face q/k/v tensors `names`."""
    q, k, v = names
    label = f"{q}+{k}+{v}"
    _need(num_kv_heads > 0 and head_dim > 0 and num_heads % num_kv_heads == 0,
          label, f"{num_heads} heads do not divide into {num_kv_heads} "
          "KV-head groups")
    _need(num_kv_heads % world == 0, label,
          f"{num_kv_heads} KV-head groups do not divide over {world} ranks")
    per_rank = num_kv_heads // world
    q_per = num_heads // num_kv_heads
    group_rows = (q_per + 2) * head_dim
    _need(tensor.dim() >= 1 and tensor.shape[0] == per_rank * group_rows,
          label, f"dim 0 is {tensor.shape[0] if tensor.dim() else 0}, "
          f"{per_rank} groups of {group_rows} rows need "
          f"{per_rank * group_rows}")
    rest = _shape(tensor.shape[1:])
    zeros = (0,) * len(rest)
    boxes = []
    for j in range(per_rank):
        g = rank * per_rank + j
        base = j * group_rows
        parts = ((q, q_per * head_dim, num_heads, g * q_per * head_dim),
                 (k, head_dim, num_kv_heads, g * head_dim),
                 (v, head_dim, num_kv_heads, g * head_dim))
        for name, rows, heads, start in parts:
            view = tensor.narrow(0, base, rows)
            boxes.append(box(name, view, (heads * head_dim,) + rest,
                             (start,) + zeros, tensor))
            base += rows
    return boxes
