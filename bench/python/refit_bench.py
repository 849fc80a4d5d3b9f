#!/usr/bin/env python3
"""Refit timings of the Python path: capture, stage and apply, against a
memcpy of the same bytes.

For each model (the refit example's and Qwen2.5-0.5B's shapes, bf16, tied
embeddings, q/k/v biases), two trainer processes hold their TP-2 shards of
every checkpoint tensor (random contents, Hugging Face names) and publish
one version per run; this process is the engine of examples/python (fused
QKV and gate/up, vLLM-style loaders) at TP 1. It captures the loader once,
then stages and applies each version. The first version plans and
connects (cold); the medians are over the warm ones. In the same run it
times a memcpy (torch copy_) of the bytes a stage moves, and prints each
figure's ratio to it.

    PYTHONPATH=python python3 bench/python/refit_bench.py [--runs 5]
        [--models example,qwen2.5-0.5b] [--backend cma|ucx]

Not a test: it asserts nothing and is run by hand.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
if os.path.isdir(os.path.join(ROOT, "python", "reshard")):
    sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

import config  # noqa: E402
from processes import Workers  # noqa: E402
from trainer_model import tp_dim_of  # noqa: E402

MODELS = {"example": config.EXAMPLE, "qwen2.5-0.5b": config.QWEN25_05B}
TP = 2


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="example,qwen2.5-0.5b")
    ap.add_argument("--runs", type=int, default=5,
                    help="warm versions per model (after one cold)")
    ap.add_argument("--backend", choices=("cma", "ucx"), default="cma")
    ap.add_argument("--directory", help="file:DIR or redis://host:port "
                    "(default: file: in a temporary folder)")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--role", default="engine", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# -- trainer ranks -------------------------------------------------------

def make_shards(cfg, rank, seed=0):
    """This rank's shard of every checkpoint tensor, random contents."""
    gen = torch.Generator().manual_seed(seed + rank)
    out = []
    for name, shape in config.checkpoint_tensors(cfg):
        dim = tp_dim_of(name)
        sub = list(shape)
        if dim is not None:
            size = -(-shape[dim] // TP)  # torch.chunk's piece
            sub[dim] = max(0, min(shape[dim], (rank + 1) * size) - rank * size)
        t = torch.empty(sub, dtype=cfg.dtype).uniform_(-1, 1, generator=gen)
        out.append((name, shape, dim, t))
    return out


def run_trainer(args):
    import reshard
    cfg = MODELS[args.model]
    shards = make_shards(cfg, args.rank)
    publish_s = []
    with reshard.Publisher(args.directory, args.model, args.rank, TP,
                           backend=args.backend) as pub:
        for name, shape, dim, t in shards:
            if dim is None:
                pub.register_replicated(name, t)
            else:
                pub.register_shard(name, t, shape, dim, args.rank, TP)
        for version in range(1, args.runs + 2):
            t0 = time.perf_counter()
            pub.publish(version)
            publish_s.append(time.perf_counter() - t0)
            pub.wait_released(version, timeout_s=args.timeout)
    print(json.dumps({"publish_s": publish_s}), flush=True)
    return 0


def trainer_command(args, model, rank):
    return [sys.executable, os.path.abspath(__file__), "--role", "trainer",
            "--rank", str(rank), "--model", model, "--runs", str(args.runs),
            "--directory", args.directory, "--backend", args.backend,
            "--timeout", str(args.timeout)]


# -- engine --------------------------------------------------------------

class Memcpy:
    """A torch copy_ between two host buffers of the bytes a stage moves,
    timed once after each version so that it sees the same machine load
    as the refit it is compared with."""

    def __init__(self, nbytes):
        self.src = torch.ones(nbytes, dtype=torch.uint8)
        self.dst = torch.empty_like(self.src)
        self.dst.copy_(self.src)  # fault the pages in before timing
        self.times = []

    def time_once(self):
        t0 = time.perf_counter()
        self.dst.copy_(self.src)
        self.times.append(time.perf_counter() - t0)


def bench_engine(args, model_name, cfg):
    import reshard
    from inference_model import InferenceModel
    model = InferenceModel(cfg)
    params = dict(model.named_parameters())
    capture_wall = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        cap = reshard.capture(model, sources=config.sources(cfg))
        capture_wall.append(time.perf_counter() - t0)
    results = []
    with reshard.Receiver(args.directory, model_name, cap, params,
                          backend=args.backend,
                          discover_timeout_s=args.timeout,
                          timeout_s=args.timeout) as receiver:
        for version in range(1, args.runs + 2):
            t0 = time.perf_counter()
            staged = receiver.stage(version)
            t1 = time.perf_counter()
            res = receiver.apply(staged)
            t2 = time.perf_counter()
            results.append((res, t1 - t0, t2 - t1))
            if version == 1:
                copy = Memcpy(res.bytes)
            else:
                copy.time_once()
    return cap, capture_wall, results, copy.times


def summarize(model_name, cfg, cap, capture_wall, results, copies, publish):
    cold, warm = results[0][0], [r for r, _, _ in results[1:]]
    med = statistics.median
    nbytes = warm[0].bytes
    copy_s = med(copies)
    stage = med(r.stage_s - r.discover_s for r in warm)
    wire = med(r.stages.get("wire_s", 0.0) for r in warm)
    verify = med(r.stages.get("verify_s", 0.0) for r in warm)
    tables = med(r.tables_s for r in warm)
    apply_s = med(r.apply_s for r in warm)
    ms = 1e3
    print(f"{model_name}: {nbytes / 2**20:.1f} MiB staged ({nbytes} B, "
          f"{warm[0].descriptors} reads, {warm[0].sessions} trainers, "
          f"{cfg.dtype})")
    print(f"  capture      {med(capture_wall) * ms:9.2f} ms ({len(cap.copies)}"
          f" copies, {len(cap.fills)} fills; first call "
          f"{capture_wall[0] * ms:.2f} ms)")
    print(f"  cold stage   {(cold.stage_s - cold.discover_s) * ms:9.2f} ms "
          f"(plan {cold.plan_s * ms:.2f}, connect {cold.connect_s * ms:.2f})")
    rows = [("stage", stage), ("  of it wire", wire),
            ("  and verify", verify), ("apply", apply_s), ("memcpy", copy_s)]
    for label, s in rows:
        print(f"  {label:<12} {s * ms:9.2f} ms  {s / copy_s:6.2f}x memcpy"
              f"  {nbytes / s / 1e9 if s else 0:6.2f} GB/s")
    print(f"  tables       {tables * ms:9.2f} ms (reading every trainer's "
          "table, part of the wait before stage)")
    if publish:
        print(f"  publish      {med(publish) * ms:9.2f} ms (trainer side, "
              "median over ranks and versions)")
    print(f"  (medians of {len(warm)} warm versions; stage = after READY: "
          "lease, plan reuse, wire, replay, verify; apply = lease proof, "
          "copy from staging, release)", flush=True)


def run_model(args, model_name):
    cfg = MODELS[model_name]
    trainers = Workers({f"trainer {r}": trainer_command(args, model_name, r)
                        for r in range(TP)}, 2 * args.timeout,
                       prog="refit_bench", stdout=subprocess.PIPE)
    try:
        trainers.start(watchdog=True)
        cap, wall, results, copies = bench_engine(args, model_name, cfg)
        outs = [p.communicate(timeout=args.timeout)[0]
                for p in trainers.procs.values()]
        if any(p.returncode for p in trainers.procs.values()):
            return 1
    finally:
        trainers.kill()
    publish = [s for o in outs for line in o.decode().splitlines()
               if line.startswith("{") for s in json.loads(line)["publish_s"]]
    summarize(model_name, cfg, cap, wall, results, copies, publish)
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.backend == "ucx":
        os.environ.setdefault("UCX_TLS", "tcp")
    if args.role == "trainer":
        return run_trainer(args)
    work = tempfile.mkdtemp(prefix="reshard-refit-bench-")
    own_dir = args.directory is None
    try:
        rc = 0
        print(f"refit_bench: trainer TP {TP} -> engine TP 1, {args.backend}, "
              f"torch threads {torch.get_num_threads()}", flush=True)
        for i, model_name in enumerate(args.models.split(",")):
            if own_dir:
                d = os.path.join(work, f"dir{i}")
                os.mkdir(d)
                args.directory = "file:" + d
            rc |= run_model(args, model_name)
        return rc
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
