"""An inference rank's receiver over a live PyTorch model.

The receiver binds the model's live parameters, stages a version (pulled,
replayed, cast and verified into receiver-owned staging while the model
keeps serving the old weights) and applies it at the caller's safe point.
A contiguous CPU parameter is bound in place; any other parameter (on a
device, or not contiguous) gets a host mirror that apply copies into it
with `param.copy_(mirror)`, so the library never dereferences a device
pointer.
"""
import ctypes
import json
import threading
import warnings
import weakref
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from . import _args, _group, _interrupt, _lib, dtypes, errors
from .capture import Capture, shared_text
from .capture_hook import shared_memory
from ._handle import Handle, notice_cb
from ._lib import DIAG


@dataclass
class PullResult:
    """What a pull or an apply did (seconds, bytes, publishers)."""
    version: int
    replanned: bool
    discover_s: float
    tables_s: float
    plan_s: float
    connect_s: float
    stage_s: float
    apply_s: float
    bytes: int
    descriptors: int
    bytes_installed: int
    sessions: int
    failovers: int
    failover_msg: str
    release_status: str
    release_msg: str
    stages: dict = field(default_factory=dict)
    # the tables step: slots whose parsed table was reused (only the
    # version's digests read), slots parsed, bytes read from the directory
    tables_reused: int = 0
    tables_parsed: int = 0
    table_bytes_read: int = 0
    # every publisher that failed within the pull: {"publisher", "slot",
    # "error"} (the first 8; each failover replaced one)
    failures: list = field(default_factory=list)
    # deltas (Receiver(delta=...), on by default): reads served by deltas
    # ("runs"), the bytes read for them and the full bytes they stand for,
    # reads read whole and their bytes, deltas refused, whether the version
    # was read again whole after a patched read failed verification, the
    # bytes of the copies held for the next version, those the budget left
    # out, those not kept for want of memory, and the bytes patched in
    # place in the shadows or the staging ("in_place_bytes")
    delta: dict = field(default_factory=dict)


def _stages_dict(s):
    out = {}
    for name in ("plan_s", "prepare_s", "descriptors_s", "wire_s",
                 "replay_s", "convert_s", "verify_s", "install_s", "run_s"):
        v = getattr(s, name)
        if v >= 0:
            out[name] = v
    for name in ("bytes", "descriptors", "full_pulls", "converts",
                 "fallback", "shards_verified", "waves", "threads",
                 "staging_bytes", "staging_unbounded", "staging_rounds"):
        out[name] = getattr(s, name)
    out["ok"] = bool(s.ok)
    out["failure"] = s.failure.decode() if s.failure else None
    return out


def _result(r):
    lib = _lib.lib()
    return PullResult(
        version=r.version, replanned=bool(r.replanned),
        discover_s=r.discover_s, tables_s=r.tables_s, plan_s=r.plan_s,
        connect_s=r.connect_s, stage_s=r.stage_s, apply_s=r.apply_s,
        bytes=r.stages.bytes, descriptors=r.stages.descriptors,
        bytes_installed=r.bytes_installed, sessions=r.sessions,
        failovers=r.failovers,
        failover_msg=r.failover_msg.decode("utf-8", "replace"),
        release_status=lib.rs_status_str(r.release_status).decode(),
        release_msg=r.release_msg.decode("utf-8", "replace"),
        stages=_stages_dict(r.stages), tables_reused=r.tables_reused,
        tables_parsed=r.tables_parsed, table_bytes_read=r.table_bytes_read,
        failures=[{"publisher": f.publisher.decode("utf-8", "replace"),
                   "slot": f.slot, "error": f.why.decode("utf-8", "replace")}
                  for f in r.failures[:min(r.nfailures,
                                           _lib.PULL_FAILURES_MAX)]],
        delta={"runs": r.delta_runs, "bytes": r.delta_bytes,
               "full_bytes": r.delta_full_bytes, "whole_runs": r.whole_runs,
               "whole_bytes": r.whole_bytes, "refused": r.delta_refused,
               "retried": bool(r.delta_retried),
               "held_bytes": r.delta_held_bytes,
               "in_place_bytes": r.delta_in_place_bytes,
               "over_budget_bytes": r.delta_over_budget_bytes,
               "no_memory_bytes": r.delta_no_memory_bytes})


