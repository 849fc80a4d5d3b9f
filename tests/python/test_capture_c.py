"""Captures written by Python load and plan in the C library.

`Capture.to_json()` is parsed by libreshard (`rs_capture_load_string`
through ctypes, the library the package loads) and
what the library read is compared with the Python object. Then `reshard
plan` plans the zoo captures against shard tables that publish every full
tensor once: a supported capture must plan complete (every copy a box of
its source, every region inside its parameter), an unsupported source must
be a fallback with the capture's reason.
"""
import ctypes
import json
import os
import subprocess

import pytest
import torch

import reshard
import under_test
import zoo
from test_capture_ops import CASES, run_case



class Diag(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


def library_path():
    path = under_test.library_path()
    if path is None or not os.path.exists(path):
        pytest.fail(f"libreshard not found ({path}): build it "
                    f"(cmake --build build) or set RESHARD_LIB")
    return path


@pytest.fixture(scope="module")
def lib():
    lib = ctypes.CDLL(library_path())
    h = ctypes.c_void_p
    lib.rs_capture_load_string.argtypes = [
        ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
        ctypes.POINTER(Diag), ctypes.POINTER(h)]
    lib.rs_capture_load_string.restype = ctypes.c_int
    for name in ("rs_capture_num_params", "rs_capture_num_copies",
                 "rs_capture_num_sources", "rs_capture_num_unsupported"):
        getattr(lib, name).argtypes = [h]
        getattr(lib, name).restype = ctypes.c_size_t
    lib.rs_capture_unattributed.argtypes = [h]
    lib.rs_capture_unattributed.restype = ctypes.c_int64
    lib.rs_capture_unsupported.argtypes = [
        h, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_char_p)]
    lib.rs_capture_unsupported.restype = None
    lib.rs_capture_destroy.argtypes = [h]
    lib.rs_capture_destroy.restype = None
    return lib


def c_load(lib, text):
    """What the library reads from capture JSON, or InputError with its
    message."""
    data = text.encode()
    diag, handle = Diag(), ctypes.c_void_p()
    st = lib.rs_capture_load_string(data, len(data), b"capture", diag,
                                    ctypes.byref(handle))
    if st != 0:
        raise reshard.InputError(diag.msg.decode())
    try:
        unsupported = {}
        for i in range(lib.rs_capture_num_unsupported(handle)):
            src, why = ctypes.c_char_p(), ctypes.c_char_p()
            lib.rs_capture_unsupported(handle, i, ctypes.byref(src),
                                       ctypes.byref(why))
            unsupported[src.value.decode()] = why.value.decode()
        return {"params": lib.rs_capture_num_params(handle),
                "copies": lib.rs_capture_num_copies(handle),
                "sources": lib.rs_capture_num_sources(handle),
                "unsupported": unsupported,
                "unattributed": lib.rs_capture_unattributed(handle)}
    finally:
        lib.rs_capture_destroy(handle)


def expected(cap):
    return {"params": len(cap.params), "copies": len(cap.copies),
            "sources": len(cap.sources), "unsupported": cap.unsupported,
            "unattributed": cap.unattributed}


ZOO = {
    "dense-tp2-r1": (zoo.ZooConfig(), 2, 1),
    "kv-replicated-tp4-r3": (zoo.ZooConfig(heads=8, kv_heads=2,
                                           head_dim=2), 4, 3),
    "uneven-vocab-tp4-r3": (zoo.ZooConfig(vocab=37), 4, 3),
    "rank-without-vocab-rows-tp4-r3": (zoo.ZooConfig(vocab=20), 4, 3),
    "moe-cast-tp2-r0": (zoo.ZooConfig(experts=3, src_dtype=torch.float32),
                        2, 0),
    "qwen2.5-0.5b-tp2-r1": (zoo.QWEN2_5_0_5B, 2, 1),
    "arith-tp2-r1": (zoo.ZooConfig(arith=True, layers=2), 2, 1),
}


