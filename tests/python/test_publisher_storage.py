"""Trainer storage that moves under a registration. For every registration
helper (register, a registered view, register_shard, register_replicated,
register_fused, register_fused_qkv, alloc_tensor), a trainer publishes a
version, then changes its weights the ways trainers do: in place, by
rebinding `param.data` to a new tensor (CPU offload and reload, FSDP
resharding), and by a step that is not in place (`p.data = p.data - lr *
g`). After each, a real Receiver pulls the new version and what it
installs must equal, bit for bit, the full tensors rebuilt from the
trainer's live parameters by torch's own slicing (independently of
reshard's layouts). The same runs with copy-in staging, and with every box
served through a host copy (the path of CUDA tensors, forced on CPU by
the publisher's device check). A base whose shape or dtype changed is
refused naming the tensor, and nothing of that version is published.
Two boxes of one tensor sharing an element are refused naming both; a
backend or staging name that does not exist is refused where given."""
import json

import pytest
import torch

import reshard
from reshard import publisher as publisher_mod

HID, Q_HEADS, KV_HEADS, HEAD_DIM, FFN = 4, 4, 2, 2, 6


def _bits(t):
    """The tensor's bytes as integers, so -0.0 and NaN compare exactly."""
    return t.contiguous().view(torch.uint8)


def _capture(shapes):
    """Each full tensor copied whole into a parameter of the same name."""
    params, copies = {}, []
    for name, shape in shapes.items():
        stride = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            stride[d] = stride[d + 1] * shape[d + 1]
        params[name] = {"shape": list(shape), "dtype": "f32"}
        copies.append({"src": name, "ops": [], "param": name,
                       "dest_offset": 0, "dest_shape": list(shape),
                       "dest_stride": stride, "dest_dtype": "f32"})
    return {"schema": "reshard.capture.v1", "params": params,
            "sources": dict(params), "copies": copies}


def _one_w():
    return json.dumps(_capture({"w": (8, HID)}))


def _w_receiver(directory, params):
    """A receiver of the one [8, HID] tensor "w" into params["w"]."""
    return reshard.Receiver(directory, "m", _one_w(), params, backend="cma",
                            discover_timeout_s=20)


def _values(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g)


