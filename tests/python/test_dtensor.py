"""Publisher.register_dtensor against torch's own full tensors (torch 2.x).

Trainer ranks (dtensor_trainer.py, one process each, a gloo group over
file:// rendezvous) hold DTensors made by distribute_tensor over CPU device
meshes (Shard on rows and columns, uneven and empty shards, Replicate, 2-D
meshes with both tensor dims sharded, one dim sharded twice, Replicate on
one mesh dim), by FSDP2's fully_shard, and by tensor parallelism then
FSDP2 (which writes _StridedShard); they publish through a file:
directory, and a Receiver pulls two versions (the weights change in
between, an SGD step for the models) into full-size parameters, which
must equal, byte for byte, the DTensors' full_tensor() (torch's gather)
of that version, cast by torch where a wire dtype is published. A Partial
DTensor is refused naming the tensor. The local-shard geometry is also
checked against torch's own splitting for many placements in one process.
"""
import itertools

import pytest
import torch

import reshard
from e2e_harness import HERE, TrainerProc
from trainer_ranks import whole_receiver
from reshard import dtensor as dtensor_mod

TORCH2 = int(torch.__version__.split(".")[0]) >= 2
torch2 = pytest.mark.skipif(
    not TORCH2,
    reason=f"DTensor needs torch 2.x (this is {torch.__version__})")

SCRIPT = HERE / "dtensor_trainer.py"

# world 2, mesh (2,): uneven rows and columns, an empty shard, Replicate,
# integers, a per-name wire dtype, _StridedShard alone (two boxes per
# rank); plus FSDP2 over the same ranks; a transposed local shard refused
WORLD2 = dict(
    meshes={"1d": [2]},
    cases=[
        dict(name="rows7", shape=[7, 3], mesh="1d", placements=["S0"]),
        dict(name="cols5", shape=[4, 5], mesh="1d", placements=["S1"]),
        dict(name="one_row", shape=[1, 6], mesh="1d", placements=["S0"]),
        dict(name="repl", shape=[3, 4], mesh="1d", placements=["R"]),
        dict(name="ints", shape=[5], mesh="1d", placements=["S0"],
             dtype="int64"),
        dict(name="bf16_wire", shape=[6, 2], mesh="1d", placements=["S0"],
             wire="bfloat16"),
        dict(name="strided", shape=[7, 3], mesh="1d",
             placements=["SS0/2"]),
    ],
    fsdp="1d",
    transposed={"transposed": "1d"})

# world 4: 1-D (4,) with 7 rows and 2 rows (empty shards), 2-D (2, 2) with
# both dims sharded, one dim sharded twice (uneven), Replicate on either
# mesh dim; TP + FSDP2 on the 2-D mesh; a Partial refused; every floating
# tensor published as bf16 (the f16 one as f16: its own wire dtype)
WORLD4 = dict(
    meshes={"1d": [4], "2d": [2, 2]},
    cases=[
        dict(name="rows7", shape=[7, 3], mesh="1d", placements=["S0"]),
        dict(name="rows2", shape=[2, 5], mesh="1d", placements=["S0"]),
        dict(name="s0s1", shape=[7, 5], mesh="2d", placements=["S0", "S1"]),
        dict(name="s1s0", shape=[3, 9], mesh="2d", placements=["S1", "S0"]),
        dict(name="s0s0", shape=[9, 3], mesh="2d", placements=["S0", "S0"]),
        dict(name="rs0", shape=[5, 4], mesh="2d", placements=["R", "S0"]),
        dict(name="s1r", shape=[2, 7], mesh="2d", placements=["S1", "R"]),
        dict(name="f16", shape=[6, 3], mesh="2d", placements=["S0", "S1"],
             dtype="float16", wire="float16"),
        dict(name="ints", shape=[6], mesh="2d", placements=["S0", "R"],
             dtype="int32"),
    ],
    fsdp_tp="2d",
    partial={"partial": "1d"},
    wire_dtype="bfloat16")


