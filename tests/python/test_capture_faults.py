"""What capture refuses and what it cannot attribute.

Each unsupported case runs a loader that reads source "bad" in a way the
capture format cannot express and source "good" with a plain narrow: the
loader must run to its end, "bad" must be reported with the op's name and
the loader's file:line, and "good" must still be captured and replay
exactly. Writes that reach no parameter, views never written and writes
into parameters that come from no source are counted as unattributed, and
no parameter byte changes.
"""
import inspect

import pytest
import torch

import reshard

SENTINEL = -7.0
HERE = __file__


def line_of(fn, marker):
    """Line number of the first source line of `fn` containing `marker`."""
    lines, first = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if marker in text:
            return first + i
    raise AssertionError(f"{marker} not in {fn.__name__}")


def run_pair(bad_read, bad_shape=(4, 6), bad_dtype=torch.float32,
             pshape=None):
    """Capture a loader copying `bad_read(w)` into `pb` and
    `good.narrow(0, 1, 2)` into `pg`; return (capture, loader fn)."""
    params = {"pb": torch.empty(pshape or (2, 6), device="meta"),
              "pg": torch.empty((2, 6), device="meta")}

    def load(weights):
        ws = dict(weights)
        params["pb"].copy_(bad_read(ws["bad"]))  # BAD
        params["pg"].copy_(ws["good"].narrow(0, 1, 2))

    cap = reshard.capture(
        sources={"bad": (bad_shape, bad_dtype),
                 "good": ((4, 6), torch.float32)},
        load=load, params=params)
    return cap, load


def assert_good_still_captured(cap):
    assert [c["src"] for c in cap.copies] == ["good"]
    full = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    fresh = {"pb": torch.full((2, 6), SENTINEL),
             "pg": torch.full((2, 6), SENTINEL)}
    cap.replay({"good": full}, fresh, partial=True)
    assert torch.equal(fresh["pg"], full[1:3])


UNSUPPORTED = [
    # (id, read of the bad source, expected words in the reason, shape, dtype)
    ("mul", lambda w: (w * 2)[:2], "'mul'", (4, 6), torch.float32),
    ("torch.exp", lambda w: torch.exp(w)[:2], "'exp'", (4, 6), torch.float32),
    ("add-then-view", lambda w: (w + 1).narrow(0, 0, 2), "'add'",
     (4, 6), torch.float32),
    ("to-other-dtype", lambda w: w.to(torch.bfloat16)[:2],
     "'to' casts f32 to bf16", (4, 6), torch.float32),
    ("cat", lambda w: torch.cat([w[:1], w[1:2]]), "'cat'", (4, 6),
     torch.float32),
    ("expand", lambda w: w[:1].expand(2, 6), "'expand'", (4, 6),
     torch.float32),
    ("tensor-index", lambda w: w[torch.tensor([0, 2])], "'__getitem__'",
     (4, 6), torch.float32),
    ("view-dtype", lambda w: w.view(torch.int32)[:2].float(),
     "'view' reinterprets", (4, 6), torch.float32),
    ("clone-in-place", lambda w: w.clone().mul_(2)[:2], "'mul_'", (4, 6),
     torch.float32),
    ("type-by-name", lambda w: w.type("torch.DoubleTensor")[:2], "'type'",
     (4, 6), torch.float32),
    ("type-dtype", lambda w: w.type(torch.float16)[:2],
     "'type' casts f32 to f16", (4, 6), torch.float32),
    ("in-place-on-source", lambda w: w.mul_(2)[:2], "'mul_'", (4, 6),
     torch.float32),
]


@pytest.mark.parametrize("read,words,shape,dtype",
                         [c[1:] for c in UNSUPPORTED],
                         ids=[c[0] for c in UNSUPPORTED])
def test_unsupported_names_op_and_line_and_spares_other_sources(
        read, words, shape, dtype):
    cap, load = run_pair(read, shape, dtype)
    assert list(cap.unsupported) == ["bad"]
    reason = cap.unsupported["bad"]
    assert words in reason
    # The innermost loader frame is the line of `read` that did it.
    assert reason.endswith(f"{HERE}:{read.__code__.co_firstlineno}"), reason
    assert cap.unattributed == 0, cap.unattributed_details
    assert_good_still_captured(cap)


