#!/usr/bin/env python3
"""Shard data and independent ground truth for `reshard run` tests.

    run_data.py make SOURCES.json DATA_DIR [--digests OUT_SOURCES.json]
        Writes DATA_DIR/<session>/<addr>.bin for every shard: the shard's
        row-major bytes, each element a deterministic function of (tensor
        name, global element index), so replicas hold identical bytes. Float
        dtypes get finite values with exponents near the bias. With
        --digests, also writes a copy of SOURCES.json whose shards carry the
        rsd64 digest of their bytes.

    run_data.py expect CAPTURE.json SOURCES.json [SOURCES.json ...] OUT_DIR
                       [--only GLOB ...]
        Recomputes every parameter from the capture alone (each copy's op
        chain replayed as PyTorch views over the full source tensor, casts
        done here), with unwritten bytes 0xEE, and compares byte for byte
        with OUT_DIR/<param>.bin. Prints the first difference and exits 1.

    run_data.py corrupt PLAN.json SOURCES.json DATA_DIR [TENSOR]
        Flips one byte of a shard file that the plan reads (a shard of
        TENSOR if given): the first byte of the shard that the first
        overlapping read takes. Prints "tensor<TAB>session<TAB>path".

Uses the Python standard library only; the digest comes from
tests/support/rsd64_ref.py.
"""
import fnmatch
import importlib.util
import itertools
import json
import os
import struct
import sys

from shapes import numel, row_major

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "rsd64_ref", os.path.join(HERE, "..", "support", "rsd64_ref.py"))
rsd64_ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rsd64_ref)

M64 = (1 << 64) - 1
SIZES = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2, "f8e4m3": 1, "f8e5m2": 1,
         "i8": 1, "u8": 1, "i16": 2, "i32": 4, "i64": 8, "bool": 1}
ALIASES = {
    "float32": "f32", "torch.float32": "f32", "float64": "f64",
    "torch.float64": "f64", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "float16": "f16", "half": "f16", "torch.float16": "f16",
    "float8_e4m3fn": "f8e4m3", "torch.float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2", "torch.float8_e5m2": "f8e5m2",
    "torch.int8": "i8", "torch.uint8": "u8", "torch.int16": "i16",
    "torch.int32": "i32", "torch.int64": "i64", "torch.bool": "bool",
}


class Refused(Exception):
    """An op chain this checker cannot (or PyTorch would not) view."""


def die(msg):
    print("run_data: " + msg, file=sys.stderr)
    sys.exit(1)


def dtype_of(name):
    return ALIASES.get(name, name)


# ---------------------------------------------------------------- values

