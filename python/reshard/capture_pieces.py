"""Sources read through a copy that moves values unchanged.

A loader's `w.view(h, 3, d, H).transpose(0, 1).reshape(3 * h * d, H)` (the
GPT-NeoX QKV reorder), or a `.contiguous()` followed by a `.view(...)`,
makes a tensor whose values are the source's, unchanged, but that is no
single strided view of it. Such a tensor is held as **pieces**: boxes of
its shape, each equal to one view of the source written with the capture
format's ops. A copy from it becomes one copy per piece, into the matching
box of the destination, so the pieces together write the loader's bytes.

The pieces of a reshape are found along the result's leading dims: the
rows (or sub-rows, recursively) whose elements form a box of the input,
run-length extended as far as the box stays one view. View ops applied to
a pieced tensor afterwards (narrow, select, slicing, transposes, chunk,
split, unbind, unsqueeze, squeeze) are applied to each piece; another
reshape cuts the pieces again.
"""
import bisect

import torch

from . import capture_ops

# More pieces than this for one tensor is refused rather than recorded.
MAX_PIECES = 1 << 16


class NotPieceable(Exception):
    """The tensor cannot be written as pieces; the message says why."""


def _suffix(shape):
    """Row-major element counts: p[i] = prod(shape[i:])."""
    p = [1] * (len(shape) + 1)
    for i in range(len(shape) - 1, -1, -1):
        p[i] = p[i + 1] * shape[i]
    return p


def row_major(shape):
    """The strides of a contiguous tensor of `shape`, in elements."""
    return _suffix(shape)[1:]


def flat_box(shape, first, count):
    """(lo, ln) of the box of a tensor of `shape` whose row-major elements
    are [first, first + count), or None when they are no box."""
    if not shape:
        return ([], []) if (first, count) == (0, 1) else None
    p = _suffix(shape)
    for j in range(len(shape)):
        inner = p[j + 1]
        if count % inner or first % inner:
            continue
        c = count // inner
        if c == 0 or c > shape[j] or \
                first // p[j] != (first + count - 1) // p[j]:
            continue
        q, idx = first // inner, []
        for d in range(j, -1, -1):
            idx.append(q % shape[d])
            q //= shape[d]
        idx.reverse()
        return (idx + [0] * (len(shape) - j - 1),
                [1] * j + [c] + list(shape[j + 1:]))
    return None


def box_ops(shape, lo, ln):
    """Narrows selecting the box (lo, ln) of a tensor of `shape`."""
    return [["narrow", d, a, n] for d, (a, n, s) in
            enumerate(zip(lo, ln, shape)) if (a, n) != (0, s)]


