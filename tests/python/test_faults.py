"""Faults end to end, across processes: what a live model sees when a
refit goes wrong. Trainer ranks are separate processes (tests/python/
e2e_trainer.py) publishing the zoo model; this process captures the zoo's
loaders and stages and applies into a live model. Every check is
byte-exact: parameters either equal the ground truth (the loaders run by
torch on the real full tensors) or are untouched, byte for byte.

"Mid-stage" is made deterministic without timing: the publisher is
frozen (SIGSTOP: with UCX over tcp its reads cannot complete), the stage
is started in a thread, and the fault strikes once the receiver's lease
on the version is in the directory (the stage has begun). Timeouts only
bound the waits.
"""
import threading

import pytest
import torch

import e2e_harness as H
import e2e_models as M
import reshard

# Across processes, the library's own behaviour: once, with the newest
# torch of the suites (tests/CMakeLists.txt).
pytestmark = pytest.mark.newest_torch

# The published model: the dense zoo model plus Mamba-style A_log sources,
# which only the arithmetic loader reads (other captures leave them be).
PUBLISHED = M.config(**M.DENSE, arith=True)
CFG = M.config(**M.DENSE)
FAILURES = (reshard.TransportError, reshard.ReshardTimeout,
            reshard.IncompleteRefit)


class World:
    """Module-wide trainers (TP 2, cma, file:) and the versions they
    published so far; each test publishes the versions it reads."""

    def __init__(self, directory):
        self.directory = directory
        self.trainers = H.Trainers(directory, "cma", PUBLISHED, world=2)
        self.version = 0

    def publish(self):
        self.version += 1
        self.trainers.publish(self.version)
        return self.version

    def fulls(self, version):
        return self.trainers.fulls(version)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults") / "dir"
    d.mkdir()
    w = World(f"file:{d}")
    try:
        yield w
    finally:
        w.trainers.close()


def truth(cfg, tp, fulls):
    return M.truth(cfg, tp[1], tp[0], fulls)


def receiver(world, cap, model, **kw):
    return H.receiver(world.directory, "cma", cap, model, **kw)


# -- a live model keeps serving the old version until apply ----------------
class Reader(threading.Thread):
    """Reads the live parameters over and over (as inference would) and
    records any that differ from the version it serves."""

    def __init__(self, model, serving):
        super().__init__(daemon=True)
        self.params = H.params_of(model)
        self.serving = serving
        self.first = threading.Event()
        self.halt = threading.Event()
        self.reads, self.changed = 0, set()

    def run(self):
        while not self.halt.is_set():
            for n, p in self.params.items():
                if not torch.equal(p.detach(), self.serving[n]):
                    self.changed.add(n)
            self.reads += 1
            self.first.set()

    def stop(self):
        self.halt.set()
        self.join(30)


def test_stage_while_old_version_serves(world):
    """Version A is applied and read by a reader thread while version B is
    staged; the reader never sees a changed byte; apply installs B."""
    model, cap = H.capture(CFG, 1, 2)
    with receiver(world, cap, model, salt=1) as r:
        a = world.publish()
        r.pull(a)
        serving = truth(CFG, (2, 1), world.fulls(a))
        H.assert_equal(model, serving, "version A")
        world.trainers.wait_released(a)
        b = world.publish()
        reader = Reader(model, serving)
        reader.start()
        try:
            assert reader.first.wait(30)
            staged = r.stage(b)
            H.assert_equal(model, serving, "after stage")
        finally:
            reader.stop()
        assert reader.reads >= 1 and not reader.changed, reader.changed
        res = r.apply(staged)
        assert res.version == b
        H.assert_equal(model, truth(CFG, (2, 1), world.fulls(b)), "version B")
        world.trainers.wait_released(b)


def test_discard_keeps_old_version(world):
    """A discarded stage leaves the live parameters as they were (and does
    not release the version); staging it again and applying installs it."""
    model, cap = H.capture(CFG, 0, 1)
    before = H.snapshot(model)
    with receiver(world, cap, model) as r:
        v = world.publish()
        staged = r.stage(v)
        r.discard(staged)
        assert staged.consumed
        H.assert_equal(model, before, "discard wrote params")
        with pytest.raises(reshard.InvalidArgument, match="discarded"):
            r.apply(staged)
        r.apply(r.stage(v))
        H.assert_equal(model, truth(CFG, (1, 0), world.fulls(v)), "restaged")
        world.trainers.wait_released(v)


# -- captures a receiver must refuse ----------------------------------------
A_LOG = "model.layers.0.mixer.A_log"


def test_arithmetic_loader_is_refused(world):
    """The loader computes A = -exp(A_log): capture reports that source
    of each layer (and only those) unsupported, naming the op and where,
    and the receiver refuses to refit the model ("unsupported geometry",
    naming every such source, op and location), with nothing installed."""
    cfg = PUBLISHED
    model, cap = H.capture(cfg, 0, 2)
    assert set(cap.unsupported) == {A_LOG, "model.layers.1.mixer.A_log"}
    assert "'exp'" in cap.unsupported[A_LOG], cap.unsupported
    assert "zoo.py:" in cap.unsupported[A_LOG], cap.unsupported
    before = H.snapshot(model)
    v = world.publish()
    with receiver(world, cap, model) as r:
        with pytest.raises(reshard.UnsupportedReshard) as e:
            r.stage(v)
        # every refused source is named, not only the first
        for name in cap.unsupported:
            assert f"'{name}'" in e.value.message, e.value.message
        assert "'exp'" in e.value.message
    H.assert_equal(model, before, "refused capture installed")


