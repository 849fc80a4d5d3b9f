"""The model-family loaders of zoo_models.py, captured and checked byte for
byte against the loader itself, in pure torch and through the library.

Ground truth: the family's `load_weights` run by torch on real full
tensors into real parameters preset to a sentinel. Capture: the same
loader over placeholders on a meta copy of the model. A capture that is
accepted must replay to the truth and, published by a trainer and pulled
by a `Receiver` (plan, wire, replay, cast, install in the C library),
install exactly the truth; a refused one must be refused by replay and by
the library alike, naming what is wrong.
"""
import functools

import pytest
import torch

import reshard
import zoo_models
from trainer_ranks import publish_and_pull

SENTINEL = -7.0


def sentinel_like(p):
    if p.dtype.is_floating_point:
        return torch.full(p.shape, SENTINEL, dtype=p.dtype)
    return torch.full(p.shape, 7, dtype=p.dtype)


def fresh(case, tp, rank):
    model = case.make(tp, rank)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(sentinel_like(p))
    return model


def params_of(model):
    return {n: p.detach() for n, p in model.named_parameters()}


def truth_of(case, tp, rank, weights):
    model = fresh(case, tp, rank)
    model.load_weights(iter(weights.items()))
    return {n: p.clone() for n, p in params_of(model).items()}


def capture_of(case, tp, rank):
    return reshard.capture(case.make(tp, rank, device="meta"), case.specs)


def fresh_params(case, tp, rank):
    return {n: p.clone() for n, p in params_of(fresh(case, tp, rank)).items()}


def assert_same(expected, actual):
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


ACCEPTED = [(c, tp, rank) for c in zoo_models.CASES if c.expect is None
            for tp in c.tps for rank in range(tp)]
REFUSED = [c for c in zoo_models.CASES if c.expect is not None]


@pytest.mark.parametrize("case,tp,rank", ACCEPTED,
                         ids=[f"{c.name}-tp{t}-r{r}" for c, t, r in ACCEPTED])
def test_capture_replays_the_loader(case, tp, rank):
    weights = zoo_models.make_weights(case.specs, seed=tp * 10 + rank)
    truth = truth_of(case, tp, rank, weights)
    cap = capture_of(case, tp, rank)
    assert cap.unsupported == {}
    assert cap.unattributed == 0, cap.unattributed_details
    assert cap.refusal() is None
    for replayed in (cap, reshard.Capture.from_json(cap.to_json())):
        out = fresh_params(case, tp, rank)
        replayed.replay(weights, out)
        assert_same(truth, out)


# Publish every full tensor from one trainer rank, pull version 1 into
# `params` with a Receiver over `cap`: the receiver's left_out.
pull_through_library = functools.partial(publish_and_pull, model="zoo")


LIBRARY = [(c, max(c.tps), max(c.tps) - 1) for c in zoo_models.CASES
           if c.expect is None]


@pytest.mark.parametrize("case,tp,rank", LIBRARY,
                         ids=[f"{c.name}-tp{t}-r{r}" for c, t, r in LIBRARY])
def test_library_installs_the_loaders_bytes(file_dir, case, tp, rank):
    weights = zoo_models.make_weights(case.specs, seed=3)
    truth = truth_of(case, tp, rank, weights)
    cap = capture_of(case, tp, rank)
    params = fresh_params(case, tp, rank)
    pull_through_library(file_dir, cap, weights, params)
    assert_same(truth, params)


