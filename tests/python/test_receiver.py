"""Publisher and Receiver in one process over a hand-written capture: two
trainer ranks publish halves of live tensors, a receiver stages (the live
parameters untouched), applies (byte-exact against torch's own slicing and
cast of the full tensors), discards, and reports errors as exceptions with
reshard's status and message. Both directories, both transports."""
import json

import pytest
import torch

import reshard
from trainer_ranks import TrainerRanks

W_SHAPE, W2_SHAPE = (8, 4), (8, 8)

CAPTURE = {
    "schema": "reshard.capture.v1",
    "params": {"p": {"shape": [8, 4], "dtype": "f32"},
               "q": {"shape": [4, 8], "dtype": "bf16"}},
    "sources": {"w": {"shape": [8, 4], "dtype": "f32"},
                "w2": {"shape": [8, 8], "dtype": "f32"}},
    "copies": [
        {"src": "w", "ops": [], "param": "p", "dest_offset": 0,
         "dest_shape": [8, 4], "dest_stride": [4, 1], "dest_dtype": "f32"},
        {"src": "w2", "ops": [["narrow", 0, 2, 4]], "param": "q",
         "dest_offset": 0, "dest_shape": [4, 8], "dest_stride": [8, 1],
         "dest_dtype": "bf16"},
    ],
}


