"""A trainer rank: tensor-parallel training that publishes every step.

The weight-sync step of an RL trainer, with reshard: register each rank's
live shards once, then after every optimizer step publish the new version
and wait until every receiver has released it before the next step writes
the weights in place. Nothing is gathered and nothing is copied; the
publisher serves the parameters' own storage.

The rank also writes, for the inference side to check against, a record of
each version: its logits on the fixed prompt and the full weights gathered
here (rank 0 writes it, before publishing, so it exists once the version is
READY). Gathering is only for that check; reshard never needs it.
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist

import reshard
from trainer_model import (BATCH, SEQ, TrainerModel, eval_input,
                           init_full_weights, make_batches, make_optimizer,
                           sync_replicated, train_step)


def record_path(work, version):
    return os.path.join(work, f"version-{version}.pt")


def write_record(work, version, loss, logits, weights):
    """Saves what the inference side compares with, atomically (a reader
    never sees half a file)."""
    path = record_path(work, version)
    torch.save({"version": version, "loss": loss, "logits": logits,
                "weights": weights}, path + ".tmp")
    os.replace(path + ".tmp", path)


def register_shards(publisher, model, rank, world):
    """Each parameter is this rank's shard (or a full replica) of one
    checkpoint tensor under its Hugging Face name. The publisher keeps
    these views of the parameters' storage, which the optimizer updates
    in place."""
    for name, p in model.named_parameters():
        if p.tp_dim is None:
            publisher.register_replicated(name, p.detach())
        else:
            publisher.register_shard(name, p.detach(), p.full_shape,
                                     p.tp_dim, rank, world)


def run_trainer(args, cfg):
    rank, world = args.rank, args.trainer_tp
    dist.init_process_group("gloo", init_method=f"file://{args.work}/gloo",
                            rank=rank, world_size=world,
                            timeout=timedelta(seconds=args.timeout))
    torch.manual_seed(args.seed)
    model = TrainerModel(cfg, init_full_weights(cfg, args.seed))
    optimizer = make_optimizer(model)
    batches = make_batches(cfg, args.steps, BATCH, SEQ, args.seed + 1)
    prompt = eval_input(cfg, args.seed + 2)
    with reshard.Publisher(args.directory, args.model, rank, world,
                           backend=args.backend) as publisher:
        register_shards(publisher, model, rank, world)
        for version in range(args.steps + 1):
            loss = None
            if version > 0:
                loss = train_step(model, optimizer, batches[version - 1])
                sync_replicated(model)
            with torch.no_grad():
                logits = model(prompt)
            weights = model.full_weights()
            if rank == 0:
                write_record(args.work, version, loss, logits, weights)
            publisher.publish(version)
            # The next step writes these very bytes: wait until no
            # receiver reads them any more.
            publisher.wait_released(version, timeout_s=args.timeout)
    dist.destroy_process_group()
    return 0
