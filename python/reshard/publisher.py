"""A trainer rank's publisher over live PyTorch tensors.

Each registered box points into the tensor's own storage, so what a
version serves is what the tensor holds when publish() is called: train,
publish(step), wait_released(step), train again. A CPU tensor is served in
place; a tensor on another device is copied into host memory at each
publish (the library never dereferences a device pointer). Every box keeps
the tensor it came from (its base: the parameter, whose `.data` a trainer
may rebind) and where in it the box lies (layouts.Source); each publish
derives every box again from its base as it is now, so storage that moved
between versions (`param.data = new`: CPU offload and reload, an optimizer
step that is not in place, FSDP resharding) is served at its new address,
and a base whose shape, dtype or layout changed is refused, naming the
tensor, before anything is published.

Staging says where the served bytes live: "caller" (the tensors' own
memory), "in_place" (tensors made by alloc_tensor, in memory the
publisher's exposer allocates, which readers on this machine copy
one-sided), or "arena" (each publish copies the tensors into such memory,
so training may go on as soon as publish returns). Cut-aligned publishing
(cut_aligned=True, or cuts_file=) works on top of "arena": each version's
shards are copied into the arena as the sub-boxes between the cuts the
receivers announced (docs/cut-aligned.md).
Publisher-side quantization (quantize=["GLOB=SPEC", ...], or
quantize_wanted=True) also works on top of "arena": each version serves an
FP8 copy "<name>#<spec>" and its scales "<name>#<spec>#scale" of the
matching tensors, made of the blocks wholly inside each registered box
(docs/quantized-refit.md, "Publisher-side quantization").
A wire dtype (wire_dtype=, for the publisher or per registration) serves a
floating tensor in another floating dtype: the box is served from a host
copy in that dtype, allocated once and refilled by torch's cast at every
publish, and the table declares the wire dtype. register_dtensor publishes
a torch.distributed DTensor's local shard (reshard.dtensor).
"""
import ctypes
import math
import threading
import weakref

import torch

from . import _args, _interrupt, _lib, dtypes, errors, layouts, wire
from . import dtensor as _dtensor
from ._handle import Handle, notice_cb
from ._lib import DIAG


def _needs_host(view):
    """Whether the library cannot read `view` where it is (it reads host
    memory only), so a host copy of it is served."""
    return view.device.type != "cpu"


class _Entry:
    """One registered box: its block of the full tensor, where it lies in
    its base (layouts.Source), the call that registered it, and what
    serves its bytes: the box's view as derived at the last publish (held,
    so the storage registered lives while it is served, even after the
    base moved on) or a host copy of it (the view is not held then: a
    trainer offloading a parameter frees its device memory)."""

    def __init__(self, bx, how, wire_dtype, alloc):
        self.name, self.full_shape, self.offset = (bx.name, bx.full_shape,
                                                   bx.offset)
        self.shape = tuple(int(d) for d in bx.view.shape)
        self.source = bx.source if bx.source is not None else \
            layouts.source_of(bx.view)
        self.how = how      # "register_fused(tensor [8, 4] float32)"
        self.wire = wire_dtype  # the dtype served (the table declares)
        self.alloc = alloc      # (shape, dtype) -> a host buffer
        self.view = self.host = None
        self.ptr = None     # the address registered; None: not registered
        self.take(bx.view.detach())

    def take(self, view):
        """Serves `view` (the box derived now) from now on: in place, or
        through a host buffer in the wire dtype (the one it had, or a new
        one of the box's shape: allocated once, so a cast costs one copy of
        the box in the wire dtype) that publish fills."""
        if not _needs_host(view) and view.dtype == self.wire:
            self.view, self.host = view, None
            return
        if self.host is None:
            self.host = self.alloc(view.shape, self.wire)
        self.view = None

    def served(self):
        """The host tensor whose bytes the library serves."""
        return self.view if self.host is None else self.host

    def live(self):
        """The box derived from its base now: InvalidArgument naming the
        tensor when that base changed shape, dtype or layout."""
        try:
            view = self.source.live(self.name)
        except layouts.LayoutError as err:
            raise errors.InvalidArgument(
                f"publisher: {err} ({self.how}); nothing was "
                f"published") from None
        return view

    def block(self):
        """"[0:4, 0:8]", the box's block of the full tensor."""
        return "[" + ", ".join(f"{o}:{o + s}" for o, s in
                               zip(self.offset, self.shape)) + "]"

    def text(self):
        """"'w' box [0:4, 0:8] (register_shard(tensor [4, 8] float32))"."""
        return f"'{self.name}' box {self.block()} ({self.how})"


