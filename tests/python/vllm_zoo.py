"""vLLM's own model classes built on CPU for the tests: tiny Hugging Face
configs made in code, vLLM's distributed state on gloo at tensor parallel
1, and each architecture's checkpoint names, shapes and seeded tensors."""
import os
import tempfile
from contextlib import contextmanager

import torch

# vLLM picks its platform once, on first use: without a GPU it must be told
# to take its CPU platform, or no attention backend exists for the layers.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

VOCAB, HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 64, 32, 48, 2, 4, 2, 8
EXPERTS, MOE_FFN = 4, 16


def _attention(p, bias):
    """q/k/v/o of one layer under prefix `p`, with q/k/v biases (Qwen2)."""
    out = {f"{p}.self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
           f"{p}.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
           f"{p}.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
           f"{p}.self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM)}
    if bias:
        out[f"{p}.self_attn.q_proj.bias"] = (HEADS * HEAD_DIM,)
        out[f"{p}.self_attn.k_proj.bias"] = (KV_HEADS * HEAD_DIM,)
        out[f"{p}.self_attn.v_proj.bias"] = (KV_HEADS * HEAD_DIM,)
    return out


def _mlp(p, ffn):
    return {f"{p}.gate_proj.weight": (ffn, HIDDEN),
            f"{p}.up_proj.weight": (ffn, HIDDEN),
            f"{p}.down_proj.weight": (HIDDEN, ffn)}


def _experts(p):
    out = {f"{p}.gate.weight": (EXPERTS, HIDDEN)}
    for e in range(EXPERTS):
        out.update(_mlp(f"{p}.experts.{e}", MOE_FFN))
    return out


def _norms(p):
    return {f"{p}.input_layernorm.weight": (HIDDEN,),
            f"{p}.post_attention_layernorm.weight": (HIDDEN,)}


def _mla(p, q_lora):
    """DeepSeek-V2's multi-head latent attention; with a q LoRA rank, vLLM
    fuses q_a_proj and kv_a_proj_with_mqa into one parameter."""
    qk = MLA["qk_nope_head_dim"] + MLA["qk_rope_head_dim"]
    rank, rope = MLA["kv_lora_rank"], MLA["qk_rope_head_dim"]
    q = {f"{p}.self_attn.q_proj.weight": (HEADS * qk, HIDDEN)}
    if q_lora:
        q = {f"{p}.self_attn.q_a_proj.weight": (Q_LORA, HIDDEN),
             f"{p}.self_attn.q_a_layernorm.weight": (Q_LORA,),
             f"{p}.self_attn.q_b_proj.weight": (HEADS * qk, Q_LORA)}
    return {**q,
            f"{p}.self_attn.kv_a_proj_with_mqa.weight": (rank + rope, HIDDEN),
            f"{p}.self_attn.kv_a_layernorm.weight": (rank,),
            f"{p}.self_attn.kv_b_proj.weight":
                (HEADS * (MLA["qk_nope_head_dim"] + MLA["v_head_dim"]), rank),
            f"{p}.self_attn.o_proj.weight": (HIDDEN, HEADS * MLA["v_head_dim"])}


MLA = dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
           v_head_dim=8)
Q_LORA = 24


def _specs(layer, tied=False):
    """{name: shape} of a checkpoint whose layer i is `layer(prefix, i)`."""
    out = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i in range(LAYERS):
        out.update(layer(f"model.layers.{i}", i))
    out["model.norm.weight"] = (HIDDEN,)
    if not tied:
        out["lm_head.weight"] = (VOCAB, HIDDEN)
    return out


def _dense(bias):
    return lambda p, i: {**_attention(p, bias), **_mlp(f"{p}.mlp", FFN),
                         **_norms(p)}


def _qwen3_moe(p, i):
    return {**_attention(p, False), f"{p}.self_attn.q_norm.weight": (HEAD_DIM,),
            f"{p}.self_attn.k_norm.weight": (HEAD_DIM,),
            **_experts(f"{p}.mlp"), **_norms(p)}