def mix(x):
    """splitmix64 finalizer: a well-spread 64-bit function of x."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & M64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & M64
    return x ^ (x >> 31)


def float_bits(h, exp_bits, mant_bits, spread):
    """Sign, an exponent within +-spread/2 of the bias, random mantissa."""
    bias = (1 << (exp_bits - 1)) - 1
    exp = bias - spread // 2 + (h >> 40) % spread
    sign = (h >> 63) & 1
    mant = h & ((1 << mant_bits) - 1)
    return (sign << (exp_bits + mant_bits)) | (exp << mant_bits) | mant


def element(dt, elsize, seed, gidx):
    """The bytes of element gidx (global row-major index) of a tensor."""
    h = mix((seed + (gidx + 1) * 0x9E3779B97F4A7C15) & M64)
    if dt == "bf16":
        v = float_bits(h, 8, 7, 32)
    elif dt == "f16":
        v = float_bits(h, 5, 10, 16)
    elif dt == "f32":
        v = float_bits(h, 8, 23, 32)
        if (h >> 50) % 4 == 0:  # exact bf16/f16 ties: exercise ties-to-even
            v = (v & ~0xFFFF) | 0x8000
    elif dt == "f64":
        v = float_bits(h, 11, 52, 32)
    elif dt == "f8e4m3":
        v = float_bits(h, 4, 3, 14)
    elif dt == "f8e5m2":
        v = float_bits(h, 5, 2, 30)
    elif dt == "bool":
        v = h & 1
    else:
        v = h
    return (v & ((1 << (8 * elsize)) - 1)).to_bytes(elsize, "little")


def tensor_seed(name):
    return rsd64_ref.rsd64(name.encode())


def blobs_of(doc):
    return doc if isinstance(doc, list) else [doc]


def shard_bytes(t, sh):
    dt, es = dtype_of(t["dtype"]), t["elsize"]
    seed, gstride = tensor_seed(t["name"]), row_major(t["full_shape"])
    ranges = [range(o, o + s) for o, s in zip(sh["shard_offset"], sh["shape"])]
    out = bytearray()
    for idx in itertools.product(*ranges):
        out += element(dt, es, seed, sum(i * g for i, g in zip(idx, gstride)))
    return bytes(out)


def cmd_make(args):
    if len(args) not in (2, 4) or (len(args) == 4 and args[2] != "--digests"):
        die("usage: run_data.py make SOURCES.json DATA_DIR [--digests OUT.json]")
    doc = json.load(open(args[0]))
    for blob in blobs_of(doc):
        for t in blob["tensors"]:
            for sh in t["shards"]:
                session = sh.get("agent_name", blob["agent_name"])
                data = shard_bytes(t, sh)
                d = os.path.join(args[1], session)
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, "%d.bin" % sh["addr"]), "wb") as f:
                    f.write(data)
                sh["digest"] = rsd64_ref.text(rsd64_ref.rsd64(data))
    if len(args) == 4:
        with open(args[3], "w") as f:
            json.dump(doc, f, indent=1)


# ---------------------------------------------------------------- views

def wrap(d, n):
    """A PyTorch dim index into [0, n)."""
    if not -n <= d < n:
        raise Refused("dim %d out of range for rank %d" % (d, n))
    return d % n


def strides_for_view(shape, stride, new):
    """PyTorch's rule for viewing (shape, stride) as `new` without a copy:
    split the old dims into chunks contiguous among themselves, and map each
    chunk onto consecutive new dims of the same element count."""
    if numel(shape) == 0 or len(shape) == 0:
        return row_major(new)
    out = [0] * len(new)
    vd = len(new) - 1
    base = stride[-1]
    t_n = v_n = 1
    for td in range(len(shape) - 1, -1, -1):
        t_n *= shape[td]
        if td == 0 or (shape[td - 1] != 1 and stride[td - 1] != t_n * base):
            while vd >= 0 and (v_n < t_n or new[vd] == 1):
                out[vd] = v_n * base
                v_n *= new[vd]
                vd -= 1
            if v_n != t_n:
                return None
            if td > 0:
                base, t_n, v_n = stride[td - 1], 1, 1
    return out if vd == -1 else None


def infer(sizes, total):
    sizes = list(sizes)
    if sizes.count(-1) > 1:
        raise Refused("more than one -1 in %r" % sizes)
    if -1 in sizes:
        rest = numel([s for s in sizes if s != -1])
        if rest == 0 or total % rest:
            raise Refused("cannot infer -1 in %r for %d elements" % (sizes, total))
        sizes[sizes.index(-1)] = total // rest
    if numel(sizes) != total or any(s < 0 for s in sizes):
        raise Refused("shape %r does not hold %d elements" % (sizes, total))
    return sizes


class View:
    def __init__(self, shape):
        self.off, self.shape, self.stride = 0, list(shape), row_major(shape)

    def narrow(self, d, start, length):
        d = wrap(d, len(self.shape))
        if start < 0:
            start += self.shape[d]
        if start < 0 or length < 0 or start + length > self.shape[d]:
            raise Refused("narrow(%d, %d, %d) out of range" % (d, start, length))
        self.off += start * self.stride[d]
        self.shape[d] = length

    def slice(self, d, start, stop, step):
        d = wrap(d, len(self.shape))
        if step is None:
            step = 1
        if step < 1:
            raise Refused("slice step %d" % step)
        r = range(*slice(start, stop, step).indices(self.shape[d]))
        self.off += (r.start if len(r) else 0) * self.stride[d]
        self.shape[d] = len(r)
        self.stride[d] *= step

    def select(self, d, i):
        d = wrap(d, len(self.shape))
        if not -self.shape[d] <= i < self.shape[d]:
            raise Refused("select index %d out of range" % i)
        self.off += (i % self.shape[d]) * self.stride[d]
        del self.shape[d], self.stride[d]

    def getitem(self, keys):
        d = 0
        for k in keys:
            if d >= len(self.shape):
                raise Refused("too many indices")
            if isinstance(k, int):
                self.select(d, k)
            elif k is None:
                d += 1
            else:
                self.slice(d, k[0], k[1], k[2])
                d += 1

    def transpose(self, a, b):
        a, b = wrap(a, len(self.shape)), wrap(b, len(self.shape))
        self.shape[a], self.shape[b] = self.shape[b], self.shape[a]
        self.stride[a], self.stride[b] = self.stride[b], self.stride[a]

    def t(self):
        if len(self.shape) > 2:
            raise Refused("t() of rank %d" % len(self.shape))
        if len(self.shape) == 2:
            self.transpose(0, 1)

    def permute(self, dims):
        dims = [wrap(d, len(self.shape)) for d in dims]
        if sorted(dims) != list(range(len(self.shape))):
            raise Refused("permute %r is not a permutation" % dims)
        self.shape = [self.shape[d] for d in dims]
        self.stride = [self.stride[d] for d in dims]

    def unsqueeze(self, d):
        d = wrap(d, len(self.shape) + 1)
        st = self.shape[d] * self.stride[d] if d < len(self.shape) else 1
        self.shape.insert(d, 1)
        self.stride.insert(d, st)

    def squeeze(self, *d):
        if d:
            k = wrap(d[0], len(self.shape)) if self.shape else 0
            keep = [i for i in range(len(self.shape)) if i != k or self.shape[i] != 1]
        else:
            keep = [i for i in range(len(self.shape)) if self.shape[i] != 1]
        self.shape = [self.shape[i] for i in keep]
        self.stride = [self.stride[i] for i in keep]

    def view(self, sizes):
        sizes = infer(sizes, numel(self.shape))
        st = strides_for_view(self.shape, self.stride, sizes)
        if st is None:
            raise Refused("view %r of shape %r stride %r needs a copy"
                          % (sizes, self.shape, self.stride))
        self.shape, self.stride = sizes, st

    def flatten(self, start=0, end=-1):
        n = len(self.shape)
        if n == 0:
            return self.view([1])
        s, e = wrap(start, n), wrap(end, n)
        self.view(self.shape[:s] + [numel(self.shape[s:e + 1])] + self.shape[e + 1:])

    def unflatten(self, d, sizes):
        d = wrap(d, len(self.shape))
        sizes = infer(sizes, self.shape[d])
        self.view(self.shape[:d] + sizes + self.shape[d + 1:])

    def pieces(self, d, lengths, i):
        if not 0 <= i < len(lengths):
            raise Refused("piece %d of %d" % (i, len(lengths)))
        self.narrow(d, sum(lengths[:i]), lengths[i])

    def chunk(self, chunks, d, i):
        n = self.shape[wrap(d, len(self.shape))]
        size = -(-n // chunks)
        lengths = [min(size, n - k) for k in range(0, n, size)] if size else [0]
        self.pieces(d, lengths, i)

    def split(self, size, d, i):
        n = self.shape[wrap(d, len(self.shape))]
        if isinstance(size, list):
            if sum(size) != n:
                raise Refused("split sizes %r do not sum to %d" % (size, n))
            lengths = size
        else:
            lengths = [min(size, n - k) for k in range(0, n, size)] or [0]
        self.pieces(d, lengths, i)

    def unbind(self, d, i):
        self.select(d, i)

    def contiguous(self):
        if self.stride != row_major(self.shape) and numel(self.shape) > 1:
            raise Refused("contiguous() of a non-contiguous view copies")

    def apply(self, op):
        kind, args = op[0], op[1:]
        alias = {"reshape": "view"}
        fn = getattr(self, alias.get(kind, kind), None)
        if fn is None or kind.startswith("_") or kind in ("apply", "pieces"):
            raise Refused("op %r is not modelled by this checker" % kind)
        fn(*args)

    def positions(self):
        for idx in itertools.product(*[range(s) for s in self.shape]):
            yield self.off + sum(i * st for i, st in zip(idx, self.stride))


# ---------------------------------------------------------------- casts

def to_float(b, dt):
    if dt == "f32":
        return struct.unpack("<f", b)[0]
    if dt == "f64":
        return struct.unpack("<d", b)[0]
    if dt == "f16":
        return struct.unpack("<e", b)[0]
    if dt == "bf16":
        return struct.unpack("<f", bytes(2) + b)[0]
    return None


def f32_to_bf16(b):
    bits = struct.unpack("<I", b)[0]
    if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:
        return struct.pack("<H", (bits >> 16) | 0x40)  # quiet NaN
    bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest, ties to even
    return struct.pack("<H", (bits >> 16) & 0xFFFF)


def cast(b, src, dst):
    if src == dst:
        return b
    if src == "bf16" and dst == "f32":
        return bytes(2) + b
    if src == "f32" and dst == "bf16":
        return f32_to_bf16(b)
    x = to_float(b, src)
    if x is not None and dst == "f64":
        return struct.pack("<d", x)
    if x is not None and dst == "f32" and src in ("f16", "bf16"):
        return struct.pack("<f", x)
    if x is not None and dst == "f16" and src in ("f32", "bf16"):
        return struct.pack("<e", x)  # one rounding: f32/bf16 -> double is exact
    die("cast %s -> %s is not modelled by this checker" % (src, dst))


# ---------------------------------------------------------------- expect

def load_sources(paths):
    tensors = {}
    for p in paths:
        for blob in blobs_of(json.load(open(p))):
            for t in blob["tensors"]:
                tensors[t["name"]] = t
    return tensors


def expected_params(cap, tensors, only):
    params = {}
    for name, p in cap["params"].items():
        params[name] = (p, bytearray(b"\xee" * numel(p["shape"]) * SIZES[dtype_of(p["dtype"])]))
    for ci, c in enumerate(cap["copies"]):
        if only and not any(fnmatch.fnmatchcase(c["param"], g) for g in only):
            continue
        t = tensors.get(c["src"])
        if t is None:
            die("copy %d: source %r is in no shard table" % (ci, c["src"]))
        v = View(t["full_shape"])
        try:
            for op in c["ops"]:
                v.apply(op)
        except (Refused, TypeError) as e:
            die("copy %d (%s): %s" % (ci, c["src"], e))
        if v.shape != list(c["dest_shape"]):
            die("copy %d: view shape %r, dest_shape %r" % (ci, v.shape, c["dest_shape"]))
        src_dt, dst_dt = dtype_of(t["dtype"]), dtype_of(c["dest_dtype"])
        seed, es, ds = tensor_seed(t["name"]), t["elsize"], SIZES[dst_dt]
        buf = params[c["param"]][1]
        dest = View(c["dest_shape"])
        dest.off, dest.stride = c["dest_offset"], list(c["dest_stride"])
        for s, d in zip(v.positions(), dest.positions()):
            buf[d * ds:(d + 1) * ds] = cast(element(src_dt, es, seed, s), src_dt, dst_dt)
    return {n: b for n, (_, b) in params.items()}


def cmd_expect(args):
    only = []
    while "--only" in args:
        i = args.index("--only")
        only.append(args[i + 1])
        del args[i:i + 2]
    if len(args) < 3:
        die("usage: run_data.py expect CAPTURE.json SOURCES.json... OUT_DIR [--only GLOB]")
    cap = json.load(open(args[0]))
    want = expected_params(cap, load_sources(args[1:-1]), only)
    out_dir = args[-1]
    for name in sorted(want):
        path = os.path.join(out_dir, name + ".bin")
        if not os.path.exists(path):
            die("param %s: %s is missing" % (name, path))
        got = open(path, "rb").read()
        w = want[name]
        if len(got) != len(w):
            die("param %s: %d bytes, want %d" % (name, len(got), len(w)))
        if got != w:
            k = next(i for i in range(len(w)) if got[i] != w[i])
            die("param %s: first difference at byte %d: expected 0x%02x, got 0x%02x"
                % (name, k, w[k], got[k]))
    print("run_data: %d params byte-exact" % len(want))


def plan_reads(plan):
    """(session, src_addr, nbytes) of every read of a reshard.plan.v2 (or v1)."""
    for seg in plan["segments"]:
        yield seg
    for kind in ("converts", "full_pulls"):
        for entry in plan[kind]:
            for seg in entry["segments"]:
                yield seg


def cmd_corrupt(args):
    if len(args) not in (3, 4):
        die("usage: run_data.py corrupt PLAN.json SOURCES.json DATA_DIR [TENSOR]")
    plan = json.load(open(args[0]))
    shards = []
    for blob in blobs_of(json.load(open(args[1]))):
        for t in blob["tensors"]:
            if len(args) == 4 and t["name"] != args[3]:
                continue
            for sh in t["shards"]:
                nbytes = numel(sh["shape"]) * t["elsize"]
                shards.append((t["name"], sh.get("agent_name", blob["agent_name"]),
                               sh["addr"], nbytes))
    for seg in plan_reads(plan):
        lo, hi = seg["src_addr"], seg["src_addr"] + seg["nbytes"]
        for name, session, addr, nbytes in shards:
            if session == seg["session"] and lo < addr + nbytes and addr < hi:
                path = os.path.join(args[2], session, "%d.bin" % addr)
                with open(path, "r+b") as f:
                    f.seek(max(lo, addr) - addr)
                    b = f.read(1)
                    f.seek(max(lo, addr) - addr)
                    f.write(bytes([b[0] ^ 0x01]))
                print("%s\t%s\t%s" % (name, session, path))
                return
    die("the plan reads no shard%s" % (" of " + args[3] if len(args) == 4 else ""))


def main():
    cmds = {"make": cmd_make, "expect": cmd_expect, "corrupt": cmd_corrupt}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        die("usage: run_data.py make|expect|corrupt ...")
    cmds[sys.argv[1]](sys.argv[2:])


main()