def zoo_capture(key):
    cfg, tp, rank = ZOO[key]
    return reshard.capture(zoo.ZooModel(cfg, tp, rank, device="meta"),
                           zoo.source_specs(cfg))


@pytest.mark.parametrize("key", list(ZOO))
def test_zoo_capture_loads_in_the_library(lib, key):
    cap = zoo_capture(key)
    assert c_load(lib, cap.to_json()) == expected(cap)


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
@pytest.mark.parametrize("fn,shape", [c[1:3] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_op_capture_loads_in_the_library(lib, fn, shape):
    cap = run_case(fn, shape)
    assert c_load(lib, cap.to_json()) == expected(cap)


def test_unattributed_count_reaches_the_library(lib):
    scratch = torch.zeros(2)
    cap = reshard.capture(sources={"w": ((2,), torch.float32)}, params={},
                          load=lambda ws: [scratch.copy_(w) for _, w in ws])
    assert cap.unattributed == 1
    assert c_load(lib, cap.to_json())["unattributed"] == 1


def test_json_round_trip_is_identical():
    cap = zoo_capture("moe-cast-tp2-r0")
    again = reshard.Capture.from_json(cap.to_json())
    assert again.to_json() == cap.to_json()
    assert again.params == cap.params and again.sources == cap.sources
    assert again.copies == cap.copies and again.fills == cap.fills


def test_library_names_what_is_wrong_in_a_damaged_capture(lib):
    doc = json.loads(zoo_capture("dense-tp2-r1").to_json())
    doc["copies"][2]["dest_dtype"] = "f32"
    with pytest.raises(reshard.InputError, match=r"copies\[2\]"):
        c_load(lib, json.dumps(doc))


def full_tables(cap, path):
    """One shard table publishing every source whole, at made-up
    addresses (planning reads no bytes)."""
    tensors, addr = [], 1 << 20
    for name, (shape, dtype) in cap.sources.items():
        size = torch.empty((), dtype=dtype).element_size()
        tensors.append({"name": name, "dtype": str(dtype), "elsize": size,
                        "full_shape": list(shape),
                        "shards": [{"addr": addr, "shape": list(shape),
                                    "shard_offset": [0] * len(shape)}]})
        n = 1
        for s in shape:
            n *= s
        addr += max(n, 1) * size
    with open(path, "w") as f:
        json.dump({"schema": "mx.reshard.shard_table.v1",
                   "agent_name": "trainer", "tensors": tensors}, f)


def plan(cap, tmp_path):
    cli = under_test.cli_path()
    if cli is None or not os.path.exists(cli):
        pytest.fail(f"reshard CLI not found ({cli})")
    cap.save(tmp_path / "capture.json")
    full_tables(cap, tmp_path / "sources.json")
    return subprocess.run(
        [cli, "plan", "--capture", str(tmp_path / "capture.json"),
         "--sources", str(tmp_path / "sources.json")],
        capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("key", [k for k in ZOO if not k.startswith("arith")])
def test_zoo_capture_plans_complete(key, tmp_path):
    cap = zoo_capture(key)
    run = plan(cap, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "plan complete" in run.stdout
    assert f"copies planned      {len(cap.copies)} of {len(cap.copies)}" \
        in run.stdout


def test_unsupported_source_is_a_fallback_in_the_plan(tmp_path):
    cap = zoo_capture("arith-tp2-r1")
    run = plan(cap, tmp_path)
    assert run.returncode == 1
    assert "plan INCOMPLETE" in run.stdout
    assert "model.layers.1.mixer.A_log" in run.stdout
    # bf16 A_log: the loader's .float() is a cast as copy_ would do it,
    # the exp of it is the first thing capture refuses.
    reason = cap.unsupported["model.layers.1.mixer.A_log"]
    assert reason.startswith("op 'exp' at ")
    assert reason in run.stdout
