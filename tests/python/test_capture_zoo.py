"""Capture of the zoo's vLLM-style loaders, checked byte for byte.

Ground truth: the zoo model's own `load_weights` on real full tensors into
real parameters (torch performs every copy). Capture: the same loader over
placeholders, on a meta copy of the model or on a live one; the replay in
pure torch into fresh parameters must be torch.equal to the truth for every
parameter, including the padding rows the loader zeroes.
"""
import pytest
import torch

import reshard
import zoo

SENTINEL = -7.0

CONFIGS = {
    "dense-bf16": zoo.ZooConfig(),
    "dense-f32-2layers": zoo.ZooConfig(dtype=torch.float32, layers=2),
    "kv-replicated": zoo.ZooConfig(heads=8, kv_heads=2, head_dim=2),
    "single-kv-head": zoo.ZooConfig(heads=4, kv_heads=1),
    "uneven-vocab": zoo.ZooConfig(vocab=37, vocab_pad=16),
    "rank-without-vocab-rows": zoo.ZooConfig(vocab=20, vocab_pad=16),
    "cast-f32-into-bf16": zoo.ZooConfig(src_dtype=torch.float32),
    "moe": zoo.ZooConfig(experts=3, moe_ffn=8, dtype=torch.float32),
    "moe-bf16-no-bias": zoo.ZooConfig(experts=2, qkv_bias=False,
                                      layers=2),
}

CASES = [(name, tp, rank) for name in CONFIGS for tp in (1, 2, 4)
         for rank in range(tp)]


def params_of(model):
    return dict(model.named_parameters())


def fresh_model(cfg, tp, rank):
    model = zoo.ZooModel(cfg, tp, rank)
    zoo.fill_params(model, SENTINEL)
    return model


def assert_same_params(expected, actual):
    exp, act = params_of(expected), params_of(actual)
    assert exp.keys() == act.keys()
    for name in exp:
        assert torch.equal(exp[name], act[name]), name


@pytest.mark.parametrize("name,tp,rank", CASES,
                         ids=[f"{n}-tp{t}-r{r}" for n, t, r in CASES])
def test_replay_of_meta_capture_equals_the_loader(name, tp, rank):
    cfg = CONFIGS[name]
    weights = zoo.make_weights(cfg, seed=tp * 10 + rank)
    truth = zoo.reference_model(cfg, tp, rank, weights, SENTINEL)

    meta = zoo.ZooModel(cfg, tp, rank, device="meta")
    cap = reshard.capture(meta, zoo.source_specs(cfg))
    assert cap.unsupported == {}
    assert cap.unattributed == 0, cap.unattributed_details
    assert cap.sources == zoo.source_specs(cfg)
    assert cap.params == {n: (tuple(p.shape), p.dtype)
                          for n, p in params_of(truth).items()}
    # Every checkpoint tensor is read by at least one copy.
    assert {c["src"] for c in cap.copies} == set(cap.sources)

    for replayed in (cap, reshard.Capture.from_json(cap.to_json())):
        out = fresh_model(cfg, tp, rank)
        replayed.replay(weights, params_of(out))
        assert_same_params(truth, out)


@pytest.mark.parametrize("tp,rank", [(2, 1), (4, 3)])
def test_padding_rows_are_fills(tp, rank):
    cfg = CONFIGS["uneven-vocab"]
    cap = reshard.capture(zoo.ZooModel(cfg, tp, rank, device="meta"),
                          zoo.source_specs(cfg))
    per_rank = zoo.pad_vocab_size(cfg.vocab, cfg.vocab_pad) // tp
    real_rows = max(0, min(per_rank, cfg.vocab - rank * per_rank))
    by_param = {f["param"]: f for f in cap.fills}
    assert set(by_param) == {"model.embed_tokens.weight", "lm_head.weight"}
    for f in by_param.values():
        assert f["value"] == 0
        assert f["dest_offset"] == real_rows * cfg.hidden
        assert f["dest_shape"] == [per_rank - real_rows, cfg.hidden]


def test_kv_heads_replicated_read_the_same_rows():
    cfg = CONFIGS["kv-replicated"]          # 2 KV heads over 4 ranks
    reads = {}
    for rank in range(4):
        cap = reshard.capture(zoo.ZooModel(cfg, 4, rank, device="meta"),
                              zoo.source_specs(cfg))
        k = [c for c in cap.copies
             if c["src"] == "model.layers.0.self_attn.k_proj.weight"]
        assert len(k) == 1
        reads[rank] = k[0]["ops"]
    assert reads[0] == reads[1] and reads[2] == reads[3]
    assert reads[0] != reads[2]


def test_moe_loader_is_called_by_keyword_and_writes_expert_slices():
    cfg = CONFIGS["moe"]
    cap = reshard.capture(zoo.ZooModel(cfg, 2, 1, device="meta"),
                          zoo.source_specs(cfg))
    w13 = [c for c in cap.copies
           if c["param"] == "model.layers.0.mlp.experts.w13_weight"]
    # gate and up of every expert, each into its half of w13[e]
    assert len(w13) == 2 * cfg.experts
    rows, hidden = cfg.moe_ffn // 2, cfg.hidden
    offsets = sorted(c["dest_offset"] for c in w13)
    assert offsets == [e * 2 * rows * hidden + half * rows * hidden
                       for e in range(cfg.experts) for half in (0, 1)]


