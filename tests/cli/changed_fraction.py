"""The demo contents with a changed fraction (docs/formats.md, "Demo
contents"), written again from the text of that section, and checks of what
`reshard publish` serves against it.

    python3 changed_fraction.py digests LIB URL MODEL VERSION SLOTS F
        every shard of every slot's table of VERSION has the rsd64 digest
        (tests/support/rsd64_ref.py) of the bytes computed here; F is the
        fraction's decimal text, or "none" for the plain contents. Prints
        "N shards match"; exit 1 naming the first shard that does not.
    python3 changed_fraction.py share LIB URL MODEL VERSION SLOTS F
        over every whole tensor in the tables: the elements whose bytes
        differ between VERSION and VERSION+1 (counted on the bytes computed
        here, which `digests` ties to the served ones) equal the elements
        whose epoch changes, counted by the epoch formula alone, and their
        share is within a binomial bound of F; of those, 7 in 8 (within a
        binomial bound) moved by one as an integer of their bytes. Prints
        "changed C of N, S by one step".
    python3 changed_fraction.py q F
        prints floor(F * 2^32), or "refused".
"""
import ctypes
import importlib.util
import json
import math
import struct
import sys
from fractions import Fraction
from pathlib import Path

M64 = (1 << 64) - 1
_SPEC = importlib.util.spec_from_file_location(
    "rsd64_ref", Path(__file__).resolve().parents[1] / "support" /
    "rsd64_ref.py")
rsd64_ref = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(rsd64_ref)


def fraction_q(text):
    """floor(F * 2^32) of a decimal F in (0, 1] with at most 18 decimals;
    None when refused."""
    head, _, tail = text.partition(".")
    if (not (head + tail).isdigit() or len(tail) > 18 or
            not all(c in "0123456789" for c in head + tail)):
        return None
    f = Fraction(int(head or "0")) + (Fraction(int(tail), 10 ** len(tail))
                                      if tail else 0)
    q = math.floor(f * 2 ** 32)
    return q if 0 < q <= 2 ** 32 and f <= 1 else None


def fnv1a64(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def splitmix(seed, i):
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def epoch(h, q, v, i):
    phase = splitmix(h ^ 0xBB67AE8584CAA73B, i) >> 32
    return ((v * q + phase) >> 32) & M64


def segment(h, e, i):
    """The epoch's segment: a new value every 8 epochs, at an offset given
    by the low 3 bits of the phase's hash."""
    return ((e + (splitmix(h ^ 0xBB67AE8584CAA73B, i) & 7)) & M64) // 8


def z_of(h, q, v, i):
    if q is None:
        return splitmix(h ^ ((v * 0xD1B54A32D192ED03) & M64), i)
    e = epoch(h, q, v, i)
    s = segment(h, e, i)
    z = splitmix(h ^ ((s * 0xD1B54A32D192ED03) & M64) ^ 0x6A09E667F3BCC909, i)
    return (z & ~1 & M64) | (e & 1)


# dtype: (struct code, exponent base, exponent shift, mantissa mask, sign bit)
PACK = {
    "bf16": ("<H", 120, 7, 0x7F, 15),
    "f16": ("<H", 8, 10, 0x3FF, 15),
    "f32": ("<I", 120, 23, 0x7FFFFF, 31),
    "f64": ("<Q", 1016, 52, 0xFFFFFFFFFFFFF, 63),
}
DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "f16",
          "torch.float32": "f32", "torch.float64": "f64"}


def element(dt, z):
    code, base, shift, mask, sign = PACK[dt]
    return struct.pack(code, ((z >> 63) << sign) |
                       ((base + ((z >> 58) & 15)) << shift) | (z & mask))


def box_indices(full, off, shape):
    """Row-major indices in the full tensor of a box, in the box's order."""
    if not full:
        return [0]
    strides = [1] * len(full)
    for d in range(len(full) - 2, -1, -1):
        strides[d] = strides[d + 1] * full[d + 1]
    idx = [0]
    for d in range(len(full)):
        idx = [b + (off[d] + k) * strides[d] for b in idx
               for k in range(shape[d])]
    return idx


def box_bytes(name, dt, q, v, full, off, shape):
    h = fnv1a64(name)
    return b"".join(element(dt, z_of(h, q, v, i))
                    for i in box_indices(full, off, shape))


