"""Refit vLLM's own model class from a trainer through vLLM's weight-transfer
API, with reshard as the backend ("reshard"), on CPU.

The trainer is a Hugging Face transformers Qwen2 model trained a step at a
time; after each step `send_weights()` publishes its parameters where they
are and has the inference worker stage and install them. The worker side
is what vLLM does itself when started with `weight_transfer_config=
{"backend": "reshard"}`: here `start_worker` stands in for vLLM's worker,
building vLLM's Qwen2ForCausalLM class on CPU and making the engine through
vLLM's factory. Each version is checked byte for byte against vLLM's own
`load_weights` run on the trainer's tensors. Needs vLLM (see docs/vllm.md):

  PYTHONPATH=python RESHARD_LIB=build/libreshard.so \\
      venv/bin/python examples/python/vllm_refit.py
"""
import os
import sys
import tempfile

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # no GPU: vLLM's CPU side

import torch  # noqa: E402
import transformers  # noqa: E402
from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.config.weight_transfer import WeightTransferConfig  # noqa: E402
from vllm.distributed import parallel_state  # noqa: E402
from vllm.distributed.weight_transfer import (  # noqa: E402
    WeightTransferEngineFactory, WeightTransferTrainerFactory)
from vllm.model_executor.model_loader.utils import initialize_model  # noqa: E402
from vllm.utils.torch_utils import set_default_torch_dtype  # noqa: E402

import reshard.vllm  # noqa: E402

CONFIG = transformers.Qwen2Config(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
    architectures=["Qwen2ForCausalLM"], max_position_embeddings=64)


def vllm_model(workdir, name):
    """vLLM's Qwen2ForCausalLM as its model loader makes it (float32, CPU;
    weights not loaded), from a config.json only: nothing is downloaded."""
    CONFIG.save_pretrained(os.path.join(workdir, name))
    vconfig = VllmConfig(model_config=ModelConfig(
        model=os.path.join(workdir, name), skip_tokenizer_init=True,
        dtype="float32", max_model_len=64))
    with set_default_torch_dtype(torch.float32), torch.device("cpu"):
        return initialize_model(vllm_config=vconfig), vconfig


def start_worker(workdir):
    """What vLLM's worker does with weight_transfer_config backend
    "reshard": load the model, then make the engine by the factory (the
    plugin entry point calls reshard.vllm.register when vLLM starts)."""
    reshard.vllm.register()
    model, vconfig = vllm_model(workdir, "served")
    engine = WeightTransferEngineFactory.create_engine(
        WeightTransferConfig(backend="reshard"), vconfig, torch.device("cpu"),
        model)
    return model, engine


def train_step(model, optimizer, seed):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, CONFIG.vocab_size, (4, 16), generator=g)
    loss = model(input_ids=tokens, labels=tokens).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def check(served, trainer, workdir, version):
    """Every served parameter's bytes equal vLLM's own loader run on the
    trainer's tensors in another instance; returns the bytes compared."""
    want, vconfig = vllm_model(workdir, f"check{version}")
    with set_current_vllm_config(vconfig), torch.no_grad():
        want.load_weights((n, p.detach()) for n, p in
                          trainer.named_parameters())
    want = dict(want.named_parameters())
    raw = lambda t: t.detach().contiguous().flatten().view(torch.uint8)  # noqa: E731
    for name, param in served.named_parameters():
        if not torch.equal(raw(param), raw(want[name])):
            raise SystemExit(f"version {version}: {name} differs from vLLM's "
                             "own loader")
    return sum(p.numel() * p.element_size() for p in want.values())


def main(work):
    torch.manual_seed(0)
    trainer = transformers.Qwen2ForCausalLM(CONFIG)
    optimizer = torch.optim.SGD(trainer.parameters(), lr=0.1)
    served, engine = start_worker(work)
    with tempfile.TemporaryDirectory(dir=work) as d:
        # The trainer's side, what an RL framework writes.
        info = reshard.vllm.ReshardTrainerInitInfo(
            directory=f"file:{d}", model="qwen2", transport="cma", rank=0)
        client = reshard.vllm.DirectClient(engine)   # vLLM's HTTP/Ray client
        sender = WeightTransferTrainerFactory.trainer_init(
            info, client=client, source=trainer)
        try:
            for step in range(2):
                loss = train_step(trainer, optimizer, seed=step)
                version = sender.send_weights()
                nbytes = check(served, trainer, work, version)
                print(f"version {version}: loss {loss:.4f}, "
                      f"{engine.last_result.bytes_installed} B installed, "
                      f"{nbytes} B byte-equal to vLLM's own loader")
        finally:
            sender.shutdown()
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as work:
        init = f"file://{work}/dist"
        with set_current_vllm_config(VllmConfig()):
            parallel_state.init_distributed_environment(
                world_size=1, rank=0, local_rank=0, backend="gloo",
                distributed_init_method=init)
            parallel_state.initialize_model_parallel(1, 1)
        try:
            sys.exit(main(work))
        finally:
            parallel_state.destroy_model_parallel()
            parallel_state.destroy_distributed_environment()
