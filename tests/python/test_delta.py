"""Deltas from Python: two arena publisher ranks serve each version with a
delta against the one before (Publisher(delta_keep=...)), and a
Receiver that holds the previous version (deltas on by default) reads only
the deltas of its reads. Versions change one element in 50 of each tensor;
every pulled version must equal torch's own tensors of that version, byte
for byte, and the warm versions must have moved a small share of the
bytes, patched in place in the receiver's shadows with no copy held.
delta_keep=0 serves no deltas: the same receiver reads whole. Reads cast
from the executor's staging (an f32 parameter) are patched in place there
when the staging is one round; with staging in rounds they keep copies
only within delta_budget: one half's bytes hold one (read by delta, the
other whole), the default (0) none; delta=False reads whole; the stage
record's `delta` says what the pull read."""
import json

import pytest
import torch

import reshard
from trainer_ranks import TrainerRanks

ROWS, COLS = 512, 1024  # bf16 halves of 512 KiB: deltas pay for their reads

CAPTURE = {
    "schema": "reshard.capture.v1",
    "params": {"q": {"shape": [ROWS, COLS], "dtype": "bf16"}},
    "sources": {"w": {"shape": [ROWS, COLS], "dtype": "bf16"}},
    "copies": [
        {"src": "w", "ops": [], "param": "q", "dest_offset": 0,
         "dest_shape": [ROWS, COLS], "dest_stride": [COLS, 1],
         "dest_dtype": "bf16"},
    ],
}


def _truth(version):
    """Version v: a fixed pattern, with every 50th element (offset by v)
    moved by v: about 2 % of the elements differ between versions."""
    i = torch.arange(ROWS * COLS, dtype=torch.int64)
    w = ((i % 251) * 0.125 - 7.0).to(torch.float64)
    for k in range(1, version + 1):
        w[(i % 50) == (k % 50)] += k
    return w.view(ROWS, COLS).to(torch.bfloat16)


class Trainers(TrainerRanks):
    def __init__(self, directory, delta_keep):
        super().__init__()
        half = ROWS // 2
        self.shards = []
        for r in range(2):
            p = reshard.Publisher(directory, "m", r, 2, backend="cma",
                                  staging="arena", delta_keep=delta_keep)
            a = torch.zeros(half, COLS, dtype=torch.bfloat16)
            p.register_shard("w", a, (ROWS, COLS), 0, r, 2)
            self.pubs.append(p)
            self.shards.append(a)

    def set(self, version):
        w = _truth(version)
        half = ROWS // 2
        for r, a in enumerate(self.shards):
            a.copy_(w[r * half:(r + 1) * half])


def _cast_capture(halves=False):
    """CAPTURE with an f32 parameter: its reads land in the executor's
    staging and are cast from there. halves: one copy per row half (two
    staged boxes of 512 KiB, which a staging budget of one box puts in
    two rounds)."""
    cap = json.loads(json.dumps(CAPTURE))
    cap["params"]["q"]["dtype"] = "f32"
    cap["copies"][0]["dest_dtype"] = "f32"
    if halves:
        half = ROWS // 2
        cap["copies"] = [
            {"src": "w", "ops": [["narrow", 0, h * half, half]], "param": "q",
             "dest_offset": h * half * COLS, "dest_shape": [half, COLS],
             "dest_stride": [COLS, 1], "dest_dtype": "f32"}
            for h in range(2)]
    return cap


ONE_BOX = 600 * 1024  # staging budget: one half's box, not both


def _pull_versions(directory, delta_keep, versions, cast=False,
                   halves=False, **receiver):
    dtype = torch.float32 if cast else torch.bfloat16
    params = {"q": torch.zeros(ROWS, COLS, dtype=dtype)}
    capture = _cast_capture(halves) if cast else CAPTURE
    results = []
    with Trainers(directory, delta_keep) as t, \
            reshard.Receiver(directory, "m", json.dumps(capture), params,
                             backend="cma", discover_timeout_s=20,
                             **receiver) as r:
        for v in versions:
            t.set(v)
            t.publish(v)
            res = r.pull(v)
            assert res.version == v
            want = _truth(v).to(dtype)  # bf16 -> f32 is exact
            assert torch.equal(params["q"], want), v
            _check_record(r.stage_record(), res)
            t.wait_released(v)
            results.append(res)
    return results