@pytest.mark.parametrize("case", REFUSED, ids=[c.name for c in REFUSED])
def test_refused_by_capture_replay_and_library(file_dir, case):
    kind, words = case.expect
    if kind == "stopped":
        with pytest.raises(reshard.InputError) as e:
            capture_of(case, 1, 0)
        for src, w in words.items():
            assert w in str(e.value) and f"'{src}'" in str(e.value)
        assert "cannot answer without data" in str(e.value)
        return
    cap = capture_of(case, 1, 0)
    weights = zoo_models.make_weights(case.specs, seed=4)
    if kind == "unsupported":
        assert set(cap.unsupported) == set(words)
        for src, w in words.items():
            assert w in cap.unsupported[src], cap.unsupported[src]
            assert "zoo_models.py:" in cap.unsupported[src]
        with pytest.raises(reshard.UnsupportedReshard) as e:
            cap.replay(weights, fresh_params(case, 1, 0))
        for src in words:                       # every source is named
            assert f"'{src}'" in str(e.value)
        with pytest.raises(reshard.UnsupportedReshard) as e:
            pull_through_library(file_dir, cap, weights,
                                 fresh_params(case, 1, 0))
        assert any(src in str(e.value) for src in words)
    else:
        assert cap.unattributed > 0
        details = "\n".join(cap.unattributed_details)
        for w in words.values():
            assert w in details
        with pytest.raises(reshard.InputError):
            cap.replay(weights, fresh_params(case, 1, 0))
        with pytest.raises(reshard.InputError, match="unattributed"):
            pull_through_library(file_dir, cap, weights,
                                 fresh_params(case, 1, 0))


def case_named(name):
    return next(c for c in zoo_models.CASES if c.name == name)


def test_skipped_sources_leave_their_parameters_and_the_rest_installs(
        file_dir):
    case = case_named("moe-wna16")
    weights = zoo_models.make_weights(case.specs, seed=5)
    truth = truth_of(case, 2, 1, weights)
    cap = capture_of(case, 2, 1)
    params = fresh_params(case, 2, 1)
    notices = []
    left = pull_through_library(file_dir, cap, weights, params,
                                skip=["*.qweight", "*.qzeros"],
                                notice=notices.append)
    assert left == ["w13_qweight", "w13_qzeros"]
    assert any("w13_qweight, w13_qzeros" in n for n in notices)
    assert torch.equal(params["w13_scales"], truth["w13_scales"])
    for name in left:
        assert torch.equal(params[name], sentinel_like(params[name]))


def test_kv_scales_are_copies_of_the_element_not_fills():
    cap = capture_of(case_named("fp8-kv-scales"), 1, 0)
    assert cap.fills == []
    by_param = {c["param"]: c for c in cap.copies}
    assert by_param["k_scale"]["src"] == "k_proj.k_scale"
    assert by_param["v_scale"]["ops"] == [["select", 0, 0]]
    assert by_param["q_scale"]["dest_dtype"] == torch.float32


def test_neox_reorder_is_recorded_as_one_copy_per_head_band():
    case = case_named("gpt-neox-qkv-reorder")
    cap = capture_of(case, 2, 1)
    w = [c for c in cap.copies
         if c["src"] == "attention.query_key_value.weight"]
    # q, k and v of each of this rank's two heads: one strided view each
    assert len(w) == 3 * 2
    assert sorted(c["dest_offset"] for c in w) == [i * 12 for i in range(6)]


def test_gpt_oss_contiguous_records_the_strided_view():
    cap = capture_of(case_named("gpt-oss-experts"), 3, 2)
    w13 = [c for c in cap.copies if c["param"] == "w13_weight"]
    assert len(w13) == 1
    assert w13[0]["ops"] == [["slice", 2, 8, 12, 1], ["permute", [0, 2, 1]]]


@pytest.mark.parametrize("case", [c for c in zoo_models.CASES
                                  if c.expect is None or
                                  c.expect[0] != "stopped"],
                         ids=lambda c: c.name)
def test_capture_on_the_live_model_is_the_meta_capture_and_writes_nothing(
        case):
    live = fresh(case, 1, 0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in live.parameters():
            p.copy_(torch.randint(0, 100, p.shape, generator=g))
    before = {n: (p.clone(), p.data_ptr())
              for n, p in params_of(live).items()}
    cap = reshard.capture(live, case.specs)
    for n, p in params_of(live).items():
        assert p.data_ptr() == before[n][1], n
        assert torch.equal(p, before[n][0]), n
    meta = capture_of(case, 1, 0)
    assert cap.copies == meta.copies and cap.fills == meta.fills
    assert cap.unsupported.keys() == meta.unsupported.keys()
    assert cap.unattributed == meta.unattributed