class Staged:
    """A staged version: pulled and verified, not yet applied. Consumed by
    Receiver.apply or Receiver.discard."""

    def __init__(self, handle, version, receiver):
        self._h = handle
        self.version = version
        self._receiver = receiver

    @property
    def consumed(self):
        return self._h is None

    def __repr__(self):
        state = "consumed" if self._h is None else "staged"
        return f"<reshard.Staged version {self.version} ({state})>"


class _Binding:
    """A capture parameter, its live tensor and the host memory bound for
    it (the tensor itself, or a mirror). A parameter the capture fills gets
    a mirror too (`mirrored`): its fills are written there, never into the
    live tensor before an apply."""

    def __init__(self, name, tensor, mirrored=False):
        self.name = name
        self.tensor = tensor
        direct = (tensor.device.type == "cpu" and tensor.is_contiguous()
                  and not mirrored)
        self.mirror = None if direct else torch.empty(
            tensor.shape, dtype=tensor.dtype,
            pin_memory=torch.cuda.is_available())
        if self.mirror is not None:
            self.mirror.copy_(tensor.detach())

    def host(self):
        return self.tensor.detach() if self.mirror is None else self.mirror

    def install(self):
        if self.mirror is not None:
            with torch.no_grad():
                self.tensor.copy_(self.mirror)


def _as_capture(capture):
    """A Capture from a Capture, its JSON text or a capture file (so the
    fills of a saved capture are applied as well)."""
    if isinstance(capture, Capture):
        return capture
    if isinstance(capture, str) and capture.lstrip().startswith("{"):
        return Capture.from_json(capture)
    return Capture.load(capture)


def _load_capture(capture):
    """The library's handle of a Capture (its reshard.capture.v1 JSON)."""
    raw = capture.to_json().encode("utf-8")
    h = ctypes.c_void_p()
    _lib.call("rs_capture_load_string", raw, len(raw), b"capture", DIAG,
              ctypes.byref(h))
    return h


UNBOUNDED = (1 << 64) - 1  # RS_STAGING_UNBOUNDED


def _budget(name, budget, default, least, what):
    """A byte budget keyword: None gives `default`, "unbounded" the
    library's UNBOUNDED, else an int of at least `least` bytes (`what`
    says which in the error)."""
    if budget is None:
        return default
    if budget == "unbounded":
        return UNBOUNDED
    if isinstance(budget, bool) or not isinstance(budget, int) or \
            not least <= budget < UNBOUNDED:
        raise errors.InvalidArgument(
            f"receiver: {name} must be None, {what} or 'unbounded', got "
            f"{budget!r}")
    return budget


def _staging_budget(budget):
    """rs_receiver_params_t.staging_budget of the keyword."""
    return _budget("staging_budget", budget, 0, 1,
                   "a positive number of bytes")


def _delta_budget(budget):
    """rs_receiver_params_t.delta_budget of the keyword (None: the
    library's default)."""
    return _budget("delta_budget", budget, None, 0,
                   "a number of bytes >= 0")


def _capture_params(cap):
    lib = _lib.lib()
    out = []
    for i in range(lib.rs_capture_num_params(cap)):
        info = _lib.ParamInfo()
        lib.rs_capture_param(cap, i, info)
        shape = tuple(info.shape[d] for d in range(info.ndim))
        out.append((info.name.decode(), shape, info.dtype, info.nbytes))
    return out


