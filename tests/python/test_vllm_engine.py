"""reshard as vLLM's weight-transfer backend "reshard": made by vLLM's own
factories after `reshard.vllm.register()`, real subclasses of vLLM's base
classes, two versions from a trainer engine into a vLLM-style model
through its `load_weights`, byte-equal to that loader run by torch, and
the settings refused field by field. Needs vLLM (skipped without it)."""
import functools

import pytest
import torch

import vllm_zoo  # noqa: F401  (selects vLLM's CPU platform before import)
import zoo
from e2e_harness import assert_equal
from trainer_ranks import backend

vllm = pytest.importorskip("vllm", reason="vLLM is not installed")

import reshard  # noqa: E402
import reshard.vllm as rv  # noqa: E402
from vllm.config import VllmConfig  # noqa: E402
from vllm.config.weight_transfer import WeightTransferConfig  # noqa: E402
from vllm.distributed.weight_transfer import (  # noqa: E402
    ParamMeta, TrainerWeightTransferEngine, WeightSource, WeightTransferEngine,
    WeightTransferEngineFactory, WeightTransferTrainerFactory)

CFG = zoo.ZooConfig(layers=2, experts=4)


def worker_engine(model):
    """The worker-side engine as vLLM's worker makes it."""
    rv.register()
    return WeightTransferEngineFactory.create_engine(
        WeightTransferConfig(backend="reshard"), VllmConfig(),
        torch.device("cpu"), model)


def trainer_engine(directory, transport, source, client, **engine):
    info = rv.ReshardTrainerInitInfo(directory=directory, model="m",
                                     transport=transport, rank=0,
                                     release_timeout_s=20,
                                     engine={"discover_timeout_s": 20,
                                             **engine})
    return WeightTransferTrainerFactory.trainer_init(info, client=client,
                                                     source=source)


def test_register_is_idempotent_and_lazy():
    rv.register()
    rv.register()
    eng = worker_engine(zoo.ZooModel(CFG, 1, 0))
    assert isinstance(eng, WeightTransferEngine)
    assert type(eng) is rv.ReshardWeightTransferEngine
    assert issubclass(rv.ReshardTrainerWeightTransferEngine,
                      TrainerWeightTransferEngine)
    assert rv.ReshardTrainerInitInfo.backend == "reshard"


def test_vllm_plugin_loader_finds_register(tmp_path, monkeypatch):
    """vLLM's plugin loader reaches reshard.vllm.register through a
    `vllm.general_plugins` entry point, the one the package declares (here
    in a distribution of its own on sys.path)."""
    dist = tmp_path / "reshard_entry_probe-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: reshard-entry-probe\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        "[vllm.general_plugins]\nreshard = reshard.vllm:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from vllm.plugins import DEFAULT_PLUGINS_GROUP, load_plugins_by_group
    plugins = load_plugins_by_group(DEFAULT_PLUGINS_GROUP)
    assert plugins.get("reshard") is rv.register
    plugins["reshard"]()