class Trainer:
    """One layout: the trainer's parameters (torch.nn.Parameter), how they
    are registered on each rank, and the full tensors they hold now,
    rebuilt with torch.cat / torch.split / view (not with layouts)."""

    def __init__(self, kind):
        self.kind = kind
        self.world = 2 if kind == "register_shard" else 1
        if kind == "register_fused":
            self.shapes = {"gate": (FFN, HID), "up": (FFN, HID)}
            self.params = [torch.nn.Parameter(_values((2 * FFN, HID), 1))]
        elif kind == "register_fused_qkv":
            rows = (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM
            self.shapes = {"q": (Q_HEADS * HEAD_DIM, HID),
                           "k": (KV_HEADS * HEAD_DIM, HID),
                           "v": (KV_HEADS * HEAD_DIM, HID)}
            self.params = [torch.nn.Parameter(_values((rows, HID), 1))]
        elif kind == "register_shard":
            self.shapes = {"w": (8, HID)}
            self.params = [torch.nn.Parameter(_values((4, HID), 1 + r))
                           for r in range(2)]
        else:  # one [8, HID] parameter "w" (registered whole or as views)
            self.shapes = {"w": (8, HID)}
            self.params = [torch.nn.Parameter(_values((8, HID), 1))]

    def register(self, pub, rank):
        p = self.params[rank] if self.kind == "register_shard" else \
            self.params[0]
        if self.kind == "register":
            pub.register("w", p)
        elif self.kind == "view":
            pub.register("w", p[0:3], (8, HID), (0, 0))
            pub.register("w", p.narrow(0, 3, 5), (8, HID), (3, 0))
        elif self.kind == "register_shard":
            pub.register_shard("w", p, (8, HID), 0, rank, 2)
        elif self.kind == "register_replicated":
            pub.register_replicated("w", p)
        elif self.kind == "register_fused":
            pub.register_fused(("gate", "up"), p, (FFN, HID))
        elif self.kind == "register_fused_qkv":
            pub.register_fused_qkv(("q", "k", "v"), p, Q_HEADS, KV_HEADS,
                                   HEAD_DIM)

    def fulls(self):
        """The full tensors the live parameters hold."""
        if self.kind == "register_shard":
            return {"w": torch.cat([p.detach() for p in self.params])}
        p = self.params[0].detach()
        if self.kind == "register_fused":
            gate, up = torch.split(p, FFN)
            return {"gate": gate, "up": up}
        if self.kind == "register_fused_qkv":
            per = Q_HEADS // KV_HEADS
            g = p.view(KV_HEADS, per + 2, HEAD_DIM, HID)
            return {"q": g[:, :per].reshape(-1, HID),
                    "k": g[:, per].reshape(-1, HID),
                    "v": g[:, per + 1].reshape(-1, HID)}
        return {"w": p}

    # The ways a trainer changes its weights between versions.
    def in_place(self, seed):
        with torch.no_grad():
            for i, p in enumerate(self.params):
                p.copy_(_values(p.shape, seed + i))

    def rebind(self, seed):
        """param.data = a new tensor (offload and reload, resharding); the
        old tensor keeps its old values."""
        for i, p in enumerate(self.params):
            p.data = _values(p.shape, seed + i)

    def step(self, seed):
        """An optimizer step that is not in place."""
        for i, p in enumerate(self.params):
            grad = _values(p.shape, seed + i)
            p.data = p.data - 0.5 * grad


class World:
    """The trainer's publisher ranks and one receiver of every tensor."""

    def __init__(self, directory, trainer, staging="caller"):
        self.trainer = trainer
        self.pubs = []
        for r in range(trainer.world):
            pub = reshard.Publisher(directory, "m", r, trainer.world,
                                    backend="cma", staging=staging)
            self.pubs.append(pub)
            trainer.register(pub, r)
        self.params = {n: torch.full(s, -7.0)
                       for n, s in trainer.shapes.items()}
        self.rx = reshard.Receiver(directory, "m",
                                   json.dumps(_capture(trainer.shapes)),
                                   self.params, backend="cma",
                                   discover_timeout_s=20)

    def version(self, v):
        """Publishes v, pulls it, checks the install against the trainer's
        live values, and waits for the release."""
        for pub in self.pubs:
            pub.publish(v)
        res = self.rx.pull(v)
        assert res.version == v
        for name, full in self.trainer.fulls().items():
            assert torch.equal(_bits(self.params[name]), _bits(full)), \
                (self.trainer.kind, v, name)
        for pub in self.pubs:
            pub.wait_released(v, timeout_s=20)

    def close(self):
        self.rx.close()
        for pub in self.pubs:
            pub.close()


KINDS = ["register", "view", "register_shard", "register_replicated",
         "register_fused", "register_fused_qkv"]


def _run_moves(directory, kind, staging="caller"):
    trainer = Trainer(kind)
    world = World(directory, trainer, staging)
    try:
        world.version(1)
        trainer.in_place(seed=10)
        world.version(2)
        trainer.rebind(seed=20)
        world.version(3)
        trainer.step(seed=30)
        world.version(4)
        trainer.rebind(seed=40)  # moved twice before one publish
        trainer.rebind(seed=50)
        world.version(5)
    finally:
        world.close()
    return trainer


@pytest.mark.parametrize("kind", KINDS)
def test_every_helper_follows_moved_storage(file_dir, kind):
    _run_moves(file_dir, kind)


@pytest.mark.parametrize("kind", ["view", "register_fused",
                                  "register_fused_qkv"])
def test_arena_copies_from_moved_storage(file_dir, kind):
    _run_moves(file_dir, kind, staging="arena")


@pytest.fixture
def host_staged(monkeypatch):
    """Every box served through a host copy, as CUDA tensors are: the
    publisher's device check answers "not host-readable" for every tensor
    (the copy itself is the same torch call as for a device tensor)."""
    seen = []

    def needs_host(view):
        seen.append(view.data_ptr())
        return True
    monkeypatch.setattr(publisher_mod, "_needs_host", needs_host)
    return seen


@pytest.mark.parametrize("kind", KINDS)
def test_host_copies_follow_moved_storage(file_dir, kind, host_staged):
    trainer = _run_moves(file_dir, kind)
    # the host copies were made from views of the live storage
    for p in trainer.params:
        lo = p.data_ptr()
        hi = lo + p.numel() * p.element_size()
        assert any(lo <= ptr < hi for ptr in host_staged), kind


def test_storage_moving_on_and_off_a_device(file_dir, monkeypatch):
    """A parameter offloaded to host-readable memory and reloaded onto a
    "device" (storage the device check says the library cannot read): the
    box switches between being served in place and through a host copy,
    and every version installs the live values."""
    device = set()
    monkeypatch.setattr(publisher_mod, "_needs_host",
                        lambda view: view.data_ptr() in device)
    trainer = Trainer("register_fused")
    world = World(file_dir, trainer)
    try:
        p = trainer.params[0]
        world.version(1)                       # in place
        on_device = _values(p.shape, 60)
        device.update({on_device.data_ptr(),
                       on_device[FFN:].data_ptr()})
        p.data = on_device                     # reload onto the device
        world.version(2)
        p.data = p.data.clone()                # offload to host memory
        world.version(3)
        p.data = on_device                     # and back
        on_device.mul_(2)
        world.version(4)
    finally:
        world.close()


def test_alloc_tensor_moved_to_another_allocation(file_dir):
    """staging="in_place": a tensor from alloc_tensor, changed in place and
    then rebound to another alloc_tensor buffer, is served from where its
    data lives."""
    pub = reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                            staging="in_place")
    params = {"w": torch.full((8, HID), -7.0)}
    try:
        a = pub.alloc_tensor((8, HID))
        a.copy_(_values((8, HID), 1))
        pub.register("w", a)
        with _w_receiver(file_dir, params) as rx:
            for v, move in ((1, None), (2, "in_place"), (3, "rebind")):
                if move == "in_place":
                    a.mul_(3)
                elif move == "rebind":
                    b = pub.alloc_tensor((8, HID))
                    b.copy_(_values((8, HID), 77))
                    a.data = b
                pub.publish(v)
                rx.pull(v)
                assert torch.equal(_bits(params["w"]), _bits(a)), v
                pub.wait_released(v, timeout_s=20)
    finally:
        pub.close()


