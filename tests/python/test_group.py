"""Group commit: the ranks of one engine replica, each its own process,
stage version 1 and apply it together or not at all. Every rank that
survives ends on one version, byte-exact: all hold the new bytes (torch's
own slicing and cast of the published tensors) or all the old ones (the
values they were created with). The directory's group records are checked
on both backends."""
import ctypes
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import reshard
from test_receiver import Trainers, _truth
from under_test import child_env

# Across processes, the library's own behaviour: once, with the newest
# torch of the suites (tests/CMakeLists.txt).
pytestmark = pytest.mark.newest_torch

HERE = Path(__file__).resolve().parent
WORKER = HERE / "group_rank.py"
SIZE = 3


def _old():
    return {"p": torch.full((8, 4), -1.0),
            "q": torch.full((4, 8), -2.0, dtype=torch.bfloat16)}


def _bits(t):
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16
                  ).flatten().tolist()


def _run_ranks(directory, modes, timeout_s, group="engine0"):
    """Starts one process per rank, returns {rank: (returncode, result or
    None)}; every process is killed if it outlives the bound."""
    env = child_env()
    env.pop("RESHARD_TEST_GROUP_FAULT", None)
    procs = {}
    try:
        for rank, mode in enumerate(modes):
            cfg = dict(directory=directory, rank=rank, size=len(modes),
                       group=group, mode=mode, backend="cma",
                       timeout_s=timeout_s)
            procs[rank] = subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps(cfg)],
                stdout=subprocess.PIPE, env=env, start_new_session=True,
                text=True)
        out = {}
        for rank, p in procs.items():
            text, _ = p.communicate(timeout=120)
            lines = [ln for ln in text.splitlines() if ln.startswith("{")]
            out[rank] = (p.returncode,
                         json.loads(lines[-1]) if lines else None)
        return out
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


@pytest.fixture
def trainers(file_dir):
    with Trainers(file_dir, "cma", seed=5) as t:
        t.publish(1)
        yield t


def _assert_all(results, want, ranks):
    for rank in ranks:
        rc, res = results[rank]
        assert rc == 0 and res is not None, (rank, rc)
        assert res["p"] == _bits(want["p"]), rank
        assert res["q"] == _bits(want["q"]), rank


def test_every_rank_applies(file_dir, trainers):
    results = _run_ranks(file_dir, ["ok"] * SIZE, timeout_s=60)
    _assert_all(results, _truth(*trainers.fulls()), range(SIZE))
    assert all(results[r][1]["ok"] for r in range(SIZE))
    with reshard.Directory(file_dir) as d:
        g = d.group("m", 1, "engine0", attempt=1)
    assert g.decision == "committed" and g.attempts == 1


def test_a_failed_apply_rolls_every_rank_back(file_dir, trainers):
    """Rank 1 fails once ranks 0 and 2 installed: they put the old bytes
    back."""
    results = _run_ranks(file_dir, ["ok", "fail", "ok"], timeout_s=60)
    _assert_all(results, _old(), range(SIZE))
    for rank in (0, 2):
        res = results[rank][1]
        assert not res["ok"] and res["type"] == "IncompleteRefit"
        assert "rolled back" in res["error"], res["error"]
        assert "rank 1" in res["error"] and "injected" in res["error"]
    with reshard.Directory(file_dir) as d:
        assert d.group("m", 1, "engine0", attempt=1).decision == "aborted"


def _assert_waited_in_vain(results, ranks, *words):
    """`ranks` kept the old weights and failed waiting for a rank that
    died, their errors naming it with `words`."""
    _assert_all(results, _old(), ranks)
    for rank in ranks:
        res = results[rank][1]
        assert res["type"] in ("ReshardTimeout", "IncompleteRefit"), res
        for w in words:
            assert w in res["error"], res["error"]


def test_a_rank_dying_mid_apply_rolls_the_others_back(file_dir, trainers):
    results = _run_ranks(file_dir, ["exit", "ok", "ok"], timeout_s=3)
    assert results[0][0] == 9
    # the rank whose wait ran out first aborted; the other follows
    _assert_waited_in_vain(results, (1, 2), "rank(s) 0 to apply",
                           "rolled back")


def test_a_rank_killed_between_stage_and_apply(file_dir, trainers):
    results = _run_ranks(file_dir, ["ok", "ok", "kill_after_stage"],
                         timeout_s=3)
    assert results[2][0] == -signal.SIGKILL
    _assert_waited_in_vain(results, (0, 1), "rank(s) 2 to stage",
                           "nothing was installed")


def test_a_rank_that_never_stages(file_dir, trainers):
    results = _run_ranks(file_dir, ["never_stage", "ok", "never_stage"],
                         timeout_s=3)
    _assert_all(results, _old(), (1,))
    res = results[1][1]
    assert res["type"] == "ReshardTimeout"
    assert "rank(s) 0, 2 to stage" in res["error"], res["error"]


# -- the directory's group records, both backends ---------------------------
def _version(directory):
    """Creates version 7 of "m" (one slot): records need a version."""
    lib = reshard._lib.lib()
    create = lib.rs_dir_create_version
    create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64,
                       ctypes.c_int64, ctypes.c_void_p]
    create.restype = ctypes.c_int
    with reshard.Directory(directory) as d:
        assert create(d._h, b"m", 7, 1, None) == 0


def test_group_records(directory):
    _version(directory)
    with reshard.Directory(directory) as d:
        assert d.group("m", 7, "g").size == 0
        a = d.group_mark("m", 7, "g", 2, 0, "staged")
        assert (a.attempt, a.decision, a.ranks) == (1, "open", "S-")
        with pytest.raises(reshard.InputError, match="has 2 ranks, not 3"):
            d.group_mark("m", 7, "g", 3, 1, "staged")
        d.group_mark("m", 7, "g", 2, 1, "staged")
        d.group_mark("m", 7, "g", 2, 0, "applied", attempt=1)
        # a state never goes back
        assert d.group_mark("m", 7, "g", 2, 0, "staged",
                            attempt=1).ranks == "PS"
        c = d.group_mark("m", 7, "g", 2, 1, "applied", attempt=1)
        assert c.decision == "committed" and c.ranks == "PP"
        # a late abort follows the record: committed stays committed
        assert d.group_abort("m", 7, "g", 1, "late").decision == "committed"
        # the next STAGED starts attempt 2; a failure aborts it
        b = d.group_mark("m", 7, "g", 2, 1, "staged")
        assert b.attempt == 2 and b.ranks == "-S"
        f = d.group_mark("m", 7, "g", 2, 1, "failed", attempt=2,
                         note="rank 1 broke")
        assert f.decision == "aborted" and f.note == "rank 1 broke"
        assert d.group("m", 7, "g", attempt=1).decision == "committed"
        assert d.group("m", 7, "g", attempt=2).decision == "aborted"
        # an abort of an open attempt wins over later applies
        d.group_mark("m", 7, "g", 2, 0, "staged")
        assert d.group_abort("m", 7, "g", 3, "timed out").decision == "aborted"
        assert d.group_mark("m", 7, "g", 2, 0, "applied",
                            attempt=3).decision == "aborted"
        with pytest.raises(reshard.InputError, match="not started"):
            d.group_mark("m", 7, "g", 2, 0, "applied", attempt=9)
        with pytest.raises(reshard.InputError, match="never created"):
            d.group_mark("m", 8, "g", 2, 0, "staged")
