"""Cut-aligned publishing from Python. Two trainer ranks hold row halves of
w (f32) and publish with cut_aligned=True (staging "arena" implied);
receivers of two tensor-parallel sizes (tp=2: column halves, tp=4: column
quarters) announce their cuts and pull their columns, compared byte for
byte with the torch ground truth, through both directories and both
transports. The version published before they announced is served whole;
the next one is cut at their cuts: each rank publishes 4 sub-boxes instead
of 1, and a tp=4 receiver reads exactly its bytes with one descriptor per
(rank, sub-box). Other stagings are refused."""
import json

import pytest
import torch

import reshard
import trainer_ranks
from trainer_ranks import TrainerRanks

ROWS, COLS = 16, 24
HALF = ROWS // 2


def _truth(version):
    i = torch.arange(ROWS * COLS, dtype=torch.float64).view(ROWS, COLS)
    return (i * 0.25 + version * 1000.0).to(torch.float32)


def _capture(tp, rank):
    width = COLS // tp
    return {
        "schema": "reshard.capture.v1",
        "params": {"p": {"shape": [ROWS, width], "dtype": "f32"}},
        "sources": {"w": {"shape": [ROWS, COLS], "dtype": "f32"}},
        "copies": [
            {"src": "w", "ops": [["narrow", 1, rank * width, width]],
             "param": "p", "dest_offset": 0, "dest_shape": [ROWS, width],
             "dest_stride": [width, 1], "dest_dtype": "f32"},
        ],
    }


@pytest.fixture(params=["cma", "ucx-tcp"])
def backend(request, monkeypatch):
    return trainer_ranks.backend(request.param, monkeypatch)


class Trainers(TrainerRanks):
    def __init__(self, directory, backend):
        super().__init__()
        self.shards = []
        for r in range(2):
            p = reshard.Publisher(directory, "m", r, 2, backend=backend,
                                  cut_aligned=True)
            assert p.staging == "arena"
            a = torch.zeros(HALF, COLS)
            p.register_shard("w", a, (ROWS, COLS), 0, r, 2)
            self.pubs.append(p)
            self.shards.append(a)

    def publish(self, version):
        w = _truth(version)
        for r, (p, a) in enumerate(zip(self.pubs, self.shards)):
            a.copy_(w[r * HALF:(r + 1) * HALF])
            p.publish(version)
            a.fill_(-7.0)  # the trainer goes on: the arena holds the version


def _pull(directory, backend, tp, rank, version, release_after, exact):
    width = COLS // tp
    params = {"p": torch.full((ROWS, width), -1.0)}
    with reshard.Receiver(directory, "m", json.dumps(_capture(tp, rank)),
                          params, backend=backend, discover_timeout_s=20,
                          release_after=release_after,
                          announce_as=f"tp{tp}-rank{rank}") as r:
        res = r.pull(version)
    assert res.version == version
    want = _truth(version)[:, rank * width:(rank + 1) * width]
    assert torch.equal(params["p"].view(torch.int32),
                       want.contiguous().view(torch.int32))
    if exact:  # cut-aligned: exactly the needed bytes on the wire
        assert res.bytes == ROWS * width * 4
    return res.descriptors


def test_cut_aligned_receivers_at_two_tp_sizes(directory, backend):
    with Trainers(directory, backend) as t:
        t.publish(1)  # nobody announced yet: whole shards
        assert [p.num_served for p in t.pubs] == [1, 1]
        before = {}
        for tp in (2, 4):
            for rank in range(tp):
                last = tp == 4 and rank == tp - 1
                before[tp, rank] = _pull(directory, backend, tp, rank, 1,
                                         release_after=last, exact=False)
        t.wait_released(1)
        t.publish(2)
        # cuts at 6, 12, 18: four sub-boxes per rank's half
        assert [p.num_served for p in t.pubs] == [4, 4]
        for tp in (2, 4):
            for rank in range(tp):
                last = tp == 4 and rank == tp - 1
                n = _pull(directory, backend, tp, rank, 2,
                          release_after=last, exact=True)
                if tp == 4:  # one sub-box of each rank, read whole
                    assert n == 2, (tp, rank, n)
                    assert before[tp, rank] >= n
        t.wait_released(2)


def test_cut_aligned_needs_the_arena(file_dir):
    with pytest.raises(reshard.InvalidArgument, match="staging 'arena'"):
        reshard.Publisher(file_dir, "m", 0, 1, cut_aligned=True,
                          staging="caller")
    with pytest.raises(reshard.InputError, match="no-such-file"):
        reshard.Publisher(file_dir, "m", 0, 1, cuts_file="/no-such-file")
