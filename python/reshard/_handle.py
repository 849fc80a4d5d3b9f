"""What the package's library handles (Publisher, Receiver) share: closing
on `with` exit and on garbage collection, a clear error once closed, and
directory notices routed to a Python callable."""
from . import _lib, errors


class Handle:
    """Subclasses set `_what` ("publisher") and `_h`, and define close()."""

    _what = "handle"
    _h = None

    def _open(self):
        if self._h is None:
            raise errors.InvalidArgument(f"{self._what} is closed")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def close(self):
        raise NotImplementedError


def notice_cb(fn):
    """A C notice callback calling fn(message), or None (the library then
    writes notices to stderr). Exceptions in fn are dropped: the library
    calls it from its own threads."""
    if fn is None:
        return None

    def call(_ctx, msg):
        try:
            fn(msg.decode("utf-8", "replace"))
        except Exception:
            pass
    return _lib.NOTICE_CB(call)
