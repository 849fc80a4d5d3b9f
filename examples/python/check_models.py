#!/usr/bin/env python3
"""Checks the example's two model copies in pure PyTorch, without reshard.

The refit example is only meaningful if its tensor-parallel trainer really
trains the model a single process would, and if the engine's fused loaders
really compute the trainer's function. This runs the seeded training once
in one process (the reference) and once over gloo with TP 2, and checks:
the gathered TP weights and the logits at every step match the reference;
the engine's model loaded by PyTorch with those weights (at TP 1 here, and
at TP 2 inside the trainer processes) gives the same logits.

    python3 examples/python/check_models.py
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from config import EXAMPLE  # noqa: E402
from inference_model import InferenceModel  # noqa: E402
from trainer_model import (BATCH, SEQ, TrainerModel,  # noqa: E402
                           eval_input, init_full_weights, make_batches,
                           make_optimizer, sync_replicated, tp_dim_of,
                           train_step)

STEPS, SEED, TOL = 3, 0, 1e-5


def train(record):
    """Trains STEPS steps under whatever process group is current; calls
    record(version, model, prompt) at every version."""
    model = TrainerModel(EXAMPLE, init_full_weights(EXAMPLE, SEED))
    for name, p in model.named_parameters():
        assert p.tp_dim == tp_dim_of(name), name
    opt = make_optimizer(model)
    batches = make_batches(EXAMPLE, STEPS, BATCH, SEQ, SEED + 1)
    prompt = eval_input(EXAMPLE, SEED + 2)
    for version in range(STEPS + 1):
        if version:
            train_step(model, opt, batches[version - 1])
            sync_replicated(model)
        record(version, model, prompt)


def engine_logits(weights, prompt):
    engine = InferenceModel(EXAMPLE)
    engine.load_weights(weights.items())
    return engine(prompt)


def tp_rank_main(rank, world, work):
    dist.init_process_group("gloo", init_method=f"file://{work}/gloo",
                            rank=rank, world_size=world)
    out = {}

    def record(version, model, prompt):
        with torch.no_grad():
            logits = model(prompt)
        weights = model.full_weights()
        # The engine at TP 2, in the same process group.
        tp_engine = engine_logits(weights, prompt)
        out[version] = {"logits": logits, "weights": weights,
                        "engine_tp2": tp_engine}

    train(record)
    if rank == 0:
        torch.save(out, os.path.join(work, "tp.pt"))
    dist.destroy_process_group()


def close(a, b):
    return torch.allclose(a, b, rtol=TOL, atol=TOL)


def main():
    ref = {}

    def record(version, model, prompt):
        with torch.no_grad():
            ref[version] = {"logits": model(prompt),
                            "weights": model.full_weights(), "prompt": prompt}

    train(record)
    with tempfile.TemporaryDirectory() as work:
        mp.spawn(tp_rank_main, args=(2, work), nprocs=2, join=True)
        tp = torch.load(os.path.join(work, "tp.pt"))
    failures = 0
    for v in range(STEPS + 1):
        r, t = ref[v], tp[v]
        w_ok = all(close(t["weights"][n], w) for n, w in r["weights"].items())
        l_ok = close(t["logits"], r["logits"])
        e1 = engine_logits(t["weights"], r["prompt"])
        e1_ok = close(e1, t["logits"])
        e2_ok = close(t["engine_tp2"], t["logits"])
        moved = max((t["weights"][n] - w).abs().max().item()
                    for n, w in ref[0]["weights"].items())
        print(f"version {v}: TP2 weights ~ reference {w_ok}, logits "
              f"{l_ok} (max diff "
              f"{(t['logits'] - r['logits']).abs().max().item():.2e}), "
              f"engine TP1 {e1_ok}, engine TP2 {e2_ok}; weights moved "
              f"{moved:.3f} from init")
        failures += not (w_ok and l_ok and e1_ok and e2_ok)
        failures += v > 0 and moved == 0.0
    print("models agree" if not failures else "MISMATCH")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