def scratch_loader(model):
    """load_weights, except one tensor is staged into a scratch buffer
    that is no parameter (a write capture cannot attribute)."""
    name = "model.norm.weight"
    scratch = torch.empty(CFG.hidden, dtype=CFG.dtype)

    def load(weights):
        rest = []
        for n, w in weights:
            if n == name:
                scratch.copy_(w)
            else:
                rest.append((n, w))
        model.load_weights(rest)
    return load


def test_unattributed_capture_is_refused(world):
    """A write into no parameter: the capture counts it (and says where),
    and a receiver over that capture is refused at construction."""
    model = M.build(CFG, 0, 1, H.LIVE_FILL)
    cap = reshard.capture(model, M.sources(CFG), load=scratch_loader(model))
    H.write_fills(model, cap)
    before = H.snapshot(model)
    assert cap.unattributed >= 1, cap
    assert cap.unattributed_details, cap
    with pytest.raises(reshard.InputError) as e:
        receiver(world, cap, model)
    assert "unattributed" in e.value.message
    assert e.value.status == "RS_ERR_INPUT"
    H.assert_equal(model, before, "refused capture touched params")


def test_other_model_config_is_refused(world):
    """The receiver's model has ffn 32, the trainers publish ffn 24: the
    loader's narrows would read the wrong rows, so the refit is refused
    naming the tensor and both shapes, nothing installed."""
    cfg = M.config(**M.DENSE, ffn=32)
    model, cap = H.capture(cfg, 0, 2)
    before = H.snapshot(model)
    v = world.publish()
    with receiver(world, cap, model) as r:
        with pytest.raises(reshard.IncompleteRefit) as e:
            r.stage(v)
    msg = e.value.message
    assert "tensor 'model.layers.0.mlp.gate_proj.weight'" in msg \
        or "tensor 'model.layers.0.mlp.up_proj.weight'" in msg \
        or "tensor 'model.layers.0.mlp.down_proj.weight'" in msg, msg
    assert "[32, 16]" in msg or "[16, 32]" in msg, msg
    H.assert_equal(model, before, "mismatched refit installed")


# -- publishers and the directory failing mid-stage --------------------------
def strike_mid_stage(directory, recv, version, holder, strike):
    """Starts recv.stage(version) in a thread and calls strike() once the
    stage holds its lease; returns the stage's outcome (or raises)."""
    job = H.InThread(lambda: recv.stage(version))
    H.wait_for(lambda: H.lease_taken(directory, version, holder) or job.done(),
               30, "the stage's lease")
    assert not job.done(), "the stage ended before the strike"
    strike()
    return job


def test_publisher_killed_mid_stage(file_dir):
    """No replica: rank 1 frozen, the stage started, rank 1 killed. The
    stage fails with the library's transport/timeout/incomplete error and
    the live parameters are untouched byte for byte."""
    with H.Trainers(file_dir, "ucx", CFG, world=2) as trainers:
        trainers.publish(1)
        model, cap = H.capture(CFG, 0, 1)
        before = H.snapshot(model)
        with H.receiver(file_dir, "ucx", cap, model, holder="victim",
                        timeout_s=10, pull_timeout_s=60) as r:
            trainers.proc(1).freeze()
            job = strike_mid_stage(file_dir, r, 1, "victim",
                                   trainers.proc(1).kill)
            with pytest.raises(FAILURES) as e:
                job.result()
            # The message names the publisher whose reads failed.
            assert "trainer-1, slot 1" in e.value.message, e.value.message
            H.assert_equal(model, before, "failed stage touched params")


def test_replica_killed_mid_stage(file_dir):
    """Two replicas per rank. The replica a receiver with salt 1 reads
    slot 1 from (replica 0: publishers join replica 0 of every rank
    first) is frozen and killed mid-stage while a reader reads the live
    parameters: the reader sees no change, the stage completes from the
    other replica, apply installs it byte-exact and records the
    failover."""
    with H.Trainers(file_dir, "ucx", CFG, world=2, replicas=2) as trainers:
        trainers.publish(1)
        model, cap = H.capture(CFG, 1, 2)
        before = H.snapshot(model)
        with H.receiver(file_dir, "ucx", cap, model, salt=1, holder="r",
                        timeout_s=10, pull_timeout_s=60) as r:
            victim = trainers.proc(1, replica=0)
            victim.freeze()
            reader = Reader(model, before)

            def strike():
                # The stage is in flight (its publisher frozen): a reader
                # sees the old bytes now, and until the stage returns.
                reader.start()
                assert reader.first.wait(30)
                victim.kill()
            job = strike_mid_stage(file_dir, r, 1, "r", strike)
            try:
                staged = job.result()
            finally:
                reader.stop()
            assert not reader.changed, reader.changed
            H.assert_equal(model, before, "stage touched params")
            res = r.apply(staged)
            assert res.failovers >= 1, res
            assert res.failover_msg == "trainer-1, slot 1 -> trainer-1-r1", \
                res.failover_msg
            H.assert_equal(model, truth(CFG, (2, 1), trainers.fulls(1)),
                           "after failover")