def view_strides(shape, stride, target):
    """The strides of `view(target)` of a tensor of `shape` and `stride`,
    or None when that view does not exist (torch's rule: each run of dims
    that are contiguous with each other may be split or merged; computed
    here because a failing view costs an exception)."""
    numel = 1
    for n in shape:
        numel *= n
    tnumel = 1
    for n in target:
        tnumel *= n
    if numel != tnumel:
        return None
    if numel == 0 or not shape:
        out, acc = [0] * len(target), 1
        for i in range(len(target) - 1, -1, -1):
            out[i] = acc
            acc *= max(target[i], 1)
        return out
    out = [0] * len(target)
    view_d = len(target) - 1
    base = stride[-1]
    tensor_numel, view_numel = 1, 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        if d == 0 or (shape[d - 1] != 1
                      and stride[d - 1] != tensor_numel * base):
            while view_d >= 0 and (view_numel < tensor_numel
                                   or target[view_d] == 1):
                out[view_d] = view_numel * base
                view_numel *= target[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                base = stride[d - 1]
                tensor_numel, view_numel = 1, 1
    return out if view_d == -1 else None


# The library's limits on the factors of one view (src/geom/box.h).
_MAX_FACTORS, _MAX_DIM_FACTORS = 64, 8


def box_refusal(src_shape, offset, shape, stride):
    """Why the library cannot read a view (element `offset`, `shape`,
    `stride`) of a row-major source of `src_shape` as one strided box, or
    None when it can. The same rule as src/geom/box.c: each view dim is cut
    into factors that stay inside one source dim, wrapping into the next
    outer dim only at a source dim's end, and each source dim's factors
    must be ordered. torch allows views this refuses (`[3, 2, 2]` viewed as
    `[2, 6]`: a row of 6 is one and a half source rows); such a view is
    recorded as pieces that are boxes (`carve`)."""
    src_shape = [int(n) for n in src_shape]
    pitch = _suffix(src_shape)[1:]
    if any(int(n) == 0 for n in shape):
        return None
    factors = []                           # (source dim, count, q)
    for vd, (n, s) in enumerate(zip(shape, stride)):
        n, s = int(n), int(s)
        while n > 1:
            d = next((d for d in range(len(src_shape) - 1, -1, -1)
                      if src_shape[d] > 1 and pitch[d] <= s
                      and s // pitch[d] < src_shape[d]), -1) if s > 0 else -1
            if d < 0:
                return (f"view dim {vd} has stride {s}, which does not step "
                        f"inside the source")
            if s % pitch[d]:
                return f"view dim {vd} (stride {s}) mixes source dims"
            q = s // pitch[d]
            if (n - 1) * q < src_shape[d]:
                factors.append((d, n, q))
                break
            inner = src_shape[d] // q
            if src_shape[d] % q or n % inner:
                return f"view dim {vd} merges a partial source dim {d}"
            factors.append((d, inner, q))
            n //= inner
            s = pitch[d] * src_shape[d]
    if len(factors) > _MAX_FACTORS:
        return "too many factors"
    for d in range(len(src_shape)):
        mine = sorted((q, c) for e, c, q in factors if e == d)
        if len(mine) > _MAX_DIM_FACTORS:
            return (f"source dim {d} is cut into more than "
                    f"{_MAX_DIM_FACTORS} pieces")
        span = 0
        for q, c in mine:
            if q <= span:
                return (f"source dim {d} is visited out of order (not a "
                        f"strided box)")
            span += (c - 1) * q
        start = (int(offset) // pitch[d]) % src_shape[d] if src_shape else 0
        if mine and span >= src_shape[d] - start:
            return f"source dim {d} is left by the view (not a strided box)"
    return None


def view_refusal(src_meta, ops):
    """box_refusal of the view `ops` make of the full source (a meta
    tensor), or None."""
    v = capture_ops.apply_ops(src_meta, ops)
    return box_refusal(src_meta.shape, v.storage_offset(), v.shape,
                       v.stride())


def _valid(src_meta, ops, shape):
    """Whether `ops` give a view of `shape` of the source."""
    try:
        out = capture_ops.apply_ops(src_meta, ops)
    except ValueError:
        return False
    return list(out.shape) == list(shape)


def carve(target, in_shape, ops_of_box, src_meta):
    """Pieces of `input.reshape(target)`: [(lo, ln, ops)] where the box
    (lo, ln) of the result equals the source view `ops`. `ops_of_box(lo,
    ln)` gives the ops of a box of the input, or None when it is no one
    view. NotPieceable when there would be too many pieces."""
    target = [int(s) for s in target]
    tp = _suffix(target)
    if tp[0] == 0:
        return []
    items = []

    def block(prefix, a, b, k):
        first = sum(i * tp[d + 1] for d, i in enumerate(prefix)) \
            + a * tp[k + 1]
        box = flat_box(in_shape, first, (b - a) * tp[k + 1])
        if box is None:
            return None
        ops = ops_of_box(*box)
        if ops is None:
            return None
        shape = [1] * k + [b - a] + target[k + 1:]
        m = capture_ops.apply_ops(src_meta, ops)
        if box[1] != shape:
            strides = view_strides(list(m.shape), list(m.stride()), shape)
            if strides is None:
                return None
            ops = ops + [["view", shape]]
        else:
            shape, strides = m.shape, m.stride()
        if box_refusal(src_meta.shape, m.storage_offset(), shape,
                       strides) is not None:
            return None
        return ops

    def walk(prefix, k):
        a = 0
        while a < target[k]:
            ops = block(prefix, a, a + 1, k)
            if ops is None:
                if k + 1 == len(target):
                    raise NotPieceable("has an element that is no view")
                walk(prefix + [a], k + 1)
                a += 1
                continue
            good, bad, step = a + 1, None, 2
            while good < target[k]:
                b = min(a + step, target[k])
                o = block(prefix, a, b, k)
                if o is None:
                    bad = b
                    break
                good, ops, step = b, o, step * 2
            while bad is not None and bad - good > 1:
                mid = (good + bad) // 2
                o = block(prefix, a, mid, k)
                if o is None:
                    bad = mid
                else:
                    good, ops = mid, o
            rest = len(target) - k - 1
            items.append((list(prefix) + [a] + [0] * rest,
                          [1] * k + [good - a] + target[k + 1:], ops))
            if len(items) > MAX_PIECES:
                raise NotPieceable(f"needs more than {MAX_PIECES} copies")
            a = good

    with torch._C.DisableTorchFunction():
        if not target:
            box = flat_box(in_shape, 0, 1)
            ops = ops_of_box(*box) if box is not None else None
            if ops is not None:
                ops = ops + [["view", []]]
            if ops is None or not _valid(src_meta, ops, []):
                raise NotPieceable("is no view of one element")
            return [([], [], ops)]
        walk([], 0)
    return items


def ops_in_pieces(items):
    """ops_of_box for an input held as pieces: the box must lie inside one
    piece. Pieces are searched from the last one starting (in row-major
    order) at or before the box, which is the one holding it for pieces
    cut along leading dims; other boxes are looked for in every piece
    when they are one element, or when there are few pieces (else they
    count as no one view, and the caller cuts smaller)."""
    order = sorted(items, key=lambda it: it[0])
    starts = [it[0] for it in order]

    def inside(item, lo, ln):
        plo, pln, _ = item
        return all(p <= a and a + n <= p + m
                   for a, n, p, m in zip(lo, ln, plo, pln))

    def ops_of_box(lo, ln):
        i = bisect.bisect_right(starts, list(lo))
        near = order[max(0, i - 8):i][::-1]
        one = all(n == 1 for n in ln)
        for item in near + (order if one or len(order) <= 64 else []):
            if inside(item, lo, ln):
                plo, pln, ops = item
                rel = [a - p for a, p in zip(lo, plo)]
                return ops + box_ops(pln, rel, ln)
        return None
    return ops_of_box


def primitives(op, shape):
    """The op as primitive ops on a tensor of `shape` (narrow, slice,
    select, unsqueeze, squeeze with a dim, permute), or None for an op that
    reshapes."""
    name, a = op[0], op[1:]
    rank = len(shape)
    if name in ("narrow", "select", "unsqueeze"):
        return [op]
    if name == "slice":
        step = a[3] if len(a) > 3 and a[3] is not None else 1
        return [["slice", a[0], a[1], a[2], step]]
    if name == "squeeze":
        dims = [a[0]] if a else range(rank)
        return [["squeeze", d] for d in sorted(dims, reverse=True)
                if shape[d] == 1]
    if name == "contiguous":
        return []
    if name in ("transpose", "t"):
        d0, d1 = (a[0], a[1]) if name == "transpose" else (0, rank - 1)
        perm = list(range(rank))
        if rank:
            perm[d0], perm[d1] = perm[d1], perm[d0]
        return [["permute", perm]]
    if name == "permute":
        return [["permute", list(a[0])]]
    if name == "chunk":
        chunks, dim, i = a
        size = -(-shape[dim] // chunks)
        start = min(i * size, shape[dim])
        return [["narrow", dim, start, max(0, min(size, shape[dim] - start))]]
    if name == "split":
        sizes, dim, i = a
        if isinstance(sizes, list):
            return [["narrow", dim, sum(sizes[:i]), sizes[i]]]
        start = i * sizes
        return [["narrow", dim, start, min(sizes, shape[dim] - start)]]
    if name == "unbind":
        return [["select", a[0], a[1]]]
    return None


def apply(items, shape, op):
    """(pieces, shape) after one primitive op."""
    name, a = op[0], op[1:]
    shape = list(shape)
    out = []
    if name in ("narrow", "slice"):
        d = a[0]
        if name == "narrow":
            start, stop, step = a[1], a[1] + a[2], 1
        else:
            start, stop, step = a[1], a[2], a[3]
        picked = range(start, stop, step)
        for lo, ln, ops in items:
            p0, p1 = lo[d], lo[d] + ln[d]
            k0 = max(0, -(-(p0 - start) // step))
            first = start + k0 * step
            count = len(range(first, min(stop, p1), step))
            if count <= 0:
                continue
            local = [] if (first, count) == (p0, ln[d]) else [
                ["slice", d, first - p0,
                 first - p0 + (count - 1) * step + 1, step]]
            lo2, ln2 = list(lo), list(ln)
            lo2[d], ln2[d] = k0, count
            out.append((lo2, ln2, ops + local))
        shape[d] = len(picked)
        return out, shape
    if name == "select":
        d, i = a
        for lo, ln, ops in items:
            if lo[d] <= i < lo[d] + ln[d]:
                out.append((lo[:d] + lo[d + 1:], ln[:d] + ln[d + 1:],
                            ops + [["select", d, i - lo[d]]]))
        return out, shape[:d] + shape[d + 1:]
    if name == "unsqueeze":
        d = a[0]
        return ([(lo[:d] + [0] + lo[d:], ln[:d] + [1] + ln[d:],
                  ops + [["unsqueeze", d]]) for lo, ln, ops in items],
                shape[:d] + [1] + shape[d:])
    if name == "squeeze":
        d = a[0]
        return ([(lo[:d] + lo[d + 1:], ln[:d] + ln[d + 1:],
                  ops + [["squeeze", d]]) for lo, ln, ops in items],
                shape[:d] + shape[d + 1:])
    if name == "permute":
        perm = a[0]
        return ([([lo[p] for p in perm], [ln[p] for p in perm],
                  ops + [["permute", list(perm)]]) for lo, ln, ops in items],
                [shape[p] for p in perm])
    raise NotPieceable(f"op '{name}' on pieces")


def apply_all(items, shape, ops):
    """(pieces, shape) after translated ops, or None when one reshapes."""
    for op in ops:
        prims = primitives(op, shape)
        if prims is None:
            return None
        for p in prims:
            items, shape = apply(items, shape, p)
    return items, shape


def dest_boxes(items, offset, stride):
    """(dest_offset, dest_shape, ops) of each piece written into a region
    at `offset` with `stride`."""
    return [(offset + sum(lo_d * s for lo_d, s in zip(lo, stride)), ln, ops)
            for lo, ln, ops in items]


def meta_of(shape, dtype):
    with torch._C.DisableTorchFunction():
        return torch.empty(shape, dtype=dtype, device="meta")
