"""reshard.megatron.register_model against the full tensors: the test splits
seeded Hugging Face tensors into Megatron-Core's per-rank parameters itself
(fused QKV by KV-head group, [gate; up] in linear_fc1, a padded vocabulary
split over tensor-parallel ranks, pipeline stages, expert-parallel blocks),
publishes every rank of a layout with one register_model call each, and
receives the full Hugging Face tensors byte for byte. Bad parameters are
refused naming them, before anything is registered."""
import pytest
import torch

import reshard
import zoo
from reshard.hf_config import ModelShape
from reshard.megatron import ParallelState, plan_model, register_model
from trainer_ranks import TrainerRanks


def shape_of(cfg, tied=False):
    """The ModelShape of a zoo config (Qwen2 naming: q/k/v biases)."""
    return ModelShape(
        hidden_size=cfg.hidden, num_layers=cfg.layers, num_heads=cfg.heads,
        num_kv_heads=cfg.kv_heads, head_dim=cfg.head_dim,
        intermediate_size=cfg.ffn, vocab_size=cfg.vocab,
        tie_word_embeddings=tied, qkv_bias=cfg.qkv_bias,
        num_experts=cfg.experts, moe_intermediate_size=cfg.moe_ffn,
        dtype=cfg.checkpoint_dtype)


def fulls_of(cfg, tied=False):
    full = zoo.make_weights(cfg, seed=7)
    if tied:
        del full["lm_head.weight"]
    return full


# -- the test's own Megatron layout (HF -> Megatron, the inverse direction) --
def qkv_shard(q, k, v, cfg, tp, r):
    """Rank r's linear_qkv: groups [q heads of the group, k, v]; with more
    ranks than KV heads, rank r holds its slice of one group's q heads and
    that group's whole k and v."""
    kv, hd = cfg.kv_heads, cfg.head_dim
    rest = q.shape[1:]
    qg = q.reshape(kv, -1, *rest)
    kg, vg = k.reshape(kv, hd, *rest), v.reshape(kv, hd, *rest)
    if kv >= tp:
        groups = torch.cat([qg, kg, vg], dim=1).chunk(tp)[r]
        return groups.reshape(-1, *rest).clone()
    share = tp // kv
    g = r // share
    return torch.cat([qg[g].chunk(share)[r % share], kg[g], vg[g]]).clone()


def vocab_shard(w, tp, r, pad_to):
    padded = -(-w.shape[0] // pad_to) * pad_to
    table = torch.cat([w, torch.zeros(padded - w.shape[0], w.shape[1])])
    return table.chunk(tp)[r].clone()


def layer_params(full, cfg, i, tp, r, ep, e_rank, te_names):
    p, out = f"model.layers.{i}.", {}
    a = "self_attention."
    norm1 = a + "linear_qkv.layer_norm_weight" if te_names \
        else "input_layernorm.weight"
    out[norm1] = full[p + "input_layernorm.weight"].clone()
    for kind in ("weight", "bias") if cfg.qkv_bias else ("weight",):
        q, k, v = (full[f"{p}self_attn.{x}_proj.{kind}"] for x in "qkv")
        out[a + "linear_qkv." + kind] = qkv_shard(q, k, v, cfg, tp, r)
    out[a + "linear_proj.weight"] = \
        full[p + "self_attn.o_proj.weight"].chunk(tp, 1)[r].clone()
    if cfg.experts:
        out["pre_mlp_layernorm.weight"] = \
            full[p + "post_attention_layernorm.weight"].clone()
        out["mlp.router.weight"] = full[p + "mlp.gate.weight"].clone()
        per = cfg.experts // ep
        for j in range(per):
            x = f"{p}mlp.experts.{e_rank * per + j}."
            fc1 = torch.cat([full[x + "gate_proj.weight"],
                             full[x + "up_proj.weight"]])
            fc2 = full[x + "down_proj.weight"].clone()
            if te_names:
                out[f"mlp.experts.linear_fc1.weight{j}"] = fc1
                out[f"mlp.experts.linear_fc2.weight{j}"] = fc2
            else:
                q = f"mlp.experts.local_experts.{j}."
                out[q + "linear_fc1.weight"], out[q + "linear_fc2.weight"] = \
                    fc1, fc2
        return out
    norm2 = "mlp.linear_fc1.layer_norm_weight" if te_names \
        else "pre_mlp_layernorm.weight"
    out[norm2] = full[p + "post_attention_layernorm.weight"].clone()
    out["mlp.linear_fc1.weight"] = torch.cat(
        [full[p + "mlp.gate_proj.weight"].chunk(tp)[r],
         full[p + "mlp.up_proj.weight"].chunk(tp)[r]])
    out["mlp.linear_fc2.weight"] = \
        full[p + "mlp.down_proj.weight"].chunk(tp, 1)[r].clone()
    return out


def megatron_rank(full, cfg, tp, r, stages, s, ep, e_rank, tied, te_names,
                  pad_to):
    """One rank's Megatron parameters (name -> tensor) and its layer
    offset; stage s holds an equal block of layers."""
    per = cfg.layers // stages
    params = {}
    if s == 0:
        params["embedding.word_embeddings.weight"] = vocab_shard(
            full["model.embed_tokens.weight"], tp, r, pad_to)
    for j in range(per):
        for n, t in layer_params(full, cfg, s * per + j, tp, r, ep, e_rank,
                                 te_names).items():
            params[f"decoder.layers.{j}.{n}"] = t
    if s == stages - 1:
        params["decoder.final_layernorm.weight"] = \
            full["model.norm.weight"].clone()
        head = full["model.embed_tokens.weight"] if tied \
            else full["lm_head.weight"]
        if not (tied and stages == 1):  # pp > 1 keeps a copy on the last
            params["output_layer.weight"] = vocab_shard(head, tp, r, pad_to)
    return params, s * per


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
            params, offset = megatron_rank(full, cfg, tp, r, pp, s, ep, e,
                                           tied, te_names, pad_to)
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
    a value no weight has."""
    params = {n: torch.full_like(t, -99.0) for n, t in full.items()}

    def load(weights):
        for n, w in weights:
            params[n].copy_(w)
    cap = reshard.capture(sources={n: t for n, t in full.items()},
                          load=load, params=params)
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
        params, _ = megatron_rank(full, cfg, 4, r, 1, 0, 1, 0, False, False,
                                  16)
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
    params, _ = megatron_rank(full, cfg, 2, 1, 1, 0, 1, 0, False, False, 64)
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
    ({"decoder.final_layernorm.weight": (16,)}, dict(tp_rank=2, tp_size=2),
     r"tp_rank 2 is outside tp_size 2"),
]


@pytest.mark.parametrize("params,state,match", BAD)
def test_bad_parameters_are_refused_naming_them(file_dir, params, state,
                                                match):
    cfg = zoo.ZooConfig(hidden=16, heads=4, kv_heads=2, head_dim=4, ffn=24,
                        vocab=52, layers=1, qkv_bias=False)
    named = [("decoder.final_layernorm.weight", torch.ones(16))] + [
        (n, torch.zeros(s)) for n, s in params.items()]
    with reshard.Publisher(file_dir, "m", 0, 1, backend="cma") as pub:
        with pytest.raises(reshard.LayoutError, match=match):
            register_model(pub, named, shape_of(cfg), **state)
        # Nothing of the refused call stayed: the norm registers again.
        pub.register_replicated("model.norm.weight", named[0][1])
