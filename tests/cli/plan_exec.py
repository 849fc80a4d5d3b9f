#!/usr/bin/env python3
# Executes a reshard.plan.v2 plan (or a v1 one) against simulated trainer memory and checks
# every parameter it writes byte for byte against a ground truth computed
# directly from the capture's op chains (narrow, slice, select, t, transpose,
# permute). Every published source element holds a distinct 16-bit id.
# usage: plan_exec.py PLAN.json CAPTURE.json SOURCES.json [SOURCES.json ...]
import itertools
import json
import sys

from shapes import numel, row_major

SIZES = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8, "i8": 1, "u8": 1,
         "i16": 2, "i32": 4, "i64": 8, "bool": 1, "f8e4m3": 1, "f8e5m2": 1}
ALIASES = {"torch.bfloat16": "bf16", "bfloat16": "bf16", "torch.float32": "f32",
           "float32": "f32", "torch.float16": "f16", "float16": "f16"}


def die(msg):
    print("plan_exec: " + msg)
    sys.exit(1)


def dtype(name):
    return ALIASES.get(name, name)


def view_of(src_shape, ops):
    """(offset, shape, stride) of the view the ops take of a row-major source."""
    off, shape, stride = 0, list(src_shape), row_major(src_shape)
    for op in ops:
        kind, a = op[0], op[1:]
        if kind == "narrow":
            d = a[0] % len(shape)
            off += a[1] * stride[d]
            shape[d] = a[2]
        elif kind == "select":
            d = a[0] % len(shape)
            off += (a[1] % shape[d]) * stride[d]
            del shape[d], stride[d]
        elif kind == "slice":
            d = a[0] % len(shape)
            start, stop, step = a[1] or 0, a[2], a[3]
            stop = shape[d] if stop is None else min(stop, shape[d])
            off += start * stride[d]
            shape[d] = max(0, (stop - start + step - 1) // step)
            stride[d] *= step
        elif kind in ("t", "transpose"):
            d0, d1 = (0, 1) if kind == "t" else (a[0] % len(shape), a[1] % len(shape))
            shape[d0], shape[d1] = shape[d1], shape[d0]
            stride[d0], stride[d1] = stride[d1], stride[d0]
        elif kind == "permute":
            dims = [d % len(shape) for d in a[0]]
            shape, stride = [shape[d] for d in dims], [stride[d] for d in dims]
        else:
            die("op %s is not modelled by this checker" % kind)
    return off, shape, stride


def positions(off, shape, stride):
    """Flat positions of a strided view, in row-major order of its indices."""
    for idx in itertools.product(*[range(s) for s in shape]):
        yield off + sum(i * st for i, st in zip(idx, stride))


def staged_at(flat, full, lo, box):
    """Where flat element `flat` of the full tensor lies in the row-major
    staging of the box lo .. lo + box (it must lie inside the box)."""
    idx = []
    for n in reversed(full):
        idx.insert(0, flat % n)
        flat //= n
    at = 0
    for i, l, n in zip(idx, lo, box):
        assert l <= i < l + n, "a copy reads outside its staged box"
        at = at * n + (i - l)
    return at


def load_memory(source_files):
    """session -> {addr: byte}; tensor -> (shape, dtype); ids are distinct."""
    mem, tensors, ids = {}, {}, {}
    for path in source_files:
        doc = json.load(open(path))
        for blob in doc if isinstance(doc, list) else [doc]:
            for t in blob["tensors"]:
                tensors[t["name"]] = (t["full_shape"], dtype(t["dtype"]))
                base = ids.setdefault(t["name"], 1 + 64 * len(ids))
                for sh in t["shards"]:
                    m = mem.setdefault(sh["agent_name"], {})
                    sub = [range(o, o + s) for o, s in zip(sh["shard_offset"], sh["shape"])]
                    gstride = row_major(t["full_shape"])
                    for k, idx in enumerate(itertools.product(*sub)):
                        val = base + sum(i * g for i, g in zip(idx, gstride))
                        for b, byte in enumerate(elem_bytes(val, t["elsize"])):
                            m[sh["addr"] + k * t["elsize"] + b] = byte
    return mem, tensors, ids


def elem_bytes(val, size):
    return (val & 0xFFFF).to_bytes(2, "little") + bytes(size - 2) if size >= 2 else bytes([val & 0xFF])


def read(mem, seg):
    m = mem.get(seg["session"])
    if m is None:
        die("segment reads unknown session %r" % seg["session"])
    try:
        return bytes(m[seg["src_addr"] + i] for i in range(seg["nbytes"]))
    except KeyError:
        die("segment %r reads memory no shard publishes" % seg)


def put(buf, at, data, what):
    if at < 0 or at + len(data) > len(buf):
        die("%s writes outside its buffer (%d+%d > %d)" % (what, at, len(data), len(buf)))
    buf[at:at + len(data)] = data


def cast(data, src, dst):
    if src == dst:
        return data
    if src == "bf16" and dst == "f32":
        return bytes(2) + data
    die("cast %s->%s is not modelled by this checker" % (src, dst))


def scatter(elems, param_buf, copy, esize):
    pos = positions(copy["dest_offset"], copy["dest_shape"], copy["dest_stride"])
    for e, p in zip(elems, pos):
        put(param_buf, p * esize, e, "copy into " + copy["param"])


def staged_box(schema, fp):
    """(box_lo, box_shape) of a staged read. v2 always carries the box; a v1
    entry is a box when it carries both keys, else (written before boxes) a
    whole-source pull at offset 0 (docs/formats.md, "Schema names")."""
    full = fp["global_shape"]
    has = ("box_lo" in fp, "box_shape" in fp)
    if schema == "reshard.plan.v2" and has != (True, True):
        die("a reshard.plan.v2 full_pulls entry of %s lacks box_lo/box_shape"
            % fp["src"])
    if has == (True, True):
        return fp["box_lo"], fp["box_shape"]
    if has != (False, False):
        die("full_pulls entry of %s has only one of box_lo/box_shape" % fp["src"])
    return [0] * len(full), full


def main():
    plan = json.load(open(sys.argv[1]))
    if plan.get("schema") not in ("reshard.plan.v1", "reshard.plan.v2"):
        die("not a reshard plan: schema %r" % plan.get("schema"))
    cap = json.load(open(sys.argv[2]))
    mem, tensors, ids = load_memory(sys.argv[3:])
    params = {n: (p["shape"], dtype(p["dtype"])) for n, p in cap["params"].items()}
    got = {n: bytearray(b"\xee" * numel(s) * SIZES[d]) for n, (s, d) in params.items()}
    touched = set()

    for seg in plan["segments"]:
        touched.add(seg["param"])
        put(got[seg["param"]], seg["dst_byte"], read(mem, seg), "segment")
    for fp in plan["full_pulls"]:
        es = SIZES[fp["dtype"]]
        full = fp["global_shape"]
        lo, box = staged_box(plan["schema"], fp)
        staging = bytearray(numel(box) * es)
        for seg in fp["segments"]:
            put(staging, seg["dst_byte"], read(mem, seg), "staged-read segment")
        for ci in fp["copies"]:
            c = cap["copies"][ci]
            touched.add(c["param"])
            at = [staged_at(p, full, lo, box)
                  for p in positions(*view_of(full, c["ops"]))]
            elems = [bytes(staging[p * es:(p + 1) * es]) for p in at]
            scatter(elems, got[c["param"]], c, es)
    for cv in plan["converts"]:
        c = cap["copies"][cv["copy"]]
        touched.add(cv["param"])
        ss, ds = SIZES[cv["src_dtype"]], SIZES[cv["dest_dtype"]]
        staging = bytearray(numel(cv["dest_shape"]) * ss)
        for seg in cv["segments"]:
            put(staging, seg["dst_byte"], read(mem, seg), "convert segment")
        elems = [cast(bytes(staging[k * ss:(k + 1) * ss]), cv["src_dtype"], cv["dest_dtype"])
                 for k in range(numel(cv["dest_shape"]))]
        assert all(len(e) == ds for e in elems)
        scatter(elems, got[cv["param"]], c, ds)

    skipped = set(plan["fallback"])
    uncovered = {u["copy"] for u in plan["uncovered"]}
    want = {n: bytearray(b"\xee" * len(b)) for n, b in got.items()}
    for ci, c in enumerate(cap["copies"]):
        if c["param"] not in touched or c["src"] in skipped or ci in uncovered:
            continue
        shape, sdt = tensors[c["src"]]
        ddt = dtype(c["dest_dtype"])
        elems = [cast(elem_bytes(ids[c["src"]] + p, SIZES[sdt]), sdt, ddt)
                 for p in positions(*view_of(shape, c["ops"]))]
        scatter(elems, want[c["param"]], c, SIZES[ddt])
    for n in sorted(touched):
        if got[n] != want[n]:
            die("param %s differs from the ground truth:\n  got  %s\n  want %s"
                % (n, got[n].hex(), want[n].hex()))
    print("plan_exec: %d params byte-exact" % len(touched))


main()