def _deepseek_v2(q_lora):
    """Layer 0 dense (first_k_dense_replace=1), the others MoE with one
    shared expert."""
    def layer(p, i):
        mlp = _mlp(f"{p}.mlp", FFN) if i == 0 else {
            **_experts(f"{p}.mlp"),
            **_mlp(f"{p}.mlp.shared_experts", MOE_FFN)}
        return {**_mla(p, q_lora), **mlp, **_norms(p)}
    return layer


def arch_of(name):
    """The vLLM architecture of a model name here ("<arch>[+variant]")."""
    return name.partition("+")[0]


def _config(name):
    """The transformers config of model `name`, tiny, float32."""
    import transformers as tf
    arch = arch_of(name)
    common = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  num_key_value_heads=KV_HEADS, max_position_embeddings=64,
                  tie_word_embeddings=False, architectures=[arch])
    if arch == "LlamaForCausalLM":
        return tf.LlamaConfig(head_dim=HEAD_DIM, **common)
    if arch == "Qwen2ForCausalLM":
        return tf.Qwen2Config(**common)
    if arch == "Qwen3MoeForCausalLM":
        return tf.Qwen3MoeConfig(head_dim=HEAD_DIM, num_experts=EXPERTS,
                                 num_experts_per_tok=2, decoder_sparse_step=1,
                                 moe_intermediate_size=MOE_FFN,
                                 mlp_only_layers=[], **common)
    if arch == "DeepseekV2ForCausalLM":
        common["num_key_value_heads"] = HEADS
        return tf.DeepseekV2Config(
            n_routed_experts=EXPERTS, n_shared_experts=1, num_experts_per_tok=2,
            moe_intermediate_size=MOE_FFN, first_k_dense_replace=1, n_group=1,
            topk_group=1, topk_method="greedy",
            q_lora_rank=Q_LORA if name.endswith("+q_lora") else None,
            **MLA, **common)
    raise ValueError(f"no tiny config for {name}")


ARCHS = {"LlamaForCausalLM": _dense(False), "Qwen2ForCausalLM": _dense(True),
         "Qwen3MoeForCausalLM": _qwen3_moe,
         "DeepseekV2ForCausalLM": _deepseek_v2(False),
         "DeepseekV2ForCausalLM+q_lora": _deepseek_v2(True)}


def checkpoint_specs(name, dtype=torch.float32):
    """{name: (shape, dtype)} of model `name`'s tiny checkpoint, in file
    order."""
    return {n: (s, dtype) for n, s in _specs(ARCHS[name]).items()}


def checkpoint(name, seed=0, dtype=torch.float32):
    """Seeded real tensors {name: tensor} of model `name`'s checkpoint."""
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(s, generator=g).to(d)
            for n, (s, d) in checkpoint_specs(name, dtype).items()}


def vllm_config(name, workdir, dtype="float32"):
    """A VllmConfig over a config.json written to `workdir` (no weights,
    no tokenizer: nothing is downloaded)."""
    from vllm.config import ModelConfig, VllmConfig
    model_dir = os.path.join(workdir, name)
    _config(name).save_pretrained(model_dir)
    mc = ModelConfig(model=model_dir, skip_tokenizer_init=True, dtype=dtype,
                     max_model_len=64)
    return VllmConfig(model_config=mc)


@contextmanager
def distributed():
    """vLLM's distributed state over gloo, one rank, tensor and pipeline
    parallel 1; torn down at exit."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    with tempfile.TemporaryDirectory() as d, \
            set_current_vllm_config(VllmConfig()):
        ps.init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"file://{d}/init")
        ps.initialize_model_parallel(1, 1)
        try:
            yield
        finally:
            ps.destroy_model_parallel()
            ps.destroy_distributed_environment()


def build(name, vconfig):
    """vLLM's own model class for model `name` made as vLLM's model loader makes
    it (its default dtype, on CPU), parameters uninitialized (torch.empty);
    the loader's load_weights step is left to the test."""
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype
    assert vconfig.model_config.architectures == [arch_of(name)]
    with set_default_torch_dtype(vconfig.model_config.dtype), \
            torch.device("cpu"):
        return initialize_model(vllm_config=vconfig)