def _bits(t):
    return t.contiguous().view(torch.uint8)


class World:
    """`world` DTensor trainer ranks publishing model "m"."""

    def __init__(self, directory, tmp_path, world, cfg):
        truth = tmp_path / "truth"
        truth.mkdir()
        self.truth = truth
        cfg = dict(cfg, init=str(tmp_path / "rendezvous"), truth=str(truth))
        self.procs = []
        try:
            for r in range(world):
                self.procs.append(TrainerProc(directory, r, world, "cma", cfg,
                                              model="m", script=SCRIPT))
            self.ready = [p.read(180) for p in self.procs]
        except BaseException:
            self.close()
            raise

    def publish(self, version):
        for p in self.procs:
            p.send(cmd="publish", version=version)
        replies = [p.read(120) for p in self.procs]
        return torch.load(self.truth / f"v{version}.pt"), replies

    def close(self):
        for p in self.procs:
            p.close()


def _expected(cfg, fulls):
    """What each parameter must hold: the full tensor, cast by torch to
    its wire dtype (its own, else the publisher's for a floating one)."""
    wires = {c["name"]: c.get("wire") for c in cfg.get("cases", [])}
    out = {}
    for name, full in fulls.items():
        wire = wires.get(name) or (cfg.get("wire_dtype")
                                   if full.is_floating_point() else None)
        out[name] = full.to(getattr(torch, wire)) if wire else full
    return out


def _round_trips(file_dir, tmp_path, world, cfg):
    """Two versions published and pulled; per version, the parameters'
    bytes against full_tensor()'s. Returns the ranks' ready replies and
    the boxes each rank served."""
    w = World(file_dir, tmp_path, world, cfg)
    try:
        fulls, replies = w.publish(1)
        want = _expected(cfg, fulls)
        receiver, params = whole_receiver(
            file_dir, {n: (tuple(t.shape), t.dtype) for n, t in want.items()})
        with receiver:
            for version in (1, 2):
                if version > 1:
                    fulls, replies = w.publish(version)
                    want = _expected(cfg, fulls)
                res = receiver.pull(version)
                # replicated boxes are read from one holder: every byte once
                assert res.bytes == sum(t.numel() * t.element_size()
                                        for t in want.values())
                for name, t in want.items():
                    assert torch.equal(_bits(params[name]), _bits(t)), \
                        (version, name)
            # the weights did change between the versions
            assert not torch.equal(fulls["rows7"], torch.load(
                w.truth / "v1.pt")["rows7"])
        return w.ready, [r["served"] for r in replies]
    finally:
        w.close()


@torch2
def test_world2_shards_replicas_and_fsdp2(file_dir, tmp_path):
    ready, served = _round_trips(file_dir, tmp_path, 2, WORLD2)
    placements = ready[0]["placements"]
    assert placements["fsdp.0.weight"] == "(Shard(dim=0),)"
    # one_row's second rank holds nothing and publishes nothing of it;
    # strided gives two boxes on each rank, every other tensor one (6
    # cases + 4 parameters)
    assert served == [12, 11]
    for r in ready:
        msg = r["refused"]["transposed"]
        assert "'transposed'" in msg and "not contiguous" in msg


@torch2
def test_world4_meshes_tp_fsdp2_and_partial(file_dir, tmp_path):
    ready, served = _round_trips(file_dir, tmp_path, 4, WORLD4)
    placements = ready[0]["placements"]
    assert "_StridedShard" in placements["fsdp_tp.0.weight"]
    for r in ready:
        msg = r["refused"]["partial"]
        assert "'partial'" in msg and "Partial" in msg
    assert all(n > 0 for n in served)


# -- geometry against torch's own splitting, in one process -----------