def test_broadcasting_copy_is_unsupported():
    cap, load = run_pair(lambda w: w[0], pshape=(2, 6))
    assert "'copy_' broadcasts [6] into [2, 6]" in cap.unsupported["bad"]
    assert cap.unsupported["bad"].endswith(f":{line_of(load, '# BAD')}")
    assert_good_still_captured(cap)


def test_a_mismatched_copy_raises_like_torch():
    params = {"p": torch.empty((2, 6), device="meta")}

    def load(weights):
        for _, w in weights:
            params["p"].copy_(w.narrow(0, 0, 3))

    with pytest.raises(RuntimeError):
        reshard.capture(sources={"w": ((4, 6), torch.float32)}, load=load,
                        params=params)


def test_every_source_of_a_cat_is_unsupported():
    params = {"p": torch.empty((2, 6), device="meta"),
              "q": torch.empty((4, 6), device="meta")}

    def load(weights):
        ws = dict(weights)
        params["p"].copy_(torch.cat([ws["a"], ws["b"]]))
        params["q"].copy_(ws["c"])

    cap = reshard.capture(
        sources={n: ((1, 6) if n != "c" else (4, 6), torch.float32)
                 for n in "abc"}, load=load, params=params)
    assert set(cap.unsupported) == {"a", "b"}
    assert [c["src"] for c in cap.copies] == ["c"]


def test_copies_of_a_source_made_before_it_turned_unsupported_are_dropped():
    params = {"p": torch.empty((2, 6), device="meta"),
              "q": torch.empty((2, 6), device="meta")}

    def load(weights):
        w = dict(weights)["w"]
        params["p"].copy_(w[:2])
        params["q"].copy_(w[2:] * 3)

    cap = reshard.capture(sources={"w": ((4, 6), torch.float32)}, load=load,
                          params=params)
    assert "'mul'" in cap.unsupported["w"]
    assert cap.copies == []


def test_unattributed_writes_and_views():
    scratch = torch.zeros(2, 6)
    live = torch.nn.Parameter(torch.full((4, 6), 5.0), requires_grad=False)

    def load(weights):
        ws = dict(weights)
        scratch.copy_(ws["a"][:2])                  # not a parameter
        ws["b"].narrow(0, 0, 1)                     # viewed, never written
        live.data.copy_(torch.ones(4, 6))           # data from no source
        live.data.mul_(2)                           # data from no source
        live.data[:2] = ws["c"][1:3]                # a real copy

    cap = reshard.capture(
        sources={n: ((4, 6), torch.float32) for n in "abc"}, load=load,
        params={"live": live})
    assert cap.unsupported == {}
    assert cap.unattributed == 4
    details = cap.unattributed_details
    assert any("'a'" in d and "no parameter" in d for d in details)
    assert any("'b'" in d and "never written" in d for d in details)
    assert sum("'live'" in d and "from no source" in d for d in details) == 2
    assert any(f"{HERE}:" in d for d in details)
    assert [c["src"] for c in cap.copies] == ["c"]
    # Nothing was performed: neither into the parameter nor the scratch.
    assert torch.equal(live, torch.full((4, 6), 5.0))
    assert torch.equal(scratch, torch.zeros(2, 6))


