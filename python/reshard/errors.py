"""Exceptions carrying reshard's status and message.

Every failing library call raises a subclass of ReshardError chosen by its
rs_status_t (include/reshard/status.h); `status` is the status name
("RS_ERR_INCOMPLETE"), `code` its value and `message` the library's detail
message, which names what is wrong (file, tensor, op, field).
"""


class ReshardError(Exception):
    """A reshard call failed."""

    status = "RS_ERR"
    code = None

    def __init__(self, message, status=None, code=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code

    def __str__(self):
        return f"{self.status}: {self.message}"


class InvalidArgument(ReshardError, ValueError):
    """An API precondition was broken (RS_ERR_INVALID_ARG)."""
    status, code = "RS_ERR_INVALID_ARG", -1


class InputError(ReshardError, ValueError):
    """Malformed or inconsistent input data (RS_ERR_INPUT)."""
    status, code = "RS_ERR_INPUT", -10


class ReshardIOError(ReshardError, OSError):
    """A file could not be read or written (RS_ERR_IO)."""
    status, code = "RS_ERR_IO", -11


class UnsupportedReshard(ReshardError):
    """Geometry or an operation outside what reshard supports
    (RS_ERR_UNSUPPORTED)."""
    status, code = "RS_ERR_UNSUPPORTED", -20


class IncompleteRefit(ReshardError):
    """Bytes the receiver needs are not covered (RS_ERR_INCOMPLETE)."""
    status, code = "RS_ERR_INCOMPLETE", -30


class VerifyError(ReshardError):
    """A check of the pulled bytes or of the lease failed (RS_ERR_VERIFY)."""
    status, code = "RS_ERR_VERIFY", -31


class TransportError(ReshardError):
    """A transport failed to move bytes (RS_ERR_TRANSPORT)."""
    status, code = "RS_ERR_TRANSPORT", -40


class ReshardTimeout(ReshardError, TimeoutError):
    """A bounded wait expired (RS_ERR_TIMEOUT)."""
    status, code = "RS_ERR_TIMEOUT", -50


class NoMemory(ReshardError, MemoryError):
    """An allocation or a configured limit failed (RS_ERR_NO_MEMORY)."""
    status, code = "RS_ERR_NO_MEMORY", -60


class Cancelled(ReshardError):
    """A wait was cancelled (RS_ERR_CANCELLED): Receiver.cancel or close
    from another thread, a cancelled stage_async future, Publisher.cancel.
    Nothing was staged or installed by the cancelled call."""
    status, code = "RS_ERR_CANCELLED", -51


_BY_CODE = {cls.code: cls for cls in (
    InvalidArgument, InputError, ReshardIOError, UnsupportedReshard,
    IncompleteRefit, VerifyError, TransportError, ReshardTimeout, NoMemory,
    Cancelled)}


def error_for(code, message):
    """The exception for a status code and its message."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return ReshardError(message, status=f"status {code}", code=code)
    return cls(message)
