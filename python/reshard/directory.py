"""Operations on a directory itself, for the process that coordinates a
job: releasing a version once every inference rank applied it."""
import ctypes

from . import _lib
from ._lib import DIAG


def release(directory, model, version):
    """Releases `version` of `model` (publishers' wait_released returns).
    IncompleteRefit, naming the holder, while any receiver's lease on it is
    live; releasing a released version succeeds; InputError for a version
    never published."""
    lib = _lib.lib()
    h = ctypes.c_void_p()
    _lib.call("rs_dir_open", _lib.enc(directory), DIAG, ctypes.byref(h))
    try:
        _lib.call("rs_dir_release", h, _lib.enc(model), int(version), DIAG)
    finally:
        lib.rs_dir_close(h)