@pytest.mark.parametrize("staging", [None, "arena"])
def test_replica_frozen_fails_over_by_stall(file_dir, staging):
    """Two replicas per rank; the one a receiver with salt 1 reads slot 1
    from is frozen (SIGSTOP) for the whole pull: its reads make no
    progress, so after stall_s (1 s; timeout_s is 60 s) the pull reads
    slot 1 from the other replica, installs it byte-exact and names the
    frozen one, and why, among the failures. Arena publishers serve
    deltas: the receiver's reads then go through its delta reads (on by
    default), which must fail over the same way."""
    with H.Trainers(file_dir, "ucx", CFG, world=2, replicas=2,
                    staging=staging) as trainers:
        trainers.publish(1)
        model, cap = H.capture(CFG, 1, 2)
        with H.receiver(file_dir, "ucx", cap, model, salt=1, holder="r",
                        timeout_s=60, pull_timeout_s=60, stall_s=1.0) as r:
            victim = trainers.proc(1, replica=0)
            victim.freeze()
            try:
                res = r.pull(1)
            finally:
                victim.thaw()
            assert res.failovers == 1, res
            assert [f["publisher"] for f in res.failures] == ["trainer-1"]
            assert res.failures[0]["slot"] == 1
            assert "no progress for 1 s" in res.failures[0]["error"], \
                res.failures
            H.assert_equal(model, truth(CFG, (2, 1), trainers.fulls(1)),
                           "after the stall's failover")
            # arena: the reads went through the delta reads (whole: nothing
            # was held yet); otherwise there were none
            assert (res.delta["whole_runs"] > 0) == (staging == "arena"), \
                res.delta


def test_redis_stopped_mid_stage(redis_server):
    """The directory goes away while a stage is in flight (its lease taken,
    a publisher frozen, then thawed). Either the stage had read every
    table: it completes (its bytes are verified; renewals that cannot
    reach the directory are retried), but apply cannot prove the lease was
    held throughout and refuses (VerifyError, after riding out the outage
    for lease_ttl_s); or it had not: the stage fails naming the directory.
    Which one depends on how far the stage got when the lease showed (no
    handshake tells), but either way the error is clear, comes in bounded
    time, and the live parameters are untouched."""
    url = redis_server.url
    with H.Trainers(url, "ucx", CFG, world=2) as trainers:
        trainers.publish(1)
        model, cap = H.capture(CFG, 0, 1)
        before = H.snapshot(model)
        with H.receiver(url, "ucx", cap, model, holder="r", timeout_s=5,
                        pull_timeout_s=10, lease_ttl_s=3) as r:
            trainers.proc(1).freeze()

            def strike():
                redis_server.stop()
                trainers.proc(1).thaw()
            job = strike_mid_stage(url, r, 1, "r", strike)
            try:
                staged = job.result()
            except reshard.ReshardError as e:
                assert url[len("redis://"):] in e.message, e.message
                staged = None
            H.assert_equal(model, before, "stage touched params")
            if staged is not None:
                assert staged.version == 1
                with pytest.raises(reshard.VerifyError) as e:
                    r.apply(staged)
                msg = e.value.message
                assert "refusing to install" in msg and "lease 'r'" in msg, \
                    msg
                H.assert_equal(model, before, "refused apply touched params")


def test_redis_down_before_stage(redis_server):
    """A directory that is gone when the stage starts: the stage times out
    (discover_timeout_s) saying the directory is unreachable, parameters
    untouched."""
    url = redis_server.url
    with H.Trainers(url, "cma", CFG, world=2) as trainers:
        trainers.publish(1)
        model, cap = H.capture(CFG, 0, 1)
        before = H.snapshot(model)
        with H.receiver(url, "cma", cap, model, timeout_s=5,
                        discover_timeout_s=2, pull_timeout_s=10) as r:
            redis_server.stop()
            with pytest.raises(reshard.ReshardTimeout) as e:
                r.stage(1)
            msg = e.value.message
            assert f"directory {url} unreachable" in msg, msg
            H.assert_equal(model, before, "failed stage touched params")


# -- a refused receiver must not write the serving model --------------------
def test_refused_receiver_leaves_live_params(world):
    """A receiver refused at construction (an unattributed capture)
    changes no byte of the serving model, here one whose padding rows hold
    what the engine left there rather than the loader's zeros."""
    model = M.build(CFG, 1, 2, H.LIVE_FILL)
    cap = reshard.capture(model, M.sources(CFG), load=scratch_loader(model))
    assert cap.fills and cap.unattributed
    before = H.snapshot(model)
    with pytest.raises(reshard.InputError, match="unattributed"):
        receiver(world, cap, model)
    H.assert_equal(model, before, "a refused receiver wrote live params")
