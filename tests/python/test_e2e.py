"""End to end, across processes: trainer ranks (separate processes, with
data-parallel replicas) publish live shards of the zoo model's full
tensors, TP-split or in Megatron's fused storage; this process captures the
zoo's vLLM-style loaders with reshard.capture, binds a live model of
another TP layout, stages and applies version after version. Every
parameter must equal, byte for byte (torch.equal), the same loaders run by
torch on the real full tensors into a fresh model.

The full matrix (ucx and cma, file: and redis directories) runs on one
representative world; the other layouts on one combination each.
"""
import pytest

import e2e_harness as H
import e2e_models as M
import reshard

# (tp_size, tp_rank) of every inference rank a world is read by.
INFERENCE = [(1, 0), (2, 0), (2, 1)]


class Rank:
    """One inference rank: its captured live model and receiver."""

    def __init__(self, directory, backend, cfg, tp_size, tp_rank, salt,
                 **kw):
        self.cfg, self.tp = cfg, (tp_size, tp_rank)
        self.model, self.cap = H.capture(cfg, tp_rank, tp_size)
        assert self.cap.unsupported == {}, self.cap.unsupported
        assert self.cap.unattributed == 0, self.cap.unattributed_details
        self.recv = H.receiver(directory, backend, self.cap, self.model,
                               salt=salt, holder=f"infer-{tp_size}-{tp_rank}",
                               **kw)

    def truth(self, fulls):
        return M.truth(self.cfg, self.tp[1], self.tp[0], fulls)

    def close(self):
        self.recv.close()


@pytest.fixture
def ranks():
    opened = []
    try:
        yield opened
    finally:
        for r in opened:
            r.close()


def open_ranks(opened, directory, backend, cfg):
    """The inference ranks of INFERENCE. None releases a version itself:
    a rank that has not begun staging holds no lease, so the first rank's
    release would end the version for the others; the test, as a
    framework's coordinator, releases once every rank applied. Salts
    differ, so with replicas both publishers of a slot serve someone."""
    for i, (tp_size, tp_rank) in enumerate(INFERENCE):
        opened.append(Rank(directory, backend, cfg, tp_size, tp_rank, i,
                           release_after=False))
    return opened


def stage_all(ranks, version):
    """Every rank stages `version` (leases live on all at once); the live
    parameters are untouched."""
    staged = []
    for rank in ranks:
        before = H.snapshot(rank.model)
        staged.append(rank.recv.stage(version))
        assert staged[-1].version == version
        H.assert_equal(rank.model, before, f"{rank.tp}: stage wrote params")
    return staged


def apply_all(ranks, staged, fulls):
    """Every rank applies; every parameter equals the ground truth."""
    for rank, s in zip(ranks, staged):
        res = rank.recv.apply(s)
        assert res.version == s.version and res.failovers == 0
        assert res.sessions == 2, res
        assert res.bytes_installed == sum(
            p.numel() * p.element_size() for p in rank.model.parameters())
        H.assert_equal(rank.model, rank.truth(fulls),
                       f"rank {rank.tp}, version {s.version}")


@pytest.mark.parametrize("backend", ["ucx", "cma"])
def test_tp2_replicas_to_tp1_and_tp2(directory, backend, ranks):
    """Trainer TP 2 (torch.chunk shards, uneven vocabulary rows), two
    replicas of each rank; inference TP 1 and TP 2 ranks 0/1 with the
    single KV head replicated; three versions, each staged by every rank
    (live parameters untouched), applied by every rank (byte-exact), then
    released by the coordinator (refused while any lease is live) before
    the trainers write the next."""
    cfg = M.config(**M.DENSE)
    with H.Trainers(directory, backend, cfg, world=2, replicas=2) as trainers:
        open_ranks(ranks, directory, backend, cfg)
        for version in (1, 2, 3):
            trainers.publish(version)
            staged = stage_all(ranks, version)
            # A live lease blocks the release, naming its holder.
            with pytest.raises(reshard.IncompleteRefit, match="infer-"):
                reshard.release(directory, H.MODEL, version)
            apply_all(ranks, staged, trainers.fulls(version))
            reshard.release(directory, H.MODEL, version)
            trainers.wait_released(version)


def test_megatron_fused_moe(file_dir, ranks):
    """Trainer TP 2 in Megatron's layout: q/k/v (weights and biases) in
    fused KV-group storage, each expert's gate/up in one tensor, published
    under Hugging Face names; inference TP 1 and TP 2 with fused MoE
    w13/w2. Two versions through pull (stage + apply in one call)."""
    cfg = M.config(**M.MOE)
    with H.Trainers(file_dir, "ucx", cfg, world=2, layout="megatron") as trainers:
        open_ranks(ranks, file_dir, "ucx", cfg)
        for version in (1, 2):
            trainers.publish(version)
            fulls = trainers.fulls(version)
            for rank in ranks:
                res = rank.recv.pull(version)
                assert res.version == version
                H.assert_equal(rank.model, rank.truth(fulls),
                               f"rank {rank.tp}, version {version}")
            reshard.release(file_dir, H.MODEL, version)
            trainers.wait_released(version)


def test_megatron_dense_replicas_redis_cma(redis_url, ranks):
    """The dense model with Megatron-fused QKV and gate/up (two KV heads,
    one per trainer rank), two replicas per rank, over cma and redis; the
    newest version (-1) is staged each time."""
    cfg = M.config(kv_heads=2)
    with H.Trainers(redis_url, "cma", cfg, world=2, replicas=2,
                          layout="megatron") as trainers:
        open_ranks(ranks, redis_url, "cma", cfg)
        for version in (1, 2):
            trainers.publish(version)
            fulls = trainers.fulls(version)
            for rank in ranks:
                staged = rank.recv.stage(-1)
                assert staged.version == version
                rank.recv.apply(staged)
                H.assert_equal(rank.model, rank.truth(fulls),
                               f"rank {rank.tp}, version {version}")
            reshard.release(redis_url, H.MODEL, version)
            trainers.wait_released(version)
