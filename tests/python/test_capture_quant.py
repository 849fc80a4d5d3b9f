"""Capture of loaders that quantize with reshard.quant.quantize_fp8.

A DeepSeek-style FP8 loader (each weight quantized by 128 x 128 blocks into
`weight` and `weight_scale_inv`, tensor-parallel slices on block
boundaries, merged gate/up projections, stacked experts) is captured: the
capture holds one quantized copy per quantize call with the expected ops,
regions and spec, the library loads it with the same fields, and replaying
it (the full source quantized by its own blocks, then the view's values
and touched scales written) gives byte for byte what the loader computed
eagerly on the real tensors. Loaders the format cannot express (views off
block boundaries, transposed views, ops on the quantized values, values
without their scales) leave their source unsupported with a reason and no
copy."""
import ctypes

import pytest
import torch

import reshard
from reshard import _lib
from reshard.quant import quantize_fp8

TP, RANK = 2, 1
H, I = 256, 512          # hidden and intermediate sizes


def _weights(specs, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in specs.items():
        # A wide range of magnitudes per block, so that scales differ.
        w = torch.randn(shape, generator=g) * torch.exp2(
            torch.randint(-8, 8, shape, generator=g).float())
        out[name] = w.to(torch.bfloat16)
    return out


SOURCES = {
    "mlp.gate_proj.weight": (I, H),
    "mlp.up_proj.weight": (I, H),
    "mlp.down_proj.weight": (H, I),
    "experts.w": (4, I // 2, H // 2),
}


def _params():
    n, k = I // TP, I // TP
    return {
        "mlp.gate_up_proj.weight": torch.zeros(2 * n, H, dtype=torch.uint8),
        "mlp.gate_up_proj.weight_scale_inv": torch.zeros(2 * n // 128,
                                                         H // 128),
        "mlp.down_proj.weight": torch.zeros(H, k, dtype=torch.uint8),
        "mlp.down_proj.weight_scale_inv": torch.zeros(H // 128, k // 128),
        "experts.0.weight": torch.zeros(I // 2, H // 2, dtype=torch.uint8),
        "experts.0.weight_scale_inv": torch.zeros(2, 1),
        "experts.1.weight": torch.zeros(I // 2, H // 2, dtype=torch.uint8),
        "experts.1.weight_scale_inv": torch.zeros(2, 1),
    }


def deepseek_loader(params):
    """Quantizes this rank's slice of each weight on block boundaries."""
    def load(weights):
        for name, w in weights:
            if name in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
                shard = 0 if "gate" in name else 1
                n = w.shape[0] // TP
                q, s = quantize_fp8(w.narrow(0, RANK * n, n), "fp8_block",
                                    block=(128, 128))
                params["mlp.gate_up_proj.weight"].data.narrow(
                    0, shard * n, n).copy_(q)
                params["mlp.gate_up_proj.weight_scale_inv"].data.narrow(
                    0, shard * (n // 128), n // 128).copy_(s)
            elif name == "mlp.down_proj.weight":
                k = w.shape[1] // TP
                q, s = quantize_fp8(w[:, RANK * k:(RANK + 1) * k],
                                    "fp8_block", block=(128, 128))
                params["mlp.down_proj.weight"].copy_(q)
                params["mlp.down_proj.weight_scale_inv"][:] = s
            elif name == "experts.w":
                for j in range(2):           # this rank's experts: 2, 3
                    q, s = quantize_fp8(w[2 + j], "fp8_block",
                                        block=(128, 128), fmt="float8_e4m3fn")
                    params[f"experts.{j}.weight"].copy_(q)
                    params[f"experts.{j}.weight_scale_inv"].copy_(s)
    return load


def _scale(param, offset, shape, stride):
    return {"param": param, "dest_offset": offset, "dest_shape": shape,
            "dest_stride": stride}


def _block(scale):
    return {"scheme": "fp8_block", "format": "f8e4m3", "block": [128, 128],
            "scale": scale}


EXPECTED = [
    {"src": "mlp.gate_proj.weight", "ops": [["narrow", 0, 256, 256]],
     "param": "mlp.gate_up_proj.weight", "dest_offset": 0,
     "dest_shape": [256, 256], "dest_stride": [256, 1],
     "dest_dtype": "f8e4m3",
     "quant": _block(_scale("mlp.gate_up_proj.weight_scale_inv", 0, [2, 2],
                            [2, 1]))},
    {"src": "mlp.up_proj.weight", "ops": [["narrow", 0, 256, 256]],
     "param": "mlp.gate_up_proj.weight", "dest_offset": 256 * 256,
     "dest_shape": [256, 256], "dest_stride": [256, 1],
     "dest_dtype": "f8e4m3",
     "quant": _block(_scale("mlp.gate_up_proj.weight_scale_inv", 4, [2, 2],
                            [2, 1]))},
    {"src": "mlp.down_proj.weight", "ops": [["slice", 1, 256, 512, 1]],
     "param": "mlp.down_proj.weight", "dest_offset": 0,
     "dest_shape": [256, 256], "dest_stride": [256, 1],
     "dest_dtype": "f8e4m3",
     "quant": _block(_scale("mlp.down_proj.weight_scale_inv", 0, [2, 2],
                            [2, 1]))},
] + [
    {"src": "experts.w", "ops": [["select", 0, 2 + j]],
     "param": f"experts.{j}.weight", "dest_offset": 0,
     "dest_shape": [256, 128], "dest_stride": [128, 1],
     "dest_dtype": "f8e4m3",
     "quant": _block(_scale(f"experts.{j}.weight_scale_inv", 0, [2, 1],
                            [1, 1]))}
    for j in range(2)
]


def _capture(load_of, sources, params):
    return reshard.capture(sources=sources, load=load_of(params),
                           params=params)


def test_deepseek_loader_is_captured_as_quantized_copies():
    weights = _weights(SOURCES)
    params = _params()
    cap = _capture(deepseek_loader, weights, params)
    assert cap.unsupported == {} and cap.unattributed == 0
    assert cap.to_dict()["copies"] == EXPECTED
    spec = cap.to_dict()["params"]
    assert spec["mlp.gate_up_proj.weight"] == {"shape": [512, 256],
                                               "dtype": "f8e4m3"}
    assert spec["mlp.gate_up_proj.weight_scale_inv"]["dtype"] == "f32"
    # no parameter byte was written by the capture
    assert all(not p.any() for p in params.values())


def test_replay_is_the_eager_loader_byte_for_byte():
    weights = _weights(SOURCES, seed=3)
    truth = _params()
    deepseek_loader(truth)(iter(weights.items()))
    cap = _capture(deepseek_loader, weights, _params())
    got = _params()
    cap.replay(weights, got)
    for name, t in truth.items():
        assert t.any(), name                        # the loader wrote it
        assert torch.equal(got[name].view(torch.uint8) if t.dtype ==
                           torch.uint8 else got[name].view(torch.int32),
                           t.view(torch.uint8) if t.dtype == torch.uint8
                           else t.view(torch.int32)), name


def _c_quant_copies(text):
    lib = _lib.lib()
    data = text.encode()
    diag, handle = _lib.Diag(), ctypes.c_void_p()
    _lib.check(lib.rs_capture_load_string(data, len(data), b"capture",
                                          ctypes.byref(diag),
                                          ctypes.byref(handle)), diag)
    out = []
    try:
        for i in range(lib.rs_capture_num_copies(handle)):
            q = _lib.QuantDesc()
            if not lib.rs_capture_copy_quant(handle, i, ctypes.byref(q)):
                out.append(None)
                continue
            out.append({"scheme": q.scheme, "format": q.format,
                        "block": q.block[:q.block_ndim],
                        "scale_param": q.scale_param.decode(),
                        "scale_offset": q.scale_offset,
                        "scale_shape": q.scale_shape[:q.scale_ndim],
                        "scale_stride": q.scale_stride[:q.scale_ndim]})
    finally:
        lib.rs_capture_destroy(handle)
    return out


def test_the_library_reads_the_quantized_copies():
    cap = _capture(deepseek_loader, _weights(SOURCES), _params())
    got = _c_quant_copies(cap.to_json())
    want = [{"scheme": _lib.QUANT_SCHEMES["fp8_block"],
             "format": _lib.CONSTANTS["RS_DTYPE_F8E4M3"],
             "block": [128, 128], "scale_param": c["quant"]["scale"]["param"],
             "scale_offset": c["quant"]["scale"]["dest_offset"],
             "scale_shape": c["quant"]["scale"]["dest_shape"],
             "scale_stride": c["quant"]["scale"]["dest_stride"]}
            for c in EXPECTED]
    assert got == want


def test_json_round_trip_keeps_the_quant_object():
    cap = _capture(deepseek_loader, _weights(SOURCES), _params())
    back = reshard.Capture.from_json(cap.to_json())
    assert back.to_dict()["copies"] == EXPECTED
    assert back.to_dict()["params"] == cap.to_dict()["params"]


def test_channel_scales_reshaped_to_one_dim():
    """fp8_channel scales come back [n, 1]; a loader that copies them as
    [n] still makes one quantized copy (dims of extent 1 do not count)."""
    weights = _weights({"w": (8, 6)}, seed=5)

    def load_of(params):
        def load(ws):
            for _, w in ws:
                q, s = quantize_fp8(w[4:], "fp8_channel", fmt="f8e5m2")
                params["q"].copy_(q.contiguous().detach())
                params["s"].copy_(s.view(-1))
        return load

    def fresh():
        return {"q": torch.zeros(4, 6, dtype=torch.uint8),
                "s": torch.zeros(4)}
    cap = _capture(load_of, weights, fresh())
    [copy] = cap.to_dict()["copies"]
    assert copy["quant"] == {"scheme": "fp8_channel", "format": "f8e5m2",
                             "scale": _scale("s", 0, [4], [1])}
    assert copy["ops"] == [["slice", 0, 4, 8, 1]]
    truth, got = fresh(), fresh()
    load_of(truth)(iter(weights.items()))
    cap.replay(weights, got)
    assert torch.equal(got["q"], truth["q"])
    assert torch.equal(got["s"].view(torch.int32), truth["s"].view(torch.int32))


def _unsupported_case(quantize_and_copy):
    weights = _weights({"w": (320, 256)}, seed=9)
    params = {"q": torch.zeros(320, 256, dtype=torch.uint8),
              "s": torch.zeros(512)}

    def load_of(ps):
        def load(ws):
            for _, w in ws:
                quantize_and_copy(w, ps)
        return load
    return _capture(load_of, weights, params)


UNSUPPORTED = [
    ("off block boundaries",
     lambda w, p: _copy_both(quantize_fp8(w.narrow(0, 160, 160), "fp8_block",
                                          block=(128, 128)), p),
     "not on block boundaries"),
    ("transposed view",
     lambda w, p: _copy_both(quantize_fp8(w.t(), "fp8_block",
                                          block=(128, 128)), p),
     "'t'"),
    ("strided view",
     lambda w, p: _copy_both(quantize_fp8(w[::2], "fp8_block",
                                          block=(128, 128)), p),
     "strided slice"),
    ("channel of a column slice",
     lambda w, p: _copy_both(quantize_fp8(w[:, :128], "fp8_channel"), p),
     "source dim 1 is read at [0, 128) with blocks of 256"),
    ("channel of an unsqueezed source",   # its channels would be dim 1
     lambda w, p: _copy_both(quantize_fp8(w.unsqueeze(0), "fp8_channel"), p),
     "blocks are not the source's"),
    ("values sliced after quantizing",
     lambda w, p: _copy_both(_slice_values(quantize_fp8(
         w, "fp8_block", block=(128, 128))), p),
     "on the values"),
    ("scales never copied",
     lambda w, p: p["q"].copy_(quantize_fp8(w, "fp8_block",
                                            block=(128, 128))[0]),
     "not its scales"),
    ("values copied twice",
     lambda w, p: _copy_twice(quantize_fp8(w, "fp8_block", block=(128, 128)),
                              p),
     "copied twice"),
    ("scales cast",
     lambda w, p: _copy_both(_cast_scales(quantize_fp8(
         w, "fp8_block", block=(128, 128))), p),
     "on the scales"),
]


def _copy_both(qs, p):
    q, s = qs
    p["q"].view(-1)[:q.numel()].view(q.shape).copy_(q)
    p["s"].view(-1)[:s.numel()].view(s.shape).copy_(s)


def _slice_values(qs):
    return qs[0][:128], qs[1]


def _cast_scales(qs):
    return qs[0], qs[1].double().float()


def _copy_twice(qs, p):
    _copy_both(qs, p)
    p["q"].copy_(qs[0])


@pytest.mark.parametrize("case", UNSUPPORTED, ids=[c[0] for c in UNSUPPORTED])
def test_what_cannot_be_expressed_is_unsupported(case):
    _, fn, frag = case
    cap = _unsupported_case(fn)
    assert list(cap.unsupported) == ["w"]
    assert frag in cap.unsupported["w"], cap.unsupported["w"]
    assert "test_capture_quant.py:" in cap.unsupported["w"]   # where
    assert cap.copies == []


def test_add_quant_copy_programmatically():
    cap = reshard.Capture(params={"q": ((4, 8), reshard.dtypes.F8E4M3),
                                  "s": ((2,), torch.float32),
                                  "b": ((2,), torch.bfloat16)},
                          sources={"w": ((8, 8), torch.bfloat16)})
    cap.add_quant_copy("w", [["narrow", 0, 4, 4]], "q", 0, [4, 8], [8, 1],
                       scheme="fp8_block", block=[4, 4], scale_param="s",
                       scale_shape=[1, 2], scale_stride=[2, 1])
    assert _c_quant_copies(cap.to_json()) == [{
        "scheme": 1, "format": 4, "block": [4, 4], "scale_param": "s",
        "scale_offset": 0, "scale_shape": [1, 2], "scale_stride": [2, 1]}]
    w = _weights({"w": (8, 8)}, seed=11)
    got = {"q": torch.zeros(4, 8, dtype=torch.uint8), "s": torch.zeros(2),
           "b": torch.zeros(2, dtype=torch.bfloat16)}
    cap.replay(w, got)
    q, s = quantize_fp8(w["w"], "fp8_block", block=(4, 4))
    assert torch.equal(got["q"], q[4:]) and torch.equal(got["s"], s[1])
    with pytest.raises(reshard.InputError, match=r"copy 1 .*'b' is bf16"):
        cap.add_quant_copy("w", [], "q", 0, [8, 8], [8, 1],
                           scheme="fp8_tensor", scale_param="b")
    with pytest.raises(reshard.InputError, match="takes no block"):
        cap.add_quant_copy("w", [], "q", 0, [8, 8], [8, 1],
                           scheme="fp8_tensor", block=[2], scale_param="s")
    with pytest.raises(reshard.InputError, match="not the quantization"):
        cap.add_quant_copy("w", [], "q", 0, [8, 8], [8, 1],
                           scheme="fp8_tensor", fmt="f8e5m2", scale_param="s")


def test_uint8_tensors_hold_fp8_parameters():
    """uint8 holds FP8 bits on every torch; a torch float8 dtype holds its
    own format only."""
    from reshard import dtypes
    fp8 = _lib.CONSTANTS["RS_DTYPE_F8E4M3"]
    assert dtypes.holds(torch.uint8, fp8)
    assert dtypes.holds(torch.uint8, _lib.CONSTANTS["RS_DTYPE_F8E5M2"])
    if not isinstance(dtypes.F8E4M3, str):
        assert dtypes.holds(dtypes.F8E4M3, fp8)
        assert not dtypes.holds(dtypes.F8E5M2, fp8)
        assert not dtypes.holds(dtypes.F8E4M3, dtypes.code_of(torch.uint8))
    assert not dtypes.holds(torch.uint8, _lib.CONSTANTS["RS_DTYPE_BF16"])
    assert dtypes.holds(torch.bfloat16, _lib.CONSTANTS["RS_DTYPE_BF16"])
    assert not dtypes.holds(torch.float32, fp8)


def _random_view(rng, w):
    """A random chain of view calls on w (some of them not boxes), as a
    function, with a text naming it."""
    steps = []
    shape = list(w.shape)
    for _ in range(rng.randint(1, 3)):
        if not shape:
            break
        d = rng.randrange(len(shape))
        kind = rng.choice(["narrow", "narrow", "select", "chunk", "split",
                           "slice", "unsqueeze", "t", "step"])
        n = shape[d]
        if kind == "narrow" and n > 1:
            start = rng.choice([0, n // 2, rng.randrange(n)])
            length = rng.randint(1, n - start)
            steps.append((f"narrow({d}, {start}, {length})",
                          lambda x, d=d, s=start, ln=length: x.narrow(d, s, ln)))
            shape[d] = length
        elif kind == "select":
            i = rng.randrange(n)
            steps.append((f"select({d}, {i})",
                          lambda x, d=d, i=i: x.select(d, i)))
            del shape[d]
        elif kind == "chunk" and n > 1:
            c = rng.randint(2, min(4, n))
            i = rng.randrange(len(range(0, n, -(-n // c))))
            steps.append((f"chunk({c}, {d})[{i}]",
                          lambda x, d=d, c=c, i=i: x.chunk(c, d)[i]))
            shape[d] = len(range(n)[i * -(-n // c):(i + 1) * -(-n // c)])
        elif kind == "split" and n > 1:
            sz = rng.randint(1, n)
            i = rng.randrange(-(-n // sz))
            steps.append((f"split({sz}, {d})[{i}]",
                          lambda x, d=d, sz=sz, i=i: x.split(sz, d)[i]))
            shape[d] = min(sz, n - i * sz)
        elif kind == "slice":
            a = rng.randrange(n)
            b = rng.randint(a + 1, n)
            steps.append((f"[{d}: {a}:{b}]", lambda x, d=d, a=a, b=b:
                          x[(slice(None),) * d + (slice(a, b),)]))
            shape[d] = b - a
        elif kind == "step" and n > 2:
            steps.append((f"[{d}: ::2]", lambda x, d=d:
                          x[(slice(None),) * d + (slice(None, None, 2),)]))
            shape[d] = len(range(0, n, 2))
        elif kind == "unsqueeze":
            steps.append((f"unsqueeze({d})", lambda x, d=d: x.unsqueeze(d)))
            shape.insert(d, 1)
        elif kind == "t" and len(shape) == 2:
            steps.append(("t()", lambda x: x.t()))
            shape.reverse()

    def view(x):
        for _, fn in steps:
            x = fn(x)
        return x
    return view, ".".join(t for t, _ in steps)


def test_random_views_are_recorded_only_when_exact():
    """Random views of random sources quantized with random specs: every
    view the recorder turns into a quantized copy replays to exactly the
    bytes of the loader run eagerly, and the library loads its capture;
    every other view leaves the source unsupported with no copy; both
    outcomes occur often."""
    import random
    rng = random.Random(2024)
    recorded = refused = 0
    for trial in range(160):
        shape = tuple(rng.choice([1, 4, 6, 8, 12]) for _ in
                      range(rng.randint(1, 3)))
        w = _weights({"w": shape}, seed=trial)["w"]
        view, text = _random_view(rng, w)
        v = view(w)
        if v.dim() == 0:
            continue
        scheme = rng.choice(["fp8_block", "fp8_block", "fp8_channel",
                             "fp8_tensor"])
        block = tuple(rng.choice([1, 2, 4]) for _ in
                      range(rng.randint(1, v.dim()))) \
            if scheme == "fp8_block" else None
        fmt = rng.choice(["f8e4m3", "f8e5m2"])
        q, s = quantize_fp8(v, scheme, block=block, fmt=fmt)

        def fresh():
            return {"q": torch.zeros(q.shape, dtype=torch.uint8),
                    "s": torch.zeros(s.shape)}

        def load_of(params):
            def load(ws):
                for _, x in ws:
                    qq, ss = quantize_fp8(view(x), scheme, block=block,
                                          fmt=fmt)
                    params["q"].copy_(qq)
                    params["s"].copy_(ss)
            return load
        cap = _capture(load_of, {"w": w}, fresh())
        what = f"{list(shape)} {text} {scheme} {block}"
        if cap.copies:
            assert cap.unsupported == {} and len(cap.copies) == 1, what
            got = fresh()
            cap.replay({"w": w}, got)
            assert torch.equal(got["q"], q), what
            assert torch.equal(got["s"].view(torch.int32),
                               s.view(torch.int32)), what
            _c_quant_copies(cap.to_json())          # the library loads it
            recorded += 1
        else:
            assert list(cap.unsupported) == ["w"], what
            refused += 1
    assert recorded > 40 and refused > 20, (recorded, refused)
