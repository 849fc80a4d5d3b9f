"""Publisher staging from Python: copy-in arenas ("arena") and tensors held
in registered memory ("in_place", Publisher.alloc_tensor). Two trainer
ranks publish row halves of w (f32) and w2 (bf16); a receiver of the whole
tensors must get exactly the published version, byte for byte, through
both directories and both transports (UCX over tcp and over shared
memory). Arenas: the live tensors are overwritten right after publish and
the version still arrives; a new version before the last is released is
refused. In place: ordinary tensors are refused; alloc_tensor memory
outlives close() while a tensor uses it. UCX's fallback to ordinary memory
(forced with UCX_ALLOC_PRIO=heap) is told once through the notice."""
import gc
import json

import pytest
import torch

import reshard
import trainer_ranks
from trainer_ranks import TrainerRanks

ROWS, COLS = 16, 24

CAPTURE = {
    "schema": "reshard.capture.v1",
    "params": {"p": {"shape": [ROWS, COLS], "dtype": "f32"},
               "q": {"shape": [ROWS, COLS], "dtype": "bf16"}},
    "sources": {"w": {"shape": [ROWS, COLS], "dtype": "f32"},
                "w2": {"shape": [ROWS, COLS], "dtype": "bf16"}},
    "copies": [
        {"src": "w", "ops": [], "param": "p", "dest_offset": 0,
         "dest_shape": [ROWS, COLS], "dest_stride": [COLS, 1],
         "dest_dtype": "f32"},
        {"src": "w2", "ops": [], "param": "q", "dest_offset": 0,
         "dest_shape": [ROWS, COLS], "dest_stride": [COLS, 1],
         "dest_dtype": "bf16"},
    ],
}


def _truth(version):
    """The full tensors of a version, from a formula (no randomness)."""
    i = torch.arange(ROWS * COLS, dtype=torch.float64).view(ROWS, COLS)
    w = (i * 0.25 + version * 1000.0).to(torch.float32)
    w2 = ((i % 97) * 0.5 - version).to(torch.bfloat16)
    return w, w2


@pytest.fixture(params=["cma", "ucx-tcp", "ucx-sm"])
def backend(request, monkeypatch):
    return trainer_ranks.backend(request.param, monkeypatch)


class Trainers(TrainerRanks):
    """Two ranks holding row halves of w and w2."""

    def __init__(self, directory, backend, staging, notice=None):
        half = ROWS // 2
        super().__init__()
        self.shards = []
        for r in range(2):
            p = reshard.Publisher(directory, "m", r, 2, backend=backend,
                                  staging=staging, notice=notice)
            if staging == "in_place":
                a = p.alloc_tensor((half, COLS), torch.float32)
                b = p.alloc_tensor((half, COLS), torch.bfloat16)
            else:
                a = torch.zeros(half, COLS)
                b = torch.zeros(half, COLS, dtype=torch.bfloat16)
            p.register_shard("w", a, (ROWS, COLS), 0, r, 2)
            p.register_shard("w2", b, (ROWS, COLS), 0, r, 2)
            self.pubs.append(p)
            self.shards.append((a, b))

    def set(self, version):
        w, w2 = _truth(version)
        half = ROWS // 2
        for r, (a, b) in enumerate(self.shards):
            a.copy_(w[r * half:(r + 1) * half])
            b.copy_(w2[r * half:(r + 1) * half])

    def scribble(self):
        for a, b in self.shards:
            a.fill_(-7.0)
            b.fill_(-9.0)


def _params():
    return {"p": torch.full((ROWS, COLS), -1.0),
            "q": torch.full((ROWS, COLS), -2.0, dtype=torch.bfloat16)}


def _pull_exact(directory, backend, version, release_after=True):
    params = _params()
    with reshard.Receiver(directory, "m", json.dumps(CAPTURE), params,
                          backend=backend, discover_timeout_s=20,
                          release_after=release_after) as r:
        assert r.pull(version).version == version
    w, w2 = _truth(version)
    assert torch.equal(params["p"].view(torch.int32), w.view(torch.int32))
    assert torch.equal(params["q"].view(torch.int16), w2.view(torch.int16))


def test_arena_serves_the_published_copy(directory, backend):
    with Trainers(directory, backend, "arena") as t:
        for version in (1, 2, 3):
            t.set(version)
            t.publish(version)
            t.scribble()  # training goes on; the arena holds the version
            _pull_exact(directory, backend, version)
            t.wait_released(version)
        t.set(4)
        t.publish(4)
        _pull_exact(directory, backend, 4, release_after=False)
        t.set(5)
        with pytest.raises(reshard.InvalidArgument,
                           match="still serves version 4"):
            t.pubs[0].publish(5)
        _pull_exact(directory, backend, 4, release_after=True)
        t.wait_released(4)
        t.publish(5)
        t.scribble()
        _pull_exact(directory, backend, 5)


def test_in_place_tensors(directory, backend):
    with Trainers(directory, backend, "in_place") as t:
        for version in (1, 2):
            t.set(version)
            t.publish(version)
            _pull_exact(directory, backend, version)
            t.wait_released(version)
        with pytest.raises(reshard.InvalidArgument, match="in_place"):
            t.pubs[0].register("other", torch.zeros(4))


def test_alloc_tensor_outlives_close(file_dir):
    p = reshard.Publisher(file_dir, "m", 0, 1, backend="cma")
    x = p.alloc_tensor((64, 8), torch.float16)
    assert x.shape == (64, 8) and x.dtype == torch.float16
    assert x.data_ptr() % 4096 == 0
    assert torch.count_nonzero(x) == 0
    view = x[3:5]
    del x
    p.close()
    view.fill_(2.5)  # still the publisher's memory, still mapped
    assert torch.all(view == 2.5)
    assert p._closing is not None
    del view
    gc.collect()
    assert p._closing is None and p._allocs == 0


def test_bad_staging(file_dir):
    with pytest.raises(reshard.InvalidArgument, match="staging"):
        reshard.Publisher(file_dir, "m", 0, 1, staging="copy")
    p = reshard.Publisher(file_dir, "m", 0, 1, backend="cma")
    assert p.alloc_tensor((0, 3), torch.float32).shape == (0, 3)
    p.close()
    with pytest.raises(reshard.InvalidArgument, match="closed"):
        p.alloc_tensor((4,), torch.float32)


def test_fallback_is_told_once(file_dir, monkeypatch):
    monkeypatch.setenv("UCX_TLS", "sm")
    monkeypatch.setenv("UCX_ALLOC_PRIO", "heap")
    notices = []
    with Trainers(file_dir, "ucx", "in_place", notice=notices.append) as t:
        extra = t.pubs[0].alloc_tensor((1024,), torch.uint8)
        told = [n for n in notices if "ordinary memory" in n]
        assert len(told) == 2, notices  # once per publisher
        assert "emulated reads" in told[0]
        monkeypatch.delenv("UCX_ALLOC_PRIO")
        t.set(1)
        t.publish(1)
        _pull_exact(file_dir, "ucx", 1)
        del extra
