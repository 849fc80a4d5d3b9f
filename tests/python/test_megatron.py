"""reshard.megatron.register_model against the full tensors: the test splits
seeded Hugging Face tensors into Megatron-Core's per-rank parameters itself
(fused QKV by KV-head group, [gate; up] in linear_fc1, a padded vocabulary
split over tensor-parallel ranks, pipeline stages, expert-parallel blocks),
publishes every rank of a layout with one register_model call each, and
receives the full Hugging Face tensors byte for byte. Bad parameters are
refused naming them, before anything is registered."""
import re

import pytest
import torch

import reshard
import simulated
import zoo
from megatron_layout import fulls_of, layout_config, megatron_rank, shape_of
from reshard import layouts
from reshard.hf_config import model_shape
from reshard.megatron import ParallelState, plan_model, register_model
from trainer_ranks import TrainerRanks


class MegatronRanks(TrainerRanks):
    """Every (stage, expert rank, tensor rank) of a layout as one publisher
    slot, each registered by a single register_model call."""

    def __init__(self, directory, cfg, tp=1, pp=1, ep=1, tied=False,
                 te_names=False, pad_to=16, model="m"):
        super().__init__()
        full = fulls_of(cfg, tied)
        slots = [(s, e, r) for s in range(pp) for e in range(ep)
                 for r in range(tp)]
        self.registered = []
        for k, (s, e, r) in enumerate(slots):
            params, offset = megatron_rank(
                full, cfg, tp=tp, r=r, stages=pp, s=s, ep=ep, e_rank=e,
                tied=tied, te_names=te_names, pad_to=pad_to)
            pub = reshard.Publisher(directory, model, k, len(slots),
                                    backend="cma")
            self.pubs.append(pub)
            state = ParallelState(tp_rank=r, tp_size=tp, layer_offset=offset,
                                  ep_rank=e, ep_size=ep)
            self.registered.append(register_model(
                pub, params.items(), shape_of(cfg, tied), state))
        self.full = full


def receive(directory, full, model="m"):
    """Pulls version 1 into one tensor per Hugging Face name, each preset to
    a value no weight has; the capture's sources are the published
    tables'."""
    params = {n: torch.full_like(t, -99.0) for n, t in full.items()}

    def load(weights):
        for n, w in weights:
            params[n].copy_(w)
    sources = reshard.sources_from_directory(directory, model, timeout_s=20)
    assert sources == {n: (tuple(t.shape), t.dtype) for n, t in full.items()}
    cap = reshard.capture(sources=sources, load=load, params=params)
    with reshard.Receiver(directory, model, cap, params, backend="cma",
                          discover_timeout_s=20, timeout_s=20) as rx:
        rx.pull(1)
    return params