def test_constant_writes_into_parameters_are_fills_not_performed():
    p = torch.nn.Parameter(torch.full((4, 6), 5.0), requires_grad=False)
    q = torch.full((3,), 5.0)

    def load(weights):
        w = dict(weights)["w"]
        p.data.zero_()
        p.data[:2].copy_(w[1:3])
        p[3:].data.fill_(1.5)
        q[1] = 2
        torch.Tensor.fill_(q[2:], torch.tensor(4.0))

    cap = reshard.capture(sources={"w": ((4, 6), torch.float32)}, load=load,
                          params={"p": p, "q": q})
    assert torch.equal(p, torch.full((4, 6), 5.0))
    assert torch.equal(q, torch.full((3,), 5.0))
    assert [(f["param"], f["dest_offset"], f["value"], f["at"])
            for f in cap.fills] == [("p", 0, 0, 0), ("p", 18, 1.5, 1),
                                    ("q", 1, 2, 1), ("q", 2, 4.0, 1)]
    full = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    truth_p, truth_q = p.detach().clone(), torch.full((3,), SENTINEL)
    with torch.no_grad():
        truth_p.zero_()
        truth_p[:2] = full[1:3]
        truth_p[3:] = 1.5
        truth_q[1], truth_q[2] = 2, 4.0
    for c in (cap, reshard.Capture.from_json(cap.to_json())):
        fresh = {"p": torch.full((4, 6), SENTINEL),
                 "q": torch.full((3,), SENTINEL)}
        c.replay({"w": full}, fresh)
        assert torch.equal(fresh["p"], truth_p)
        assert torch.equal(fresh["q"], truth_q)


def test_placeholder_outlives_capture_only_for_metadata():
    kept = []
    reshard.capture(sources={"w": ((4, 6), torch.float32)},
                    load=lambda ws: kept.extend(w for _, w in ws), params={})
    assert kept[0].shape == (4, 6)
    with pytest.raises(RuntimeError, match="after its capture ended"):
        kept[0].narrow(0, 0, 1)


@pytest.mark.parametrize("kwargs,words", [
    (dict(sources={}), "sources"),
    (dict(sources={"w": "nope"}), "source 'w'"),
    (dict(sources={"w": ((2,), torch.complex64)}), "source 'w'"),
    (dict(sources={"w": ((2,), torch.float32)}), "model or params"),
    (dict(sources={"w": ((2,), torch.float32)},
          params={"p": torch.empty(2, dtype=torch.complex64)}),
     "parameter 'p'"),
])
def test_bad_arguments_are_named(kwargs, words):
    with pytest.raises(reshard.InvalidArgument, match=words):
        reshard.capture(load=lambda ws: None, **kwargs)


def test_model_without_load_weights_needs_load():
    with pytest.raises(reshard.InvalidArgument, match="load_weights"):
        reshard.capture(torch.nn.Linear(2, 2),
                        sources={"w": ((2, 2), torch.float32)})


def test_loader_exception_propagates_and_releases_the_guard():
    p = torch.full((2,), 1.0)

    def load(weights):
        raise KeyError("missing tensor")

    with pytest.raises(KeyError):
        reshard.capture(sources={"w": ((2,), torch.float32)}, load=load,
                        params={"p": p})
    p.fill_(2.0)                     # no guard left behind
    assert torch.equal(p, torch.full((2,), 2.0))


@pytest.mark.parametrize("text,words", [
    ("{", "malformed JSON"),
    ('{"schema": "other"}', "schema"),
    ('{"schema": "reshard.capture.v1", "params": {"p": {"shape": [2], '
     '"dtype": "f99"}}, "copies": []}', "params['p'].dtype"),
    ('{"schema": "reshard.capture.v1", "params": {"p": {"shape": [-2], '
     '"dtype": "f32"}}, "copies": []}', "params['p'].shape"),
    ('{"schema": "reshard.capture.v1", "params": {}, '
     '"copies": [{"src": "w"}]}',
     "copies[0]"),
])
def test_from_json_names_what_is_wrong(text, words):
    with pytest.raises(reshard.InputError) as e:
        reshard.Capture.from_json(text)
    assert words in str(e.value)


def test_replay_refuses_a_source_of_another_shape():
    p = torch.empty((2, 6), device="meta")
    cap = reshard.capture(sources={"w": ((4, 6), torch.float32)},
                          load=lambda ws: [p.copy_(w[:2]) for _, w in ws],
                          params={"p": p})
    with pytest.raises(reshard.InputError, match="tensor 'w'"):
        cap.replay({"w": torch.zeros(2, 6)}, {"p": torch.zeros(2, 6)})
    with pytest.raises(reshard.InputError, match="parameter 'p'"):
        cap.replay({"w": torch.zeros(4, 6)}, {"p": torch.zeros(3, 6)})