def _torch_indices(size, mesh_shape, coord, placements):
    """The global indices of a dim of `size` that the rank at `coord`
    holds, by torch's own placement splitting of an index tensor."""
    idx = torch.arange(size)
    for mesh_dim, p in enumerate(placements):
        if p is None:
            continue
        pieces, _ = p._split_tensor(idx, mesh_shape[mesh_dim],
                                    with_padding=False)
        idx = pieces[coord[mesh_dim]] if coord[mesh_dim] < len(pieces) \
            else idx[:0]
    return idx.tolist()


# (mesh shape, placements): "S0" Shard(0), "R" Replicate, "SS0/2"
# _StridedShard(0, split_factor=2) (how TP then FSDP2 shards dim 0)
PLACEMENT_SETS = [
    ((2, 2), ("S0", "S0")), ((3, 2), ("S0", "S0")), ((2, 3), ("R", "S0")),
    ((4,), ("S0",)), ((2, 2, 2), ("S0", "R", "S0")),
    ((2, 2), ("SS0/2", "S0")), ((2, 3), ("SS0/3", "S0")),
    ((3, 2), ("SS0/2", "S0")),
]


def _placement(text):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard
    if text == "R":
        return Replicate()
    if text.startswith("SS"):
        dim, split = text[2:].split("/")
        return _StridedShard(int(dim), split_factor=int(split))
    return Shard(int(text[1:]))


@torch2
@pytest.mark.parametrize("mesh_shape,texts", PLACEMENT_SETS)
def test_held_indices_match_torch_splitting(mesh_shape, texts):
    placements = [_placement(t) for t in texts]
    types = dtensor_mod._placement_types("t")
    split = [None if t == "R" else p for t, p in zip(texts, placements)]
    for size in range(0, 13):
        for coord in itertools.product(*[range(n) for n in mesh_shape]):
            runs = dtensor_mod.held_runs("t", (size,), mesh_shape, coord,
                                         placements, types)[0]
            mine = [i for start, n in runs for i in range(start, start + n)]
            assert mine == _torch_indices(size, mesh_shape, coord, split), \
                (size, coord)


@torch2
def test_partial_and_unknown_placements_are_refused():
    from torch.distributed.tensor import Partial
    types = dtensor_mod._placement_types("w")
    with pytest.raises(reshard.LayoutError, match="'w'.*Partial"):
        dtensor_mod.held_runs("w", (4, 4), (2,), (0,), (Partial(),), types)
    with pytest.raises(reshard.LayoutError, match="'w'.*dim 2"):
        from torch.distributed.tensor import Shard
        dtensor_mod.held_runs("w", (4, 4), (2,), (1,), (Shard(2),), types)


@torch2
def test_a_plain_tensor_is_refused(file_dir):
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma") as pub:
        with pytest.raises(reshard.LayoutError, match="'w'.*not a DTensor"):
            pub.register_dtensor("w", torch.zeros(2))


@pytest.mark.skipif(TORCH2, reason="torch 2.x has DTensor")
def test_torch1_refuses_register_dtensor_naming_the_tensor(file_dir):
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma") as pub:
        with pytest.raises(reshard.LayoutError,
                           match="'w'.*needs torch.distributed DTensor"):
            pub.register_dtensor("w", torch.zeros(2))


@torch2
def test_a_shard_order_other_than_mesh_order_is_refused():
    """A spec recording that dim 0 was sharded on mesh dim 1 first."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    if not hasattr(DTensorSpec, "compute_default_shard_order"):
        pytest.skip("this torch records no shard order")

    class Spec:
        compute_default_shard_order = DTensorSpec.compute_default_shard_order
        use_strided_shard_as_shard_order = False

    placements = (Shard(0), Shard(0))
    spec = Spec()
    spec.shard_order = ((0, (1, 0)),)
    with pytest.raises(reshard.LayoutError, match="'w'.*not in mesh order"):
        dtensor_mod._check_order("w", spec, placements)
    spec.shard_order = DTensorSpec.compute_default_shard_order(placements)
    dtensor_mod._check_order("w", spec, placements)