@pytest.mark.parametrize("name", ["cma", "ucx-tcp"])
def test_two_versions_through_load_weights(name, file_dir, monkeypatch):
    transport = backend(name, monkeypatch)
    model = zoo.ZooModel(CFG, 1, 0)
    zoo.fill_params(model, -7.0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    weights = zoo.make_weights(CFG, seed=1)
    eng = worker_engine(model)
    trainer = trainer_engine(file_dir, transport, weights,
                             rv.DirectClient(eng))
    try:
        assert eng.capture.copies and not eng.capture.unsupported
        assert_equal(model, before, "the handshake wrote no parameter")
        for version, seed in ((0, 1), (1, 2)):
            fresh = zoo.make_weights(CFG, seed=seed)
            for n, t in weights.items():   # the optimizer step, in place
                t.copy_(fresh[n])
            assert trainer.send_weights() == version
            want = zoo.reference_model(CFG, 1, 0, fresh)
            assert_equal(model, dict(want.named_parameters()),
                         f"version {version}")
            assert eng.last_result.version == version
            assert eng.last_result.bytes_installed > 0
    finally:
        trainer.shutdown()
    assert eng.receiver is None


def test_stage_leaves_live_weights_until_finish(file_dir):
    model = zoo.ZooModel(CFG, 1, 0)
    zoo.fill_params(model, -7.0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    weights = zoo.make_weights(CFG, seed=3)
    eng = worker_engine(model)
    client = rv.DirectClient(eng)
    trainer = trainer_engine(file_dir, "cma", weights, client)
    try:
        trainer.publisher.publish(5)
        client.start_weight_update()
        client.update_weights({"version": 5})
        assert_equal(model, before, "staged, not installed")
        with pytest.raises(reshard.InvalidArgument, match="already staged"):
            client.update_weights({"version": 5})
        client.finish_weight_update()
        want = zoo.reference_model(CFG, 1, 0, weights)
        assert_equal(model, dict(want.named_parameters()), "installed")
        reshard.release(file_dir, "m", 5)
    finally:
        trainer.shutdown()


class DictSource(WeightSource):
    """A vLLM WeightSource over full tensors: its metadata declares the
    sources the workers capture with."""

    def __init__(self, tensors):
        self.tensors = tensors

    @functools.cached_property
    def metadata(self):
        return [ParamMeta(n, t.dtype, tuple(t.shape))
                for n, t in self.tensors.items()]

    def iter_full(self):
        return iter(self.tensors.items())


class FailingOnce(rv.DirectClient):
    """A client whose first update fails, as a worker that died would."""

    failed = False

    def update_weights(self, update_info):
        if not self.failed:
            self.failed = True
            raise RuntimeError("worker lost")
        super().update_weights(update_info)


def test_weight_source_and_a_failed_round(file_dir):
    """A WeightSource's metadata gives the sources; a round that fails
    abandons its version (no trainer waits for it), the workers keep the
    bytes they had, and the next round installs the next version."""
    model = zoo.ZooModel(CFG, 1, 0)
    zoo.fill_params(model, -7.0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    weights = zoo.make_weights(CFG, seed=4)
    eng = worker_engine(model)
    trainer = trainer_engine(file_dir, "cma", DictSource(weights),
                             FailingOnce(eng))
    try:
        assert list(eng.capture.sources) == list(weights)
        with pytest.raises(RuntimeError, match="worker lost"):
            trainer.send_weights()
        assert_equal(model, before, "failed round")
        assert trainer.send_weights(version=1) == 1
        want = zoo.reference_model(CFG, 1, 0, weights)
        assert_equal(model, dict(want.named_parameters()), "version 1")
    finally:
        trainer.shutdown()


def test_source_handing_out_new_tensors(file_dir):
    """A source that yields other tensor objects each round (gathered or
    offloaded copies) and a strided one: each is registered again, and
    every round still installs the source's bytes."""
    model = zoo.ZooModel(CFG, 1, 0)
    rounds = iter([zoo.make_weights(CFG, seed=7), zoo.make_weights(CFG, 8)])
    held = {}

    def pairs():
        if not held:
            held.update(next(rounds))
        for n, t in held.items():
            if t.dim() == 2:   # served strided: a transposed view's .T
                yield n, t.t().contiguous().t()
            else:
                yield n, t.clone()

    eng = worker_engine(model)
    trainer = trainer_engine(file_dir, "cma", pairs, rv.DirectClient(eng))
    try:
        for version in (0, 1):
            if version:
                held.clear()
            trainer.send_weights()
            want = zoo.reference_model(CFG, 1, 0, held)
            assert_equal(model, dict(want.named_parameters()),
                         f"version {version}")
    finally:
        trainer.shutdown()


def test_strided_source_tensor_updated_in_place(file_dir):
    """The same strided tensor objects every round, changed in place
    between rounds (as an optimizer steps a transposed parameter): they are
    served from copies, and each round installs the bytes they hold then,
    never the copy of an earlier round."""
    model = zoo.ZooModel(CFG, 1, 0)
    first = zoo.make_weights(CFG, seed=11)
    held = {n: t.t().contiguous().t() if t.dim() == 2 else t.clone()
            for n, t in first.items()}
    assert any(not t.is_contiguous() for t in held.values())
    eng = worker_engine(model)
    trainer = trainer_engine(file_dir, "cma", lambda: iter(held.items()),
                             rv.DirectClient(eng))
    try:
        for version, seed in ((0, 11), (1, 12)):
            fresh = zoo.make_weights(CFG, seed=seed)
            for n, t in held.items():
                t.copy_(fresh[n])
            trainer.send_weights()
            want = zoo.reference_model(CFG, 1, 0, fresh)
            assert_equal(model, dict(want.named_parameters()),
                         f"version {version}")
    finally:
        trainer.shutdown()


@pytest.fixture
def gloo_world_of_one(tmp_path):
    """A default process group of one rank (gloo), destroyed after."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg",
                            rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_dtensor_source(file_dir, gloo_world_of_one):
    """DTensors (sharded on a device mesh of one rank) as the source: the
    workers capture with their full shapes, and each round installs the
    tensors' bytes as updated in place."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (1,))
    dts = {n: distribute_tensor(t, mesh, [Shard(0)])
           for n, t in zoo.make_weights(CFG, seed=9).items()}
    model = zoo.ZooModel(CFG, 1, 0)
    eng = worker_engine(model)
    trainer = trainer_engine(file_dir, "cma", lambda: iter(dts.items()),
                             rv.DirectClient(eng))
    try:
        for version, seed in ((0, 9), (1, 10)):
            fresh = zoo.make_weights(CFG, seed=seed)
            for n, dt in dts.items():
                dt.to_local().copy_(fresh[n])
            trainer.send_weights()
            want = zoo.reference_model(CFG, 1, 0, fresh)
            assert_equal(model, dict(want.named_parameters()),
                         f"version {version}")
        assert list(eng.capture.sources) == list(dts)
    finally:
        trainer.shutdown()


def test_capture_refused_at_init_unless_skipped(file_dir):
    """A loader doing arithmetic on a source (Mamba's A = -exp(A_log)) is
    refused at the handshake, naming the source; `skip` leaves it out."""
    cfg = zoo.ZooConfig(arith=True, dtype=torch.float32)
    weights = zoo.make_weights(cfg, seed=6)
    model = zoo.ZooModel(cfg, 1, 0)
    eng = worker_engine(model)
    with pytest.raises(reshard.UnsupportedReshard, match="mixer.A_log"):
        trainer_engine(file_dir, "cma", weights, rv.DirectClient(eng))
    with pytest.warns(UserWarning, match="mixer.A$"):
        trainer = trainer_engine(file_dir, "cma", weights,
                                 rv.DirectClient(eng), skip="*.A_log")
    try:
        trainer.send_weights()
        assert eng.receiver.left_out == ["model.layers.0.mixer.A"]
    finally:
        trainer.shutdown()


def _init(**over):
    d = {"directory": "file:/tmp/x", "model": "m",
         "sources": [["w", [2, 3], "bfloat16"]]}
    d.update(over)
    return {k: v for k, v in d.items() if v is not None}


@pytest.mark.parametrize("info, field", [
    (_init(directory=None), "'directory' is required"),
    (_init(colour="red"), "'colour' is not a setting"),
    (_init(directory="/tmp/x"), "'directory' must be a directory URL"),
    (_init(transport="nccl"), "'transport' must be one of ucx, cma"),
    (_init(sources=[["w", [2, -1], "bf16"]]), r"'sources\[0\]'.*shape"),
    (_init(sources=[["w", [2], "complex7"]]), "unknown dtype 'complex7'"),
    (_init(sources=[]), "'sources' must be a non-empty list"),
    (_init(timeout_s=-1), "'timeout_s' must be a number of seconds"),
    (_init(group_size=0), "'group_size' must be an integer >= 1"),
    (_init(staging_budget=0), "'staging_budget' must be an integer >= 1"),
    (_init(staging_budget="1GiB"), "'staging_budget' must be an integer"),
    (_init(only=[""]), "'only' must be a glob"),
    (_init(sources={"w": [[2], "bf16"], "b": "f32"}), r"'sources\[1\]'"),
])
def test_init_info_refused_naming_the_field(info, field):
    eng = worker_engine(zoo.ZooModel(CFG, 1, 0))
    good = eng.parse_init_info(_init(sources={"w": [[2, 3], "bf16"]}))
    assert good.sources == {"w": ((2, 3), torch.bfloat16)}
    assert good.staging_budget is None
    for budget in (4096, "unbounded"):
        assert eng.parse_init_info(
            _init(staging_budget=budget)).staging_budget == budget
    with pytest.raises(reshard.InvalidArgument, match=field) as e:
        eng.parse_init_info(info)
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("info, field", [
    ({}, "'version' is required"), ({"version": "3"}, "'version' must be"),
    ({"version": -2}, "'version' must be an integer >= -1"),
    ({"version": 1, "names": []}, "'names' is not a setting"),
])
def test_update_info_refused_naming_the_field(info, field):
    eng = worker_engine(zoo.ZooModel(CFG, 1, 0))
    with pytest.raises(reshard.InvalidArgument, match=field):
        eng.parse_update_info(info)


def test_update_before_init_and_bad_trainer_settings(file_dir):
    eng = worker_engine(zoo.ZooModel(CFG, 1, 0))
    with pytest.raises(RuntimeError, match="init_weight_transfer_engine"):
        eng.start_weight_update()
    with pytest.raises(reshard.InvalidArgument, match="'rank' must be below"):
        rv.ReshardTrainerInitInfo(directory=file_dir, model="m", rank=2)
    with pytest.raises(reshard.InvalidArgument, match="'engine.sources'"):
        rv.ReshardTrainerInitInfo(directory=file_dir, model="m", rank=0,
                                  engine={"sources": []})
    with pytest.raises(reshard.InvalidArgument, match="'timeout_s' must"):
        rv.ReshardTrainerInitInfo(directory=file_dir, model="m", rank=0,
                                  engine={"timeout_s": "soon"})
    with pytest.raises(reshard.InvalidArgument, match="'timeout'"):
        rv.ReshardTrainerInitInfo(directory=file_dir, model="m", rank=0,
                                  engine={"timeout": 3})
    with pytest.raises(reshard.InvalidArgument, match="an iterator is read"):
        trainer_engine(file_dir, "cma", iter([]), rv.DirectClient(eng))

