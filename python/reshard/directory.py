"""Operations on a directory itself, for the process that coordinates a
job: listing versions and their leases, releasing a version once every
inference rank applied it, abandoning one whose ranks died, and reading the
group commit records of engine replicas (docs/python.md, "Directory")."""
import ctypes
from dataclasses import dataclass

from . import _lib, errors
from ._lib import DIAG

_STATES = {1: "PENDING", 2: "READY", 3: "RELEASED"}
_DECISIONS = {0: "open", ord("C"): "committed", ord("A"): "aborted"}
_MARKS = {"staged": ord("S"), "applied": ord("P"), "failed": ord("F")}


@dataclass
class VersionInfo:
    """One version of a model: its state ("PENDING", "READY",
    "RELEASED"), expected slots and published ones."""
    version: int
    state: str
    slots: int
    published: int


@dataclass
class LeaseInfo:
    """A live lease: its holder, epoch and seconds left."""
    holder: str
    epoch: int
    left_s: float


@dataclass
class GroupInfo:
    """An attempt of a group's commit record: the group's size (0: no
    record), the attempt, attempts decided so far, the attempt's decision
    ("open", "committed", "aborted"), each rank's state while open
    ("-" nothing, "S" staged, "P" applied, "F" failed) and the note of the
    latest decision."""
    size: int
    attempt: int
    attempts: int
    decision: str
    ranks: str
    note: str


def _listed(struct, convert, fn, *args):
    """convert() of each record of the array the library call `fn`(*args,
    &array, &count) returns, the array freed."""
    arr = ctypes.POINTER(struct)()
    n = ctypes.c_size_t()
    _lib.call(fn, *args, ctypes.byref(arr), ctypes.byref(n))
    try:
        return [convert(arr[i]) for i in range(n.value)]
    finally:
        _lib.libc().free(ctypes.cast(arr, ctypes.c_void_p))


def _group_info(g):
    return GroupInfo(size=g.size, attempt=g.attempt, attempts=g.attempts,
                     decision=_DECISIONS.get(g.decision, str(g.decision)),
                     ranks=g.ranks.decode(),
                     note=g.note.decode("utf-8", "replace"))


class Directory:
    """A directory ("file:DIR" or "redis://host:port") opened once; a
    context manager (close() closes it). One thread at a time."""

    def __init__(self, url):
        self._h = None
        h = ctypes.c_void_p()
        _lib.call("rs_dir_open", _lib.enc(url), DIAG, ctypes.byref(h))
        self._h = h

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._h is not None:
            _lib.lib().rs_dir_close(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def _open(self):
        if self._h is None:
            raise errors.InvalidArgument("directory: closed")
        return self._h

    def versions(self, model):
        """Every version of `model`, ascending ([] when none)."""
        return _listed(_lib.VersionInfo, lambda v: VersionInfo(
            v.version, _STATES.get(v.state, "?"), v.slots, v.published),
            "rs_dir_list", self._open(), _lib.enc(model), DIAG)

    def wait_ready(self, model, version=-1, timeout_s=60.0):
        """The VersionInfo of `version` once it is READY (-1: the newest
        READY version); ReshardTimeout after timeout_s."""
        v = _lib.VersionInfo()
        _lib.call("rs_dir_wait_ready", self._open(), _lib.enc(model),
                  int(version), float(timeout_s), 0.0, DIAG, v)
        return VersionInfo(v.version, _STATES.get(v.state, "?"), v.slots,
                           v.published)

    def table(self, model, version, slot):
        """The shard table (bytes) slot `slot`'s first publisher published
        for a READY version; its digest is checked."""
        buf, n = ctypes.c_void_p(), ctypes.c_size_t()
        _lib.call("rs_dir_read", self._open(), _lib.enc(model), int(version),
                  int(slot), DIAG, ctypes.byref(buf), ctypes.byref(n))
        try:
            return ctypes.string_at(buf, n.value)
        finally:
            _lib.libc().free(buf)

    def leases(self, model, version):
        """The live leases of a version, in holder order (InputError for a
        version never created)."""
        return _listed(_lib.DirLeaseInfo, lambda x: LeaseInfo(
            x.holder.decode(), x.epoch, x.left_s),
            "rs_dir_leases", self._open(), _lib.enc(model), int(version),
            DIAG)

    def release(self, model, version, by=None):
        """Releases a version (as `by`, recorded and named by later
        refusals; default "<host>-<pid>"). IncompleteRefit, naming a holder,
        while a lease is live."""
        if by is None:
            _lib.call("rs_dir_release", self._open(), _lib.enc(model),
                      int(version), DIAG)
        else:
            _lib.call("rs_dir_release_as", self._open(), _lib.enc(model),
                      int(version), _lib.enc(by), DIAG)

    def abandon(self, model, version, by=None):
        """Releases a version whatever its leases (dropped): for versions
        whose publishers or receivers died. Returns the number of live
        leases dropped."""
        n = ctypes.c_size_t()
        if by is None:
            _lib.call("rs_dir_abandon", self._open(), _lib.enc(model),
                      int(version), DIAG, ctypes.byref(n))
        else:
            _lib.call("rs_dir_abandon_as", self._open(), _lib.enc(model),
                      int(version), _lib.enc(by), DIAG, ctypes.byref(n))
        return n.value

    def group(self, model, version, group, attempt=0):
        """Attempt `attempt` (0: the open one) of a group's commit
        record for a version."""
        g = _lib.DirGroupInfo()
        _lib.call("rs_dir_group_info", self._open(), _lib.enc(model),
                  int(version), _lib.enc(group), int(attempt), DIAG, g)
        return _group_info(g)

    def group_mark(self, model, version, group, size, rank, state,
                   attempt=0, note=None):
        """Reports rank `rank`'s `state` ("staged", "applied", "failed")
        in a group's attempt (0: join the open one; staged only). What a
        receiver created with a group does itself; for tools and tests."""
        g = _lib.DirGroupInfo()
        _lib.call("rs_dir_group_mark", self._open(), _lib.enc(model),
                  int(version), _lib.enc(group), int(size), int(rank),
                  int(attempt), _MARKS[state], _lib.enc(note), DIAG, g)
        return _group_info(g)

    def group_abort(self, model, version, group, attempt, note=None):
        """Aborts an open attempt; returns its decision (committed when
        the last rank applied first)."""
        g = _lib.DirGroupInfo()
        _lib.call("rs_dir_group_abort", self._open(), _lib.enc(model),
                  int(version), _lib.enc(group), int(attempt),
                  _lib.enc(note), DIAG, g)
        return _group_info(g)


def release(directory, model, version, by=None):
    """Releases `version` of `model` (publishers' wait_released returns).
    IncompleteRefit, naming the holder, while any receiver's lease on it is
    live; releasing a released version succeeds; InputError for a version
    never published."""
    with Directory(directory) as d:
        d.release(model, version, by=by)


def abandon(directory, model, version, by=None):
    """Directory.abandon on a directory opened for the call."""
    with Directory(directory) as d:
        return d.abandon(model, version, by=by)