LAYOUTS = {
    "tp2-padded-vocab": (dict(vocab=50), dict(tp=2)),
    "tp4-kv2": (dict(heads=8, kv_heads=2), dict(tp=4)),
    "tp4-kv1-tied": (dict(kv_heads=1), dict(tp=4, tied=True)),
    "tp2-pp2-te": (dict(layers=4, qkv_bias=False), dict(tp=2, pp=2,
                                                        te_names=True)),
    "pp2-tied": (dict(layers=2), dict(pp=2, tied=True)),
    "moe-tp2-ep2": (dict(experts=4, moe_ffn=8), dict(tp=2, ep=2)),
    "moe-ep2-pp2-te": (dict(experts=4, layers=2),
                       dict(ep=2, pp=2, te_names=True)),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_rank_published_gives_the_full_tensors(file_dir, layout):
    over, kw = LAYOUTS[layout]
    base = dict(hidden=16, heads=4, kv_heads=2, head_dim=4, ffn=24,
                vocab=52, layers=2, dtype=torch.float32, qkv_bias=True)
    cfg = zoo.ZooConfig(**{**base, **over})
    with MegatronRanks(file_dir, cfg, **kw) as ranks:
        ranks.publish(1)
        got = receive(file_dir, ranks.full)
    bad = [n for n, t in ranks.full.items() if not torch.equal(got[n], t)]
    assert not bad, f"{layout}: tensors differ: {bad}"
    # Each rank registered exactly the names it holds a box of.
    union = set().union(*map(set, ranks.registered))
    assert union == set(ranks.full)


def test_replicated_kv_heads_are_published_by_the_first_rank_of_a_group():
    cfg = zoo.ZooConfig(heads=8, kv_heads=2, head_dim=4, hidden=16, layers=1)
    full = fulls_of(cfg)
    holders = {}
    for r in range(4):
        params, _ = megatron_rank(full, cfg, tp=4, r=r)
        for method, names, args in plan_model(
                params.items(), shape_of(cfg), tp_rank=r, tp_size=4):
            for n in names:
                if ".k_proj." in n or ".v_proj." in n:
                    holders.setdefault(n, []).append((r, args[-1]))
    want_w = [(0, (0, 0)), (2, (4, 0))]
    assert holders["model.layers.0.self_attn.k_proj.weight"] == want_w
    assert holders["model.layers.0.self_attn.v_proj.bias"] == [(0, (0,)),
                                                               (2, (4,))]


def test_padding_rows_are_not_published():
    cfg = zoo.ZooConfig(vocab=50, layers=1)
    full = fulls_of(cfg)
    params, _ = megatron_rank(full, cfg, tp=2, r=1, pad_to=64)
    calls = plan_model(params.items(), shape_of(cfg), tp_rank=1, tp_size=2)
    emb = [c for c in calls if c[1] == ("model.embed_tokens.weight",)]
    (method, _, args), = emb
    assert method == "register" and list(args[1].shape) == [18, 16]
    assert args[2] == (50, 16) and args[3] == (32, 0)


def test_qwen3_and_mixtral_names():
    """q/k layernorms and Mixtral's block_sparse_moe names come from the
    config's model_type."""
    qwen3 = dict(model_type="qwen3_moe", hidden_size=8,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                 intermediate_size=16, moe_intermediate_size=4,
                 num_experts=2, num_hidden_layers=1, vocab_size=10)
    t = torch.zeros
    params = {"decoder.layers.0.self_attention.q_layernorm.weight": t(4),
              "decoder.layers.0.mlp.router.weight": t(2, 8),
              "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1."
              "weight": t(8, 8)}
    names = [n for _, ns, _ in plan_model(params.items(), qwen3)
             for n in ns]
    assert names == ["model.layers.0.self_attn.q_norm.weight",
                     "model.layers.0.mlp.gate.weight",
                     "model.layers.0.mlp.experts.0.gate_proj.weight",
                     "model.layers.0.mlp.experts.0.up_proj.weight"]
    mixtral = dict(qwen3, model_type="mixtral", num_local_experts=2,
                   intermediate_size=4)
    del mixtral["num_experts"]
    params = {"module.decoder.layers.0.mlp.experts.local_experts.1."
              "linear_fc2.weight": t(8, 4),
              "decoder.layers.0.mlp.router.weight": t(2, 8)}
    names = [n for _, ns, _ in plan_model(params.items(), mixtral)
             for n in ns]
    assert names == [
        "model.layers.0.block_sparse_moe.experts.1.w2.weight",
        "model.layers.0.block_sparse_moe.gate.weight"]


BAD = [
    ({"decoder.layers.0.self_attention.linear_qkv.wieght": (32, 16)}, {},
     r"parameter 'decoder.layers.0.self_attention.linear_qkv.wieght': is "
     r"not a Megatron-Core decoder parameter"),
    ({"embedding.position_embeddings.weight": (8, 16)}, {},
     r"'embedding.position_embeddings.weight': is not a Megatron-Core GPT"),
    ({"decoder.layers.0.mlp.linear_fc1.weight": (40, 16)}, dict(tp_size=2),
     r"'decoder.layers.0.mlp.linear_fc1.weight': shape \[40, 16\], the "
     r"config gives \[24, 16\]"),
    ({"decoder.layers.0.self_attention.linear_qkv.weight": (16, 16)},
     dict(tp_size=3, tp_rank=0),
     r"linear_qkv.weight': num_heads 4 does not divide over 3 ranks"),
    ({"decoder.layers.0.self_attention.linear_qkv.bias": (8,)}, {},
     r"maps to 'model.layers.0.self_attn.q_proj.bias', which the config's "
     r"checkpoint does not have"),
    ({"decoder.layers.0.mlp.experts.weight1": (16, 16)}, {},
     r"GroupedMLP holds every expert transposed"),
    ({"decoder.layers.0.self_attention.linear_proj.weight": (16, 16, "t")},
     {}, r"linear_proj.weight': is not contiguous \(strides \[1, 16\]\)"),
    ({"decoder.final_layernorm.weight": (16,)}, dict(tp_rank=2, tp_size=2),
     r"tp_rank 2 is outside tp_size 2"),
]


@pytest.mark.parametrize("params,state,match", BAD)
def test_bad_parameters_are_refused_naming_them(file_dir, params, state,
                                                match):
    cfg = zoo.ZooConfig(hidden=16, heads=4, kv_heads=2, head_dim=4, ffn=24,
                        vocab=52, layers=1, qkv_bias=False)
    named = [("decoder.final_layernorm.weight", torch.ones(16))] + [
        (n, torch.zeros(s[:2]).t() if "t" in s else torch.zeros(s))
        for n, s in params.items()]
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma") as pub:
        with pytest.raises(reshard.LayoutError, match=match):
            register_model(pub, named, shape_of(cfg), **state)
        # Nothing of the refused call stayed: the norm registers again.
        pub.register_replicated("model.norm.weight", named[0][1])


# -- the same boxes as the simulator's Megatron trainer tables ---------------
class BoxRecorder:
    """Stands in for a Publisher: the boxes each register call would
    publish, as (name, offset, shape)."""

    def __init__(self):
        self.boxes = set()

    def _add(self, boxes):
        self.boxes |= {(b.name, b.offset, tuple(b.view.shape))
                       for b in boxes}

    def register(self, name, t, full_shape=None, offset=None):
        self._add([layouts.box(name, t, full_shape, offset)])

    def register_shard(self, *args):
        self._add(layouts.shard(*args))

    def register_replicated(self, name, t):
        self._add(layouts.replicated(name, t))

    def register_fused(self, *args):
        self._add(layouts.fused(*args))

    def register_fused_qkv(self, *args):
        self._add(layouts.fused_qkv(*args))


# (model, megatron spec, tp, pp, ep): specs whose derived dp is 1, so rank
# = tp_rank + tp * pp_rank and, with ep = tp, ep_rank = tp_rank.
SIMULATED = [("tiny-moe.json", "megatron:tp=2,ep=2", 2, 1, 2),
             ("tiny-moe.json", "megatron:tp=2,pp=2", 2, 2, 1),
             ("tiny-moe.json", "megatron:tp=4", 4, 1, 1),
             ("tiny-llama.json", "megatron:tp=2,pp=2", 2, 2, 1)]


@pytest.mark.parametrize("model,spec,tp,pp,ep", SIMULATED)
def test_boxes_agree_with_the_simulator(tmp_path, model, spec, tp, pp, ep):
    """register_model publishes the boxes the simulator's Megatron tables
    hold, rank by rank, except that KV heads shared by several ranks (TP >
    KV heads) are published by the first rank of each group only. The
    vocabulary (1000 rows) needs no padding at these TP sizes, where
    Megatron's padded split and the simulator's near-equal one agree."""
    path = simulated.MODELS / model
    shape = model_shape(path)
    full = {n: torch.zeros(s, dtype=shape.dtype)
            for n, (s, _) in reshard.sources_from_hf_config(path).items()}
    sim = [{(n, off, sh) for n, _, _, off, sh in rank}
           for rank in simulated.trainer_tables(path, spec, tmp_path)]
    assert len(sim) == tp * pp
    share = max(1, tp // shape.num_kv_heads)
    for rank, want in enumerate(sim):
        r, s = rank % tp, rank // tp
        params, offset = megatron_rank(
            full, layout_config(shape), tp=tp, r=r, stages=pp, s=s, ep=ep,
            e_rank=r % ep, tied=shape.tie_word_embeddings, pad_to=8)
        rec = BoxRecorder()
        register_model(rec, params.items(), shape, tp_rank=r, tp_size=tp,
                       layer_offset=offset, ep_rank=r % ep, ep_size=ep)
        if r % share:
            want = {b for b in want if not re.search(r"\.[kv]_proj\.", b[0])}
        assert rec.boxes == want, f"{spec} rank {rank}"
