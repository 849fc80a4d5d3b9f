"""A torch.distributed DTensor's local shard as boxes of its full tensor.

From the DTensor's placements over its device mesh and this rank's mesh
coordinate, works out which rows of each tensor dim the local shard holds
(torch.chunk per mesh dim, in mesh order; _StridedShard as FSDP2 + TP
writes it) and turns the local shard into views that are boxes of the
full tensor (layouts.box), without a copy. Partial sums and unknown
placements are refused naming the tensor.
"""
import itertools

import torch

from . import layouts


def _placement_types(name):
    """(DTensor, Shard, Replicate, _StridedShard or None); LayoutError
    naming the tensor on a torch without DTensor (before 2.x)."""
    try:
        from torch.distributed.tensor import DTensor, Replicate, Shard
    except ImportError:
        try:  # torch 2.0 - 2.3 kept it under _tensor
            from torch.distributed._tensor import DTensor, Replicate, Shard
        except ImportError:
            _refuse(name, f"register_dtensor needs torch.distributed "
                    f"DTensor (torch 2.x); this is torch "
                    f"{torch.__version__}")
    try:
        from torch.distributed.tensor.placement_types import _StridedShard
    except ImportError:
        _StridedShard = None
    return DTensor, Shard, Replicate, _StridedShard


# A dim's held indices: runs (global start, length) in local order.


def _take(runs, lo, hi):
    """Positions [lo, hi) of the index list `runs`, as runs."""
    out, pos = [], 0
    for start, n in runs:
        a, b = max(lo, pos), min(hi, pos + n)
        if a < b:
            out.append((start + a - pos, b - a))
        pos += n
    return out


def _chunk(runs, n, c):
    """Piece c of torch.chunk(n) of the index list: ceil(len / n) each,
    the last ones shorter or empty."""
    size = sum(k for _, k in runs)
    step = -(-size // n) if size else 0
    lo = min(size, c * step)
    return _take(runs, lo, min(size, lo + step))


def _strided(runs, split, n, c):
    """_StridedShard(split_factor=split): the list cut into `split` chunks,
    each chunked n ways; piece c of each, in order."""
    out = []
    for j in range(split):
        out += _chunk(_chunk(runs, split, j), n, c)
    return out


def _merge(runs):
    """Adjacent runs joined: [(0, 2), (2, 3)] -> [(0, 5)]."""
    out = []
    for start, n in runs:
        if n == 0:
            continue
        if out and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((start, n))
    return out


def _refuse(name, what):
    raise layouts.LayoutError(f"tensor '{name}': {what}")


def _check_order(name, spec, placements):
    """Refuses a DTensor whose shard order is not its placements' mesh
    order (a torch that records another order in its spec)."""
    order = getattr(spec, "shard_order", None)
    default = getattr(type(spec), "compute_default_shard_order", None)
    if order is None or default is None or \
            getattr(spec, "use_strided_shard_as_shard_order", False):
        return
    if tuple(order) != tuple(default(tuple(placements))):
        _refuse(name, f"its shards are applied in the order {order}, not "
                "in mesh order; redistribute it to plain placements first")


def held_runs(name, full_shape, mesh_shape, coord, placements, types):
    """Per tensor dim, the runs of global indices the rank at mesh
    coordinate `coord` holds, in the order its local shard holds them."""
    _, shard_t, replicate_t, strided_t = types
    runs = [[(0, int(s))] for s in full_shape]
    ndim = len(full_shape)
    for mesh_dim, p in enumerate(placements):
        n, c = int(mesh_shape[mesh_dim]), int(coord[mesh_dim])
        if isinstance(p, replicate_t):
            continue
        strided = strided_t is not None and isinstance(p, strided_t)
        if not strided and not isinstance(p, shard_t):
            _refuse(name, f"placement {p!r} on mesh dim {mesh_dim} is not "
                    "supported (Shard, _StridedShard and Replicate are; a "
                    "Partial holds unreduced sums: reduce it, e.g. "
                    "redistribute to Replicate, first)")
        d = int(p.dim)
        if not -ndim <= d < ndim:
            _refuse(name, f"placement {p!r} on mesh dim {mesh_dim} shards "
                    f"dim {d} of a {ndim}-dim tensor")
        d %= ndim
        if strided:  # not a Shard subclass in every torch
            runs[d] = _strided(runs[d], int(p.split_factor), n, c)
        else:
            runs[d] = _chunk(runs[d], n, c)
    return [_merge(r) for r in runs]


def boxes(name, dtensor):
    """This rank's boxes of the DTensor `dtensor` published as `name`: a
    view of its local shard per block of the full tensor it holds (none
    when it holds nothing, or is outside the mesh). LayoutError naming
    the tensor for placements it cannot publish."""
    types = _placement_types(name)
    if not isinstance(dtensor, types[0]):
        _refuse(name, f"is a {type(dtensor).__name__}, not a DTensor")
    mesh, placements = dtensor.device_mesh, tuple(dtensor.placements)
    coord = mesh.get_coordinate()
    if coord is None:
        return []   # this rank is not in the DTensor's mesh
    _check_order(name, getattr(dtensor, "_spec", None), placements)
    full = tuple(int(s) for s in dtensor.shape)
    runs = held_runs(name, full, tuple(mesh.shape), coord, placements,
                     types)
    with torch.no_grad():
        local = dtensor.to_local()
    held = tuple(sum(k for _, k in r) for r in runs)
    if held != tuple(int(s) for s in local.shape):
        _refuse(name, f"placements {list(placements)} on mesh "
                f"{list(mesh.shape)} at coordinate {list(coord)} give a "
                f"local shard of {list(held)}, the DTensor's local shard "
                f"is {list(local.shape)}")
    if any(h == 0 for h in held):
        return []
    return [_box(name, local, full, pieces)
            for pieces in itertools.product(*[_positions(r) for r in runs])]


def _positions(runs):
    """(local start, global start, length) of each run."""
    out, pos = [], 0
    for start, n in runs:
        out.append((pos, start, n))
        pos += n
    return out


def _box(name, local, full, pieces):
    """The box of `local` at the local/global positions `pieces` (one per
    dim)."""
    view = local
    for d, (pos, _, n) in enumerate(pieces):
        if n != local.shape[d]:
            view = view.narrow(d, pos, n)
    return layouts.box(name, view, full, tuple(g for _, g, _ in pieces),
                       local)
