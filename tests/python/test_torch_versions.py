"""What torch 1.13 and torch 2.x do differently where the package looks:
the capture asks the running torch whether `t[...] = v` into memory-sharing
elements raises (2.x) or fills (1.13), storages are told apart without
torch 2.x's TypedStorage deprecation warning, a capture, replay and
receive run warning-free on either, torch 2.x's squeeze of several dims
is recorded as one squeeze per dim, and its load_state_dict(assign=True)
as copies (docs/python.md, "Supported versions")."""
import warnings

import pytest
import torch

import reshard
from reshard.capture_hook import setitem_refuses_overlap, storage_key
from reshard.quant import quantize_fp8
from trainer_ranks import publish_and_pull


def test_the_setitem_probe_is_what_torch_does_to_a_parameter():
    p = torch.nn.Parameter(torch.zeros(3, 4))
    try:
        p.data[1:].t().expand(2, 4, 2)[...] = 1.0
        raised = False
    except RuntimeError as e:
        assert "single memory location" in str(e)
        raised = True
    assert setitem_refuses_overlap() == raised
    assert raised == (int(torch.__version__.split(".")[0]) >= 2)


def test_storages_are_told_apart_without_warnings():
    a, b = torch.zeros(4, 4), torch.zeros(4, 4)
    meta = torch.empty(4, 4, device="meta")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert storage_key(a) == storage_key(a[1:].t())
        assert storage_key(a) != storage_key(b)
        assert storage_key(meta) == storage_key(meta.view(16))
        assert storage_key(meta) != storage_key(torch.empty(1, device="meta"))


def _load(params):
    def load(weights):
        for name, w in weights:
            if name == "w":
                half = w.shape[0] // 2
                params["a"].data.narrow(0, 0, half).copy_(w[half:])
                params["a"][half:] = w.chunk(2)[0]
                params["b"].data[0].fill_(0)
                params["b"].data[1:].t().copy_(w[:, 1:].to(torch.float16))
            else:
                q, s = quantize_fp8(w.split(128)[1], "fp8_block",
                                    block=(128, 128))
                params["q"].copy_(q)
                params["s"][:] = s.view(1, 1)
    return load


def test_capture_replay_and_receive_warn_nothing(file_dir):
    """Every warning (deprecations included) is an error here."""
    g = torch.Generator().manual_seed(7)
    fulls = {"w": torch.randn(8, 6, generator=g).to(torch.bfloat16),
             "x": torch.randn(256, 128, generator=g)}

    def fresh():
        return {"a": torch.zeros(8, 6, dtype=torch.bfloat16),
                "b": torch.zeros(6, 8, dtype=torch.float16),
                "q": torch.zeros(128, 128, dtype=torch.uint8),
                "s": torch.zeros(1, 1)}
    want = fresh()
    _load(want)(iter(fulls.items()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        params = fresh()
        cap = reshard.capture(sources=fulls, params=params,
                              load=_load(params))
        assert cap.unsupported == {} and len(cap.copies) == 4
        got = fresh()
        cap.replay(fulls, got)
        publish_and_pull(file_dir, cap, fulls, params, model="w")
    for name, t in want.items():
        bits = torch.int16 if t.element_size() == 2 else \
            torch.int32 if t.element_size() == 4 else torch.uint8
        assert torch.equal(got[name].view(bits), t.view(bits)), name
        assert torch.equal(params[name].view(bits), t.view(bits)), name


@pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2,
                    reason=f"torch {torch.__version__} squeezes one dim "
                           f"at a time (several: torch 2.0+)")
@pytest.mark.parametrize("dims,ops", [
    ((0, 2), [["squeeze", 2], ["squeeze", 0]]),
    ((-4, 1), [["squeeze", 1], ["squeeze", 0]]),      # dim 1 is kept: 6
])
def test_squeeze_of_several_dims_is_one_squeeze_per_dim(file_dir, dims, ops):
    w = torch.arange(24, dtype=torch.float32).reshape(1, 6, 1, 4)
    want = w.squeeze(dims)
    params = {"p": torch.zeros(want.shape)}

    def load(ws):
        for _, x in ws:
            params["p"].copy_(x.squeeze(dims))
    cap = reshard.capture(sources={"w": w}, params=params, load=load)
    assert [c["ops"] for c in cap.to_dict()["copies"]] == [ops]
    publish_and_pull(file_dir, cap, {"w": w}, params, model="sq")
    assert torch.equal(params["p"], want)


@pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2,
                    reason=f"torch {torch.__version__}'s load_state_dict "
                           f"has no assign= (torch 2.1+)")
def test_load_state_dict_with_assign_is_captured_as_copies():
    """assign=True replaces the module's parameters by the checkpoint's
    tensors (torch 2.1+): captured as copies, and the live model keeps its
    own parameter objects and bytes."""
    g = torch.Generator().manual_seed(5)
    m = torch.nn.Linear(4, 3)
    before = {n: (p, p.detach().clone()) for n, p in m.named_parameters()}
    sd = {"weight": torch.randn(3, 4, generator=g),
          "bias": torch.randn(3, generator=g)}
    cap = reshard.capture(
        model=m, sources=sd,
        load=lambda ws: m.load_state_dict(dict(ws), assign=True))
    assert cap.unsupported == {} and cap.unattributed == 0
    assert [(c["src"], c["param"], c["ops"]) for c in cap.copies] == \
        [("weight", "weight", []), ("bias", "bias", [])]
    for n, p in m.named_parameters():
        assert p is before[n][0] and torch.equal(p, before[n][1]), n
    got = {n: torch.zeros_like(p) for n, p in m.named_parameters()}
    cap.replay(sd, got)
    m.load_state_dict(sd, assign=True)
    for n, p in m.named_parameters():
        assert torch.equal(got[n], p), n
