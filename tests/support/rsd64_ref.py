#!/usr/bin/env python3
"""Reference rsd64 digest, written from the specification in docs/formats.md
("Digest") and used to produce the test vectors in tests/unit/core/test_digest.c.

    python3 tests/support/rsd64_ref.py            # prints the test vectors
    python3 tests/support/rsd64_ref.py --extra    # and the boundary lengths
    python3 tests/support/rsd64_ref.py FILE...    # digest of each file
"""
import struct
import sys

M64 = (1 << 64) - 1
K1 = 0x243185BE4EE4B2AF
K2 = 0x550C7DC3D5FFB507
K3 = 0x72BE5D74F27B89AB
K4 = 0x80DEB1FE3B1696FF
K5 = 0x9BDC06A725C7125B


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def rsd64(data: bytes) -> int:
    lanes = [(K4 * (2 * i + 1)) & M64 for i in range(4)]
    nstripes = len(data) // 32
    for s in range(nstripes):
        words = struct.unpack_from("<4Q", data, 32 * s)
        for i in range(4):
            lanes[i] = (rotl(((lanes[i] ^ words[i]) * K1) & M64, 29) * K2) & M64
    h = K5
    for v in lanes:
        h = (((h ^ ((rotl((v * K2) & M64, 27) * K1) & M64)) * K3) + K4) & M64
    h = ((h ^ (len(data) & M64)) * K2) & M64
    tail = data[32 * nstripes:]
    i = 0
    while i + 8 <= len(tail):
        (w,) = struct.unpack_from("<Q", tail, i)
        h = (rotl(h ^ ((w * K1) & M64), 29) * K2 + K4) & M64
        i += 8
    while i < len(tail):
        h = (rotl(h ^ ((tail[i] * K5) & M64), 11) * K1) & M64
        i += 1
    h ^= h >> 31
    h = (h * K2) & M64
    h ^= h >> 29
    h = (h * K3) & M64
    h ^= h >> 32
    return h


def text(h: int) -> str:
    return "rsd64:%016x" % h


def extra_vectors():
    """Lengths around the stripe and word boundaries, bytes (7 * i + 3) % 256."""
    return [("%d bytes" % n, bytes((7 * i + 3) % 256 for i in range(n)))
            for n in (1, 7, 8, 9, 31, 32, 33, 40, 63, 64, 65, 100)]


def vectors():
    return [
        ("empty", b""),
        ('"abc"', b"abc"),
        ("1000 bytes of i % 251", bytes(i % 251 for i in range(1000))),
    ]


if __name__ == "__main__":
    if sys.argv[1:] == ["--extra"]:
        for name, data in vectors() + extra_vectors():
            print(text(rsd64(data)), name)
    elif len(sys.argv) > 1:
        for path in sys.argv[1:]:
            with open(path, "rb") as f:
                print(text(rsd64(f.read())), path)
    else:
        for name, data in vectors():
            print(text(rsd64(data)), name)