def _fulls(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(W_SHAPE, generator=g), torch.randn(W2_SHAPE, generator=g)


def _truth(w, w2):
    p = torch.empty(8, 4)
    p.copy_(w)
    q = torch.empty(4, 8, dtype=torch.bfloat16)
    q.copy_(w2.narrow(0, 2, 4))
    return {"p": p, "q": q}


class Trainers(TrainerRanks):
    """Two publisher ranks holding row halves of w and w2 as live tensors."""

    def __init__(self, directory, backend, seed=1):
        w, w2 = _fulls(seed)
        self.shards = [(w[r * 4:(r + 1) * 4].clone(),
                        w2[r * 4:(r + 1) * 4].clone()) for r in range(2)]
        super().__init__()
        for r in range(2):
            p = reshard.Publisher(directory, "m", r, 2, backend=backend)
            p.register_shard("w", self.shards[r][0], W_SHAPE, 0, r, 2)
            p.register_shard("w2", self.shards[r][1], W2_SHAPE, 0, r, 2)
            self.pubs.append(p)

    def fulls(self):
        return (torch.cat([s[0] for s in self.shards]),
                torch.cat([s[1] for s in self.shards]))

    def set(self, seed):
        """New weights written in place into the live shards."""
        w, w2 = _fulls(seed)
        for r, (a, b) in enumerate(self.shards):
            a.copy_(w[r * 4:(r + 1) * 4])
            b.copy_(w2[r * 4:(r + 1) * 4])


@pytest.fixture(params=["cma", "ucx"])
def backend(request):
    return request.param


@pytest.fixture
def trainers(directory, backend):
    with Trainers(directory, backend) as t:
        yield t


def _params():
    return {"p": torch.full((8, 4), -1.0),
            "q": torch.full((4, 8), -2.0, dtype=torch.bfloat16)}


def _receiver(directory, backend, params, **kw):
    kw.setdefault("discover_timeout_s", 20)
    return reshard.Receiver(directory, "m", json.dumps(CAPTURE), params,
                            backend=backend, **kw)


def _same(params, want, *where):
    """Every parameter holds want's bytes (`where` goes into the message)."""
    for n in params:
        assert torch.equal(params[n], want[n]), (*where, n) if where else n


def _pull_refused(open_receiver, error):
    """The message of `error`, which a pull of version 1 through
    open_receiver(params) raises, the parameters left as they were."""
    params = _params()
    before = {n: x.clone() for n, x in params.items()}
    with open_receiver(params) as r:
        with pytest.raises(error) as e:
            r.pull(1)
    _same(params, before)
    return e.value.message


def test_stage_then_apply(directory, backend, trainers):
    trainers.publish(1)
    params = _params()
    before = {n: t.clone() for n, t in params.items()}
    with _receiver(directory, backend, params) as r:
        staged = r.stage(1)
        assert staged.version == 1 and not staged.consumed
        _same(params, before)
        res = r.apply(staged)
        assert staged.consumed
        assert res.version == 1 and res.bytes > 0 and res.sessions == 2
        assert res.bytes_installed == 8 * 4 * 4 + 4 * 8 * 2
        truth = _truth(*trainers.fulls())
        _same(params, truth)
        rec = r.stage_record()
        assert rec["schema"] == "reshard.stage.v2"
        cov = r.coverage()
        assert cov["schema"] == "reshard.coverage.v1"
        with pytest.raises(reshard.InvalidArgument, match="applied or discarded"):
            r.apply(staged)


def test_versions_follow_live_storage(directory, backend, trainers):
    params = _params()
    with _receiver(directory, backend, params) as r:
        for version in (1, 2, 3):
            trainers.set(seed=version * 7)
            trainers.publish(version)
            res = r.pull(version)
            assert res.version == version
            # the first pull parses both trainers' tables; later ones only
            # read their digests into the parsed tables
            assert (res.tables_parsed, res.tables_reused) == (
                (2, 0) if version == 1 else (0, 2))
            assert res.table_bytes_read > 0
            truth = _truth(*trainers.fulls())
            _same(params, truth, version)
            for p in trainers.pubs:
                p.wait_released(version, timeout_s=20)


def test_moved_storage_is_reregistered(file_dir):
    with Trainers(file_dir, "cma") as t:
        t.publish(1)
        params = _params()
        with _receiver(file_dir, "cma", params) as r:
            r.pull(1)
            for p in t.pubs:
                p.wait_released(1, timeout_s=20)
            w, w2 = _fulls(99)
            # A new tensor object replaces the old storage (param.data = ...).
            for rank, (a, b) in enumerate(t.shards):
                a.data = w[rank * 4:(rank + 1) * 4].clone()
                b.data = w2[rank * 4:(rank + 1) * 4].clone()
            t.publish(2)
            res = r.pull(2)
            assert res.replanned
            assert res.tables_parsed == 2 and res.tables_reused == 0
            truth = _truth(w, w2)
            _same(params, truth)


def test_discard_leaves_params_and_allows_next_stage(file_dir):
    with Trainers(file_dir, "cma") as t:
        t.publish(1)
        params = _params()
        before = {n: x.clone() for n, x in params.items()}
        with _receiver(file_dir, "cma", params) as r:
            s = r.stage(1)
            with pytest.raises(reshard.InvalidArgument, match="staged"):
                r.stage(1)
            r.discard(s)
            r.discard(s)  # a consumed handle is a no-op
            _same(params, before)
            r.apply(r.stage(1))
            truth = _truth(*t.fulls())
            assert torch.equal(params["p"], truth["p"])


def test_a_staged_version_is_kept_through_refused_pulls_and_stages(file_dir):
    """While version 1 is staged, a pull or stage of a newer version is
    refused before it moves a byte: the live parameters stay as they were,
    and applying the staged handle installs version 1's bytes, not the
    newer version's."""
    with Trainers(file_dir, "cma") as t:
        t.publish(1)
        truth1 = _truth(*t.fulls())
        params = _params()
        before = {n: x.clone() for n, x in params.items()}
        with _receiver(file_dir, "cma", params) as r:
            s = r.stage(1)
            t.set(7)
            t.publish(2)
            with pytest.raises(reshard.InvalidArgument,
                               match="version 1 is staged"):
                r.pull(2)
            with pytest.raises(reshard.InvalidArgument, match="staged"):
                r.stage(2)
            _same(params, before)
            assert r.apply(s).version == 1
            _same(params, truth1)
            assert r.pull(2).version == 2
            truth2 = _truth(*t.fulls())
            _same(params, truth2)


def test_mirrored_param_gets_copied(file_dir):
    """A parameter that is not a contiguous CPU tensor (here a transposed
    view; a CUDA tensor takes the same path) is staged through host memory
    and installed with copy_."""
    with Trainers(file_dir, "cma") as t:
        t.publish(1)
        base = torch.full((4, 8), -1.0)
        params = {"p": base.t(), "q": torch.zeros(4, 8, dtype=torch.bfloat16)}
        assert not params["p"].is_contiguous()
        with _receiver(file_dir, "cma", params) as r:
            s = r.stage(1)
            assert torch.equal(base, torch.full((4, 8), -1.0))
            r.apply(s)
        truth = _truth(*t.fulls())
        assert torch.equal(params["p"], truth["p"])
        assert torch.equal(base, truth["p"].t())


def test_errors_are_exceptions_with_status(file_dir):
    with Trainers(file_dir, "cma") as t:
        t.publish(1)
        with pytest.raises(reshard.InvalidArgument, match="'q' of the capture is not in params"):
            _receiver(file_dir, "cma", {"p": torch.zeros(8, 4)})
        with pytest.raises(reshard.InputError, match="parameter 'p' is \\[4, 8\\] f32, the capture has \\[8, 4\\] f32"):
            _receiver(file_dir, "cma", {"p": torch.zeros(4, 8),
                                         "q": torch.zeros(4, 8, dtype=torch.bfloat16)})
        bad = dict(CAPTURE, unattributed=2)
        with pytest.raises(reshard.InputError) as e:
            reshard.Receiver(file_dir, "m", json.dumps(bad), _params(),
                             backend="cma")
        assert e.value.status == "RS_ERR_INPUT"
        assert "2 unattributed write(s)" in e.value.message
        broken = json.dumps(CAPTURE).replace('"narrow", 0, 2, 4', '"narrow", 0, 2')
        with pytest.raises(reshard.InputError, match="copies\\[1\\].ops\\[0\\]"):
            reshard.Receiver(file_dir, "m", broken, _params(), backend="cma")
        params = _params()
        before = {n: x.clone() for n, x in params.items()}
        with _receiver(file_dir, "cma", params, discover_timeout_s=0.5) as r:
            with pytest.raises(reshard.ReshardTimeout) as e:
                r.stage(5)
            assert isinstance(e.value, TimeoutError)
            assert "5" in e.value.message
            _same(params, before)


def test_mismatched_model_is_refused(file_dir):
    """The trainers publish w2 as [8, 8]; a capture assuming [16, 8] is the
    wrong model config: IncompleteRefit naming the tensor, nothing
    installed."""
    with Trainers(file_dir, "cma") as t:
        t.publish(1)
        cap = json.loads(json.dumps(CAPTURE))
        cap["sources"]["w2"]["shape"] = [16, 8]
        msg = _pull_refused(lambda params: reshard.Receiver(
            file_dir, "m", json.dumps(cap), params, backend="cma",
            discover_timeout_s=20), reshard.IncompleteRefit)
        assert "tensor 'w2'" in msg


def test_release_by_the_coordinator(file_dir):
    """Receivers that do not release (several inference ranks): the version
    stays unreleased after apply, and reshard.release ends it, after which
    the publishers' wait_released returns."""
    with Trainers(file_dir, "cma") as t:
        t.publish(1)
        params = _params()
        with _receiver(file_dir, "cma", params, release_after=False) as r:
            res = r.pull(1)
            assert res.release_status == "RS_OK" and res.release_msg == ""
            with pytest.raises(reshard.ReshardTimeout):
                t.pubs[0].wait_released(1, timeout_s=0.3)
            s = r.stage(1)
            with pytest.raises(reshard.IncompleteRefit) as e:
                reshard.release(file_dir, "m", 1)
            assert "lease" in e.value.message
            r.discard(s)
        reshard.release(file_dir, "m", 1)
        for p in t.pubs:
            p.wait_released(1, timeout_s=20)
        with pytest.raises(reshard.InputError):
            reshard.release(file_dir, "m", 9)


def test_unregister_drops_a_tensor(file_dir):
    """After unregister the next version lists only what is left: a receiver
    whose capture reads the dropped tensor finds it unpublished (the plan's
    fallback: UnsupportedReshard), nothing installed."""
    with Trainers(file_dir, "cma") as t:
        for p in t.pubs:
            p.unregister("w2")
            with pytest.raises(reshard.InvalidArgument, match="'w2' is not registered"):
                p.unregister("w2")
        t.publish(1)
        msg = _pull_refused(lambda params: _receiver(file_dir, "cma", params),
                            reshard.UnsupportedReshard)
        assert "'w2': not published by any shard table" in msg


def test_fills_outside_a_param_are_refused(file_dir):
    """A capture whose fill reaches past its parameter (a corrupt or forged
    file) is refused before anything is written."""
    cap = reshard.Capture.from_json(json.dumps(CAPTURE))
    params = _params()
    before = {n: x.clone() for n, x in params.items()}
    cap.fills = [{"param": "p", "dest_offset": 30, "dest_shape": [4],
                  "dest_stride": [1], "value": 0.0, "at": 0}]
    with pytest.raises(reshard.InputError, match="fills\\[0\\] of parameter 'p'"):
        reshard.Receiver(file_dir, "m", cap, params, backend="cma")
    _same(params, before)
    cap.fills = [{"param": "p", "dest_offset": 28, "dest_shape": [4],
                  "dest_stride": [1], "value": 0.0, "at": 0}]
    with reshard.Receiver(file_dir, "m", cap, params, backend="cma"):
        # accepted, and nothing written before a first apply
        _same(params, before)


def test_deadline_in_discovery_is_named_once(file_dir):
    """pull_timeout_s running out while waiting for a version that never
    comes: ReshardTimeout naming the discover stage once, with the cause."""
    params = _params()
    with _receiver(file_dir, "cma", params, pull_timeout_s=0.5,
                   discover_timeout_s=30) as r:
        with pytest.raises(reshard.ReshardTimeout) as e:
            r.stage(1)
    msg = e.value.message
    assert msg.count("deadline passed in the discover stage") == 1, msg
    assert "(timeout 0.5 s)" in msg, msg


# Two converts (w2's row halves into bf16 a and b), one page of staging
# each: a budget of one page pulls them in two rounds.
HALVES = {
    "schema": "reshard.capture.v1",
    "params": {"a": {"shape": [4, 8], "dtype": "bf16"},
               "b": {"shape": [4, 8], "dtype": "bf16"}},
    "sources": {"w2": {"shape": [8, 8], "dtype": "f32"}},
    "copies": [
        {"src": "w2", "ops": [["narrow", 0, 0, 4]], "param": "a",
         "dest_offset": 0, "dest_shape": [4, 8], "dest_stride": [8, 1],
         "dest_dtype": "bf16"},
        {"src": "w2", "ops": [["narrow", 0, 4, 4]], "param": "b",
         "dest_offset": 0, "dest_shape": [4, 8], "dest_stride": [8, 1],
         "dest_dtype": "bf16"},
    ],
}


def _halves_params():
    return {n: torch.full((4, 8), -3.0, dtype=torch.bfloat16) for n in "ab"}


@pytest.mark.parametrize("budget,rounds", [(4096, 2), (None, 1),
                                           ("unbounded", 1)])
def test_staging_budget_pulls_in_rounds(file_dir, budget, rounds):
    with Trainers(file_dir, "cma") as t:
        t.publish(1)
        params = _halves_params()
        with reshard.Receiver(file_dir, "m", json.dumps(HALVES), params,
                              backend="cma", discover_timeout_s=20,
                              release_after=False,
                              staging_budget=budget) as r:
            res = r.pull(1)
            assert res.stages["staging_rounds"] == rounds
            assert res.stages["staging_bytes"] == 8192 // rounds
            assert res.stages["staging_unbounded"] == 8192
            assert r.stage_record()["staging_rounds"] == rounds
            d = r.dry_run(1)
            assert (d["staging_bytes"], d["staging_rounds"]) == \
                (8192 // rounds, rounds)
            assert d["param_bytes"] == d["shadow_bytes"] == 2 * 4 * 8 * 2
        _, w2 = t.fulls()
        want = w2.to(torch.bfloat16)
        assert torch.equal(params["a"], want[:4]) and \
            torch.equal(params["b"], want[4:])


def test_staging_budget_below_a_box_is_refused(file_dir):
    with Trainers(file_dir, "cma") as t:
        t.publish(1)
        params = _halves_params()
        before = {n: x.clone() for n, x in params.items()}
        with reshard.Receiver(file_dir, "m", json.dumps(HALVES), params,
                              backend="cma", discover_timeout_s=20,
                              staging_budget=1024) as r:
            with pytest.raises(reshard.InvalidArgument,
                               match=r"staging budget of 1.00 KiB .* copy 0 "
                                     r"of 'w2' into 'a'"):
                r.pull(1)
        _same(params, before)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "1GiB", True])
def test_bad_staging_budgets_are_refused(file_dir, bad):
    with pytest.raises(reshard.InvalidArgument, match="staging_budget"):
        reshard.Receiver(file_dir, "m", json.dumps(HALVES),
                         _halves_params(), backend="cma",
                         staging_budget=bad)
