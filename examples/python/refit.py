#!/usr/bin/env python3
"""Refit a live PyTorch model from tensor-parallel trainers, with reshard.

Trainer processes (TP 2 by default) train a small transformer with real
tensor parallelism (torch.distributed over gloo), unfused, under Hugging
Face names; after every optimizer step each rank publishes its live shards
as a new version. Engine processes (TP 1 by default) hold the inference
copy: fused QKV and gate/up parameters, a padded vocabulary and vLLM-style
weight loaders. Each engine rank captures its loader once, then for every
version stages it while serving, applies it between two forward passes,
and checks its logits against the trainer's and every parameter byte
against a PyTorch load of the trainer's weights. This process only
launches and supervises them.

    PYTHONPATH=python python3 examples/python/refit.py [--backend ucx]
        [--directory redis://127.0.0.1:6379] [--steps 3]
        [--trainer-tp 1|2] [--engine-tp 1|2]

Prints one line per version and exits 0 when every version matched, 1 on
any mismatch or failure of any process, leaving no process behind. The
reshard package is the installed one (pip install .), else this
repository's python/.

Where to read what: trainer.py (publishing live shards each step),
inference.py (capture, stage while serving, apply, release, checks),
inference_model.py (the engine's fused parameters and weight loaders),
trainer_model.py and tensor_parallel.py (the tensor-parallel trainer),
config.py (the checkpoint's names and shapes, all the two sides share),
processes.py (process supervision). check_models.py checks the two model
copies against each other in pure PyTorch, without reshard.
"""
import argparse
import importlib.util
import os
import shutil
import signal
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
_REPO_PYTHON = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
if importlib.util.find_spec("reshard") is None and \
        os.path.isdir(os.path.join(_REPO_PYTHON, "reshard")):
    sys.path.insert(0, _REPO_PYTHON)

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("cma", "ucx"), default="cma",
                    help="transport (ucx runs with UCX_TLS=tcp unless set)")
    ap.add_argument("--directory", help="file:DIR or redis://host:port "
                    "(default: file: in a temporary folder)")
    ap.add_argument("--steps", type=int, default=3,
                    help="optimizer steps; versions 0..steps move")
    ap.add_argument("--trainer-tp", type=int, choices=(1, 2), default=2,
                    help="trainer tensor-parallel degree")
    ap.add_argument("--engine-tp", type=int, choices=(1, 2), default=1,
                    help="inference tensor-parallel degree")
    ap.add_argument("--model", help="the model's name in the directory "
                    "(default: refit-example-<pid>, new each run, so a "
                    "shared directory never serves an older run's versions)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="bound on every wait (on the whole run: twice it)")
    ap.add_argument("--role", choices=("launcher", "engine", "trainer"),
                    default="launcher", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def worker_command(args, role, rank):
    return [sys.executable, os.path.abspath(__file__), "--role", role,
            "--rank", str(rank), "--work", args.work,
            "--directory", args.directory, "--model", args.model,
            "--backend", args.backend, "--steps", str(args.steps),
            "--trainer-tp", str(args.trainer_tp),
            "--engine-tp", str(args.engine_tp), "--seed", str(args.seed),
            "--timeout", str(args.timeout)]


def launch(args):
    """Starts every trainer and engine rank and supervises them."""
    from processes import Workers

    args.work = tempfile.mkdtemp(prefix="reshard-refit-")
    if args.model is None:
        args.model = f"refit-example-{os.getpid()}"
    if args.directory is None:
        os.mkdir(os.path.join(args.work, "dir"))
        args.directory = "file:" + os.path.join(args.work, "dir")
    commands = {f"trainer {r}": worker_command(args, "trainer", r)
                for r in range(args.trainer_tp)}
    commands.update({f"engine rank {r}": worker_command(args, "engine", r)
                     for r in range(args.engine_tp)})
    workers = Workers(commands, 2 * args.timeout)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    print(f"refit: trainer TP {args.trainer_tp} (unfused q/k/v, gate/up) -> "
          f"engine TP {args.engine_tp} (fused qkv_proj, gate_up_proj, padded "
          f"vocab), {args.backend}, {args.directory.split(':')[0]} directory",
          flush=True)
    try:
        workers.start()
        rc = workers.supervise()
    finally:
        workers.kill()
        shutil.rmtree(args.work, ignore_errors=True)
    print("refit: every version matched" if rc == 0 else "refit: FAILED",
          flush=True)
    return rc


def main(argv=None):
    args = parse_args(argv)
    if args.backend == "ucx":
        # Before the library loads UCX; inherited by every worker.
        os.environ.setdefault("UCX_TLS", "tcp")
    if args.role == "launcher":
        return launch(args)
    import reshard
    from config import EXAMPLE
    from inference import RefitMismatch, run_engine_rank
    from trainer import run_trainer
    run = run_trainer if args.role == "trainer" else run_engine_rank
    try:
        return run(args, EXAMPLE)
    except (RefitMismatch, reshard.ReshardError) as e:
        print(f"refit: {args.role} rank {args.rank}: FAILED: {e}",
              file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
