"""The coverage floor as the Python package's receivers get it: the
parameters rs_receiver_params_init fills, read through the package's ctypes
mirror, hold the library's default floor (0.995) with the gate off, so a
floor lowered in the library (or a mirror that misplaces the field) shows
here; and the gate through Receiver(require_full_coverage=True): a pull
covering exactly the default floor's share installs, one just below it is
refused with the parameter untouched (as in C, tests/unit/exec/
test_coverage_floor.c, and the CLI, tests/cli/test_coverage_floor_cli.sh)."""
import ctypes
import json

import pytest
import torch

import reshard
from reshard import _lib


def test_receiver_params_default_floor():
    p = _lib.ReceiverParams()
    _lib.lib().rs_receiver_params_init_sized(p, ctypes.sizeof(p))
    assert p.coverage_floor == 0.995
    assert p.require_full_coverage == 0


def _capture(param_elems, covered=3980):
    return json.dumps({
        "schema": "reshard.capture.v1",
        "params": {"p": {"shape": [param_elems], "dtype": "f32"}},
        "sources": {"w": {"shape": [covered], "dtype": "f32"}},
        "copies": [{"src": "w", "ops": [], "param": "p", "dest_offset": 0,
                    "dest_shape": [covered], "dest_stride": [1],
                    "dest_dtype": "f32"}]})


def _pull(directory, p, model="m", **kw):
    """Publishes w (3,980 f32) and pulls it into p[:3980] of the parameter
    p (filled with -3 before); the rest of p is never written."""
    w = torch.arange(3980, dtype=torch.float32) * 0.5 + 1.0
    pub = reshard.Publisher(directory, model, 0, 1, backend="cma")
    try:
        pub.register("w", w)
        pub.publish(1)
        with reshard.Receiver(directory, model, _capture(p.numel()),
                              {"p": p}, backend="cma",
                              discover_timeout_s=20, **kw) as r:
            r.pull(1)
    finally:
        pub.close()
    assert torch.equal(p[:3980], w)
    assert torch.equal(p[3980:], torch.full((p.numel() - 3980,), -3.0))


def test_gate_at_the_default_floor_installs(file_dir):
    # 3,980 of 4,000 bytes' share: 0.995 exactly
    _pull(file_dir, torch.full((4000,), -3.0), require_full_coverage=True)


def test_gate_just_below_the_default_floor_refuses(file_dir):
    # 3,980 / 4,001 = 0.99475: refused, the parameter untouched
    p = torch.full((4001,), -3.0)
    with pytest.raises(reshard.IncompleteRefit,
                       match="covers 0.9948 .* below the floor 0.9950"):
        _pull(file_dir, p, require_full_coverage=True)
    assert torch.equal(p, torch.full((4001,), -3.0))


def test_gate_off_or_floor_lowered_installs(file_dir):
    _pull(file_dir, torch.full((4001,), -3.0), model="off")
    _pull(file_dir, torch.full((4001,), -3.0), model="lowered",
          require_full_coverage=True, coverage_floor=0.99)


def test_bad_floor(file_dir):
    for bad in (0, 1.5, -0.1, "0.9", True):
        with pytest.raises(reshard.InvalidArgument, match="coverage_floor"):
            reshard.Receiver(file_dir, "m", _capture(4000),
                             {"p": torch.zeros(4000)}, backend="cma",
                             require_full_coverage=True, coverage_floor=bad)
