"""The worker side of vLLM's weight transfer over reshard: an engine that
captures the model's own `load_weights` once, stages each version while
the model keeps its weights, and installs it when vLLM finishes the
update. Imports vLLM (loaded by the factory, never by `import reshard`)."""
from dataclasses import dataclass
from typing import Any

import torch
from vllm.config import set_current_vllm_config
from vllm.distributed.weight_transfer.base import (WeightTransferEngine,
                                                   WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)

from .. import _args
from ..capture import capture
from ..errors import InvalidArgument
from ..receiver import Receiver
from . import settings as s

INIT = "reshard init_info"
UPDATE = "reshard update_info"


@dataclass
class ReshardInitInfo(WeightTransferInitInfo):
    """Where versions come from and how to receive them (see docs/vllm.md).
    `sources` lists the checkpoint's tensors in the order the loader reads
    them ([name, shape, dtype]); the trainer side sends it."""

    directory: str
    model: str
    sources: Any
    transport: str = "ucx"
    holder: str | None = None
    salt: int | None = None
    group: str | None = None
    group_size: int | None = None
    group_rank: int | None = None
    release_after: bool = False
    verify_digests: bool = True
    discover_timeout_s: float = 60.0
    timeout_s: float = 60.0
    lease_ttl_s: float = 60.0
    group_timeout_s: float = 60.0
    only: Any = None
    skip: Any = None
    staging_budget: Any = None

    def __post_init__(self):
        self.directory = s.directory(INIT, "directory", self.directory)
        self.model = s.text(INIT, "model", self.model)
        self.sources = s.sources(INIT, "sources", self.sources)
        self.transport = s.choice(INIT, "transport", self.transport,
                                  _args.BACKENDS)
        self.holder = s.text(INIT, "holder", self.holder, optional=True)
        self.salt = s.integer(INIT, "salt", self.salt, optional=True)
        self.group = s.text(INIT, "group", self.group, optional=True)
        self.group_size = s.integer(INIT, "group_size", self.group_size, 1,
                                    optional=True)
        self.group_rank = s.integer(INIT, "group_rank", self.group_rank,
                                    optional=True)
        for name in ("release_after", "verify_digests"):
            setattr(self, name, s.flag(INIT, name, getattr(self, name)))
        for name in ("discover_timeout_s", "timeout_s", "lease_ttl_s",
                     "group_timeout_s"):
            setattr(self, name, s.seconds(INIT, name, getattr(self, name)))
        self.only = s.patterns(INIT, "only", self.only)
        self.skip = s.patterns(INIT, "skip", self.skip)
        if self.staging_budget != "unbounded":
            self.staging_budget = s.integer(INIT, "staging_budget",
                                            self.staging_budget, 1,
                                            optional=True)


@dataclass
class ReshardUpdateInfo(WeightTransferUpdateInfo):
    """The version to install: a trainer step the trainers published, or
    -1 for the newest READY one."""

    version: int

    def __post_init__(self):
        self.version = s.integer(UPDATE, "version", self.version, low=-1)


class ReshardWeightTransferEngine(
        WeightTransferEngine[ReshardInitInfo, ReshardUpdateInfo]):
    """vLLM weight-transfer backend "reshard" (worker side).

    `init_transfer_engine` captures the target model's `load_weights`
    over placeholders of `sources` and opens a `reshard.Receiver` on its
    parameters; each update round stages one version in `update_weights`
    (the live parameters are untouched, a failed stage leaves them so) and
    installs it in `finish_weight_update`. `last_result` is the
    `reshard.PullResult` of the last installed version."""

    init_info_cls = ReshardInitInfo
    update_info_cls = ReshardUpdateInfo
    # A draft model has parameters of its own: it would need a capture of
    # its own loader, which one engine per target does not keep.
    supports_draft_weight_update = False

    def __init__(self, config, vllm_config, device, model):
        super().__init__(config, vllm_config, device, model)
        self.capture = None
        self.receiver = None
        self.last_result = None
        self._staged = None

    def parse_init_info(self, init_dict):
        return ReshardInitInfo(**s.check_keys(INIT, ReshardInitInfo,
                                              init_dict))

    def parse_update_info(self, update_dict):
        return ReshardUpdateInfo(**s.check_keys(UPDATE, ReshardUpdateInfo,
                                                update_dict))

    def init_transfer_engine(self, init_info):
        """Captures the model's loader and opens the receiver; a second
        call replaces both (new settings, same model)."""
        self.shutdown()
        with set_current_vllm_config(self.vllm_config):
            cap = capture(self.model, init_info.sources)
        refusal = cap.select(init_info.only, init_info.skip).refusal()
        if refusal is not None:
            raise refusal
        self.capture = cap
        self.receiver = Receiver(
            init_info.directory, init_info.model, cap,
            dict(self.model.named_parameters()), backend=init_info.transport,
            **self._receiver_options(init_info))

    def _receiver_options(self, info):
        """The Receiver's keywords: the info's, with this worker's place in
        its engine (vLLM's parallel config) where the info leaves it out."""
        pc = self.parallel_config
        rank = pc.rank % pc.world_size   # the rank within this replica
        opts = dict(salt=rank if info.salt is None else info.salt,
                    holder=info.holder, release_after=info.release_after,
                    verify_digests=info.verify_digests,
                    discover_timeout_s=info.discover_timeout_s,
                    timeout_s=info.timeout_s, lease_ttl_s=info.lease_ttl_s,
                    only=info.only, skip=info.skip,
                    staging_budget=info.staging_budget)
        if info.group is not None:
            opts.update(
                group=info.group, group_timeout_s=info.group_timeout_s,
                group_size=info.group_size or pc.world_size,
                group_rank=rank if info.group_rank is None
                else info.group_rank)
        return opts

    def _open(self):
        if self.receiver is None:
            raise RuntimeError("reshard engine: init_weight_transfer_engine "
                               "was not called (or the engine was shut down)")
        return self.receiver

    def start_weight_update(self):
        """A new round: a version staged by a round that never finished is
        dropped (with its lease)."""
        rx = self._open()
        if self._staged is not None:
            staged, self._staged = self._staged, None
            rx.discard(staged)

    def update_weights(self, update_info):
        """Stages the version; nothing is queued on a device, so there is
        nothing to synchronize on CPU."""
        self.receive_weights(self.parse_update_info(update_info))
        if self.device.type != "cpu":
            torch.accelerator.synchronize()

    def receive_weights(self, update_info):
        """Reads the version into the receiver's staging, the live
        parameters untouched; one version per round."""
        rx = self._open()
        if self._staged is not None:
            raise InvalidArgument(
                f"reshard engine: version {self._staged.version} is already "
                f"staged in this round; version {update_info.version} needs "
                "a round of its own")
        self._staged = rx.stage(update_info.version)

    def finish_weight_update(self):
        """Installs the staged version into the live parameters (vLLM runs
        this between engine steps)."""
        if self._staged is None:
            return
        staged, self._staged = self._staged, None
        self.last_result = self._open().apply(staged)
        if self.device.type != "cpu":
            torch.accelerator.synchronize()

    def shutdown(self):
        """Drops a staged version and closes the receiver; the model keeps
        the weights it holds."""
        rx, self.receiver, self._staged = self.receiver, None, None
        if rx is not None:
            rx.close()
