"""A trainer rank as its own process, for the end-to-end tests.

It builds the full Hugging Face tensors of the test model from a seed (the
same function the test uses for its ground truth), keeps only this rank's
shards as live tensors, laid out the way a trainer holds them:
- "tp": every tensor TP-split like torch.chunk (column-parallel on dim 0,
  row-parallel on dim 1), norms and the router replicated;
- "megatron": as "tp", but q/k/v (weights and biases) in Megatron's fused
  QKV storage and every gate/up pair in one fused tensor,
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

    def __init__(self, cfg, layout, rank, world):
        self.cfg, self.rank, self.world = cfg, rank, world
        self.groups = []  # (kind, names, live tensor)
        shapes = e2e_models.hf_shapes(cfg)
        fused = set()
        if layout == "megatron":
            fused = self._fused_groups(shapes)
        elif layout != "tp":
            raise ValueError(f"unknown trainer layout '{layout}'")
        for name in shapes:
            if name not in fused:
                self.groups.append(("plain", (name,), None))
        self.fill(e2e_models.full_tensors(cfg, 0), allocate=True)

    def _fused_groups(self, shapes):
        """Megatron's fused tensors: q/k/v of every layer (weight, bias)
        and every gate/up pair (dense MLP, or each expert)."""
        names = set()
        for i in range(self.cfg.layers):
            p = f"model.layers.{i}."
            for kind in ("weight", "bias"):
                qkv = tuple(f"{p}self_attn.{x}_proj.{kind}" for x in "qkv")
                if qkv[0] in shapes:
                    self.groups.append(("qkv", qkv, None))
                    names.update(qkv)
            experts = [f"{p}mlp.experts.{e}." for e in range(self.cfg.experts)]
            for q in experts or [p + "mlp."]:
                pair = (q + "gate_proj.weight", q + "up_proj.weight")
                self.groups.append(("gate_up", pair, None))
                names.update(pair)
        return names

    def _build(self, kind, names, fulls):
        r, w = self.rank, self.world
        if kind == "plain":
            full = fulls[names[0]]
            dim = split_dim(names[0])
            return full if dim is None else chunk(full, dim, r, w)
        if kind == "gate_up":
            return torch.cat([chunk(fulls[n], 0, r, w) for n in names])
        return self._megatron_qkv(names, fulls)

    def _megatron_qkv(self, names, fulls):
        """Rank's KV-head groups, each [its q heads, its k, its v]."""
        q, k, v = (fulls[n] for n in names)
        cfg, hd = self.cfg, self.cfg.head_dim
        q_per = cfg.heads // cfg.kv_heads
        per_rank = cfg.kv_heads // self.world
        bands = []
        for g in range(self.rank * per_rank, (self.rank + 1) * per_rank):
            bands += [q.narrow(0, g * q_per * hd, q_per * hd),
                      k.narrow(0, g * hd, hd), v.narrow(0, g * hd, hd)]
        return torch.cat(bands)

    def fill(self, fulls, allocate=False):
        """Writes a version's contents into the live tensors in place."""
        for i, (kind, names, live) in enumerate(self.groups):
            piece = self._build(kind, names, fulls)
            if allocate:
                self.groups[i] = (kind, names, piece.contiguous().clone())
            else:
                live.copy_(piece)

    def register(self, pub):
        shapes = e2e_models.hf_shapes(self.cfg)
        r, w = self.rank, self.world
        for kind, names, live in self.groups:
            if kind == "qkv":
                cfg = self.cfg
                pub.register_fused_qkv(names, live, cfg.heads, cfg.kv_heads,
                                       cfg.head_dim, r, w)
            elif kind == "gate_up":
                pub.register_fused(names, live, shapes[names[0]], r, w)
            elif split_dim(names[0]) is None:
                pub.register_replicated(names[0], live)
            else:
                pub.register_shard(names[0], live, shapes[names[0]],
                                   split_dim(names[0]), r, w)


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
    shards = Shards(cfg, a["layout"], a["rank"], a["world"])
    with reshard.Publisher(a["directory"], a["model"], a["rank"], a["world"],
                           backend=a["backend"], replica=a["replica"]) as pub:
        shards.register(pub)
        reply({"ok": "ready", "pid": os.getpid()})
        serve(pub, shards, cfg)


if __name__ == "__main__":
    main()
