"""Stopping a receiver's stage and a publisher's wait_released: from
another thread (cancel, close, a stage_async future's cancel) and by Ctrl-C
(SIGINT delivered to this process), each leaving nothing staged, the live
parameters untouched and the handle usable. And a receiver's constant
fills: written into no live parameter before the first successful apply,
then installed in the loader's order (the loader run by torch is the ground
truth).

Every wait here is for a version that never comes under a 60 s timeout, so
only a cancel ends it; the joins are bounded hang guards, not timings."""
import os
import signal
import threading
import time

import pytest
import torch

import e2e_harness as H
import e2e_models as M
import reshard

# Across processes, the library's own behaviour: once, with the newest
# torch of the suites (tests/CMakeLists.txt).
pytestmark = pytest.mark.newest_torch

SHAPE = (8, 4)
GUARD_S = 20.0  # hang guard on every join; a cancel ends far sooner


def _load(params):
    """The engine's loader: zeroes p (its padding rows stay zero), copies
    w over the first rows, sets the scale s to a constant."""
    p, s = params["p"], params["s"]

    def load(weights):
        w = dict(weights)["w"]
        with torch.no_grad():
            p.zero_()
            p[:SHAPE[0]].copy_(w)
            s.fill_(0.5)
    return load


def _live():
    return {"p": torch.full((SHAPE[0] + 2, SHAPE[1]), -1.0),
            "s": torch.full((2,), -3.0)}


def _capture():
    live = _live()
    cap = reshard.capture(sources={"w": (SHAPE, torch.float32)},
                          load=_load(live), params=live)
    assert len(cap.fills) == 2 and len(cap.copies) == 1, cap
    return cap


def _truth(w):
    """The loader itself run by torch on live tensors holding the same
    values as the receiver's."""
    t = _live()
    _load(t)([("w", w)])
    return t


def _weights(seed):
    return torch.randn(SHAPE, generator=torch.Generator().manual_seed(seed))


class Trainer:
    """One publisher rank serving w."""

    def __init__(self, directory, seed=1):
        self.w = _weights(seed)
        self.pub = reshard.Publisher(directory, "m", 0, 1, backend="cma")
        self.pub.register("w", self.w)

    def close(self):
        self.pub.close()


@pytest.fixture
def trainer(file_dir):
    t = Trainer(file_dir)
    try:
        yield t
    finally:
        t.close()


def _receiver(directory, params, **kw):
    kw.setdefault("discover_timeout_s", 60)
    return reshard.Receiver(directory, "m", _capture(), params,
                            backend="cma", **kw)


def _same(params, before):
    for n in params:
        assert torch.equal(params[n], before[n]), n


def _until(cond, what):
    deadline = time.monotonic() + GUARD_S
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _staging(r):
    """Whether a stage (or pull) of r is in its library call now."""
    return r._current is not None


class Background:
    """fn() on a thread; its result or exception kept."""

    def __init__(self, fn):
        self.result = self.error = None
        self.thread = threading.Thread(target=self._run, args=(fn,))
        self.thread.start()

    def _run(self, fn):
        try:
            self.result = fn()
        except BaseException as e:  # the test inspects it
            self.error = e

    def join(self):
        self.thread.join(GUARD_S)
        assert not self.thread.is_alive(), "the call did not end"


def _apply_and_check(r, trainer, version, params):
    trainer.pub.publish(version)
    staged = r.stage(version)
    r.apply(staged)
    _same(params, _truth(trainer.w))


def test_cancel_stops_a_stage_waiting_for_a_version(file_dir, trainer):
    params = _live()
    before = {n: t.clone() for n, t in params.items()}
    with _receiver(file_dir, params) as r:
        bg = Background(lambda: r.stage(5))
        _until(lambda: _staging(r), "the stage never started")
        time.sleep(0.3)  # most likely inside the discovery wait by now
        r.cancel()
        bg.join()
        assert isinstance(bg.error, reshard.Cancelled), bg.error
        assert bg.error.status == "RS_ERR_CANCELLED"
        assert "version 5 of 'm'" in bg.error.message
        _same(params, before)
        assert r._staged is None
        # usable: the next stage runs (a cancel before it does not carry
        # over) and installs byte-exact
        _apply_and_check(r, trainer, 1, params)


