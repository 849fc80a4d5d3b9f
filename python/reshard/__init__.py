"""reshard from PyTorch: capture what a weight loader reads, publish live
tensors from trainer ranks, stage and apply new versions into a live model.

The work is done by libreshard (loaded with ctypes on first use: the one
installed with the package, or RESHARD_LIB's path). See docs/python.md.
"""
from . import _version
from . import megatron, quant
from .capture import Capture, capture
from .errors import (ReshardError, InvalidArgument, InputError, ReshardIOError,
                     UnsupportedReshard, IncompleteRefit, VerifyError,
                     TransportError, ReshardTimeout, NoMemory, Cancelled)
from .directory import Directory, abandon, release
from .layouts import Box, LayoutError, chunk_range
from .publisher import Publisher
from .receiver import Receiver, Staged, PullResult
from .sources import sources_from_directory, sources_from_hf_config

__version__ = _version.version()

__all__ = [
    "capture", "Capture", "quant", "megatron", "sources_from_directory",
    "sources_from_hf_config", "Publisher", "Receiver", "release", "abandon", "Directory", "Staged", "PullResult", "Box", "LayoutError",
    "chunk_range", "ReshardError", "InvalidArgument", "InputError",
    "ReshardIOError", "UnsupportedReshard", "IncompleteRefit", "VerifyError",
    "TransportError", "ReshardTimeout", "NoMemory", "Cancelled",
]


def library_version():
    """The loaded libreshard's version string."""
    from . import _lib
    return _lib.lib().rs_version_string().decode()
