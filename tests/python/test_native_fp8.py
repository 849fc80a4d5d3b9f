"""FP8 as torch 2.x's own float8 dtypes: quantize_fp8 asked for
torch.float8_e4m3fn gives torch's own cast of x / scale; a loader writing
float8 parameters (as vLLM's FP8 layers hold them) is captured, published
and received byte for byte against the same loader run eagerly; plain
copies cast into float8 parameters, and float8 sources widened into bf16
ones, land as torch's own casts of every finite value; copying values
into a parameter of another dtype (copy_ converts them as numbers) is
refused. Torch 1.13 has no float8 dtypes: these tests skip there."""
import pytest
import torch

import reshard
from reshard.quant import quantize_fp8
from trainer_ranks import publish_and_pull
from test_capture_quant import SOURCES, _weights
from test_quant_landing import pull_versions

pytestmark = pytest.mark.skipif(
    not hasattr(torch, "float8_e4m3fn"),
    reason=f"torch {torch.__version__} has no float8 dtypes (torch 2.1+)")

E4M3 = getattr(torch, "float8_e4m3fn", None)
E5M2 = getattr(torch, "float8_e5m2", None)
H, I = 256, 512


def _bits(t):
    """A tensor's bytes as integers, for exact comparison."""
    return t.contiguous().view({1: torch.uint8, 2: torch.int16,
                                4: torch.int32}[t.element_size()])


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("scheme,block", [("fp8_block", (4, 8)),
                                          ("fp8_channel", None),
                                          ("fp8_tensor", None)])
def test_quantize_is_torchs_own_cast(fmt, scheme, block):
    """q is torch's cast of x / scale (the scale of each element's block),
    in the float8 dtype asked for, with the bits of the uint8 form."""
    dtype = E4M3 if fmt == "e4m3" else E5M2
    x = _weights({"w": (12, 20)}, seed=4)["w"]
    q, s = quantize_fp8(x, scheme, block=block, fmt=dtype)
    q8, s8 = quantize_fp8(x, scheme, block=block, fmt=f"f8{fmt}")
    assert q.dtype == dtype and q8.dtype == torch.uint8
    assert torch.equal(q.view(torch.uint8), q8) and torch.equal(s, s8)
    rows, cols = block or ((1, 20) if scheme == "fp8_channel" else (12, 20))
    per = s.repeat_interleave(rows, 0)[:12].repeat_interleave(cols, 1)[:, :20]
    want = (x.float() / per).to(dtype)
    assert torch.equal(q.view(torch.uint8), want.view(torch.uint8))


