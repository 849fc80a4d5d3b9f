"""Publisher-side quantization from Python. A trainer rank holds w (bf16
[12, 8]) as two row halves and publishes with quantize=[...] (staging
"arena" implied): its table serves w#fp8_block:4x4:f8e4m3 as the rows of
whole 4x4 blocks inside each half ([0, 4) and [8, 12); block row 1
straddles the halves) and the matching scale rows, and each entry's digest
equals the rsd64 (tests/support/rsd64_ref.py) of reshard.quant's PyTorch
quantization of the full bf16 tensor, at two versions with the trainer's
tensors overwritten after each publish; a NaN in a served block makes the
next publish raise InputError naming the block, no table written. quantize_wanted alone serves
nothing quantized until a receiver asks; bad entries and other stagings are
refused naming them."""
import importlib.util
import json
from pathlib import Path

import pytest
import torch

import reshard
from reshard import quant

_SPEC = importlib.util.spec_from_file_location(
    "rsd64_ref", Path(__file__).resolve().parents[1] / "support" /
    "rsd64_ref.py")
rsd64_ref = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(rsd64_ref)

SPEC = "fp8_block:4x4:f8e4m3"
ROWS, COLS, HALF = 12, 8, 6


def _truth(version):
    g = torch.Generator().manual_seed(1000 + version)
    mag = torch.tensor([2.0 ** (k % 7 - 3) for k in range(ROWS)])
    x = torch.randn(ROWS, COLS, generator=g) * mag.view(ROWS, 1)
    x[0:4, 4:8] = 0.0  # an all-zero block: scale 1
    return x.to(torch.bfloat16)


def _table(file_dir, version):
    # the table as the directory hands it out (the publisher stores it
    # split: docs/formats.md, "Split entries")
    with reshard.directory.Directory(file_dir) as d:
        return json.loads(d.table("m", version, 0))


def _entries(table, name):
    for t in table["tensors"]:
        if t["name"] == name:
            return t
    return None


def _digest(t):
    return rsd64_ref.text(rsd64_ref.rsd64(t.contiguous().numpy().tobytes()))


def test_quantize_rules_serve_whole_blocks(file_dir):
    p = reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                          quantize=[f"w={SPEC}"])
    try:
        assert p.staging == "arena"
        halves = [torch.zeros(HALF, COLS, dtype=torch.bfloat16)
                  for _ in range(2)]
        for h, a in enumerate(halves):
            p.register("w", a, (ROWS, COLS), (h * HALF, 0))
        for version in (1, 2):
            w = _truth(version)
            for h, a in enumerate(halves):
                a.copy_(w[h * HALF:(h + 1) * HALF])
            p.publish(version)
            for a in halves:
                a.fill_(-3.0)  # the arena holds the version
            assert p.num_served == 2 + 4
            q, scale = quant.quantize_fp8(w, "fp8_block", (4, 4), "f8e4m3")
            table = _table(file_dir, version)
            fp8 = _entries(table, f"w#{SPEC}")
            sc = _entries(table, f"w#{SPEC}#scale")
            assert fp8["dtype"] == "torch.float8_e4m3fn"
            assert sc["dtype"] == "torch.float32"
            assert fp8["full_shape"] == [ROWS, COLS]
            assert sc["full_shape"] == [3, 2]
            boxes = [(s["shard_offset"], s["shape"]) for s in fp8["shards"]]
            assert boxes == [([0, 0], [4, 8]), ([8, 0], [4, 8])]
            sboxes = [(s["shard_offset"], s["shape"]) for s in sc["shards"]]
            assert sboxes == [([0, 0], [1, 2]), ([2, 0], [1, 2])]
            for s, rows in zip(fp8["shards"], ((0, 4), (8, 12))):
                assert s["digest"] == _digest(q[rows[0]:rows[1]])
            for s, g in zip(sc["shards"], (0, 2)):
                assert s["digest"] == _digest(scale[g:g + 1])
            reshard.directory.release(file_dir, "m", version)
            p.wait_released(version, timeout_s=20)
        halves[1][5, 2] = float("nan")  # row 11: block (2, 0), served
        with pytest.raises(reshard.errors.InputError,
                           match=r"quantizing 'w' .*block \[2, 0\]"):
            p.publish(3)
        assert not (Path(file_dir[len("file:"):]) / "m" / "3" /
                    "slot-0@trainer-0").exists()
    finally:
        p.close()


