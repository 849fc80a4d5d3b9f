"""Every view op of reshard.capture.v1, in method and function form, on the
source side and on the destination side.

Each case is a function taking the full source tensor and returning the
view(s) a loader would copy. Ground truth: the function on the real tensor,
copied by torch into real parameters. Capture: the same function on a
placeholder, recorded, replayed in pure torch into fresh parameters; the
results must be torch.equal, and the recorded ops must be the expected ones.
"""
import pytest
import torch

import reshard

SENTINEL = -7.0


def distinct(shape, dtype, seed=0):
    """A tensor of distinct small integers (exact in bf16 up to 256), so
    that reading any wrong element changes the result."""
    n = 1
    for s in shape:
        n *= s
    g = torch.Generator().manual_seed(seed)
    return (torch.randperm(n, generator=g).float() - n // 2) \
        .reshape(shape).to(dtype)


def as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def run_case(fn, shape, dtype=torch.float32, pdtype=None):
    """Capture `fn` as a loader and check its replay against torch; return
    the Capture."""
    pdtype = pdtype or dtype
    full = distinct(shape, dtype)
    truth = {}
    for i, view in enumerate(as_list(fn(full))):
        truth[f"p{i}"] = torch.full(view.shape, SENTINEL, dtype=pdtype)
        truth[f"p{i}"].copy_(view)
    meta = {n: torch.empty(t.shape, dtype=pdtype, device="meta")
            for n, t in truth.items()}

    def load(weights):
        for _, w in weights:
            for i, view in enumerate(as_list(fn(w))):
                meta[f"p{i}"].copy_(view)

    cap = reshard.capture(sources={"w": (shape, dtype)}, load=load,
                          params=meta)
    assert cap.unsupported == {}
    assert cap.unattributed == 0, cap.unattributed_details
    assert len(cap.copies) == len(truth)
    for replayed in (cap, reshard.Capture.from_json(cap.to_json())):
        fresh = {n: torch.full(t.shape, SENTINEL, dtype=pdtype)
                 for n, t in truth.items()}
        replayed.replay({"w": full}, fresh)
        for n in truth:
            assert torch.equal(fresh[n], truth[n]), n
    return cap


# (id, fn, source shape, expected ops of the first copy or None)
CASES = [
    ("narrow", lambda w: w.narrow(1, 2, 3), (6, 8), [["narrow", 1, 2, 3]]),
    ("torch.narrow", lambda w: torch.narrow(w, 1, 2, 3), (6, 8),
     [["narrow", 1, 2, 3]]),
    ("narrow-neg-dim", lambda w: w.narrow(-1, 1, 2), (6, 8),
     [["narrow", 1, 1, 2]]),
    ("narrow-kw", lambda w: w.narrow(dim=0, start=1, length=2), (6, 8),
     [["narrow", 0, 1, 2]]),
    ("select", lambda w: w.select(0, 2), (6, 8), [["select", 0, 2]]),
    ("torch.select-neg", lambda w: torch.select(w, 1, -1), (6, 8),
     [["select", 1, 7]]),
    ("getitem-int", lambda w: w[1], (6, 8), [["select", 0, 1]]),
    ("getitem-neg-int", lambda w: w[-1], (6, 8), [["select", 0, 5]]),
    ("getitem-slice", lambda w: w[1:3], (6, 8), [["slice", 0, 1, 3, 1]]),
    ("getitem-step", lambda w: w[::2], (6, 8), [["slice", 0, 0, 5, 2]]),
    ("getitem-two-slices", lambda w: w[1::3, 2:], (6, 8),
     [["slice", 0, 1, 5, 3], ["slice", 1, 2, 8, 1]]),
    ("getitem-clamped", lambda w: w[:100], (6, 8), []),
    ("getitem-empty", lambda w: w[2:1], (6, 8), [["slice", 0, 2, 2, 1]]),
    ("getitem-neg-slice", lambda w: w[-3:-1], (6, 8),
     [["slice", 0, 3, 5, 1]]),
    ("getitem-none", lambda w: w[None], (6, 8), [["unsqueeze", 0]]),
    ("getitem-full-none", lambda w: w[:, None], (6, 8), [["unsqueeze", 1]]),
    ("getitem-ellipsis", lambda w: w[..., 1], (2, 3, 4), [["select", 2, 1]]),
    ("getitem-int-ellipsis-none", lambda w: w[1, ..., None], (2, 3, 4),
     [["select", 0, 1], ["unsqueeze", 2]]),
    ("getitem-mixed", lambda w: w[1, None, ::2, -1], (2, 6, 4),
     [["select", 0, 1], ["unsqueeze", 0], ["slice", 1, 0, 5, 2],
      ["select", 2, 3]]),
    ("transpose", lambda w: w.transpose(0, 1), (6, 8),
     [["transpose", 0, 1]]),
    ("torch.transpose-neg", lambda w: torch.transpose(w, -1, 0), (6, 8),
     [["transpose", 1, 0]]),
    ("swapaxes", lambda w: w.swapaxes(0, 1), (6, 8), [["transpose", 0, 1]]),
    ("torch.swapdims", lambda w: torch.swapdims(w, 0, 1), (6, 8),
     [["transpose", 0, 1]]),
    ("t", lambda w: w.t(), (6, 8), [["t"]]),
    ("torch.t", lambda w: torch.t(w), (6, 8), [["t"]]),
    ("T", lambda w: w.T, (6, 8), [["t"]]),
    ("T-3d", lambda w: w.T, (2, 3, 4), [["permute", [2, 1, 0]]]),
    ("mT", lambda w: w.mT, (2, 3, 4), [["transpose", 1, 2]]),
    ("permute-varargs", lambda w: w.permute(2, 0, 1), (2, 3, 4),
     [["permute", [2, 0, 1]]]),
    ("permute-tuple", lambda w: w.permute((2, 0, -2)), (2, 3, 4),
     [["permute", [2, 0, 1]]]),
    ("torch.permute", lambda w: torch.permute(w, (1, 2, 0)), (2, 3, 4),
     [["permute", [1, 2, 0]]]),
    ("view-flat", lambda w: w.view(-1), (6, 4), [["view", [-1]]]),
    ("view-varargs", lambda w: w.view(3, 2, 4), (6, 4),
     [["view", [3, 2, 4]]]),
    ("view-tuple", lambda w: w.view((12, 2)), (6, 4), [["view", [12, 2]]]),
    ("view_as", lambda w: w.view_as(torch.empty(2, 12)), (6, 4),
     [["view", [2, 12]]]),
    ("reshape", lambda w: w.reshape(24), (6, 4), [["reshape", [24]]]),
    ("torch.reshape", lambda w: torch.reshape(w, (2, 12)), (6, 4),
     [["reshape", [2, 12]]]),
    ("reshape-scalar", lambda w: w.reshape(1), (), [["reshape", [1]]]),
    ("flatten", lambda w: w.flatten(), (2, 3, 4), [["flatten", 0, 2]]),
    ("torch.flatten", lambda w: torch.flatten(w, 1), (2, 3, 4),
     [["flatten", 1, 2]]),
    ("flatten-range", lambda w: w.flatten(0, 1), (2, 3, 4),
     [["flatten", 0, 1]]),
    ("unflatten", lambda w: w.unflatten(1, (2, 4)), (6, 8),
     [["unflatten", 1, [2, 4]]]),
    ("unsqueeze", lambda w: w.unsqueeze(0), (6, 8), [["unsqueeze", 0]]),
    ("torch.unsqueeze-neg", lambda w: torch.unsqueeze(w, -1), (6, 8),
     [["unsqueeze", 2]]),
    ("squeeze", lambda w: w.squeeze(), (1, 6, 1, 4), [["squeeze"]]),
    ("torch.squeeze-dim", lambda w: torch.squeeze(w, 2), (1, 6, 1, 4),
     [["squeeze", 2]]),
    ("contiguous-noop", lambda w: w.narrow(0, 1, 2).contiguous(), (6, 8),
     [["narrow", 0, 1, 2], ["contiguous"]]),
    ("chunk", lambda w: w.chunk(3, 0), (6, 8), [["chunk", 3, 0, 0]]),
    ("torch.chunk-uneven", lambda w: torch.chunk(w, 4, 1), (6, 6),
     [["chunk", 4, 1, 0]]),
    ("split-size", lambda w: w.split(4, 0), (6, 8), [["split", 4, 0, 0]]),
    ("torch.split-sections", lambda w: torch.split(w, [1, 3, 2], 0), (6, 8),
     [["split", [1, 3, 2], 0, 0]]),
    ("split-kw", lambda w: w.split(split_size=3, dim=1), (6, 8),
     [["split", 3, 1, 0]]),
    ("unbind", lambda w: w.unbind(0), (3, 8), [["unbind", 0, 0]]),
    ("torch.unbind", lambda w: torch.unbind(w, 1), (3, 4), [["unbind", 1, 0]]),
    ("iterate", lambda w: list(w), (3, 8), [["unbind", 0, 0]]),
    ("chain", lambda w: w.t().narrow(0, 1, 4)[::2], (6, 8),
     [["t"], ["narrow", 0, 1, 4], ["slice", 0, 0, 3, 2]]),
    ("chain-view-permute", lambda w: w.view(2, 3, 4).permute(2, 0, 1)[1],
     (6, 4), [["view", [2, 3, 4]], ["permute", [2, 0, 1]],
              ["select", 0, 1]]),
    ("identity", lambda w: w.detach().data.to(w.dtype).to("cpu"), (6, 8),
     []),
]


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
@pytest.mark.parametrize("fn,shape,ops", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_op_recorded_and_replayed(fn, shape, ops):
    cap = run_case(fn, shape)
    assert cap.copies[0]["ops"] == ops
    assert cap.copies[0]["src"] == "w"


@pytest.mark.parametrize("fn,n", [
    (lambda w: w.chunk(3, 0), 3), (lambda w: torch.chunk(w, 3, 1), 3),
    (lambda w: torch.split(w, [1, 3, 2], 0), 3),
    (lambda w: w.split(4, 0), 2), (lambda w: w.unbind(1), 8),
    (lambda w: list(w), 6)], ids=["chunk", "chunk-uneven", "split-list",
                                  "split-int", "unbind", "iterate"])
def test_each_piece_records_its_index(fn, n):
    cap = run_case(fn, (6, 8))
    assert len(cap.copies) == n
    assert [c["ops"][-1][-1] for c in cap.copies] == list(range(n))


@pytest.mark.parametrize("dtype,pdtype", [
    (torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16),
    (torch.bfloat16, torch.float32), (torch.float32, torch.float16)])
def test_copy_casts_to_the_parameter_dtype(dtype, pdtype):
    cap = run_case(lambda w: w.narrow(0, 2, 3).t(), (6, 8), dtype, pdtype)
    assert cap.copies[0]["dest_dtype"] == pdtype
    assert cap.sources["w"] == ((6, 8), dtype)


# Writes into regions of parameters: (id, write(param, w), param shape,
# source shape). `param` is the parameter, `w` the full source.
DEST_CASES = [
    ("data-copy", lambda p, w: p.data.copy_(w), (4, 6), (4, 6)),
    ("transposed-dest", lambda p, w: p.data.t().copy_(w), (4, 6), (6, 4)),
    ("setitem-rows", lambda p, w: p.data.__setitem__(slice(1, 3), w),
     (4, 6), (2, 6)),
    ("setitem-step", lambda p, w: p.data.__setitem__(
        (slice(None), slice(None, None, 2)), w), (4, 6), (4, 3)),
    ("setitem-int", lambda p, w: p.data.__setitem__(2, w[1]), (4, 6),
     (3, 6)),
    ("getitem-param-data", lambda p, w: p[:2].data.copy_(w.narrow(0, 0, 2)),
     (4, 6), (4, 6)),
    ("expert-narrow", lambda p, w: p.data[1].narrow(0, 2, 2).copy_(w),
     (3, 4, 6), (2, 6)),
    ("flat-view", lambda p, w: p.view(-1)[4:10].copy_(w.view(-1)[::2]),
     (4, 6), (3, 4)),
    ("function-form-copy", lambda p, w: torch.Tensor.copy_(p.data, w),
     (4, 6), (4, 6)),
    ("torch.select-dest", lambda p, w: torch.select(p.data, 1, 2).copy_(w),
     (4, 6), (4,)),
    ("torch-function-dest", lambda p, w: torch.narrow(p.data, 1, 1, 4)
     .copy_(w), (4, 6), (4, 4)),
]


@pytest.mark.parametrize("write,pshape,sshape",
                         [c[1:] for c in DEST_CASES],
                         ids=[c[0] for c in DEST_CASES])
def test_destination_regions(write, pshape, sshape):
    full = distinct(sshape, torch.float32)
    truth = torch.full(pshape, SENTINEL)
    write(truth, full)
    meta = torch.nn.Parameter(torch.empty(pshape, device="meta"),
                              requires_grad=False)
    cap = reshard.capture(
        sources={"w": full}, params={"p": meta},
        load=lambda ws: [write(meta, w) for _, w in ws])
    assert cap.unsupported == {} and cap.unattributed == 0
    assert len(cap.copies) == 1 and cap.copies[0]["param"] == "p"
    fresh = torch.full(pshape, SENTINEL)
    cap.replay({"w": full}, {"p": fresh})
    assert torch.equal(fresh, truth)


def test_params_sharing_one_storage_are_told_apart():
    buf = torch.empty(20, device="meta")
    p1, p2 = buf[:8].view(2, 4), buf[8:].view(3, 4)
    cap = reshard.capture(
        sources={"w": ((3, 4), torch.float32)}, params={"a": p1, "b": p2},
        load=lambda ws: [p2[1:].copy_(w[:2]) for _, w in ws])
    assert [(c["param"], c["dest_offset"]) for c in cap.copies] == [("b", 4)]
    full = distinct((3, 4), torch.float32)
    truth = torch.full((3, 4), SENTINEL)
    truth[1:] = full[:2]
    fresh = {"a": torch.full((2, 4), SENTINEL),
             "b": torch.full((3, 4), SENTINEL)}
    cap.replay({"w": full}, fresh)
    assert torch.equal(fresh["b"], truth)
    assert torch.equal(fresh["a"], torch.full((2, 4), SENTINEL))


def test_metadata_queries_answer_from_the_source():
    seen = {}

    def load(weights):
        for _, w in weights:
            seen.update(shape=tuple(w.shape), size=tuple(w.size()),
                        size1=w.size(1), dim=w.dim(), ndim=w.ndim,
                        dtype=w.dtype, numel=w.numel(), len=len(w),
                        stride=w.stride(), contig=w.is_contiguous(),
                        tcontig=w.t().is_contiguous(),
                        offset=w[1].storage_offset(),
                        esize=w.element_size(), fp=w.is_floating_point(),
                        tnumel=torch.numel(w))

    cap = reshard.capture(sources={"w": ((6, 8), torch.bfloat16)}, load=load,
                          params={})
    assert seen == dict(shape=(6, 8), size=(6, 8), size1=8, dim=2, ndim=2,
                        dtype=torch.bfloat16, numel=48, len=6, stride=(8, 1),
                        contig=True, tcontig=False, offset=8, esize=2,
                        fp=True, tnumel=48)
    # A source viewed (t, [1]) but never written is reported once;
    # metadata queries alone would not be.
    assert cap.unattributed == 1
    assert "'w'" in cap.unattributed_details[0]
    assert "never written" in cap.unattributed_details[0]
