"""A trainer rank holding torch.distributed DTensors, as its own process,
for test_dtensor.py (torch 2.x). It joins a gloo process group (file://
rendezvous), builds its DTensors the ways trainers do: distribute_tensor
over 1-D and 2-D CPU device meshes, or from_local with _StridedShard
(cfg "cases"), FSDP2's fully_shard of a
tiny model (cfg "fsdp"), tensor parallelism then FSDP2 on a (dp, tp) mesh
(cfg "fsdp_tp"), and registers each with Publisher.register_dtensor.

Driven over stdin/stdout with one JSON object per line (e2e_harness's
TrainerProc): once registered it answers {"ok": "ready", "refused": {name:
what register_dtensor said of a Partial (cfg "partial") or a transposed
local shard (cfg "transposed")}, "placements": {name: text}}, then
  {"cmd": "publish", "version": V} -> {"ok": "published", "served": boxes
      of this rank's table}; changes the weights in place (V > 1:
      an arithmetic update of every local shard, an SGD step of the
      models), writes every DTensor's full_tensor() (torch's own gather,
      the ground truth; rank 0 writes it to cfg["truth"]/vV.pt), publishes V
  {"cmd": "quit"}                  -> closes and exits 0.
A failing command answers {"error": "<type>: <message>"}.
Usage: dtensor_trainer.py JSON-ARGS (directory, model, rank, world,
backend, cfg).
"""
import json
import os
import sys
import zlib

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard,
                                      distribute_tensor)

import reshard


def placement(text):
    """"S0" -> Shard(0), "R" -> Replicate()."""
    return Replicate() if text == "R" else Shard(int(text[1:]))


def values(name, shape, dtype):
    """The full tensor `name` starts as, the same on every rank."""
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-1000, 1000, shape, generator=g, dtype=dtype)


def strided(full, mesh, text):
    """A DTensor on the 1-D `mesh` placed _StridedShard(0, split_factor)
    ("SS0/2"), its local shard cut by torch's own split (distribute_tensor
    does not take the placement)."""
    from torch.distributed.tensor.placement_types import _StridedShard
    p = _StridedShard(int(text[2]), split_factor=int(text.split("/")[1]))
    pieces, _ = p._split_tensor(full, mesh.size(0), with_padding=False)
    return DTensor.from_local(pieces[mesh.get_local_rank()].contiguous(),
                              mesh, [p], run_check=False, shape=full.shape,
                              stride=full.stride())


def tiny(seed, hidden=(5, 6, 3)):
    """Linear - ReLU - Linear, seeded."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(hidden[0], hidden[1]),
                               torch.nn.ReLU(),
                               torch.nn.Linear(hidden[1], hidden[2]))


class Rank:
    def __init__(self, args):
        cfg = args["cfg"]
        self.rank, self.truth = args["rank"], cfg["truth"]
        dist.init_process_group("gloo", init_method="file://" + cfg["init"],
                                rank=args["rank"],
                                world_size=args["world"])
        self.meshes = {k: init_device_mesh(
            "cpu", tuple(v), mesh_dim_names=tuple(f"d{i}"
                                                  for i in range(len(v))))
            for k, v in cfg["meshes"].items()}
        self.tensors, self.models, self.refused = {}, [], {}
        for case in cfg.get("cases", []):
            dtype = getattr(torch, case.get("dtype", "float32"))
            full = values(case["name"], case["shape"], dtype)
            mesh = self.meshes[case["mesh"]]
            if case["placements"][0].startswith("SS"):
                t = strided(full, mesh, case["placements"][0])
            else:
                t = distribute_tensor(full, mesh, [placement(p) for p in
                                                   case["placements"]])
            self.tensors[case["name"]] = (t, case.get("wire"))
        if cfg.get("fsdp"):
            self.add_model("fsdp", self.fsdp(cfg["fsdp"]))
        if cfg.get("fsdp_tp"):
            self.add_model("fsdp_tp", self.fsdp_tp(cfg["fsdp_tp"]))
        self.pub = reshard.Publisher(args["directory"], args["model"],
                                     args["rank"], args["world"],
                                     args["backend"],
                                     wire_dtype=cfg.get("wire_dtype"))
        for name, (t, wire) in self.tensors.items():
            self.pub.register_dtensor(name, t, wire_dtype=wire)
        for name, mesh in cfg.get("partial", {}).items():
            self.refuse(name, DTensor.from_local(
                torch.ones(2, 3), self.meshes[mesh],
                [Partial()] * self.meshes[mesh].ndim))
        for name, mesh in cfg.get("transposed", {}).items():
            self.refuse(name, DTensor.from_local(
                torch.ones(3, 2).t(), self.meshes[mesh],
                [Shard(0)] * self.meshes[mesh].ndim))

    def fsdp(self, mesh):
        from torch.distributed.fsdp import fully_shard
        model = tiny(1)
        fully_shard(model, mesh=self.meshes[mesh])
        return model

    def fsdp_tp(self, mesh_name):
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import (ColwiseParallel,
                                                       RowwiseParallel,
                                                       parallelize_module)
        mesh = self.meshes[mesh_name]
        model = tiny(2)
        parallelize_module(model, mesh[mesh.mesh_dim_names[1]],
                           {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(model, mesh=mesh[mesh.mesh_dim_names[0]])
        return model

    def add_model(self, prefix, model):
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        self.models.append((model, opt))
        for n, p in model.named_parameters():
            self.tensors[f"{prefix}.{n}"] = (p, None)

    def refuse(self, name, t):
        """What register_dtensor says of a DTensor it cannot publish."""
        try:
            self.pub.register_dtensor(name, t)
        except reshard.LayoutError as e:
            self.refused[name] = str(e)

    def step(self, version):
        """Every weight changes in place, as training does."""
        with torch.no_grad():
            for t, _ in self.tensors.values():
                if not isinstance(t, torch.nn.Parameter):
                    local = t.to_local()
                    if local.dtype.is_floating_point:
                        local.mul_(-0.75).add_(version)
                    else:
                        local.add_(version)
        for model, opt in self.models:
            opt.zero_grad()
            x = torch.linspace(-1, 1, 2 * 5).view(2, 5) * version
            model(x).square().sum().backward()
            opt.step()

    def publish(self, version):
        if version > 1:
            self.step(version)
        fulls = {n: t.full_tensor().detach().clone()
                 for n, (t, _) in self.tensors.items()}
        if self.rank == 0:
            torch.save(fulls, os.path.join(self.truth, f"v{version}.pt"))
        self.pub.publish(version)

    def placements(self):
        return {n: repr(tuple(t.placements))
                for n, (t, _) in self.tensors.items()}


def reply(**msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def main():
    args = json.loads(sys.argv[1])
    try:
        rank = Rank(args)
    except Exception as e:  # noqa: BLE001 - the test reads it
        reply(error=f"{type(e).__name__}: {e}")
        return
    reply(ok="ready", refused=rank.refused, placements=rank.placements())
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            break
        try:
            rank.publish(cmd["version"])
            reply(ok="published", served=rank.pub.num_served)
        except Exception as e:  # noqa: BLE001 - the test reads it
            reply(error=f"{type(e).__name__}: {e}")
    rank.pub.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