def test_capture_on_a_live_model_leaves_its_bytes_unchanged():
    cfg = zoo.ZooConfig(experts=2, vocab=37, arith=True,
                        src_dtype=torch.float32)
    weights = zoo.make_weights(cfg, seed=3)
    live = zoo.ZooModel(cfg, 4, 3)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in live.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    before = {n: p.detach().clone() for n, p in params_of(live).items()}
    ptrs = {n: p.data_ptr() for n, p in params_of(live).items()}

    cap = reshard.capture(live, zoo.source_specs(cfg))

    for name, p in params_of(live).items():
        assert p.data_ptr() == ptrs[name], name
        assert torch.equal(p, before[name]), name
    # The live capture is the meta capture.
    meta_cap = reshard.capture(zoo.ZooModel(cfg, 4, 3, device="meta"),
                               zoo.source_specs(cfg))
    assert cap.copies == meta_cap.copies and cap.fills == meta_cap.fills
    assert cap.unsupported.keys() == meta_cap.unsupported.keys()


def test_arithmetic_loader_is_unsupported_for_its_source_only():
    cfg = zoo.ZooConfig(arith=True, layers=2, dtype=torch.float32)
    weights = zoo.make_weights(cfg, seed=5)
    truth = zoo.reference_model(cfg, 2, 0, weights, SENTINEL)
    cap = reshard.capture(zoo.ZooModel(cfg, 2, 0, device="meta"),
                          zoo.source_specs(cfg))
    a_logs = {f"model.layers.{i}.mixer.A_log" for i in range(cfg.layers)}
    assert set(cap.unsupported) == a_logs
    for reason in cap.unsupported.values():
        assert "'exp'" in reason and "zoo.py:" in reason
    assert not any(c["src"] in a_logs for c in cap.copies)
    assert {c["src"] for c in cap.copies} == set(cap.sources) - a_logs
    out = fresh_model(cfg, 2, 0)
    with pytest.raises(reshard.UnsupportedReshard, match="mixer.A_log"):
        cap.replay(weights, params_of(out))
    cap.replay(weights, params_of(out), partial=True)
    for name, p in params_of(truth).items():
        if name.endswith("mixer.A"):
            assert torch.equal(params_of(out)[name],
                               torch.full(p.shape, SENTINEL))
        else:
            assert torch.equal(params_of(out)[name], p), name


def test_weight_loaders_called_directly_positionally_and_by_keyword():
    cfg = zoo.ZooConfig(dtype=torch.float32)
    weights = zoo.make_weights(cfg, seed=9)
    names = ["model.layers.0.self_attn.k_proj.weight",
             "model.layers.0.mlp.up_proj.weight"]

    def load_into(model, ws):
        ws = dict(ws)
        layer = model.model.layers[0]
        qkv = layer.self_attn.qkv_proj.weight
        qkv.weight_loader(qkv, ws[names[0]], "k")
        gate_up = layer.mlp.gate_up_proj.weight
        gate_up.weight_loader(param=gate_up, loaded_weight=ws[names[1]],
                              loaded_shard_id=1)

    truth = fresh_model(cfg, 2, 1)
    load_into(truth, weights.items())
    meta = zoo.ZooModel(cfg, 2, 1, device="meta")
    sources = {n: weights[n] for n in names}       # tensors: shape only
    cap = reshard.capture(meta, sources,
                          load=lambda ws: load_into(meta, ws))
    assert [c["src"] for c in cap.copies] == names
    out = fresh_model(cfg, 2, 1)
    cap.replay(weights, params_of(out))
    assert_same_params(truth, out)


def test_explicit_params_subset():
    cfg = zoo.ZooConfig(dtype=torch.float32)
    meta = zoo.ZooModel(cfg, 2, 0, device="meta")
    keep = {n: p for n, p in params_of(meta).items() if "layers" in n}
    cap = reshard.capture(meta, zoo.source_specs(cfg), params=keep)
    assert set(cap.params) == set(keep)
    assert {c["param"] for c in cap.copies} == set(keep)
    # Copies into the embedding, the head and the final norm, and the two
    # padding fills, fall outside the given params: counted, not performed.
    assert cap.unattributed == 5, cap.unattributed_details
    details = "\n".join(cap.unattributed_details)
    for src in ("model.embed_tokens.weight", "lm_head.weight",
                "model.norm.weight"):
        assert f"'{src}'" in details
    assert details.count("no captured parameter") == 5
    assert "model tensor 'model.norm.weight'" in details


def test_live_params_left_out_of_params_are_not_written_either():
    cfg = zoo.ZooConfig(dtype=torch.float32)
    live = zoo.ZooModel(cfg, 2, 1)
    zoo.fill_params(live, 3.0)
    keep = {n: p for n, p in params_of(live).items() if "layers" in n}
    reshard.capture(live, zoo.source_specs(cfg), params=keep)
    for name, p in params_of(live).items():
        assert torch.equal(p, torch.full(p.shape, 3.0)), name