def test_quantize_wanted_alone_serves_what_is_asked(file_dir):
    p = reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                          quantize_wanted=True)
    try:
        assert p.staging == "arena"
        a = torch.ones(ROWS, COLS, dtype=torch.bfloat16)
        p.register("w", a)
        p.publish(1)
        assert p.num_served == 1  # no receiver asked
    finally:
        p.close()


def test_bad_entries_and_stagings(file_dir):
    with pytest.raises(reshard.errors.InvalidArgument,
                       match="quantize entry 1 'w=fp8_block:0x4:f8e4m3'"):
        reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                          quantize=[f"w={SPEC}", "w=fp8_block:0x4:f8e4m3"])
    with pytest.raises(reshard.errors.InvalidArgument,
                       match="quantize entry 0 'w'"):
        reshard.Publisher(file_dir, "m", 0, 1, backend="cma", quantize="w")
    with pytest.raises(reshard.errors.InvalidArgument, match="arena"):
        reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                          staging="caller", quantize=[f"w={SPEC}"])
    with pytest.raises(reshard.errors.InvalidArgument, match="arena"):
        reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                          staging="in_place", quantize_wanted=True)


def _quant_copy(r0, rows):
    """Rows [r0, r0 + rows) of w quantized into the same rows of q, their
    block row's scales into row r0 // 4 of s."""
    return {"src": "w", "ops": [["narrow", 0, r0, rows]], "param": "q",
            "dest_offset": r0 * COLS, "dest_shape": [rows, COLS],
            "dest_stride": [COLS, 1], "dest_dtype": "f8e4m3",
            "quant": {"scheme": "fp8_block", "format": "f8e4m3",
                      "block": [4, 4],
                      "scale": {"param": "s", "dest_offset": r0 // 4 * 2,
                                "dest_shape": [1, 2],
                                "dest_stride": [2, 1]}}}


def test_receiver_reads_the_fp8_copies(file_dir):
    """A receiver whose capture quantizes w (three copies of four rows:
    block rows 0 and 2 lie inside the halves, block row 1 straddles them)
    reads the publisher's FP8 values and scales for the first and the last,
    quantizes the middle one itself from bf16, and lands every byte of
    reshard.quant's quantization of the full tensor."""
    p = reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                          quantize=[f"w={SPEC}"])
    cap = {"schema": "reshard.capture.v1",
           "params": {"q": {"shape": [ROWS, COLS], "dtype": "f8e4m3"},
                      "s": {"shape": [3, 2], "dtype": "f32"}},
           "sources": {"w": {"shape": [ROWS, COLS], "dtype": "bf16"}},
           "copies": [_quant_copy(r, 4) for r in (0, 4, 8)]}
    try:
        w = _truth(1)
        halves = [w[h * HALF:(h + 1) * HALF].clone() for h in range(2)]
        for h, a in enumerate(halves):
            p.register("w", a, (ROWS, COLS), (h * HALF, 0))
        p.publish(1)
        storage = reshard.dtypes.storage_dtype(reshard.dtypes.F8E4M3)
        params = {"q": torch.zeros(ROWS, COLS, dtype=storage),
                  "s": torch.zeros(3, 2)}
        with reshard.Receiver(file_dir, "m", json.dumps(cap), params,
                              backend="cma", discover_timeout_s=20,
                              announce_cuts=False) as r:
            res = r.pull(1)
        q, scale = quant.quantize_fp8(w, "fp8_block", (4, 4), "f8e4m3")
        assert torch.equal(params["q"].view(torch.uint8), q)
        assert torch.equal(params["s"].view(torch.int32),
                           scale.view(torch.int32))
        # FP8 and scales for 8 rows, bf16 for the 4 straddling ones: less
        # than the 192 bytes of the whole tensor in bf16
        assert res.bytes < ROWS * COLS * 2, res.bytes
    finally:
        p.close()