def _overlap(a, b):
    """Whether the boxes of entries a and b of one tensor share an
    element."""
    return len(a.shape) == len(b.shape) and all(
        max(oa, ob) < min(oa + sa, ob + sb)
        for oa, sa, ob, sb in zip(a.offset, a.shape, b.offset, b.shape))


def _how_dtensor(dt):
    """"register_dtensor(DTensor [8, 4] float32 (Shard(dim=0),) on
    mesh [2])", for messages."""
    return f"register_dtensor(DTensor {list(dt.shape)} " \
        f"{layouts.dtype_text(dt.dtype)} {tuple(dt.placements)} on mesh " \
        f"{list(dt.device_mesh.shape)})"


def _how(call, tensor):
    return f"{call}(tensor {list(tensor.shape)} " \
        f"{layouts.dtype_text(tensor.dtype)})"


class Publisher(Handle):
    """Publishes this rank's shards of every version to a directory.

    directory: "file:DIR" or "redis://host:port"; model: the model's name in
    the directory; rank, world: this trainer's slot and the slot count;
    backend: "ucx" or "cma"; replica: data-parallel replica index of this
    rank (replicas publish identical geometry to one slot); session: the
    agent name (default trainer-<rank>[-r<replica>]); digests: publish a
    digest per shard (receivers verify them by default); staging:
    "caller" (default), "in_place" (only tensors from alloc_tensor may be
    registered) or "arena" (copy-in: publish(v) copies every registered
    tensor into a publisher-owned arena and serves that; publishing another
    version before v is released raises InvalidArgument); notice: called
    with each notice (directory outages, UCX falling back to ordinary
    memory, cuts records the publisher cannot use), else they go to
    stderr. wire_dtype: the dtype floating tensors are published in (a
    torch dtype or a name: "bf16"; default: each tensor's own): each box
    is served from a copy in that dtype, made by torch's cast from the
    live tensor at every publish; a registration's own wire_dtype
    overrides it. cut_aligned: before staging each version, read every
    receiver's announced cuts from the directory and serve each shard as
    the sub-boxes between them; cuts_file: also cut at a reshard.cuts.v1
    file's cuts (`reshard cuts` writes one for an inference layout).
    Either one implies staging="arena" and refuses any other staging. quantize: "GLOB=SPEC"
    strings (fnmatch over tensor names, e.g.
    "*.mlp.experts.*.weight=fp8_block:128x128:f8e4m3"): each version also
    serves the matching tensors quantized to FP8 as "<name>#<spec>" with
    their scales "<name>#<spec>#scale", each registered box serving the
    blocks wholly inside it; a bad entry raises InvalidArgument naming it.
    quantize_wanted: also serve the quantized copies receivers announce in
    their cuts records (their captures' quantized copies). Either implies
    staging="arena" too. delta_keep: with staging "arena", each version
    is also served as a delta of every shard against the version before,
    and the deltas of the last delta_keep versions are kept (None: the
    library's default, 2; 0: no deltas; at most 16; the CLI's
    --delta-keep; docs/delta.md, "Publishers")."""

    _what = "publisher"

    def __init__(self, directory, model, rank, world, backend="ucx", *,
                 replica=0, session=None, digests=True, heartbeat_s=1.0,
                 publish_retry_s=60.0, notice=None, staging=None,
                 cut_aligned=False, cuts_file=None, quantize=(),
                 quantize_wanted=False, wire_dtype=None, delta_keep=None):
        _args.choice("publisher: backend", backend, _args.BACKENDS)
        self.wire_dtype = wire.parse(wire_dtype, "publisher: wire_dtype")
        if staging is not None:
            _args.choice("publisher: staging", staging, _lib.STAGING)
        if isinstance(quantize, (str, bytes)):
            quantize = [quantize]  # one entry, not its characters
        quantize = [str(q) for q in quantize]
        cut = bool(cut_aligned) or cuts_file is not None
        quant = bool(quantize) or bool(quantize_wanted)
        if staging is None:
            staging = "arena" if cut or quant else "caller"
        if cut and staging != "arena":
            raise errors.InvalidArgument(
                f"publisher: cut-aligned publishing copies shards into the "
                f"arena: it needs staging 'arena', not {staging!r}")
        if quant and staging != "arena":
            raise errors.InvalidArgument(
                f"publisher: publisher-side quantization fills the arena: "
                f"it needs staging 'arena', not {staging!r}")
        p = _lib.PublisherParams()
        _lib.lib().rs_publisher_params_init_sized(p, ctypes.sizeof(p))
        self._keep = [_lib.enc(directory), _lib.enc(model),
                      _lib.enc(backend), _lib.enc(session),
                      _lib.enc(cuts_file)]
        p.directory, p.model, p.backend, p.session, p.cuts_file = self._keep
        p.cut_aligned = 1 if cut_aligned else 0
        entries = (ctypes.c_char_p * max(len(quantize), 1))(
            *[_lib.enc(q) for q in quantize])
        self._keep.append(entries)
        p.quantize = ctypes.cast(entries, ctypes.POINTER(ctypes.c_char_p))
        p.num_quantize = len(quantize)
        p.quantize_wanted = 1 if quantize_wanted else 0
        p.rank, p.world, p.replica = int(rank), int(world), int(replica)
        p.digests = 1 if digests else 0
        p.heartbeat_s = float(heartbeat_s)
        p.publish_retry_s = float(publish_retry_s)
        p.staging = _lib.STAGING[staging]
        if delta_keep is not None:
            # the range is the library's to check (rs_publisher_create)
            if isinstance(delta_keep, bool) or not isinstance(delta_keep, int):
                raise errors.InvalidArgument(
                    f"publisher: delta_keep must be an int, not "
                    f"{delta_keep!r}")
            p.delta_keep = delta_keep
        self.staging = staging
        self._notice = notice_cb(notice)
        if self._notice is not None:
            p.notice = self._notice
        h = ctypes.c_void_p()
        _lib.call("rs_publisher_create", p, DIAG, ctypes.byref(h))
        self._h = h
        self._entries = []
        self._by_name = {}  # name -> its entries, for the overlap check
        # Reentrant: a buffer's finalizer (_free) may run on this thread
        # while it holds the lock, whenever a last reference goes.
        self._lock = threading.RLock()
        self._allocs = 0      # alloc_tensor buffers still alive
        self._closing = None  # the handle close() left for the last one
        # _waiting (under _cancel_guard): a wait_released cancel() stops
        self._cancel_guard = threading.Lock()
        self._waiting = False

    # -- registered memory ---------------------------------------------
    def alloc_tensor(self, shape, dtype=torch.float32):
        """A zeroed CPU tensor of `shape` and `dtype` in memory the
        publisher's exposer allocated (for UCX, shared memory readers on
        this machine copy one-sided). Register it like any tensor; in
        staging "in_place" only such tensors may be registered. The memory
        lives while the tensor (or any view of it) does, also past
        close()."""
        shape = tuple(int(d) for d in shape)
        elsize = torch.empty((), dtype=dtype).element_size()
        nbytes = math.prod(shape) * elsize
        with self._lock:
            self._open()
            ptr = ctypes.c_void_p()
            _lib.call("rs_publisher_alloc", self._h, max(nbytes, 1), DIAG,
                      ctypes.byref(ptr))
            mem = type("_Registered", (ctypes.c_ubyte * max(nbytes, 1),),
                       {}).from_address(ptr.value)
            self._allocs += 1
        weakref.finalize(mem, self._free, ptr.value)
        flat = torch.frombuffer(mem, dtype=torch.uint8)[:nbytes]
        return flat.view(dtype).view(shape)

    def _host_buffer(self, shape, dtype):
        """Host memory a box is served from when it cannot be served in
        place (device memory, or a wire dtype): from the exposer in
        staging "in_place", which serves only such memory."""
        if self.staging == "in_place":
            return self.alloc_tensor(shape, dtype)
        return torch.empty(tuple(shape), dtype=dtype,
                           pin_memory=torch.cuda.is_available())

    def _free(self, ptr):
        """The last view of an alloc_tensor buffer is gone."""
        with self._lock:
            self._allocs -= 1
            if self._h is not None:
                _lib.lib().rs_publisher_free(self._h, ctypes.c_void_p(ptr),
                                             None)
            elif self._closing is not None and self._allocs == 0:
                _lib.lib().rs_publisher_destroy(self._closing)
                self._closing = None

    # -- registering ---------------------------------------------------
    # Every registration takes wire_dtype=: the dtype its boxes are served
    # in (default: the publisher's wire_dtype for a floating tensor).
    def register(self, name, tensor, full_shape=None, offset=None, *,
                 wire_dtype=None):
        """Publishes `tensor` (contiguous) as the block of the full tensor
        `name` at `offset` (default: the whole tensor at offset 0)."""
        self._add([layouts.box(name, tensor, full_shape, offset)],
                  _how("register", tensor), wire_dtype)

    def register_shard(self, name, tensor, full_shape, dim, rank, world, *,
                       wire_dtype=None):
        """`tensor` is rank's torch.chunk piece of `full_shape` on `dim`."""
        self._add(layouts.shard(name, tensor, full_shape, dim, rank, world),
                  _how("register_shard", tensor), wire_dtype)

    def register_replicated(self, name, tensor, *, wire_dtype=None):
        """`tensor` is the whole of `name` (every rank holds it)."""
        self._add(layouts.replicated(name, tensor),
                  _how("register_replicated", tensor), wire_dtype)

    def register_fused(self, names, tensor, full_shapes, rank=0, world=1, *,
                       wire_dtype=None):
        """Fused storage on dim 0 holding each name's piece in order (see
        layouts.fused); published without a copy."""
        self._add(layouts.fused(names, tensor, full_shapes, rank, world),
                  _how("register_fused", tensor), wire_dtype)

    def register_fused_qkv(self, names, tensor, num_heads, num_kv_heads,
                           head_dim, rank=0, world=1, *, wire_dtype=None):
        """Megatron's fused QKV under the q/k/v names (layouts.fused_qkv)."""
        self._add(layouts.fused_qkv(names, tensor, num_heads, num_kv_heads,
                                    head_dim, rank, world),
                  _how("register_fused_qkv", tensor), wire_dtype)

    def register_dtensor(self, name, dtensor, *, wire_dtype=None):
        """Publishes this rank's local shard of the torch.distributed
        DTensor `dtensor` (torch 2.x) as the boxes of the full tensor its
        placements give it over its device mesh (reshard.dtensor): Shard
        and _StridedShard on any mesh dims, uneven or empty shards,
        Replicate (every holder publishes the same box; a receiver reads
        each element from one). Nothing when this rank holds no element
        or is outside the mesh. LayoutError naming the tensor for Partial
        and other placements."""
        boxes = _dtensor.boxes(name, dtensor)
        self._add(boxes, _how_dtensor(dtensor), wire_dtype, name)

    def unregister(self, name):
        """Stops publishing every box of `name` (call after wait_released:
        the version published last is no longer served). InvalidArgument
        when nothing of `name` is registered."""
        with self._lock:
            self._open()
            mine = self._by_name.get(name)
            if not mine:
                raise errors.InvalidArgument(
                    f"publisher: tensor '{name}' is not registered")
            while mine:  # the index and the list drop each box together
                self._unregister(mine[-1])
                self._entries.remove(mine.pop())
            del self._by_name[name]

    def _add(self, boxes, how, wire_dtype=None, label=None):
        """Registers `boxes` (from the call `how`, of the tensors `label`:
        default the boxes' names), served in `wire_dtype`."""
        if label is None:
            label = "+".join(dict.fromkeys(b.name for b in boxes))
        with self._lock:
            self._open()
            wanted = wire.parse(wire_dtype,
                                f"publisher: tensor '{label}' ({how})")
            for b in boxes:
                dtypes.code_of(b.view.dtype)
            entries = [_Entry(b, how, wire.served(b.name, b.view.dtype,
                                                  self.wire_dtype, wanted),
                              self._host_buffer) for b in boxes]
            self._check_overlap(entries)
            done = []
            try:
                for e in entries:
                    self._register(e)
                    done.append(e)
            except BaseException:
                for e in done:
                    self._unregister(e)
                raise
            self._entries.extend(entries)
            for e in entries:
                self._by_name.setdefault(e.name, []).append(e)

    def _check_overlap(self, entries):
        """Refuses a box that shares an element with a registered box of
        its tensor, or with another box of the same call (a receiver would
        get the bytes of one of them), naming both."""
        fresh = {}
        for e in entries:
            had = self._by_name.get(e.name, []) + fresh.get(e.name, [])
            for o in had:
                if _overlap(o, e):
                    what = "is" if (o.offset, o.shape) == (e.offset, e.shape) \
                        else "overlaps"
                    raise errors.InvalidArgument(
                        f"publisher: {e.text()} {what} {o.text()}, "
                        f"registered before on this rank; each element of "
                        f"a tensor is published by one box per rank")
            fresh.setdefault(e.name, []).append(e)

    def _register(self, e):
        t = e.served()
        n = len(e.full_shape)
        full, off, shape = (_lib.ints(e.full_shape), _lib.ints(e.offset),
                            _lib.ints(t.shape))
        ptr = t.data_ptr()
        _lib.call("rs_publisher_register", self._h, _lib.enc(e.name),
                  dtypes.code_of(t.dtype), n, full, off, shape,
                  ctypes.c_void_p(ptr), _lib.RS_MEM_HOST, DIAG)
        e.ptr = ptr

    def _unregister(self, e):
        if e.ptr is None:
            return  # a move's registration failed: nothing to drop
        _lib.call("rs_publisher_unregister", self._h, _lib.enc(e.name),
                  _lib.ints(e.offset), DIAG)
        e.ptr = None

    # -- versions ------------------------------------------------------
    def publish(self, version):
        """Publishes this rank's table for `version`: the tensors' bytes
        now are what the version serves. Every box is first derived again
        from its base (InvalidArgument naming the tensor, with nothing
        published, when that base changed shape, dtype or layout); a box
        whose storage moved is registered again at its new address, and
        boxes served through host memory are copied from their live
        views."""
        with self._lock:
            self._open()
            live = [e.live() for e in self._entries]  # before any change
            for e, view in zip(self._entries, live):
                self._follow(e, view)
            with torch.no_grad():
                for e, view in zip(self._entries, live):
                    if e.host is not None:
                        e.host.copy_(view)
            _lib.call("rs_publisher_publish", self._h, int(version), DIAG)

    def _follow(self, e, view):
        """Makes e serve `view`, registered again when the served address
        changed (its storage moved, or it moved to or from host memory).
        A registration that fails leaves e unregistered, and raises; the
        next publish tries again."""
        was = e.served()
        e.take(view)
        if e.ptr == e.served().data_ptr():
            return
        self._unregister(e)
        del was  # the storage served before may go once it is unregistered
        self._register(e)

    @property
    def num_served(self):
        """Entries of the table published last: the registered boxes, or
        with cut-aligned publishing the sub-boxes they were cut into, and
        two per quantized box (its FP8 values and its scales)."""
        with self._lock:
            self._open()
            return int(_lib.lib().rs_publisher_num_served(self._h))

    def wait_released(self, version, timeout_s=60.0):
        """Blocks until every receiver is done with `version` (released in
        the directory); ReshardTimeout after timeout_s. cancel() or close()
        from another thread end it with reshard.Cancelled; Ctrl-C raises
        KeyboardInterrupt within about a second (the wait runs on another
        thread, the caller waiting for it in short slices). When the directory
        lost `version`, the version published last is published again
        from its kept table if it is still served as published; any other
        missing version (never published here, or replaced since) raises
        InvalidArgument naming it, publishing nothing."""
        with self._lock:
            self._open()
            h, version, timeout_s = self._h, int(version), float(timeout_s)
            with self._cancel_guard:
                _lib.lib().rs_publisher_cancel_clear(h)
                self._waiting = True
            try:
                _interrupt.wait(_interrupt.spawn(
                    lambda: _lib.call("rs_publisher_wait_released", h,
                                      version, timeout_s, DIAG),
                    "reshard-wait-released"), self.cancel)
            finally:
                with self._cancel_guard:
                    self._waiting = False

    def cancel(self):
        """Ends a wait_released running on another thread with
        reshard.Cancelled (within about a second). No effect when none
        runs."""
        guard = getattr(self, "_cancel_guard", None)  # None: not created
        if guard is None:
            return
        with guard:
            if self._waiting:
                _lib.lib().rs_publisher_cancel(self._h)

    def close(self):
        """Stops serving: heartbeats stop, memory is no longer exposed.
        While tensors from alloc_tensor are alive their memory stays (the
        library's handle goes with the last of them). A wait_released
        running on another thread is cancelled first."""
        self.cancel()
        with self._lock:
            if self._h is None:
                return
            if self._allocs == 0:
                _lib.lib().rs_publisher_destroy(self._h)
            else:
                for e in self._entries:
                    try:
                        self._unregister(e)
                    except errors.ReshardError:
                        pass  # a box of the same name and offset went first
                self._closing = self._h
            self._h = None
            self._entries = []
            self._by_name = {}