def _params():
    """This rank's FP8 weights as torch float8 tensors, with their scales."""
    return {
        "mlp.gate_up_proj.weight": torch.zeros(I, H, dtype=E4M3),
        "mlp.gate_up_proj.weight_scale_inv": torch.zeros(I // 128, H // 128),
        "mlp.down_proj.weight": torch.zeros(H, I // 2, dtype=E4M3),
        "mlp.down_proj.weight_scale_inv": torch.zeros(2, 2),
        "experts.0.weight": torch.zeros(I // 2, H // 2, dtype=E5M2),
        "experts.0.weight_scale_inv": torch.zeros(2, 1),
    }


def native_loader(params):
    """Rank 1 of 2: merged gate/up quantized straight to float8, down_proj
    quantized to uint8 bits and read as float8, an expert in e5m2."""
    def load(weights):
        for name, w in weights:
            if name in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
                n, at = w.shape[0] // 2, 0 if "gate" in name else 1
                q, s = quantize_fp8(w.narrow(0, n, n), "fp8_block",
                                    block=(128, 128), fmt=E4M3)
                params["mlp.gate_up_proj.weight"].narrow(
                    0, at * n, n).copy_(q)
                params["mlp.gate_up_proj.weight_scale_inv"].narrow(
                    0, at * (n // 128), n // 128).copy_(s)
            elif name == "mlp.down_proj.weight":
                q, s = quantize_fp8(w[:, I // 2:], "fp8_block",
                                    block=(128, 128))
                params["mlp.down_proj.weight"].copy_(q.view(E4M3))
                params["mlp.down_proj.weight_scale_inv"].copy_(s)
            elif name == "experts.w":
                q, s = quantize_fp8(w[3], "fp8_block", block=(128, 128),
                                    fmt=E5M2)
                params["experts.0.weight"].copy_(q)
                params["experts.0.weight_scale_inv"].copy_(s)
    return load


def _eager(full):
    params = _params()
    native_loader(params)(iter(full.items()))
    return params


def _assert_lands(got, want, what):
    for name, t in want.items():
        assert got[name].dtype == t.dtype, (what, name)
        assert _bits(t).any(), (what, name)           # the loader wrote it
        assert torch.equal(_bits(got[name]), _bits(t)), (what, name)


def test_float8_parameters_are_captured_as_their_format():
    params = _params()
    cap = reshard.capture(sources=_weights(SOURCES), params=params,
                          load=native_loader(params))
    assert cap.unsupported == {} and len(cap.copies) == 4
    spec = cap.to_dict()["params"]
    assert spec["mlp.gate_up_proj.weight"]["dtype"] == "f8e4m3"
    assert spec["experts.0.weight"]["dtype"] == "f8e5m2"
    assert [c["quant"]["format"] for c in cap.to_dict()["copies"]] == \
        ["f8e4m3", "f8e4m3", "f8e4m3", "f8e5m2"]
    weights = _weights(SOURCES, seed=6)
    got = _params()
    cap.replay(weights, got)
    _assert_lands(got, _eager(weights), "replay")


@pytest.mark.parametrize("backend", ["cma", "ucx"])
def test_float8_parameters_receive_what_the_loader_computes(file_dir,
                                                            backend):
    params = _params()
    pull_versions(file_dir, backend, params, native_loader, (31, 32),
                  lambda version, full: _assert_lands(params, _eager(full),
                                                      version))


@pytest.mark.parametrize("dest", ["float8", "uint8"])
def test_values_converted_as_numbers_are_refused(dest):
    """copy_ of uint8 bits into a float8 parameter (or of float8 values
    into a uint8 one) converts them as numbers: eagerly the parameter gets
    other bytes than the FP8 values, so the capture refuses the source."""
    w = _weights({"w": (128, 128)}, seed=2)["w"]
    fmt, dtype = ("f8e4m3", E4M3) if dest == "float8" else \
        (E4M3, torch.uint8)

    def fresh():
        return {"q": torch.zeros(128, 128, dtype=dtype),
                "s": torch.zeros(1, 1)}

    def load_of(params):
        def load(ws):
            for _, x in ws:
                q, s = quantize_fp8(x, "fp8_tensor", fmt=fmt)
                params["q"].copy_(q)
                params["s"].copy_(s)
        return load
    eager = fresh()
    load_of(eager)(iter({"w": w}.items()))
    q, _ = quantize_fp8(w, "fp8_tensor")
    assert not torch.equal(_bits(eager["q"]), q)     # not the FP8 bits
    cap = reshard.capture(sources={"w": w}, params=fresh(),
                          load=load_of(fresh()))
    assert cap.copies == [] and list(cap.unsupported) == ["w"]
    assert "converts the values of quantize_fp8" in cap.unsupported["w"]
    hint = "fmt=torch.float8_e4m3fn returns" if dest == "float8" else \
        "fmt='f8e4m3' returns uint8 bits"
    assert hint in cap.unsupported["w"], cap.unsupported["w"]


def _finite_patterns(dtype, shape):
    """Finite values of a float dtype, each bit pattern once, zero-padded
    to `shape`: all of a 16-bit dtype's, every 65521st of f32's."""
    if dtype == torch.float32:
        x = torch.arange(0, 1 << 32, 65521).to(torch.int32).view(dtype)
    else:
        x = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16) \
            .view(dtype)
    x = x[torch.isfinite(x)]
    out = torch.zeros(shape, dtype=dtype)
    out.view(-1)[:x.numel()] = x
    return out


def _copy_loader(params):
    def load(weights):
        for name, w in weights:
            params[name].copy_(w)
    return load


@pytest.mark.parametrize("src", [torch.bfloat16, torch.float16,
                                 torch.float32])
def test_casts_into_float8_are_torchs_casts(file_dir, src):
    """A plain copy_ of bf16/f16/f32 weights into float8 parameters: the
    library's cast of each finite value is the bytes of torch's own."""
    fulls = {f"w.{f}": _finite_patterns(src, (256, 256)) for f in ("a", "b")}
    params = {"w.a": torch.zeros(256, 256, dtype=E4M3),
              "w.b": torch.zeros(256, 256, dtype=E5M2)}
    cap = reshard.capture(sources=fulls, params=params,
                          load=_copy_loader(params))
    assert cap.unsupported == {}
    assert cap.to_dict()["params"]["w.b"]["dtype"] == "f8e5m2"
    publish_and_pull(file_dir, cap, fulls, params, model="cast")
    for name, dtype in (("w.a", E4M3), ("w.b", E5M2)):
        want = fulls[name].to(dtype)
        assert torch.equal(_bits(params[name]), _bits(want)), name


def test_float8_sources_move_and_widen(file_dir):
    """A trainer publishing float8 weights: copied into a float8 parameter
    unchanged, and widened into bf16 and f32 parameters as torch widens
    them (every non-NaN value of each format)."""
    fulls = {}
    for fmt, dtype in (("e4m3", E4M3), ("e5m2", E5M2)):
        x = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
        fulls[fmt] = x[~torch.isnan(x.float())].contiguous()
    params = {"e4m3": torch.zeros(fulls["e4m3"].shape, dtype=E4M3),
              "e5m2": torch.zeros(fulls["e5m2"].shape, dtype=E5M2),
              "e4m3.bf16": torch.zeros(fulls["e4m3"].shape,
                                       dtype=torch.bfloat16),
              "e5m2.f32": torch.zeros(fulls["e5m2"].shape)}

    def load(weights):
        for name, w in weights:
            params[name].copy_(w)
            wide = "e4m3.bf16" if name == "e4m3" else "e5m2.f32"
            params[wide].copy_(w)
    cap = reshard.capture(sources=fulls, params=params, load=load)
    assert cap.unsupported == {} and len(cap.copies) == 4
    publish_and_pull(file_dir, cap, fulls, params, model="wide")
    for name, want in (("e4m3", fulls["e4m3"]), ("e5m2", fulls["e5m2"]),
                       ("e4m3.bf16", fulls["e4m3"].to(torch.bfloat16)),
                       ("e5m2.f32", fulls["e5m2"].float())):
        assert torch.equal(_bits(params[name]), _bits(want)), name