class Receiver(Handle):
    """Receives versions of `model` into the live tensors `params`
    ({name: tensor}, every parameter of the capture) as `capture`
    (a reshard.Capture, its JSON or a capture file) reads them.

    directory: "file:DIR" or "redis://host:port"; backend: "ucx" or "cma";
    salt: this rank's index (spreads replica choice); holder: the lease
    holder name (unique among a version's live leases: a name another
    receiver holds is refused; default unique per receiver object);
    release_after: release each version once applied (refused, and
    reported in the result, while another receiver's lease is live; the
    first release that finds none ends the version, so ranks that do not
    stage together leave it off and the coordinator releases); stale_s:
    versions whose publishers were silent longer are skipped (default 5,
    as the CLI's --stale-after; 0: off); group, group_size, group_rank,
    group_timeout_s: the ranks of one engine replica apply together or
    not at all (docs/python.md, "Group commit");
    timeouts in seconds (pull_timeout_s 0: no overall bound);
    announce_cuts: before the first pull, write the cut points this
    capture reads to the directory (as record `announce_as`, default the
    holder), so cut-aligned publishers cut their next version for it,
    with the capture's quantized copies, so publishers created with
    quantize_wanted=True serve them quantized (default True; a failed
    announcement is a notice, never a failed pull); staging_budget: the
    most bytes of staging (staged reads, converts, quantized boxes) a pull
    holds at once, as the CLI's --staging-budget: None (default) 1 GiB or
    the largest single box, a positive int of bytes (a box above it is
    refused), or "unbounded" (docs/executor.md, "Staging budget");
    stall_s: a publisher whose reads make no progress for this long counts
    as failed while its slot has another publisher to read (default 5, as
    the CLI's --stall-after; 0: off; docs/directory.md, "Replicas");
    delta: once the shadows hold a verified version, read the next one
    through the deltas arena publishers serve where the cost model
    prefers them, patch the shadows in place and verify the full new
    digests (None, the default: on when verify_digests is; True: on,
    refused without verify_digests; False: every read whole; the CLI's
    --delta / --no-delta; docs/delta.md, "Receivers");
    reads into the executor's staging (staged, cast, quantized reads) are
    patched in place there too when the staging takes one round;
    delta_budget: the most bytes kept as copies of the reads that land in
    neither (staged reads when the staging takes rounds), the reads that
    save most per byte kept first, the others read whole (None: the library's
    default, 0: no copies; a positive int of bytes; "unbounded"; the CLI's
    --delta-budget; docs/delta.md, "The delta budget");
    require_full_coverage: refuse, before anything is installed, a pull
    whose plan leaves a parameter's written share below coverage_floor
    (None: the library's default, 0.995; a number in (0, 1]);
    docs/executor.md, "The coverage gate")."""

    _what = "receiver"

    def __init__(self, directory, model, capture, params, backend="ucx", *,
                 salt=0, holder=None, discover_timeout_s=60.0,
                 pull_timeout_s=0.0, lease_ttl_s=60.0, timeout_s=60.0,
                 verify_digests=True, release_after=True, stale_s=5.0,
                 notice=None, announce_cuts=True, announce_as=None,
                 group=None, group_size=None, group_rank=None,
                 group_timeout_s=60.0, only=None, skip=None,
                 staging_budget=None, stall_s=5.0, delta=None,
                 delta_budget=None,
                 require_full_coverage=False, coverage_floor=None):
        _args.choice("receiver: backend", backend, _args.BACKENDS)
        self._staging_budget = _staging_budget(staging_budget)
        self._stall_s = float(stall_s)
        if delta and not verify_digests:
            raise errors.InvalidArgument(
                "receiver: delta=True needs verify_digests=True (a patched "
                "read is accepted only by the full new digest)")
        self._delta = 1 if delta or (delta is None and verify_digests) else 0
        self._delta_budget = _delta_budget(delta_budget)
        if coverage_floor is not None and not (
                isinstance(coverage_floor, (int, float))
                and not isinstance(coverage_floor, bool)
                and 0 < coverage_floor <= 1):
            raise errors.InvalidArgument(
                f"receiver: coverage_floor must be a number in (0, 1], "
                f"not {coverage_floor!r}")
        self._coverage = (1 if require_full_coverage else 0, coverage_floor)
        self._lock = threading.Lock()
        # _state guards _current (the call that cancel() stops) and
        # _closing; never held across a library call but the cancel.
        self._state = threading.Lock()
        self._current = None
        self._closing = False
        self._runner = _interrupt.Runner("reshard-receiver")
        self._h = None
        self._cap = None
        capture = _as_capture(capture)
        if only is not None or skip is not None:
            capture = capture.select(only=only, skip=skip)
        self.left_out = list(capture.left_out)
        if self.left_out:
            (notice or warnings.warn)(
                "receiver: sources left out (only/skip); these parameters "
                "keep their own bytes where those would write: "
                + ", ".join(self.left_out))
        self._cap = _load_capture(capture)
        try:
            # Nothing is written into the model before the first successful
            # apply: the fills go into the mirrors of the parameters they
            # touch, and the bind copies the bound memory (mirror or live
            # tensor) into the staging that versions land in.
            self._bindings = self._match(
                params, {f["param"] for f in capture.fills})
            self._check_fills(capture)
            self._create(directory, model, backend, salt, holder,
                         discover_timeout_s, pull_timeout_s, lease_ttl_s,
                         timeout_s, verify_digests, release_after, stale_s,
                         notice, announce_cuts, announce_as,
                         (group, group_size, group_rank, group_timeout_s))
            self._fill(capture)
            self._bind()
        except BaseException:
            self.close()
            raise
        self._staged = None
        self._last_plan_s = -1.0

    def _match(self, params, filled=()):
        """Each capture parameter's live tensor, checked against the
        capture's shape and dtype; those named in `filled` are mirrored."""
        params = dict(params)
        bindings = []
        for name, shape, code, _ in _capture_params(self._cap):
            t = params.pop(name, None)
            if t is None:
                raise errors.InvalidArgument(
                    f"receiver: parameter '{name}' of the capture is not in "
                    "params")
            if tuple(t.shape) != shape or not dtypes.holds(t.dtype, code):
                raise errors.InputError(
                    f"receiver: parameter '{name}' is {list(t.shape)} "
                    f"{dtypes.name_of(t.dtype)}, the capture has {list(shape)} "
                    f"{dtypes.name_of_code(code)}")
            bindings.append(_Binding(name, t, mirrored=name in filled))
        if params:
            raise errors.InvalidArgument(
                "receiver: params not in the capture: "
                + ", ".join(sorted(params)[:8]))
        shared = shared_memory({b.name: b.tensor for b in bindings})
        if shared is not None:
            raise errors.InvalidArgument(shared_text("receiver", *shared))
        return bindings

    def _check_fills(self, capture):
        """Every fill names a parameter and lies inside it."""
        by_name = {b.name: b for b in self._bindings}
        for i, f in enumerate(capture.fills):
            b = by_name.get(f["param"])
            if b is None or not _inside(f, b.tensor.numel()):
                raise errors.InputError(
                    f"receiver: fills[{i}] of parameter '{f['param']}' "
                    "is not inside that parameter")

    def _fill(self, capture):
        """Constant writes the loader makes (zeroed padding rows), done once,
        in capture order, into the mirror bound for each filled parameter
        (never the live tensor): the bind copies it into the staging, where
        the copies of every version land over it, as the loader's copies
        land over its earlier fills; apply installs the whole."""
        by_name = {b.name: b for b in self._bindings}
        for f in capture.fills:
            m = by_name[f["param"]].mirror
            region = m.as_strided(f["dest_shape"], f["dest_stride"],
                                  m.storage_offset() + f["dest_offset"])
            with torch.no_grad():
                region.fill_(f["value"])

    def _create(self, directory, model, backend, salt, holder,
                discover_timeout_s, pull_timeout_s, lease_ttl_s, timeout_s,
                verify_digests, release_after, stale_s, notice,
                announce_cuts, announce_as, group):
        p = _lib.ReceiverParams()
        _lib.lib().rs_receiver_params_init_sized(p, ctypes.sizeof(p))
        self._keep = [_lib.enc(directory), _lib.enc(model),
                      _lib.enc(backend), _lib.enc(holder),
                      _lib.enc(announce_as)]
        (p.directory, p.model, p.backend, p.holder,
         p.announce_as) = self._keep
        p.announce_cuts = 1 if announce_cuts else 0
        p.salt = int(salt)
        p.discover_timeout_s = float(discover_timeout_s)
        p.pull_timeout_s = float(pull_timeout_s)
        p.lease_ttl_s = float(lease_ttl_s)
        p.timeout_s = float(timeout_s)
        p.verify_digests = 1 if verify_digests else 0
        p.release_after = 1 if release_after else 0
        p.stale_s = float(stale_s)
        p.staging_budget = self._staging_budget
        p.stall_s = self._stall_s
        p.delta = self._delta
        if self._delta_budget is not None:
            p.delta_budget = self._delta_budget
        p.require_full_coverage = self._coverage[0]
        if self._coverage[1] is not None:
            p.coverage_floor = float(self._coverage[1])
        self._keep.append(_group.set_params(p, *group))
        self._notice = notice_cb(notice)
        if self._notice is not None:
            p.notice = self._notice
        h = ctypes.c_void_p()
        _lib.call("rs_receiver_create", p, self._cap, DIAG, ctypes.byref(h))
        self._h = h

    def _bind(self):
        for i, b in enumerate(self._bindings):
            t = b.host()
            nbytes = t.numel() * t.element_size()
            _lib.call("rs_receiver_bind", self._h, i,
                      ctypes.c_void_p(t.data_ptr()), nbytes,
                      _lib.RS_MEM_HOST, DIAG)

    # -- versions ------------------------------------------------------
    def announce_cuts(self):
        """Writes this receiver's cuts record now (announce_cuts does it
        once before the first pull), replacing the one written before."""
        with self._lock:
            self._open()
            _lib.call("rs_receiver_announce_cuts", self._h, DIAG)

    def stage(self, version=-1):
        """Pulls, replays, casts and verifies `version` (-1: the newest
        READY one) into staging; the live parameters are untouched. Holds a
        lease on the version until apply or discard. Cancelled
        (reshard.Cancelled) by cancel() or close() from another thread;
        Ctrl-C raises KeyboardInterrupt within about a second; either way
        nothing stays staged."""
        return self._stage(version, None)

    def stage_async(self, version=-1):
        """stage(version) on a thread of its own: a
        concurrent.futures.Future of the Staged version. Its cancel()
        stops the stage, also while it runs (the future is then cancelled
        and nothing stays staged); cancel() on the receiver ends it with
        reshard.Cancelled."""
        fut = _StageFuture(self)
        token = fut._token

        def run():
            try:
                staged = self._stage(version, token)
            except BaseException as e:  # the future carries it
                if fut.set_running_or_notify_cancel():
                    fut.set_exception(e)
                return
            if fut.set_running_or_notify_cancel():
                fut.set_result(staged)
            else:
                self.discard(staged)  # cancelled as it finished
        _interrupt.spawn(run, "reshard-stage")
        return fut

    def _stage(self, version, token):
        with self._lock:
            self._open()
            h = self._run(lambda: self._stage_now(int(version)), token=token,
                          undo=lambda h: self._lib_discard(h))
            staged = Staged(h, _lib.lib().rs_staged_version(h), self)
            self._staged = staged
            return staged

    def _stage_now(self, version):
        h = ctypes.c_void_p()
        _lib.call("rs_receiver_stage", self._h, version, DIAG,
                  ctypes.byref(h))
        return h

    def _lib_discard(self, h):
        _lib.lib().rs_receiver_discard(self._h, h)

    def apply(self, staged):
        """Installs a staged version into the live parameters (the caller's
        safe point). The handle is consumed, also when apply fails (then
        nothing is installed). Not cancelled: an apply interrupted by
        Ctrl-C installs the whole version before KeyboardInterrupt is
        raised."""
        with self._lock:
            self._open()
            h = self._take(staged)
            self._staged = None
            r = self._run(lambda: self._install("rs_receiver_apply_sized", h),
                          cancellable=False)
            return self._installed(r)

    def _install(self, fn, what):
        """rs_receiver_apply of a staged handle or rs_receiver_pull of a
        version, then the mirrors: the library's PullResult."""
        r = _lib.PullResult()
        _lib.call(fn, self._h, what, DIAG, r, ctypes.sizeof(r))
        self._install_mirrors()
        return r

    def _installed(self, r):
        """The PullResult of an install; its planning time (-1 when the
        plan was cached) goes into the stage record."""
        self._last_plan_s = r.plan_s if r.replanned else -1.0
        return _result(r)

    def discard(self, staged):
        """Drops a staged version (and its lease); live parameters
        untouched. A consumed handle is a no-op."""
        with self._lock:
            if self._h is None or staged is None or staged._h is None:
                return
            h = self._take(staged)
            self._lib_discard(h)
            self._staged = None

    def pull(self, version=-1):
        """stage + apply in one call. Cancelled and interrupted as stage
        is, until its install begins (an install runs to its end)."""
        with self._lock:
            self._open()
            if self._staged is not None and not self._staged.consumed:
                raise errors.InvalidArgument(
                    f"receiver: version {self._staged.version} is staged; "
                    "apply or discard it first")
            r = self._run(lambda: self._install("rs_receiver_pull_sized",
                                                int(version)))
            return self._installed(r)

    def dry_run(self, version=-1):
        """What a pull of `version` would read, without reading it."""
        with self._lock:
            self._open()
            d = self._run(lambda: self._dry_run_now(int(version)))
            return {name: getattr(d, name) for name, _ in d._fields_}

    def _dry_run_now(self, version):
        d = _lib.DryRun()
        _lib.call("rs_receiver_dry_run_sized", self._h, version, DIAG, d,
                  ctypes.sizeof(d))
        return d

    # -- cancelling ----------------------------------------------------
    def cancel(self):
        """Stops the stage, pull or dry run running now (from any thread):
        it raises reshard.Cancelled within about a second, nothing staged,
        its lease dropped, the live parameters untouched. A call that
        starts afterwards runs normally. No effect when none runs."""
        with self._state:
            if self._current is not None and self._h is not None:
                _lib.lib().rs_receiver_cancel(self._h)

    def _cancel_token(self, token):
        with self._state:
            token.cancelled = True
            if self._current is token and self._h is not None:
                _lib.lib().rs_receiver_cancel(self._h)

    def _run(self, job, token=None, cancellable=True, undo=None):
        """job() on the receiver's thread, the caller (holding _lock)
        waiting in short slices so that signals are handled; see
        _interrupt. While it runs, cancel() stops it (when cancellable)."""
        token = token if token is not None else _Token()
        with self._state:
            if self._closing or token.cancelled:
                raise errors.Cancelled(
                    "receiver: " + ("closing" if self._closing else
                                    "the stage was cancelled before it "
                                    "started"))
            _lib.lib().rs_receiver_cancel_clear(self._h)
            if cancellable:
                self._current = token
        try:
            return _interrupt.wait(self._runner.submit(job),
                                   lambda: self._cancel_token(token)
                                   if cancellable else None, undo)
        finally:
            with self._state:
                self._current = None

    def _take(self, staged):
        if not isinstance(staged, Staged) or staged._receiver is not self:
            raise errors.InvalidArgument(
                "receiver: not a version staged by this receiver")
        if staged._h is None:
            raise errors.InvalidArgument(
                f"receiver: staged version {staged.version} was applied or "
                "discarded already")
        h, staged._h = staged._h, None
        return h

    def _install_mirrors(self):
        for b in self._bindings:
            b.install()

    # -- records -------------------------------------------------------
    def stage_record(self):
        """The stage record (reshard.stage.v2) of the last stage or pull,
        or None before the first."""
        return self._record(lambda e, f, d: _lib.lib().rs_exec_write_stage_json(
            e, self._last_plan_s, f, d))

    def coverage(self):
        """The coverage record (reshard.coverage.v1) of the last run."""
        return self._record(lambda e, f, d:
                            _lib.lib().rs_exec_write_coverage_json(e, f, d))

    def _record(self, write):
        with self._lock:
            self._open()
            ex = _lib.lib().rs_receiver_exec(self._h)
            if not ex:
                return None
            diag = _lib.Diag()
            status = []
            text = _lib.memstream(lambda f: status.append(write(ex, f, diag)))
            _lib.check(status[0], diag)
            return json.loads(text)

    # -- lifetime ------------------------------------------------------
    def close(self):
        """Discards a staged version, closes connections and the directory.
        A stage, pull or dry run running on another thread is cancelled
        first (it raises reshard.Cancelled), so close never waits for its
        timeout; an apply in progress is let finish."""
        lock = getattr(self, "_lock", None)
        state = getattr(self, "_state", None)
        if lock is None or state is None:
            return
        with state:
            self._closing = True
            if self._current is not None and self._h is not None:
                _lib.lib().rs_receiver_cancel(self._h)
        with lock:
            if getattr(self, "_h", None) is not None:
                _lib.lib().rs_receiver_destroy(self._h)
                self._h = None
            if getattr(self, "_cap", None) is not None:
                _lib.lib().rs_capture_destroy(self._cap)
                self._cap = None
            self._runner.stop()


class _Token:
    """One call that cancel() may stop (a stage_async future's, or one of
    its own)."""
    cancelled = False


class _StageFuture(Future):
    """stage_async's future: cancel() also stops a stage that is running
    (the future stays pending until the stage ends, so it can be
    cancelled all along)."""

    def __init__(self, receiver):
        super().__init__()
        self._receiver = weakref.ref(receiver)
        self._token = _Token()

    def cancel(self):
        r = self._receiver()
        if r is not None:
            r._cancel_token(self._token)
        else:
            self._token.cancelled = True
        return super().cancel()



def _inside(fill, numel):
    """Whether a fill's strided region lies inside a parameter of numel
    elements (empty regions must still start inside it or at its end)."""
    shape, stride = fill["dest_shape"], fill["dest_stride"]
    first = fill["dest_offset"]
    if len(shape) != len(stride) or first < 0 or min(stride, default=0) < 0:
        return False
    if any(s == 0 for s in shape):
        return first <= numel
    last = first + sum((n - 1) * st for n, st in zip(shape, stride))
    return last < numel