def _not_published(directory, shapes, v):
    params = {n: torch.full(s, -7.0) for n, s in shapes.items()}
    with reshard.Receiver(directory, "m", json.dumps(_capture(shapes)),
                          params, backend="cma",
                          discover_timeout_s=0.3) as rx:
        with pytest.raises(reshard.ReshardTimeout):
            rx.stage(v)


@pytest.mark.parametrize("kind,bad", [
    ("register_fused", (2 * FFN + 2, HID)),
    ("register_fused_qkv", ((Q_HEADS + 2 * KV_HEADS) * HEAD_DIM, HID + 1)),
    ("view", (4, 8)),
    ("register", (8, HID, 1)),
])
def test_incompatible_rebind_refused(file_dir, kind, bad):
    """A base rebound to another shape: publish raises naming the tensor
    and the registration, publishes nothing and re-registers nothing; once
    the shape is right again the next version goes out whole."""
    trainer = Trainer(kind)
    world = World(file_dir, trainer)
    try:
        world.version(1)
        p = trainer.params[0]
        good = tuple(p.shape)
        p.data = _values(bad, 5)
        with pytest.raises(reshard.InvalidArgument) as e:
            world.pubs[0].publish(2)
        msg = e.value.message
        name = next(iter(trainer.shapes))
        assert f"tensor '{name}': its storage is now {list(bad)} float32" \
            in msg, msg
        assert (kind if kind != "view" else "register") + "(tensor" in msg
        assert "nothing was published" in msg
        _not_published(file_dir, trainer.shapes, 2)
        p.data = _values(good, 7)
        world.version(3)
    finally:
        world.close()


