"""The coverage floor as the Python package's receivers get it: the
parameters rs_receiver_params_init fills, read through the package's ctypes
mirror, hold the library's default floor (0.995) with the gate off, so a
floor lowered in the library (or a mirror that misplaces the field) shows
here. The gate's behaviour at and one byte below the floor is tested in C
(tests/unit/exec/test_coverage_floor.c) and through the CLI
(tests/cli/test_coverage_floor_cli.sh)."""
import ctypes

from reshard import _lib


def test_receiver_params_default_floor():
    p = _lib.ReceiverParams()
    _lib.lib().rs_receiver_params_init_sized(p, ctypes.sizeof(p))
    assert p.coverage_floor == 0.995
    assert p.require_full_coverage == 0
