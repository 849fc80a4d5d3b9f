"""An inference engine rank: capture its loader once, then stage and apply
each version between forward passes, and check it.

The weight-sync step of an engine, with reshard: `reshard.capture` runs the
model's own `load_weights` once over placeholders of the checkpoint's
shapes and records where every byte lands; a `Receiver` bound to the live
parameters then pulls each version into staging (on a background thread,
while the engine keeps serving the old weights) and `apply` installs it at
a safe point, between two forward passes. With several engine ranks, each
rank receives on its own and one of them releases the version once every
rank applied it.

Each version is checked twice: its logits on the fixed prompt against the
trainer's (close, not equal: the two sides sum their tensor-parallel
partial products in other orders), and every parameter byte against the
same loader run by PyTorch on the trainer's gathered weights (equal).
"""
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

import reshard
from inference_model import InferenceModel
from tensor_parallel import tp_world
from trainer import record_path
from trainer_model import eval_input

RTOL, ATOL = 1e-5, 1e-5


class RefitMismatch(Exception):
    """A version's parameters or logits are not the trainer's."""


def all_ranks(flag):
    """True when flag is true on every engine rank (a collective)."""
    if tp_world()[1] == 1:
        return flag
    t = torch.tensor([int(flag)])
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def capture_loader(model, args):
    """The engine's loader recorded once, over the tensors the trainers
    publish (their names, full shapes and dtypes, read from the first
    version's tables); refused if it did anything reshard cannot replay."""
    sources = reshard.sources_from_directory(args.directory, args.model,
                                             timeout_s=args.timeout)
    cap = reshard.capture(model, sources=sources)
    if cap.unsupported or cap.unattributed:
        raise RefitMismatch(f"capture refused: unsupported {cap.unsupported}"
                            f", unattributed {cap.unattributed_details}")
    return cap


def stage_while_serving(receiver, version, model, prompt):
    """Stages `version` on a thread while this one keeps serving forward
    passes with the current weights, which must not change meanwhile.
    Engine ranks serve in lockstep (every forward is a collective) until
    every rank has staged. Returns (staged handle, forwards served)."""
    before = model(prompt)
    box = {}

    def stage():
        try:
            box["staged"] = receiver.stage(version)
        except BaseException as e:  # re-raised on the serving thread
            box["error"] = e

    thread = threading.Thread(target=stage, daemon=True)
    thread.start()
    served = 0
    while True:
        if not torch.equal(model(prompt), before):
            raise RefitMismatch(f"version {version}: live weights changed "
                                "while staging")
        served += 1
        thread.join(0.001)
        if all_ranks(not thread.is_alive()):
            break
    if "error" in box:
        raise box["error"]
    return box["staged"], served


def expected_params(cfg, weights):
    """Ground truth: this rank's loader run by PyTorch on real tensors."""
    reference = InferenceModel(cfg)
    reference.load_weights(weights.items())
    return dict(reference.named_parameters())


def check_version(version, params, logits, record, cfg):
    """Max abs logit difference; RefitMismatch on any wrong byte or logit."""
    expected = expected_params(cfg, record["weights"])
    wrong = [n for n, p in params.items() if not torch.equal(p, expected[n])]
    diff = (logits - record["logits"]).abs().max().item()
    if wrong:
        raise RefitMismatch(f"version {version}: parameters differ from the "
                            f"trainer's: {', '.join(wrong)}")
    if not torch.allclose(logits, record["logits"], rtol=RTOL, atol=ATOL):
        raise RefitMismatch(f"version {version}: logits differ from the "
                            f"trainer's by up to {diff:.3g}")
    return diff


def version_line(version, record, result, served, diff):
    """One line per version. The stage's own work is what follows the wait
    for the version to be READY (the trainer's step)."""
    ms = 1e3
    loss = "-" if record["loss"] is None else f"{record['loss']:.4f}"
    work = result.stage_s - result.discover_s
    return (f"version {version}: loss {loss}, {result.bytes} B staged in "
            f"{result.descriptors} reads from {result.sessions} trainer(s); "
            f"ready after {result.discover_s * ms:.1f} ms, stage "
            f"{work * ms:.2f} ms (wire {result.stages['wire_s'] * ms:.2f}), "
            f"apply {result.apply_s * ms:.2f} ms, {served} forwards served "
            f"while staging; max |logit diff| {diff:.2e}, params byte-exact")


def release_when_all_applied(args, version):
    """With several engine ranks no receiver releases on its own (a rank
    that has not begun staging holds no lease yet): once every rank applied
    the version, rank 0 releases it, and the trainers move on."""
    dist.barrier()
    if tp_world()[0] == 0:
        reshard.release(args.directory, args.model, version)


def run_inference(args, cfg, out=print):
    rank, world = tp_world()
    model = InferenceModel(cfg)
    params = dict(model.named_parameters())
    cap = capture_loader(model, args)
    out(f"capture: {len(cap.copies)} copies and {len(cap.fills)} fills "
        f"into {len(cap.params)} params from {len(cap.sources)} sources in "
        f"{cap.seconds * 1e3:.1f} ms")
    prompt = eval_input(cfg, args.seed + 2)
    with reshard.Receiver(args.directory, args.model, cap, params,
                          backend=args.backend, salt=rank,
                          release_after=world == 1,
                          discover_timeout_s=args.timeout,
                          timeout_s=args.timeout) as receiver:
        for version in range(args.steps + 1):
            staged, served = stage_while_serving(receiver, version, model,
                                                 prompt)
            result = receiver.apply(staged)  # the safe point
            record = torch.load(record_path(args.work, version))
            diff = check_version(version, params, model(prompt), record, cfg)
            if world > 1:
                release_when_all_applied(args, version)
            out(version_line(version, record, result, served, diff))
    return 0


def run_engine_rank(args, cfg):
    """One engine rank: with several, in a process group of their own;
    output from rank 0 only."""
    if args.engine_tp > 1:
        dist.init_process_group(
            "gloo", init_method=f"file://{args.work}/gloo-engine",
            rank=args.rank, world_size=args.engine_tp,
            timeout=timedelta(seconds=args.timeout))
    prefix = "" if args.engine_tp == 1 else "engine rank 0: "
    out = (lambda s: print(prefix + s, flush=True)) if args.rank == 0 else \
        (lambda s: None)
    return run_inference(args, cfg, out)