def test_cancel_when_nothing_runs_does_not_stop_the_next_stage(file_dir,
                                                               trainer):
    params = _live()
    with _receiver(file_dir, params) as r:
        r.cancel()
        _apply_and_check(r, trainer, 1, params)


def test_close_during_a_stage_returns_promptly(file_dir, trainer):
    params = _live()
    before = {n: t.clone() for n, t in params.items()}
    r = _receiver(file_dir, params)
    bg = Background(lambda: r.stage(5))
    _until(lambda: _staging(r), "the stage never started")
    closer = Background(r.close)
    closer.join()
    bg.join()
    assert isinstance(bg.error, reshard.Cancelled), bg.error
    _same(params, before)
    with pytest.raises(reshard.InvalidArgument, match="closed"):
        r.stage(1)


@pytest.fixture
def sigint():
    """SIGINT raises KeyboardInterrupt here, also when this process was
    started with SIGINT ignored (Python then installs no handler)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _interrupted(cond, call):
    """call() ends in KeyboardInterrupt: SIGINT to this process from
    another thread once cond() holds."""
    def send():
        _until(cond, "the wait never started")
        os.kill(os.getpid(), signal.SIGINT)
    sender = threading.Thread(target=send)
    sender.start()
    with pytest.raises(KeyboardInterrupt):
        call()
    sender.join(GUARD_S)


def test_sigint_interrupts_a_stage(file_dir, trainer, sigint):
    params = _live()
    before = {n: t.clone() for n, t in params.items()}
    with _receiver(file_dir, params) as r:
        _interrupted(lambda: _staging(r), lambda: r.stage(5))
        assert not _staging(r)
        _same(params, before)
        _apply_and_check(r, trainer, 1, params)


def test_sigint_interrupts_a_pull(file_dir, trainer, sigint):
    params = _live()
    before = {n: t.clone() for n, t in params.items()}
    with _receiver(file_dir, params) as r:
        _interrupted(lambda: _staging(r), lambda: r.pull(5))
        _same(params, before)
        trainer.pub.publish(1)
        r.pull(1)
        _same(params, _truth(trainer.w))


def test_sigint_interrupts_wait_released(file_dir, trainer, sigint):
    trainer.pub.publish(1)
    _interrupted(lambda: trainer.pub._waiting,
                 lambda: trainer.pub.wait_released(1, timeout_s=60))
    # usable: released by someone, the wait returns
    reshard.release(file_dir, "m", 1)
    trainer.pub.wait_released(1, timeout_s=60)


def test_publisher_cancel_and_close_stop_wait_released(file_dir, trainer):
    trainer.pub.publish(1)
    bg = Background(lambda: trainer.pub.wait_released(1, timeout_s=60))
    _until(lambda: trainer.pub._waiting, "the wait never started")
    trainer.pub.cancel()
    bg.join()
    assert isinstance(bg.error, reshard.Cancelled), bg.error
    assert "release of version 1 of 'm'" in bg.error.message
    bg = Background(lambda: trainer.pub.wait_released(1, timeout_s=60))
    _until(lambda: trainer.pub._waiting, "the wait never started")
    closer = Background(trainer.pub.close)
    closer.join()
    bg.join()
    assert isinstance(bg.error, reshard.Cancelled), bg.error


def test_stage_async_future(file_dir, trainer):
    params = _live()
    before = {n: t.clone() for n, t in params.items()}
    with _receiver(file_dir, params) as r:
        # cancelled while it runs: the future is cancelled, nothing staged
        fut = r.stage_async(5)
        _until(lambda: _staging(r), "the stage never started")
        assert fut.cancel()
        assert fut.cancelled()
        _until(lambda: not _staging(r), "the stage did not stop")
        _same(params, before)
        # receiver.cancel() ends it with Cancelled
        fut = r.stage_async(5)
        _until(lambda: _staging(r), "the stage never started")
        r.cancel()
        assert isinstance(fut.exception(timeout=GUARD_S), reshard.Cancelled)
        # a version that comes: the future holds the staged version
        fut = r.stage_async(1)
        trainer.pub.publish(1)
        staged = fut.result(timeout=GUARD_S)
        assert isinstance(staged, reshard.Staged) and staged.version == 1
        _same(params, before)
        r.apply(staged)
        _same(params, _truth(trainer.w))


def test_cancel_mid_wire_over_ucx(file_dir):
    """A stage whose reads cannot complete (rank 1 frozen: UCX over tcp
    gets no reply) cancelled once it holds its lease: Cancelled, the lease
    dropped, nothing staged, the live model untouched; with rank 1 thawed
    the next stage installs byte-exact."""
    cfg = M.config(**M.DENSE)
    with H.Trainers(file_dir, "ucx", cfg, world=2) as trainers:
        trainers.publish(1)
        model, cap = H.capture(cfg, 0, 1)
        before = H.snapshot(model)
        with H.receiver(file_dir, "ucx", cap, model, holder="victim",
                        timeout_s=60) as r:
            trainers.proc(1).freeze()
            fut = r.stage_async(1)
            H.wait_for(lambda: H.lease_taken(file_dir, 1, "victim")
                       or fut.done(), GUARD_S, "the stage's lease")
            assert not fut.done(), fut.exception()
            time.sleep(0.5)  # most likely waiting for the reads by now
            r.cancel()
            err = fut.exception(timeout=GUARD_S)
            assert isinstance(err, reshard.Cancelled), err
            assert f"version 1 of '{H.MODEL}'" in err.message, err.message
            assert not H.lease_taken(file_dir, 1, "victim")
            assert r._staged is None
            H.assert_equal(model, before, "cancelled stage touched params")
            trainers.proc(1).thaw()
            r.apply(r.stage(1))
            H.assert_equal(model, M.truth(cfg, 0, 1, trainers.fulls(1)),
                           "after the cancelled stage")


# -- fills -------------------------------------------------------------------
def test_fills_touch_no_live_parameter_before_the_first_apply(file_dir,
                                                              trainer):
    """A receiver whose stages fail (no version comes, a version it cannot
    plan) leaves every live byte as it was, the fill regions included; the
    first successful apply installs the fills and the copies."""
    params = _live()
    before = {n: t.clone() for n, t in params.items()}
    with _receiver(file_dir, params, discover_timeout_s=0.3) as r:
        _same(params, before)
        with pytest.raises(reshard.ReshardTimeout):
            r.stage(1)
        with pytest.raises(reshard.ReshardTimeout):
            r.pull(1)
        _same(params, before)
        _apply_and_check(r, trainer, 1, params)


def test_fills_stay_out_of_live_parameters_when_a_version_is_refused(
        file_dir):
    other = reshard.Publisher(file_dir, "m", 0, 1, backend="cma")
    try:
        other.register("w", torch.ones(SHAPE[0], SHAPE[1] + 1))  # wrong shape
        other.publish(1)
        params = _live()
        before = {n: t.clone() for n, t in params.items()}
        with _receiver(file_dir, params) as r:
            with pytest.raises(reshard.ReshardError):
                r.pull(1)
        _same(params, before)
    finally:
        other.close()


def test_fill_then_overlapping_copy_installs_the_loader_bytes(file_dir,
                                                              trainer):
    """p is zeroed whole, then w copied over its first rows: the rows the
    copy writes hold w, the rest zero, version after version."""
    params = _live()
    with _receiver(file_dir, params) as r:
        _apply_and_check(r, trainer, 1, params)
        assert torch.equal(params["p"][SHAPE[0]:], torch.zeros(2, SHAPE[1]))
        assert torch.equal(params["s"], torch.full((2,), 0.5))
        trainer.pub.wait_released(1, timeout_s=GUARD_S)
        trainer.w.copy_(_weights(2))
        _apply_and_check(r, trainer, 2, params)
