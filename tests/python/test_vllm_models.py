"""vLLM's own model classes (Llama, Qwen2, Qwen3-MoE, DeepSeek-V2), built
on CPU at tensor parallel 1: the "reshard" engine made by vLLM's factory
captures each class's real `load_weights`, receives two versions from a
trainer engine, and every parameter byte equals a second instance loaded
by vLLM's own `load_weights` from the same tensors. Needs vLLM."""
import pytest
import torch

import vllm_zoo
import zoo

pytest.importorskip("vllm", reason="vLLM is not installed")

import reshard.vllm as rv  # noqa: E402
from vllm.config import set_current_vllm_config  # noqa: E402
from vllm.config.weight_transfer import WeightTransferConfig  # noqa: E402
from vllm.distributed.weight_transfer import (  # noqa: E402
    WeightTransferEngineFactory, WeightTransferTrainerFactory)

SENTINEL = -7.0


@pytest.fixture(scope="module")
def vllm_state():
    """vLLM's distributed state, once for the file (it is process-wide)."""
    with vllm_zoo.distributed():
        yield


def reference(name, workdir, dtype, weights):
    """Ground truth: another instance (under a config of its own: vLLM
    keeps each config's layer names), every parameter preset to the
    sentinel, loaded by vLLM's own load_weights from the real tensors."""
    vconfig = vllm_zoo.vllm_config(name, workdir, dtype)
    model = vllm_zoo.build(name, vconfig)
    zoo.fill_params(model, SENTINEL)
    with set_current_vllm_config(vconfig):
        model.load_weights(iter(weights.items()))
    return dict(model.named_parameters())


def raw(t):
    return t.detach().contiguous().flatten().view(torch.uint8)


def assert_bytes_equal(got, want, what):
    """Every parameter's bytes equal; vLLM's loader wrote all of them."""
    assert set(got) == set(want), what
    unwritten = [n for n, p in want.items() if (p == SENTINEL).any()]
    assert not unwritten, f"{what}: vLLM's loader left {unwritten}"
    bad = [n for n in want if not torch.equal(raw(got[n]), raw(want[n]))]
    assert not bad, f"{what}: parameters differ from vLLM's loader: {bad}"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(vllm_zoo.ARCHS))
def test_vllm_model_class(name, dtype, vllm_state, file_dir, tmp_path):
    vconfig = vllm_zoo.vllm_config(name, str(tmp_path / "live"), dtype)
    tdtype = getattr(torch, dtype)
    model = vllm_zoo.build(name, vconfig)
    zoo.fill_params(model, SENTINEL)
    rv.register()
    eng = WeightTransferEngineFactory.create_engine(
        WeightTransferConfig(backend="reshard"), vconfig, torch.device("cpu"),
        model)
    weights = vllm_zoo.checkpoint(name, 1, tdtype)
    info = rv.ReshardTrainerInitInfo(
        directory=file_dir, model="m", transport="cma", rank=0,
        release_timeout_s=20, engine={"discover_timeout_s": 20})
    trainer = WeightTransferTrainerFactory.trainer_init(
        info, client=rv.DirectClient(eng), source=weights)
    try:
        cap = eng.capture
        assert not cap.unsupported and not cap.unattributed
        for seed in (1, 2):
            fresh = vllm_zoo.checkpoint(name, seed, tdtype)
            for n, t in weights.items():
                t.copy_(fresh[n])
            version = trainer.send_weights()
            params = dict(model.named_parameters())
            assert_bytes_equal(params, reference(
                name, str(tmp_path / f"ref{seed}"), dtype, fresh),
                               f"{name} {dtype} version {version}")
        nbytes = sum(p.numel() * p.element_size() for p in params.values())
        print(f"{name} {dtype}: {len(params)} params, "
              f"{sum(p.numel() for p in params.values())} elements, "
              f"{nbytes} B byte-exact; capture {len(cap.sources)} sources, "
              f"{len(cap.copies)} copies, {len(cap.fills)} fills; "
              f"{eng.last_result.bytes_installed} B installed")
    finally:
        trainer.shutdown()