def test_dtype_change_refused_and_nothing_moves(file_dir):
    """Two tensors, one rebound validly and one to another dtype: the
    refusal names the second, and the first is not re-registered either
    (the version published before is still what it serves)."""
    a = torch.nn.Parameter(_values((8, HID), 1))
    b = torch.nn.Parameter(_values((8, HID), 2))
    shapes = {"a": (8, HID), "b": (8, HID)}
    params = {n: torch.full(s, -7.0) for n, s in shapes.items()}
    pub = reshard.Publisher(file_dir, "m", 0, 1, backend="cma")
    try:
        pub.register("a", a)
        pub.register_replicated("b", b)
        with reshard.Receiver(file_dir, "m", json.dumps(_capture(shapes)),
                              params, backend="cma",
                              discover_timeout_s=20) as rx:
            pub.publish(1)
            rx.pull(1)
            pub.wait_released(1, timeout_s=20)
            ptrs = [e.ptr for e in pub._entries]
            a.data = _values((8, HID), 3)
            b.data = b.data.double()
            with pytest.raises(reshard.InvalidArgument) as e:
                pub.publish(2)
            assert "tensor 'b': its storage is now [8, 4] float64" in \
                e.value.message
            assert "register_replicated(tensor [8, 4] float32)" in \
                e.value.message
            assert [e.ptr for e in pub._entries] == ptrs
            b.data = _values((8, HID), 4)
            pub.publish(3)
            rx.pull(3)
            assert torch.equal(_bits(params["a"]), _bits(a.detach()))
            assert torch.equal(_bits(params["b"]), _bits(b.detach()))
    finally:
        pub.close()


def test_served_storage_lives_until_the_next_publish(file_dir):
    """After `param.data = new` the version published before is still
    served from the storage it was published from: the publisher holds it
    (a receiver pulling that version late still gets its bytes)."""
    p = torch.nn.Parameter(_values((8, HID), 1))
    old = p.detach().clone()
    params = {"w": torch.full((8, HID), -7.0)}
    pub = reshard.Publisher(file_dir, "m", 0, 1, backend="cma")
    try:
        pub.register("w", p)
        pub.publish(1)
        p.data = _values((8, HID), 2)          # the old storage has no owner
        garbage = [torch.full((8, HID), 9.0) for _ in range(64)]
        with _w_receiver(file_dir, params) as rx:
            rx.pull(1)
            assert torch.equal(_bits(params["w"]), _bits(old))
            pub.wait_released(1, timeout_s=20)
            pub.publish(2)
            rx.pull(2)
            assert torch.equal(_bits(params["w"]), _bits(p.detach()))
        del garbage
    finally:
        pub.close()


# -- two boxes of one element ---------------------------------------------

def test_same_box_twice_refused_naming_both(file_dir):
    t1, t2 = torch.zeros(8, HID), torch.ones(8, HID)
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma") as pub:
        pub.register("w", t1)
        with pytest.raises(reshard.InvalidArgument) as e:
            pub.register_replicated("w", t2)
        assert e.value.message == (
            "publisher: 'w' box [0:8, 0:4] (register_replicated(tensor "
            "[8, 4] float32)) is 'w' box [0:8, 0:4] (register(tensor [8, 4] "
            "float32)), registered before on this rank; each element of a "
            "tensor is published by one box per rank")
        assert pub.num_served == 0
        pub.publish(1)
        assert pub.num_served == 1


