"""Publisher-side casts: a trainer holding fp32 master weights publishes
them in a wire dtype (Publisher(wire_dtype=...) or per registration).

A real Receiver whose capture reads bf16 (or f16) sources pulls two
versions, the master weights changed in between (in place, and by
rebinding `param.data`), and what it installs must equal, byte for byte,
torch's own `master.to(wire_dtype)` of each version. Per-name wire dtypes
override the publisher's, integer tensors keep their dtype, every staging
and the host-copy path (the path of device tensors) cast the same, a
receiver that assumes the master's dtype is told the published one, and
bad wire dtypes are refused naming the tensor.
"""
import pytest
import torch

import reshard
from reshard import publisher as publisher_mod
from trainer_ranks import whole_receiver


def _bits(t):
    return t.contiguous().view(torch.uint8)


def _master(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.Parameter(torch.randn(shape, generator=g) * 3)


def _step(version, w, b):
    """Weights change the ways trainers change them: in place, and by a
    step that rebinds the parameter's storage."""
    with torch.no_grad():
        w.mul_(-1.37).add_(version / 7)
    b.data = b.data * 0.5 + version


@pytest.mark.parametrize("staging", ["caller", "arena", "in_place"])
def test_fp32_master_served_as_bf16_across_versions(file_dir, staging):
    w, b = _master((16, 8), 1), _master((8,), 2)
    specs = {"w": ((16, 8), torch.bfloat16), "b": ((8,), torch.bfloat16),
             "steps": ((5,), torch.int64)}
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                           staging=staging, wire_dtype=torch.bfloat16) as pub:
        # in place, the wire copies live in the exposer's memory; a tensor
        # served as it is must be allocated there
        steps = pub.alloc_tensor((5,), torch.int64) \
            if staging == "in_place" else torch.zeros(5, dtype=torch.int64)
        steps.copy_(torch.arange(5))
        pub.register("w", w)
        pub.register("b", b)
        pub.register("steps", steps)  # not floating: served as it is
        receiver, params = whole_receiver(file_dir, specs)
        with receiver:
            for version in (1, 2, 3):
                if version > 1:
                    pub.wait_released(version - 1, timeout_s=20)
                    _step(version, w, b)
                    steps.add_(1)
                pub.publish(version)
                receiver.pull(version)
                for name, t in (("w", w), ("b", b)):
                    want = t.detach().to(torch.bfloat16)
                    assert torch.equal(_bits(params[name]), _bits(want)), \
                        (version, name)
                assert torch.equal(params["steps"], steps)
        # the masters were not rounded: only the wire copies were
        assert w.dtype == torch.float32
        assert not torch.equal(w.detach(), w.detach().to(torch.bfloat16)
                               .float())


def test_per_name_wire_dtypes_override_the_publisher(file_dir):
    q, k, v = _master((4, 8), 3), _master((4, 8), 4), _master((6, 8), 5)
    specs = {"q": ((4, 8), torch.float16), "k": ((4, 8), torch.float32),
             "v": ((6, 8), torch.bfloat16)}
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                           wire_dtype="bf16") as pub:
        pub.register("q", q, wire_dtype="float16")
        pub.register("k", k, wire_dtype=torch.float32)  # its own: no cast
        pub.register_shard("v", v[:3], (6, 8), 0, 0, 2)
        pub.register_shard("v", v[3:], (6, 8), 0, 1, 2)
        pub.publish(1)
        receiver, params = whole_receiver(file_dir, specs)
        with receiver:
            receiver.pull(1)
        for name, t in (("q", q), ("k", k), ("v", v)):
            want = t.detach().to(specs[name][1])
            assert torch.equal(_bits(params[name]), _bits(want)), name


def test_host_copies_cast_too(file_dir, monkeypatch):
    """Every box served through a host copy (as device tensors are): the
    copy is made in the wire dtype."""
    monkeypatch.setattr(publisher_mod, "_needs_host", lambda view: True)
    w = _master((8, 4), 6)
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma") as pub:
        pub.register_shard("w", w[:4], (8, 4), 0, 0, 2, wire_dtype="bf16")
        pub.register_shard("w", w[4:], (8, 4), 0, 1, 2, wire_dtype="bf16")
        receiver, params = whole_receiver(file_dir,
                                          {"w": ((8, 4), torch.bfloat16)})
        with receiver:
            for version in (1, 2):
                if version > 1:
                    pub.wait_released(1, timeout_s=20)
                    _step(version, w, w)
                pub.publish(version)
                receiver.pull(version)
                assert torch.equal(_bits(params["w"]),
                                   _bits(w.detach().to(torch.bfloat16)))


def test_a_receiver_assuming_the_master_dtype_is_told_the_wire_dtype(
        file_dir):
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma",
                           wire_dtype="bf16") as pub:
        pub.register("w", _master((8, 4), 7))
        pub.publish(1)
        receiver, _ = whole_receiver(file_dir, {"w": ((8, 4), torch.float32)})
        with receiver:
            with pytest.raises(reshard.IncompleteRefit,
                               match=r"'w'.*f32.*published \[8, 4\] bf16"):
                receiver.pull(1)


@pytest.mark.parametrize("bad", ["int8", torch.int32, "bool", "f8e4m3",
                                 "float17", 3])
def test_bad_wire_dtypes_are_refused_naming_the_tensor(file_dir, bad):
    with pytest.raises(reshard.InvalidArgument,
                       match="publisher: wire_dtype.*wire dtype"):
        reshard.Publisher(file_dir, "m", 0, 1, backend="cma", wire_dtype=bad)
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma") as pub:
        with pytest.raises(reshard.InvalidArgument,
                           match="tensor 'w'.*wire dtype"):
            pub.register("w", torch.zeros(4), wire_dtype=bad)
        with pytest.raises(reshard.InvalidArgument,
                           match="tensor 'g\\+u'.*wire dtype"):
            pub.register_fused(("g", "u"), torch.zeros(4, 2), (2, 2),
                               wire_dtype=bad)
        assert pub.num_served == 0


def test_an_integer_tensor_is_not_cast(file_dir):
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma") as pub:
        with pytest.raises(reshard.InvalidArgument,
                           match="tensor 'ids' is int64: wire_dtype casts "
                                 "only floating tensors"):
            pub.register("ids", torch.arange(4), wire_dtype="bf16")
