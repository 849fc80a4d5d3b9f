"""A trainer rank as its own process, for the end-to-end tests.

It builds the full Hugging Face tensors of the test model from a seed (the
same function the test uses for its ground truth), keeps only this rank's
shards as live tensors, laid out the way a trainer holds them:
- "tp": every tensor TP-split like torch.chunk (column-parallel on dim 0,
  row-parallel on dim 1), norms and the router replicated;
- "megatron": Megatron-Core's own parameters (names and fused storage:
  linear_qkv by KV-head group, [gate; up] in linear_fc1, a padded
  vocabulary; tests/python/megatron_layout.py), registered with one
  reshard.megatron.register_model call,
and publishes them with reshard.Publisher. New versions are written into
the same storage in place, as an optimizer step would.

It is driven over stdin/stdout with one JSON object per line, so the test
knows when it is ready and when a version is published or released:
  {"cmd": "publish", "version": V, "seed": S}  -> {"ok": "published", ...}
  {"cmd": "wait_released", "version": V, "timeout_s": T} -> {"ok": ...}
  {"cmd": "quit"}                               -> exits 0
A failing command answers {"error": "<type>: <message>"} and the process
keeps serving. The test may SIGSTOP or SIGKILL it at any point.

Usage: e2e_trainer.py JSON-ARGS (directory, model, rank, world, replica,
backend, layout, cfg, seed).
"""
import json
import os
import sys

import torch

import e2e_models
import megatron_layout
import reshard

COLUMN, ROW, REPLICATED = 0, 1, None


def split_dim(name):
    """How a TP trainer splits a tensor: the dim, or None (replicated)."""
    if name.endswith("norm.weight") or name.endswith("mlp.gate.weight"):
        return REPLICATED
    if "o_proj" in name or "down_proj" in name:
        return ROW
    return COLUMN


def chunk(full, dim, rank, world):
    """This rank's torch.chunk piece (an empty piece past the last)."""
    pieces = torch.chunk(full, world, dim)
    if rank < len(pieces):
        return pieces[rank]
    return full.narrow(dim, full.shape[dim], 0)


class Shards:
    """This rank's live tensors and how to refill them from full tensors."""

    def __init__(self, cfg, rank, world):
        self.cfg, self.rank, self.world = cfg, rank, world
        self.live = {}
        self.fill(e2e_models.full_tensors(cfg, 0))

    def fill(self, fulls):
        """Writes a version's contents into the live tensors in place."""
        for name, full in fulls.items():
            dim = split_dim(name)
            piece = full if dim is None else chunk(full, dim, self.rank,
                                                    self.world)
            if name in self.live:
                self.live[name].copy_(piece)
            else:
                self.live[name] = piece.contiguous().clone()

    def register(self, pub):
        shapes = e2e_models.hf_shapes(self.cfg)
        r, w = self.rank, self.world
        for name, live in self.live.items():
            if split_dim(name) is None:
                pub.register_replicated(name, live)
            else:
                pub.register_shard(name, live, shapes[name], split_dim(name),
                                   r, w)


class MegatronShards:
    """This rank's Megatron-Core parameters (tensor parallel over the
    world, one pipeline stage, every expert), refilled in place."""

    def __init__(self, cfg, rank, world):
        self.cfg, self.rank, self.world = cfg, rank, world
        self.live = self._params(e2e_models.full_tensors(cfg, 0))

    def _params(self, fulls):
        return megatron_layout.megatron_rank(fulls, self.cfg, tp=self.world,
                                             r=self.rank, pad_to=64)[0]

    def fill(self, fulls):
        for name, t in self._params(fulls).items():
            self.live[name].copy_(t)

    def register(self, pub):
        reshard.megatron.register_model(
            pub, self.live.items(), megatron_layout.shape_of(self.cfg),
            tp_rank=self.rank, tp_size=self.world)


LAYOUTS = {"tp": Shards, "megatron": MegatronShards}


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve(pub, shards, cfg):
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["cmd"] == "quit":
                return
            if cmd["cmd"] == "publish":
                shards.fill(e2e_models.full_tensors(cfg, cmd["seed"]))
                pub.publish(cmd["version"])
                reply({"ok": "published", "version": cmd["version"]})
            elif cmd["cmd"] == "wait_released":
                pub.wait_released(cmd["version"], cmd.get("timeout_s", 30))
                reply({"ok": "released", "version": cmd["version"]})
            else:
                reply({"error": f"unknown command {cmd['cmd']!r}"})
        except reshard.ReshardError as e:
            reply({"error": f"{type(e).__name__}: {e.message}"})


def main():
    a = json.loads(sys.argv[1])
    cfg = e2e_models.from_json(a["cfg"])
    if a["layout"] not in LAYOUTS:
        raise ValueError(f"unknown trainer layout '{a['layout']}'")
    shards = LAYOUTS[a["layout"]](cfg, a["rank"], a["world"])
    extra = {"staging": a["staging"]} if "staging" in a else {}
    with reshard.Publisher(a["directory"], a["model"], a["rank"], a["world"],
                           backend=a["backend"], replica=a["replica"],
                           **extra) as pub:
        shards.register(pub)
        reply({"ok": "ready", "pid": os.getpid()})
        serve(pub, shards, cfg)


if __name__ == "__main__":
    main()