class Diag(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


def tables(lib_path, url, model, version, slots):
    lib = ctypes.CDLL(lib_path)
    libc = ctypes.CDLL(None)
    diag, d = Diag(), ctypes.c_void_p()
    lib.rs_dir_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(Diag),
                                ctypes.POINTER(ctypes.c_void_p)]
    lib.rs_dir_read.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                ctypes.c_int64, ctypes.c_int64,
                                ctypes.POINTER(Diag),
                                ctypes.POINTER(ctypes.c_void_p),
                                ctypes.POINTER(ctypes.c_size_t)]
    lib.rs_dir_close.argtypes = [ctypes.c_void_p]
    libc.free.argtypes = [ctypes.c_void_p]
    if lib.rs_dir_open(url.encode(), diag, d) != 0:
        sys.exit(f"changed_fraction: open {url}: {diag.msg.decode()}")
    out = []
    for slot in range(slots):
        buf, n = ctypes.c_void_p(), ctypes.c_size_t()
        if lib.rs_dir_read(d, model.encode(), version, slot, diag,
                           ctypes.byref(buf), ctypes.byref(n)) != 0:
            sys.exit(f"changed_fraction: read slot {slot}: "
                     f"{diag.msg.decode()}")
        out.append(json.loads(ctypes.string_at(buf, n.value)))
        libc.free(buf)
    lib.rs_dir_close(d)
    return out


def digests(tabs, version, q):
    n = 0
    for t in tabs:
        for ten in t["tensors"]:
            for sh in ten["shards"]:
                data = box_bytes(ten["name"], DTYPES[ten["dtype"]], q,
                                 version, ten["full_shape"],
                                 sh["shard_offset"], sh["shape"])
                want = rsd64_ref.text(rsd64_ref.rsd64(data))
                if sh["digest"] != want:
                    sys.exit(f"tensor '{ten['name']}' shard at "
                             f"{sh['shard_offset']}: served {sh['digest']}, "
                             f"the formula gives {want}")
                n += 1
    print(f"{n} shards match")


def share(tabs, version, q, text):
    full = {}
    for t in tabs:
        for ten in t["tensors"]:
            full[ten["name"]] = (DTYPES[ten["dtype"]], ten["full_shape"])
    changed = epochs = total = one = 0
    for name, (dt, shape) in sorted(full.items()):
        h = fnv1a64(name)
        numel = math.prod(shape)
        for i in range(numel):
            a = element(dt, z_of(h, q, version, i))
            b = element(dt, z_of(h, q, version + 1, i))
            changed += a != b
            epochs += epoch(h, q, version, i) != epoch(h, q, version + 1, i)
            ia, ib = int.from_bytes(a, "little"), int.from_bytes(b, "little")
            one += abs(ia - ib) == 1
        total += numel
    if changed != epochs:
        sys.exit(f"changed {changed} of {total} elements, but {epochs} "
                 f"epochs changed")
    f = Fraction(q, 2 ** 32)
    mean = float(f) * total
    slack = 6 * math.sqrt(total * float(f) * (1 - float(f))) + 1
    if abs(changed - mean) > slack:
        sys.exit(f"changed {changed} of {total} elements, F={text} expects "
                 f"{mean:.0f} +- {slack:.0f}")
    # of the changes, 7 in 8 are a step of one as an integer of the bytes
    slack = 6 * math.sqrt(changed * 7 / 64) + 1
    if abs(one - changed * 7 / 8) > slack:
        sys.exit(f"{one} of {changed} changes are steps of one, 7 in 8 "
                 f"expected (+- {slack:.0f})")
    print(f"changed {changed} of {total}, {one} by one step")


def main():
    if sys.argv[1] == "q":
        q = fraction_q(sys.argv[2])
        print("refused" if q is None else q)
        return
    cmd, lib, url, model, version, slots, text = sys.argv[1:8]
    q = None if text == "none" else fraction_q(text)
    tabs = tables(lib, url, model, int(version), int(slots))
    if cmd == "digests":
        digests(tabs, int(version), q)
    else:
        share(tabs, int(version), q, text)


if __name__ == "__main__":
    main()
