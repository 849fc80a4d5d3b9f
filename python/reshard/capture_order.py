"""The order of a capture's writes: fills against copies.

A receiver applies a capture's fills to a parameter before its copies, so
a fill the loader made before an overlapping copy comes out as in the
loader (the copy wins), and fills among themselves keep the loader's order.
A fill the loader made *after* a copy it overlaps would be undone by that
copy: capture refuses such a pair, and a Capture holding one is refused.

Overlap is decided on the exact sets of elements the two strided regions
write, not on their extents: the regions' element offsets are enumerated
with torch in chunks, only where their extents meet, into a mark of one
byte per element of that common window (at most the parameter's size).
"""
import itertools

import torch

# Element offsets enumerated per step.
CHUNK = 1 << 20


def _extent(r):
    """(first, last) element a region writes, or None when it writes none."""
    shape, stride = r["dest_shape"], r["dest_stride"]
    if any(n == 0 for n in shape):
        return None
    first = r["dest_offset"]
    return first, first + sum((n - 1) * s for n, s in zip(shape, stride))


def _offsets(r):
    """The region's element offsets, in int64 tensors of about CHUNK."""
    dims = [(n, s) for n, s in zip(r["dest_shape"], r["dest_stride"])
            if n != 1]
    first = r["dest_offset"]
    k, inner = len(dims), 1
    while k > 0 and inner * dims[k - 1][0] <= CHUNK:
        k -= 1
        inner *= dims[k][0]
    grid = torch.zeros(1, dtype=torch.int64)
    for n, s in dims[k:]:
        grid = (grid.unsqueeze(1)
                + torch.arange(n, dtype=torch.int64) * s).reshape(-1)
    if k == 0:
        yield first + grid
        return
    n_mid, s_mid = dims[k - 1]
    rows = max(1, CHUNK // inner)
    for idx in itertools.product(*[range(n) for n, _ in dims[:k - 1]]):
        base = first + sum(i * s for i, (_, s) in zip(idx, dims))
        for a in range(0, n_mid, rows):
            m = min(rows, n_mid - a)
            mid = torch.arange(a, a + m, dtype=torch.int64) * s_mid
            yield (base + mid.unsqueeze(1) + grid.unsqueeze(0)).reshape(-1)


def overlaps(a, b):
    """Whether two regions ({dest_offset, dest_shape, dest_stride}) of one
    parameter write a common element."""
    ea, eb = _extent(a), _extent(b)
    if ea is None or eb is None:
        return False
    lo, hi = max(ea[0], eb[0]), min(ea[1], eb[1])
    if lo > hi:
        return False
    mark = torch.zeros(hi - lo + 1, dtype=torch.bool)
    for off in _offsets(a):
        off = off[(off >= lo) & (off <= hi)]
        mark[off - lo] = True
    for off in _offsets(b):
        off = off[(off >= lo) & (off <= hi)]
        if bool(mark[off - lo].any()):
            return True
    return False


def _regions(copy):
    """(param, region) of every region a copy writes: its values and, for
    a quantized copy, its scales."""
    out = [(copy["param"], copy)]
    scale = (copy.get("quant") or {}).get("scale")
    if isinstance(scale, dict) and "param" in scale:
        out.append((scale["param"], scale))
    return out


def late_fills(copies, fills):
    """(fill index, copy index) of every fill that overlaps a copy made
    before it (copy index < the fill's `at`)."""
    by_param = {}
    for ci, c in enumerate(copies):
        for param, region in _regions(c):
            by_param.setdefault(param, []).append((ci, region))
    pairs = []
    for fi, f in enumerate(fills):
        at = f.get("at", 0)
        for ci, region in by_param.get(f["param"], ()):
            if ci < at and overlaps(f, region):
                pairs.append((fi, ci))
    return pairs


def _same_write(a, b):
    keys = ("src", "ops", "param", "dest_offset", "dest_shape",
            "dest_stride", "dest_dtype", "quant")
    return all(a.get(k) == b.get(k) for k in keys)


def overlapping_copies(copies):
    """(earlier, later) copy indices of every pair of copies that write a
    common element of a parameter, other than a copy made twice or pieces
    of one write. Regions are swept by extent, so only pairs whose extents
    meet are compared element by element (on a capture read back from JSON
    the pieces of one write are compared too, at a cost quadratic in the
    pieces whose extents meet)."""
    by_param = {}
    for ci, c in enumerate(copies):
        for param, region in _regions(c):
            ext = _extent(region)
            if ext is not None:
                by_param.setdefault(param, []).append((ext, ci, region))
    pairs = set()
    for items in by_param.values():
        items.sort(key=lambda t: t[0])
        active = {}                       # write -> [(extent, index, region)]
        for (lo, hi), ci, region in items:
            write = copies[ci].get("_write")
            for key in list(active):
                kept = [a for a in active[key] if a[0][1] >= lo]
                if kept:
                    active[key] = kept
                else:
                    del active[key]
            for key, entries in active.items():
                if key is not None and key == write:
                    continue
                for _, cj, other in entries:
                    i, j = min(ci, cj), max(ci, cj)
                    if not _same_write(copies[i], copies[j]) and \
                            overlaps(region, other):
                        pairs.add((i, j))
            active.setdefault(write, []).append(((lo, hi), ci, region))
    return sorted(pairs)


def overlapping_copy_text(later, earlier, later_where=None,
                          earlier_where=None):
    """The refusal of a copy that overwrites part of an earlier one."""
    return (f"copy of source '{later['src']}' into parameter "
            f"'{later['param']}'{_where(later_where)} overwrites part of the "
            f"earlier copy of source '{earlier['src']}' into parameter "
            f"'{earlier['param']}'{_where(earlier_where)}; copies that "
            f"overlap are refused (their order is not kept by the library)")


def _where(w):
    return f" ({w})" if w else ""


def late_fill_text(fill, copy, fill_where=None, copy_where=None):
    """The refusal of a fill made after a copy it overlaps, naming both."""
    return (f"fill of parameter '{fill['param']}' with {fill['value']!r} "
            f"at offset {fill['dest_offset']} shape {fill['dest_shape']} "
            f"stride {fill['dest_stride']}{_where(fill_where)} overwrites "
            f"part of the earlier copy of source '{copy['src']}' into "
            f"parameter '{copy['param']}'{_where(copy_where)}; a fill after "
            f"a copy it overlaps is refused (a receiver applies fills "
            f"before copies)")


def renumber(fills, old_copies, kept):
    """The fills with `at` counting only the copies in `kept` (a sub-list
    of old_copies, same objects), in the same order."""
    kept_ids = {id(c) for c in kept}
    before, n = [0], 0
    for c in old_copies:
        n += id(c) in kept_ids
        before.append(n)
    out = []
    for f in fills:
        g = dict(f)
        g["at"] = before[min(max(f.get("at", 0), 0), len(old_copies))]
        out.append(g)
    return out