def _check_record(rec, res):
    """The stage record's delta object is what the pull read."""
    assert rec["bytes"] == ROWS * COLS * 2
    if not res.delta["runs"] and not res.delta["whole_runs"]:
        assert "delta" not in rec  # no delta reads at all
        return
    d = rec["delta"]
    for k in ("runs", "bytes", "full_bytes", "whole_runs", "whole_bytes",
              "refused", "held_bytes", "in_place_bytes"):
        assert d[k] == res.delta[k], (k, d, res.delta)
    assert d["wire_bytes"] == d["bytes"] + d["whole_bytes"]


def test_warm_versions_read_deltas(file_dir):
    first, second, third = _pull_versions(file_dir, None, (1, 2, 3),
                                          delta=True)
    full = ROWS * COLS * 2
    assert first.delta["runs"] == 0 and first.bytes == full
    for res in (second, third):
        d = res.delta
        assert d["runs"] == 2 and d["full_bytes"] == full, d
        assert d["refused"] == 0 and not d["retried"], d
        # 2 % of bf16 elements changed: the deltas are a small share
        assert d["bytes"] + d["whole_bytes"] < full // 10, d
        # patched in place in the shadows: no copy held
        assert d["in_place_bytes"] == full and d["held_bytes"] == 0, d


@pytest.mark.parametrize("budget", [None, ROWS * COLS])
def test_staged_reads_in_place(file_dir, budget):
    # cast reads, staging in one round (kept from one pull to the next):
    # patched in place in the staging, no copy held, whatever the budget
    full = ROWS * COLS * 2
    _, second = _pull_versions(file_dir, None, (1, 2), cast=True,
                               delta_budget=budget)
    d = second.delta
    assert d["runs"] == 2 and d["full_bytes"] == full, d
    assert d["in_place_bytes"] == full and d["held_bytes"] == 0, d
    assert d["bytes"] + d["whole_bytes"] < full // 10, d


def test_budget_keeps_half(file_dir):
    half = ROWS // 2 * COLS * 2
    # cast reads, staging in rounds (two halves' boxes sharing the
    # buffer): one half's bytes hold one copy: that half by delta
    first, second = _pull_versions(file_dir, None, (1, 2), cast=True,
                                   halves=True, staging_budget=ONE_BOX,
                                   delta_budget=half)
    assert first.delta["held_bytes"] == half
    d = second.delta
    assert d["runs"] == 1 and d["full_bytes"] == half, d
    assert d["whole_runs"] == 1 and d["whole_bytes"] == half, d
    assert d["over_budget_bytes"] == half and d["held_bytes"] == half, d
    assert d["in_place_bytes"] == 0, d


def test_default_budget_keeps_no_copy(file_dir):
    # cast reads, staging in rounds, the default budget (0): read whole,
    # nothing held
    _, second = _pull_versions(file_dir, None, (1, 2), cast=True,
                               halves=True, staging_budget=ONE_BOX)
    d = second.delta
    assert d["runs"] == 0 and d["held_bytes"] == 0, d
    assert d["whole_bytes"] == ROWS * COLS * 2, d


@pytest.mark.parametrize("off", [{"delta": False},
                                 {"verify_digests": False}])
def test_deltas_off(file_dir, off):
    _, second = _pull_versions(file_dir, None, (1, 2), **off)
    assert second.delta["runs"] == 0 and second.delta["held_bytes"] == 0
    assert second.bytes == ROWS * COLS * 2


def test_no_deltas_served_reads_whole(file_dir):
    # no publisher serves deltas: no copies, no delta reads at all (a plain
    # pull, every byte whole: the result's bytes, and no `delta` in the
    # stage record, which _check_record asserts)
    _, second = _pull_versions(file_dir, 0, (1, 2))
    assert second.delta["runs"] == 0 and second.delta["whole_runs"] == 0
    assert second.delta["held_bytes"] == 0
    assert second.bytes == ROWS * COLS * 2


def test_bad_keywords(file_dir):
    for bad in (-1, 17, 2.0, True, "2"):
        with pytest.raises(reshard.InvalidArgument, match="delta_keep"):
            reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                              staging="arena", delta_keep=bad)
    params = {"q": torch.zeros(ROWS, COLS, dtype=torch.bfloat16)}
    with pytest.raises(reshard.InvalidArgument, match="verify_digests"):
        reshard.Receiver(file_dir, "m", json.dumps(CAPTURE), params,
                         backend="cma", delta=True, verify_digests=False)
    for bad in (-1, 2.0, True, "8GiB"):
        with pytest.raises(reshard.InvalidArgument, match="delta_budget"):
            reshard.Receiver(file_dir, "m", json.dumps(CAPTURE), params,
                             backend="cma", delta_budget=bad)
