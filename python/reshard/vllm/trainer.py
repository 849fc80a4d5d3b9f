"""The trainer side of vLLM's weight transfer over reshard: every trainer
rank publishes its tensors for each version, and rank 0 has vLLM's
workers stage and install it through the weight-sync client. Imports
vLLM (loaded by the factory, never by `import reshard`)."""
from dataclasses import dataclass, field
from typing import Any, ClassVar

from vllm.distributed.weight_transfer.base import (TrainerInitInfo,
                                                   TrainerWeightTransferEngine)

from .. import _args
from ..directory import abandon, release
from ..errors import InvalidArgument
from ..publisher import Publisher
from . import settings as s
from .source import Registrations, pairs_of, specs_of
from .worker import ReshardInitInfo

TRAINER = "reshard trainer init_info"
# Worker settings the trainer side fills in itself.
_DERIVED = ("directory", "model", "sources", "transport")


@dataclass
class ReshardTrainerInitInfo(TrainerInitInfo):
    """A trainer rank's reshard settings (docs/vllm.md). `world` is the
    number of trainer ranks that publish, `rank` (keyword) this one's slot;
    `engine` holds extra worker settings (timeouts, group, only/skip...)
    sent to the workers at the handshake."""

    backend: ClassVar[str] = "reshard"

    directory: str
    model: str
    world: int = 1
    transport: str = "ucx"
    replica: int = 0
    staging: str | None = None
    first_version: int = 0
    release_timeout_s: float = 60.0
    engine: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        s.directory(TRAINER, "directory", self.directory)
        s.text(TRAINER, "model", self.model)
        s.integer(TRAINER, "world", self.world, 1)
        s.integer(TRAINER, "rank", self.rank)
        if self.rank >= self.world:
            raise s.fail(TRAINER, "rank", f"must be below world "
                         f"{self.world}, got {self.rank}")
        s.choice(TRAINER, "transport", self.transport, _args.BACKENDS)
        s.integer(TRAINER, "replica", self.replica)
        s.integer(TRAINER, "first_version", self.first_version)
        self.release_timeout_s = s.seconds(TRAINER, "release_timeout_s",
                                           self.release_timeout_s)
        if not isinstance(self.engine, dict):
            raise s.fail(TRAINER, "engine", f"must be a dict of worker "
                         f"settings, got {self.engine!r}")
        for key in self.engine:
            if key in _DERIVED:
                raise s.fail(TRAINER, f"engine.{key}", "is set by the trainer "
                             "side; give it as the trainer's own field")
        # The workers' own checks, here, before anything is published.
        ReshardInitInfo(**s.check_keys(
            TRAINER + " engine", ReshardInitInfo,
            {**self.engine, "directory": self.directory, "model": self.model,
             "sources": [["-", [1], "float32"]]}))


class ReshardTrainerWeightTransferEngine(
        TrainerWeightTransferEngine[ReshardTrainerInitInfo]):
    """vLLM weight-transfer backend "reshard" (trainer side).

    Made by `WeightTransferTrainerFactory.trainer_init` on every trainer
    rank: a `reshard.Publisher` over the source's tensors (nothing is
    gathered or copied: the tensors' own storage is served). Each
    `send_weights()` publishes the next version on every rank; rank 0 then
    drives the workers' round (start, update with the version, finish:
    stage, then install) and releases the version; every rank waits until
    it is released before returning, so the optimizer may then write the
    tensors."""

    init_info_cls = ReshardTrainerInitInfo

    def __init__(self, *, client, source, info, publisher, pairs):
        super().__init__(client=client, source=source,
                         is_sender=info.is_sender, rank=info.rank)
        self.info = info
        self.publisher = publisher
        self.next_version = info.first_version
        self._pairs = pairs
        self._registrations = Registrations(pairs)

    @classmethod
    def trainer_init(cls, init_info, *, client, source=None):
        if source is None:
            raise InvalidArgument("reshard trainer: a source of (name, "
                                  "tensor) is required")
        pairs = pairs_of(source)
        i = init_info
        pub = Publisher(i.directory, i.model, i.rank, i.world,
                        backend=i.transport, replica=i.replica,
                        staging=i.staging)
        try:
            engine = cls(client=client, source=source, info=i, publisher=pub,
                         pairs=pairs)
            engine._registrations.refresh(pub)
            if engine.is_sender:
                client.init_weight_transfer_engine(engine.worker_init_info())
        except BaseException:
            pub.close()
            raise
        return engine

    def worker_init_info(self):
        """The workers' init info (a JSON-friendly dict)."""
        i = self.info
        return {"directory": i.directory, "model": i.model,
                "transport": i.transport,
                "sources": s.source_list(specs_of(self.source, self._pairs)),
                **i.engine}

    def send_weights(self, version=None):
        """Publishes `version` (default: one past the last), has the
        workers install it (rank 0) and waits until it is released.
        Returns the version."""
        v = self.next_version if version is None else version
        self._registrations.refresh(self.publisher)
        self.publisher.publish(v)
        if self.is_sender:
            self._drive(v)
        self.publisher.wait_released(v, timeout_s=self.info.release_timeout_s)
        self.next_version = v + 1
        return v

    def _drive(self, version):
        """One update round on the workers. Every worker installed the
        version once finish returns; a failed round abandons the version so
        no trainer rank waits for it."""
        c, i = self.client, self.info
        try:
            c.start_weight_update()
            c.update_weights({"version": version})
            c.finish_weight_update(weight_version=str(version))
        except BaseException:
            abandon(i.directory, i.model, version)
            raise
        if not i.engine.get("release_after", False):
            release(i.directory, i.model, version)

    def shutdown(self):
        """Closes the publisher; rank 0 also closes the workers' receivers
        when its client can."""
        self.publisher.close()
        stop = getattr(self.client, "shutdown_weight_transfer_engine", None)
        if self.is_sender and callable(stop):
            stop()