def test_overlapping_boxes_refused_naming_both(file_dir):
    fused = torch.zeros(2 * FFN, HID)
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma") as pub:
        pub.register("gate", torch.zeros(4, HID), (FFN, HID), (2, 0))
        with pytest.raises(reshard.InvalidArgument) as e:
            pub.register_fused(("gate", "up"), fused, (FFN, HID))
        assert "'gate' box [0:6, 0:4] (register_fused(tensor [12, 4] " \
            "float32)) overlaps 'gate' box [2:6, 0:4] (register(tensor " \
            "[4, 4] float32))" in e.value.message
        # nothing of the refused call is registered: its other name is free
        pub.register("up", torch.zeros(FFN, HID))
        # the same name twice in one call
        with pytest.raises(reshard.InvalidArgument, match="'x' box \\[0:6, "
                           "0:4\\] \\(register_fused.*\\) is 'x' box"):
            pub.register_fused(("x", "x"), fused, (FFN, HID))
        pub.register("gate", torch.zeros(2, HID), (FFN, HID), (0, 0))
        pub.unregister("gate")
        pub.register_fused(("gate", "y"), fused, (FFN, HID))


# -- enum-like arguments ----------------------------------------------------

def test_backend_and_staging_checked_where_given(file_dir):
    with pytest.raises(reshard.InvalidArgument) as e:
        reshard.Publisher(file_dir, "m", 0, 1, backend="nccl")
    assert e.value.message == \
        "publisher: backend must be one of ucx, cma, got 'nccl'"
    with pytest.raises(reshard.InvalidArgument,
                       match="publisher: backend must be one of ucx, cma, "
                             "got 'local'"):
        reshard.Publisher(file_dir, "m", 0, 1, backend="local")
    with pytest.raises(reshard.InvalidArgument,
                       match="publisher: staging must be one of caller, "
                             "in_place, arena, got 'inplace'"):
        reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                          staging="inplace")
    with pytest.raises(reshard.InvalidArgument) as e:
        reshard.Receiver(file_dir, "m", json.dumps(_capture({"w": (2,)})),
                         {"w": torch.zeros(2)}, backend="nccl")
    assert e.value.message == \
        "receiver: backend must be one of ucx, cma, got 'nccl'"


def test_wait_released_for_a_version_never_published(file_dir):
    """wait_released(v) of a version this publisher never published
    publishes nothing (a receiver would install the current buffers as v):
    InvalidArgument naming the version."""
    w = torch.nn.Parameter(_values((8, HID), 1))
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma") as pub:
        pub.register("w", w)
        pub.publish(1)
        with pytest.raises(reshard.InvalidArgument) as e:
            pub.wait_released(7, timeout_s=0.3)
        assert "publisher: version 7 was never published by trainer-0" in \
            e.value.message
        _not_published(file_dir, {"w": (8, HID)}, 7)


def test_lost_version_published_again_with_its_bytes(file_dir):
    """The version published last, lost by the directory (restarted
    without its data), is published again by wait_released from the table
    kept at its publish: a receiver then installs that version's bytes,
    and when the trainer changed them since (which caller staging forbids
    until the release) the receiver refuses them (their digest is not the
    version's) instead of installing them as that version."""
    import shutil
    w = torch.nn.Parameter(_values((8, HID), 1))
    want = w.detach().clone()
    params = {"w": torch.full((8, HID), -7.0)}
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                           heartbeat_s=0) as pub:
        pub.register("w", w)
        pub.publish(1)
        shutil.rmtree(file_dir[len("file:"):] + "/m/1")
        with pytest.raises(reshard.ReshardTimeout):
            pub.wait_released(1, timeout_s=0.3)  # published again, waiting
        with _w_receiver(file_dir, params) as rx:
            rx.pull(1)
            assert torch.equal(_bits(params["w"]), _bits(want))
            pub.wait_released(1, timeout_s=20)
            pub.publish(2)
            with torch.no_grad():
                w.add_(1.0)
            shutil.rmtree(file_dir[len("file:"):] + "/m/2")
            with pytest.raises(reshard.ReshardTimeout):
                pub.wait_released(2, timeout_s=0.3)
            with pytest.raises(reshard.VerifyError, match="digest mismatch"):
                rx.pull(2)
            assert torch.equal(_bits(params["w"]), _bits(want))
