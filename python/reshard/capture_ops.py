"""The view-op vocabulary of reshard.capture.v1, both ways.

`translate` turns one PyTorch view call seen during capture (method or
function form, positional or keyword arguments) into the JSON ops of the
capture format (docs/formats.md, "Ops"); `apply_ops` replays JSON ops on a
real tensor in pure torch. Both live here so that what capture writes and
what replay reads cannot drift apart.

Indexing is translated into the primitive ops `select`, `slice` and
`unsqueeze`, with dims and indices made non-negative and Python's slice
clamping resolved, because the format rejects out-of-range bounds where
Python clamps them.
"""
import operator

import torch


class NotAView(Exception):
    """The call cannot be expressed as format ops; the message says why."""


def _dim(d, rank):
    """A dim made non-negative (torch has already checked the range)."""
    d = operator.index(d)
    return d + rank if d < 0 else d


def _sizes(args):
    """Sizes given as varargs (`view(2, 3)`) or as one sequence
    (`view((2, 3))`, `view(torch.Size([2, 3]))`)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        args = args[0]
    return [operator.index(s) for s in args]


def _bind(args, kwargs, names, defaults=None):
    """Positional and keyword arguments after `self`, by parameter name."""
    defaults = defaults or {}
    out = dict(defaults)
    for name, value in zip(names, args):
        out[name] = value
    for name, value in kwargs.items():
        out[name] = value
    missing = [n for n in names if n not in out]
    if missing:
        raise TypeError(f"missing argument(s) {missing}")
    return out


def _narrow(x, args, kwargs):
    a = _bind(args, kwargs, ("dim", "start", "length"))
    rank = x.dim()
    dim = _dim(a["dim"], rank)
    start = operator.index(a["start"])
    if start < 0:
        start += x.shape[dim]
    return [["narrow", dim, start, operator.index(a["length"])]]


def _select(x, args, kwargs):
    a = _bind(args, kwargs, ("dim", "index"))
    dim = _dim(a["dim"], x.dim())
    index = operator.index(a["index"])
    if index < 0:
        index += x.shape[dim]
    return [["select", dim, index]]


def _transpose(x, args, kwargs):
    names = ("dim0", "dim1")
    if "axis0" in kwargs or "axis1" in kwargs:
        kwargs = {"dim0": kwargs.get("axis0"), "dim1": kwargs.get("axis1")}
    a = _bind(args, kwargs, names)
    rank = x.dim()
    return [["transpose", _dim(a["dim0"], rank), _dim(a["dim1"], rank)]]


def _t(x, args, kwargs):
    return [["t"]]


def _big_t(x, args, kwargs):
    # Tensor.T reverses every dim; for rank <= 2 that is t().
    if x.dim() <= 2:
        return [["t"]]
    return [["permute", list(range(x.dim() - 1, -1, -1))]]


def _mt(x, args, kwargs):
    rank = x.dim()
    return [["transpose", rank - 2, rank - 1]]


def _permute(x, args, kwargs):
    dims = kwargs["dims"] if "dims" in kwargs else args
    return [["permute", [_dim(d, x.dim()) for d in _sizes(dims)]]]


def _view(x, args, kwargs):
    if "dtype" in kwargs or (args and isinstance(args[0], torch.dtype)):
        raise NotAView("reinterprets the element type")
    sizes = kwargs["size"] if "size" in kwargs else args
    return [["view", _sizes(sizes)]]


def _reshape(x, args, kwargs):
    sizes = kwargs["shape"] if "shape" in kwargs else args
    return [["reshape", _sizes(sizes)]]


def _shape_of_other(op):
    """view_as / reshape_as: `op` to the shape of the other tensor."""
    def translate(x, args, kwargs):
        other = kwargs.get("other", args[0] if args else None)
        return [[op, list(other.shape)]]
    return translate


def _flatten(x, args, kwargs):
    a = _bind(args, kwargs, ("start_dim", "end_dim"),
              {"start_dim": 0, "end_dim": -1})
    rank = max(x.dim(), 1)
    return [["flatten", _dim(a["start_dim"], rank), _dim(a["end_dim"], rank)]]


def _unflatten(x, args, kwargs):
    a = _bind(args, kwargs, ("dim", "sizes"))
    return [["unflatten", _dim(a["dim"], x.dim()), _sizes([a["sizes"]])]]


def _unsqueeze(x, args, kwargs):
    a = _bind(args, kwargs, ("dim",))
    return [["unsqueeze", _dim(a["dim"], x.dim() + 1)]]


def _squeeze(x, args, kwargs):
    a = _bind(args, kwargs, ("dim",), {"dim": None})
    if a["dim"] is None:
        return [["squeeze"]]
    if isinstance(a["dim"], (tuple, list)):
        # torch 2.x's squeeze of several dims: each dim of extent 1 among
        # them goes, as one squeeze per dim from the last (the earlier
        # dims keep their numbers).
        dims = {_dim(d, max(x.dim(), 1)) for d in a["dim"]}
        return [["squeeze", d] for d in sorted(dims, reverse=True)]
    return [["squeeze", _dim(a["dim"], max(x.dim(), 1))]]


def _movedim(x, args, kwargs):
    kw = dict(kwargs)
    if "source" in kw or "destination" in kw:
        kw = {"source": kw.get("source"), "destination": kw.get("destination")}
    a = _bind(args, kw, ("source", "destination"))
    rank = x.dim()
    src, dst = a["source"], a["destination"]
    if not isinstance(src, (tuple, list)):
        src, dst = [src], [dst]
    src = [_dim(d, rank) for d in src]
    dst = [_dim(d, rank) for d in dst]
    order = [None] * rank
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(rank) if d not in src)
    return [["permute", [o if o is not None else next(rest)
                         for o in order]]]


def _contiguous(x, args, kwargs):
    return [["contiguous"]]


def _chunk(x, args, kwargs):
    a = _bind(args, kwargs, ("chunks", "dim"), {"dim": 0})
    dim = _dim(a["dim"], x.dim())
    chunks = operator.index(a["chunks"])
    return lambda i: [["chunk", chunks, dim, i]]


def _split_args(x, args, kwargs, aliases):
    """(where to split, dim) of a split call, whichever name of its
    overloads the first argument is passed by."""
    kw = dict(kwargs)
    for alias in aliases:
        if alias in kw:
            kw["what"] = kw.pop(alias)
    a = _bind(args, kw, ("what", "dim"), {"dim": 0})
    return a["what"], _dim(a["dim"], x.dim())


def _split(x, args, kwargs):
    size, dim = _split_args(x, args, kwargs, (
        "split_size", "split_size_or_sections", "split_sizes"))
    if isinstance(size, (tuple, list, torch.Size)):
        size = [operator.index(s) for s in size]
    else:
        size = operator.index(size)
    return lambda i: [["split", size, dim, i]]


def _tensor_split(x, args, kwargs):
    what, dim = _split_args(x, args, kwargs, (
        "sections", "indices", "tensor_indices_or_sections"))
    size = x.shape[dim]
    if isinstance(what, torch.Tensor):
        raise NotAView("splits at indices given as a tensor")
    if isinstance(what, (tuple, list)):
        cuts = [min(max(operator.index(i) + (size if i < 0 else 0), 0), size)
                for i in what]
        bounds = [0] + cuts + [size]
        pieces = [(lo, max(0, hi - lo)) for lo, hi in zip(bounds, bounds[1:])]
    else:
        n = operator.index(what)
        base, extra = divmod(size, n)
        pieces, start = [], 0
        for i in range(n):
            length = base + (1 if i < extra else 0)
            pieces.append((start, length))
            start += length
    return lambda i: [["narrow", dim, min(pieces[i][0], size),
                       pieces[i][1]]]


def _unbind(x, args, kwargs):
    a = _bind(args, kwargs, ("dim",), {"dim": 0})
    dim = _dim(a["dim"], x.dim())
    return lambda i: [["unbind", dim, i]]


def _slice_op(dim, size, key):
    """The op for `key` (a slice) on a dim of `size`, or None when the
    slice keeps the whole dim."""
    start, stop, step = key.indices(size)
    count = len(range(start, stop, step))
    if (start, step, count) == (0, 1, size):
        return None
    if count == 0:
        return ["slice", dim, start, start, 1]
    return ["slice", dim, start, start + (count - 1) * step + 1, step]


def index_keys(key):
    """The key of `x[key]` as a tuple, a 0-dim integer tensor holding data
    (an expert id looked up in an expert map) as its int, which is how
    torch indexes with it; NotAView for advanced indexing."""
    keys = key if isinstance(key, tuple) else (key,)
    out = []
    for k in keys:
        if isinstance(k, torch.Tensor) and k.dim() == 0 and not k.is_meta \
                and not k.is_floating_point() and k.dtype != torch.bool \
                and not hasattr(k, "_rs_srcs"):
            with torch._C.DisableTorchFunction():
                k = int(k.item())
        if k is None or k is Ellipsis or isinstance(k, slice):
            out.append(k)
            continue
        if isinstance(k, bool) or isinstance(k, torch.Tensor) \
                or isinstance(k, (list, tuple)):
            raise NotAView("indexes with a tensor, a list or a bool")
        out.append(operator.index(k))
    return tuple(out)


def _getitem(x, args, kwargs):
    keys = index_keys(args[0] if args else kwargs["indices"])
    consumed = sum(1 for k in keys if k is not None and k is not Ellipsis)
    ops, d, cur = [], 0, x
    for k in keys:
        if k is None:
            ops.append(["unsqueeze", d])
            cur, d = cur.unsqueeze(d), d + 1
        elif k is Ellipsis:
            d += cur.dim() - d - (consumed - _consumed_before(keys, k))
        elif isinstance(k, slice):
            op = _slice_op(d, cur.shape[d], k)
            if op is not None:
                ops.append(op)
                cur = _apply_one(cur, op)
            d += 1
        else:
            index = operator.index(k)
            if index < 0:
                index += cur.shape[d]
            ops.append(["select", d, index])
            cur = cur.select(d, index)
    return ops


def _consumed_before(keys, stop):
    """Dim-consuming keys before the first `stop` key (the Ellipsis)."""
    n = 0
    for k in keys:
        if k is stop:
            return n
        if k is not None and k is not Ellipsis:
            n += 1
    return n


# Calls that produce one view, by the name capture sees (method and function
# forms share the name), mapped to the translator of their arguments.
SINGLE = {
    "narrow": _narrow, "select": _select, "transpose": _transpose,
    "swapaxes": _transpose, "swapdims": _transpose, "t": _t, "T": _big_t,
    "mT": _mt, "permute": _permute, "view": _view,
    "view_as": _shape_of_other("view"), "reshape": _reshape,
    "reshape_as": _shape_of_other("reshape"), "flatten": _flatten,
    "ravel": lambda x, args, kwargs: [["flatten", 0, max(x.dim(), 1) - 1]],
    "unflatten": _unflatten, "unsqueeze": _unsqueeze, "squeeze": _squeeze,
    "contiguous": _contiguous, "__getitem__": _getitem,
    "movedim": _movedim, "moveaxis": _movedim,
}

# Calls that produce several views; the translator returns i -> ops.
MULTI = {"chunk": _chunk, "split": _split, "split_with_sizes": _split,
         "unbind": _unbind,
         "tensor_split": _tensor_split}

# Ops whose result must share the input's storage to be a pure view.
MUST_VIEW = {"reshape", "reshape_as", "flatten", "ravel", "contiguous"}

# Calls that change the shape by reading the elements in row-major order:
# where that is no view of the source they are recorded as pieces.
RESHAPES = {"view", "view_as", "reshape", "reshape_as", "flatten", "ravel",
            "unflatten"}


def translate(name, x, args, kwargs):
    """JSON ops for the view call `name` on meta tensor `x` (arguments after
    self); for MULTI calls a function of the piece index. NotAView when the
    call is outside the format."""
    table = SINGLE if name in SINGLE else MULTI
    try:
        return table[name](x, args, kwargs)
    except NotAView:
        raise
    except (TypeError, KeyError, IndexError) as e:
        raise NotAView(f"arguments not understood ({e})") from None


# ---------------------------------------------------------------- replay


def _full_dims(t, dim, key):
    return t[(slice(None),) * dim + (key,)]


def _key_of(k):
    if k is None:
        return slice(None)
    if isinstance(k, list):
        return slice(*k)
    return k


def _apply_one(t, op):
    name, a = op[0], op[1:]
    if name == "narrow":
        return t.narrow(a[0], a[1], a[2])
    if name == "slice":
        step = a[3] if len(a) > 3 and a[3] is not None else 1
        return _full_dims(t, _dim(a[0], t.dim()), slice(a[1], a[2], step))
    if name == "select":
        return t.select(a[0], a[1])
    if name == "getitem":
        return t[tuple(_key_of(k) for k in a[0])]
    if name == "transpose":
        return t.transpose(a[0], a[1])
    if name == "t":
        return t.t()
    if name == "permute":
        return t.permute(*a[0])
    if name in ("view", "reshape"):
        return t.view(*a[0])
    if name == "flatten":
        return t.flatten(*a)
    if name == "unflatten":
        return t.unflatten(a[0], tuple(a[1]))
    if name == "unsqueeze":
        return t.unsqueeze(a[0])
    if name == "squeeze":
        return t.squeeze(a[0]) if a else t.squeeze()
    if name == "chunk":
        return t.chunk(a[0], a[1])[a[2]]
    if name == "split":
        return t.split(a[0], a[1])[a[2]]
    if name == "unbind":
        return t.unbind(a[0])[a[1]]
    if name == "contiguous":
        if not t.is_contiguous():
            raise ValueError("op 'contiguous' would copy this view")
        return t
    raise ValueError(f"op '{name}' is not supported")


def apply_ops(tensor, ops):
    """The view of `tensor` that the JSON `ops` describe (PyTorch view
    semantics, no copy); ValueError naming the op that fails."""
    for i, op in enumerate(ops):
        try:
            tensor = _apply_one(tensor, op)
        except (RuntimeError, IndexError, TypeError) as e:
            raise ValueError(f"ops[{i}] {op}: {e}") from None
    return tensor
