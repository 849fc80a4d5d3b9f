"""Quantized refit lands byte for byte: two trainer ranks publish row halves
of bf16 weights, a receiver pulls them through the capture of a
DeepSeek-style FP8 loader (test_capture_quant.deepseek_loader: 128 x 128
blocks, tensor-parallel slices, merged gate/up, stacked experts) into uint8
weights and float32 weight_scale_inv tensors. Ground truth: the same loader
run eagerly by PyTorch on the full tensors. Every version is checked, so
scales that change between versions are followed."""
import pytest
import torch

import reshard
from trainer_ranks import TrainerRanks
from test_capture_quant import SOURCES, _params, _weights, deepseek_loader


class Trainers(TrainerRanks):
    """Two publisher ranks holding row halves of every source."""

    def __init__(self, directory, backend, seed):
        self.full = _weights(SOURCES, seed)
        self.shards = {n: list(t.chunk(2, 0)) for n, t in self.full.items()}
        self.shards = {n: [s.clone() for s in ss]
                       for n, ss in self.shards.items()}
        super().__init__()
        for r in range(2):
            p = reshard.Publisher(directory, "m", r, 2, backend=backend)
            for n, ss in self.shards.items():
                p.register_shard(n, ss[r], tuple(self.full[n].shape), 0, r, 2)
            self.pubs.append(p)

    def set(self, seed):
        self.full = _weights(SOURCES, seed)
        for n, ss in self.shards.items():
            for r, s in enumerate(ss):
                s.copy_(self.full[n].chunk(2, 0)[r])


def _truth(full):
    params = _params()
    deepseek_loader(params)(iter(full.items()))
    return params


def _bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t


def pull_versions(directory, backend, params, load, seeds, check):
    """Captures `load` into `params`, then for each seed publishes a version
    of SOURCES from two ranks, pulls it and calls check(version, full)."""
    cap = reshard.capture(sources=_weights(SOURCES), params=params,
                          load=load(params))
    assert cap.unsupported == {}
    with Trainers(directory, backend, seed=seeds[0]) as t:
        with reshard.Receiver(directory, "m", cap, params, backend=backend,
                              discover_timeout_s=20) as r:
            for version, seed in enumerate(seeds, 1):
                if version > 1:
                    t.set(seed)
                t.publish(version)
                assert r.pull(version).version == version
                check(version, t.full)
                t.wait_released(version)
    return cap


@pytest.mark.parametrize("backend", ["cma", "ucx"])
def test_fp8_loader_lands_as_torch_computes_it(file_dir, backend):
    params = _params()

    def check(version, full):
        for name, want in _truth(full).items():
            assert want.any(), name
            assert torch.equal(_bits(params[name]), _bits(want)), \
                (version, name)
    cap = pull_versions(file_dir, backend, params, deepseek_loader, (21, 22),
                        check)
    assert len(cap.copies) == 5
