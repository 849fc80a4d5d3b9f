"""A capture's sources without a hand-written dict: from the shard tables
trainers published (reshard.sources_from_directory: names, full shapes and
served dtypes, in publishing or natural name order) and from a Hugging Face
config (reshard.sources_from_hf_config), checked against the checkpoint
transformers itself writes (torch 2 with transformers only) and against
tables written out by hand."""
import dataclasses

import pytest
import torch

import reshard
import simulated
from reshard.hf_config import ConfigError
from trainer_ranks import TrainerRanks

F32, BF16 = torch.float32, torch.bfloat16


class Ranks(TrainerRanks):
    """Two publisher ranks: a row-split tensor, tensors only one rank has,
    names whose numbers sort differently as text, and a tensor served with
    its publisher-side FP8 copy."""

    def __init__(self, directory):
        super().__init__()
        self.t = {"b.weight": torch.arange(24.).view(4, 6),
                  "layers.10.w": torch.ones(3, dtype=BF16),
                  "layers.2.w": torch.zeros(2, 2),
                  "q": torch.arange(16.).view(4, 4),
                  "only_r1": torch.ones(5)}
        for r in range(2):
            p = reshard.Publisher(directory, "m", r, 2, backend="cma",
                                  quantize=["q=fp8_block:2x2:f8e4m3"])
            self.pubs.append(p)
            p.register_shard("b.weight", self.t["b.weight"][2 * r:2 * r + 2],
                             (4, 6), 0, r, 2)
            if r == 0:
                p.register_replicated("layers.10.w", self.t["layers.10.w"])
                p.register_replicated("layers.2.w", self.t["layers.2.w"])
            p.register_replicated("q", self.t["q"])
            if r == 1:
                p.register_replicated("only_r1", self.t["only_r1"])


def test_sources_from_the_published_tables(file_dir):
    with Ranks(file_dir) as ranks:
        ranks.publish(1)
        got = reshard.sources_from_directory(file_dir, "m", timeout_s=20)
        assert list(got.items()) == [
            ("b.weight", ((4, 6), F32)), ("layers.10.w", ((3,), BF16)),
            ("layers.2.w", ((2, 2), F32)), ("q", ((4, 4), F32)),
            ("only_r1", ((5,), F32))]
        by_name = reshard.sources_from_directory(file_dir, "m", version=1,
                                                 order="name")
        assert list(by_name) == ["b.weight", "layers.2.w", "layers.10.w",
                                 "only_r1", "q"]
        assert by_name == got
        # The newest READY version by default.
        reshard.release(file_dir, "m", 1)
        ranks.wait_released(1)
        ranks.pubs[1].unregister("only_r1")
        ranks.publish(2)
        assert "only_r1" not in reshard.sources_from_directory(file_dir, "m")
        with pytest.raises(reshard.IncompleteRefit, match="version 1 of 'm' "
                           "was released"):
            reshard.sources_from_directory(file_dir, "m", version=1)


def test_sources_from_a_directory_refuse_and_time_out(file_dir):
    with pytest.raises(reshard.InvalidArgument, match="order must be one of "
                       "published, name, got 'size'"):
        reshard.sources_from_directory(file_dir, "m", order="size")
    with pytest.raises(reshard.ReshardTimeout):
        reshard.sources_from_directory(file_dir, "nothing", timeout_s=0.3)


# -- from a Hugging Face config -----------------------------------------------
TINY = dict(hidden_size=16, num_attention_heads=4, num_key_value_heads=2,
            head_dim=4, intermediate_size=24, num_hidden_layers=2,
            vocab_size=50, tie_word_embeddings=False, torch_dtype="bfloat16")


def test_qwen3_moe_by_hand():
    """Qwen3-MoE with layer 0 dense (mlp_only_layers): q/k norms, the
    router before the experts, per-expert names."""
    cfg = dict(TINY, model_type="qwen3_moe", num_experts=2,
               moe_intermediate_size=8, mlp_only_layers=[0],
               tie_word_embeddings=True)
    got = reshard.sources_from_hf_config(cfg)
    m = "model.layers.1.mlp."

    def attn(i):
        a = f"model.layers.{i}.self_attn."
        return [(a + "q_proj.weight", (16, 16)),
                (a + "k_proj.weight", (8, 16)),
                (a + "v_proj.weight", (8, 16)),
                (a + "o_proj.weight", (16, 16)),
                (a + "q_norm.weight", (4,)), (a + "k_norm.weight", (4,))]

    def norms(i):
        return [(f"model.layers.{i}.input_layernorm.weight", (16,)),
                (f"model.layers.{i}.post_attention_layernorm.weight", (16,))]
    want = [("model.embed_tokens.weight", (50, 16))] + attn(0) + [
        ("model.layers.0.mlp.gate_proj.weight", (24, 16)),
        ("model.layers.0.mlp.up_proj.weight", (24, 16)),
        ("model.layers.0.mlp.down_proj.weight", (16, 24))] + norms(0) + \
        attn(1) + [(m + "gate.weight", (2, 16))] + [
        (f"{m}experts.{e}.{p}_proj.weight", s) for e in range(2)
        for p, s in (("gate", (8, 16)), ("up", (8, 16)), ("down", (16, 8)))
    ] + norms(1) + [("model.norm.weight", (16,))]
    assert list(got.items()) == [(n, (s, BF16)) for n, s in want]


