"""Checks of arguments where they are given, so a wrong word fails at the
call that took it, naming the argument, instead of at a later call."""
from . import errors


def choice(what, value, allowed):
    """`value` when it is one of `allowed`, else InvalidArgument naming
    `what` ("publisher: backend"), the allowed values and the value
    given."""
    allowed = tuple(allowed)
    if isinstance(value, str) and value in allowed:
        return value
    raise errors.InvalidArgument(
        f"{what} must be one of {', '.join(allowed)}, got {value!r}")


# The backends that expose memory to other processes (publishers) and
# read from them (receivers); the library's local and local-mt backends
# only move bytes within one process.
BACKENDS = ("ucx", "cma")
