"""The ctypes mirrors of reshard's structs match the C headers: a probe
compiled from include/reshard prints every mirrored field's offset and each
struct's size, and they must equal what ctypes computes. A field renamed in
C fails the probe's compilation; one added or retyped changes the figures.
The enumerators the package spells as numbers (quantization schemes, the
dtype codes) are printed and compared the same way."""
import ctypes
import os
import subprocess
from pathlib import Path

from reshard import _lib

ROOT = Path(__file__).resolve().parents[2]


def _probe_source():
    lines = ["#include <stddef.h>", "#include <stdio.h>",
             '#include "reshard/reshard.h"', "int main(void) {"]
    for cname, mirror in _lib.MIRRORS.items():
        lines.append(f'printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        for field, _ in mirror._fields_:
            lines.append(f'printf("{cname} {field} %zu\\n", '
                         f'offsetof({cname}, {field}));')
    for cname in _lib.CONSTANTS:
        lines.append(f'printf("{cname} value %d\\n", (int)({cname}));')
    lines += ["return 0;", "}"]
    return "\n".join(lines) + "\n"


def test_mirrors_match_the_headers(tmp_path):
    src = tmp_path / "abi_probe.c"
    src.write_text(_probe_source())
    exe = tmp_path / "abi_probe"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-I", str(ROOT / "include"), "-o", str(exe),
                    str(src)], check=True, timeout=120)
    out = subprocess.run([str(exe)], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    seen = {}
    for line in out.splitlines():
        cname, field, value = line.split()
        seen[(cname, field)] = int(value)
    for cname, mirror in _lib.MIRRORS.items():
        assert seen[(cname, "sizeof")] == ctypes.sizeof(mirror), cname
        for field, _ in mirror._fields_:
            got = getattr(mirror, field).offset
            assert seen[(cname, field)] == got, f"{cname}.{field}"
    for cname, value in _lib.CONSTANTS.items():
        assert seen[(cname, "value")] == value, cname


def test_dtype_codes_match_the_constants():
    from reshard import dtypes
    for short in ("f32", "bf16", "f16", "f8e4m3", "f8e5m2"):
        code = _lib.CONSTANTS["RS_DTYPE_" + short.upper()]
        assert dtypes.code_of(dtypes.from_name(short)) == code, short


def test_every_prototype_resolves():
    lib = _lib.lib()
    for name in _lib._PROTOS:
        assert getattr(lib, name).argtypes is not None, name