def test_mixtral_and_qwen2_by_hand():
    mixtral = dict(TINY, model_type="mixtral", num_local_experts=2,
                   num_hidden_layers=1, intermediate_size=8)
    names = list(reshard.sources_from_hf_config(mixtral, dtype=F32))
    b = "model.layers.0.block_sparse_moe."
    assert names[5:12] == [b + "gate.weight"] + [
        f"{b}experts.{e}.{w}.weight" for e in range(2)
        for w in ("w1", "w2", "w3")]
    qwen2 = reshard.sources_from_hf_config(dict(TINY, model_type="qwen2"))
    assert qwen2["model.layers.1.self_attn.k_proj.bias"] == ((8,), BF16)
    assert "model.layers.1.self_attn.o_proj.bias" not in qwen2


@pytest.mark.parametrize("change,match", [
    (dict(model_type="gpt2"), "model_type 'gpt2' is not one of"),
    (dict(hidden_size=None), "'hidden_size' is missing"),
    (dict(num_hidden_layers=-1), "'num_hidden_layers' must be a "
     "non-negative integer, got -1"),
    (dict(torch_dtype="complex64"), "dtype 'complex64' is not one reshard"),
])
def test_bad_configs_name_the_field(change, match):
    cfg = {**TINY, "model_type": "llama", **change}
    with pytest.raises(ConfigError, match=match):
        reshard.sources_from_hf_config(cfg)


# -- against transformers' own checkpoint (torch 2) ---------------------------
def _transformers():
    if int(torch.__version__.split(".")[0]) < 2:
        pytest.skip("transformers' models need torch 2")
    return pytest.importorskip("transformers")


def _saved(tf, kind, cfg, path):
    """What save_pretrained writes for a tiny model of `cfg`: [(name,
    shape, dtype)] in the model's state_dict order (experts, which
    transformers holds fused, at the end in file order) and the config."""
    from safetensors import safe_open
    config = tf.AutoConfig.for_model(kind, **cfg)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config).to(BF16)
    model.save_pretrained(path)
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        saved = {k: (tuple(f.get_slice(k).get_shape()), BF16)
                 for k in f.keys()}
    order = [n for n in model.state_dict() if n in saved]
    order += [n for n in saved if n not in order]
    return [(n, saved[n]) for n in order], config


CONFIGS = {
    "llama-bias": ("llama", dict(attention_bias=True, mlp_bias=True)),
    "mistral": ("mistral", dict(tie_word_embeddings=True)),
    "qwen2": ("qwen2", {}),
    "qwen3-tied": ("qwen3", dict(tie_word_embeddings=True)),
    "qwen3_moe": ("qwen3_moe", dict(num_experts=4, moe_intermediate_size=8,
                                    num_experts_per_tok=2,
                                    decoder_sparse_step=2)),
    "mixtral": ("mixtral", dict(num_local_experts=3, num_experts_per_tok=2)),
}


@pytest.mark.parametrize("which", sorted(CONFIGS))
def test_against_transformers_checkpoint(tmp_path, which):
    tf = _transformers()
    kind, extra = CONFIGS[which]
    cfg = {k: v for k, v in TINY.items() if k != "torch_dtype"}
    saved, config = _saved(tf, kind, {**cfg, **extra, "dtype": "bfloat16"},
                           tmp_path)
    got = reshard.sources_from_hf_config(config)
    assert set(got.items()) == set(saved)
    if "moe" not in kind and kind != "mixtral":  # state_dict order known
        assert list(got.items()) == saved
    # The same from config.json on disk and from its dict.
    assert reshard.sources_from_hf_config(tmp_path) == got
    assert reshard.sources_from_hf_config(config.to_dict()) == got


def test_model_shape_dtype_override():
    from reshard.hf_config import model_shape
    shape = model_shape(dict(TINY, model_type="llama"))
    assert shape.dtype == BF16
    f32 = reshard.sources_from_hf_config(shape, dtype="float32")
    assert set(d for _, d in f32.values()) == {F32}
    assert dataclasses.replace(shape, dtype=F32) == model_shape(shape, F32)


@pytest.mark.parametrize("model", [
    "tiny-llama", "tiny-moe", "qwen2.5-0.5b", "llama-3.1-8b",
    "llama-3.1-70b", "qwen3-30b-a3b", "qwen3-235b-a22b"])
def test_agrees_with_the_simulators_manifest(tmp_path, model):
    """The names, full shapes and dtypes of the checkpoint tensors the C
    simulator reads off the same config.json (one fsdp rank's table). Its
    order puts a layer's input norm first; ours is transformers' module
    order (test_against_transformers_checkpoint)."""
    path = simulated.MODELS / f"{model}.json"
    table, = simulated.trainer_tables(path, "fsdp:1", tmp_path)
    want = {n: (full, dt) for n, full, dt, _, _ in table}
    got = reshard.sources_from_hf_config(path)
    assert len(got) == len(table) and got == want
