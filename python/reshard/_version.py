"""The package's version: the one the wheel was built as, or in a source
tree the one include/reshard/version.h states (the version's one source,
which the library, the CLI and the wheel are built from)."""
import re
from pathlib import Path


def _from_header(header):
    text = header.read_text()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^#define RS_VERSION_{part} +(\d+)$", text, re.M)
        if m is None:
            raise RuntimeError(f"{header}: no '#define RS_VERSION_{part} "
                               "<number>'")
        parts.append(m.group(1))
    return ".".join(parts)


def version():
    """The version string, "major.minor.patch"."""
    try:
        from ._wheel_version import version as built
        return built
    except ImportError:  # not installed from a wheel: python/ of a source tree
        pass
    header = Path(__file__).resolve().parents[2] / "include" / "reshard" / \
        "version.h"
    return _from_header(header)
