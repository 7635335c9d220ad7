"""``trainer.device``, ``trainer.dtype`` and ``trainer.gradient_checkpointing``: how ``auto`` resolves, what is
refused (and when: before anything starts), and what a real backend and its sampler then hold and compute."""

from __future__ import annotations

import asyncio
import math
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from datums import completion_datum
from transformers import AutoModelForCausalLM

from hermes_nb.backends import PARTS, make_backend
from hermes_nb.config import EnvironmentRef, RunConfig
from hermes_nb.errors import ConfigError
from hermes_nb.inference.contract import Policy
from hermes_nb.inference.engine import InferenceEngine
from hermes_nb.inference.sampler import SampleRow
from hermes_nb.processes import inference_server as standalone
from hermes_nb.runs.launcher import start_run
from hermes_nb.system import home
from hermes_nb.system.devices import check_device, resolve_hardware
from hermes_nb.system.net import LOOPBACK, free_port
from hermes_nb.testing import make_tiny_chat_model, make_tiny_model
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.run.main import run
from hermes_nb.trainer.types import AdamParams, Datum

torch.set_num_threads(1)

CUDA = torch.cuda.is_available()
no_cuda_here = pytest.mark.skipif(CUDA, reason="checks the refusal on a machine without CUDA")
ENVIRONMENT = EnvironmentRef(
    name="arithmetic", class_name="ArithmeticEnv", file=str(home.shipped_environments_dir() / "arithmetic.py")
)
PROMPT = [1, 40, 41, 42]


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_chat_model(tmp_path_factory.mktemp("chat"))


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("llama"))


def _batch() -> list[Datum]:
    return [
        completion_datum(PROMPT, [50, 51, 2], 1.0),
        completion_datum(PROMPT, [50, 51, 2], 1.0),
        completion_datum(PROMPT, [60, 2], -1.0),
    ]


def _grads(backend: LocalBackend) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in backend.model.parameters() if p.grad is not None])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((LOOPBACK, port)) == 0


# --- resolving and refusing -------------------------------------------------------------------------------------


def test_auto_is_cuda_in_bfloat16_when_torch_sees_cuda_else_the_cpu_in_float32() -> None:
    hardware = resolve_hardware("auto", "auto")
    assert hardware.device.type == ("cuda" if CUDA else "cpu")
    assert hardware.dtype == (torch.bfloat16 if CUDA and torch.cuda.is_bf16_supported(False) else torch.float32)
    assert resolve_hardware("cpu", "bfloat16").dtype == torch.bfloat16


def test_the_config_defaults_to_auto_without_checkpointing() -> None:
    trainer = RunConfig().trainer
    assert (trainer.device, trainer.dtype, trainer.gradient_checkpointing) == ("auto", "auto", False)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("device", "tpu", r"trainer.device: .*expected auto, cpu, cuda or cuda:N \(got 'tpu'\)"),
        ("device", "cuda:x", r"trainer.device: .*expected auto, cpu, cuda or cuda:N"),
        ("dtype", "fp8", r"trainer.dtype: .*'auto', 'float32', 'bfloat16' or 'float16' \(got 'fp8'\)"),
    ],
)
def test_a_device_or_dtype_that_does_not_exist_is_refused_naming_the_field(
    field: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_yaml_text(f"trainer:\n  {field}: '{value}'\n")
    config = RunConfig()
    with pytest.raises(ValueError, match=f"trainer.{field}|{field}"):
        setattr(config.trainer, field, value)
    assert getattr(config.trainer, field) == "auto"  # unchanged


@no_cuda_here
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_asked_for_without_cuda_is_refused_naming_the_field(device: str) -> None:
    with pytest.raises(ConfigError, match=rf"trainer.device: '{device}' asked for, but .* sees no CUDA device"):
        check_device(device)
    with pytest.raises(ConfigError, match="use auto or cpu on this machine"):
        resolve_hardware(device)


@no_cuda_here
def test_a_run_asking_for_cuda_without_it_is_refused_before_anything_is_created() -> None:
    config = RunConfig.model_validate({"environment": ENVIRONMENT.model_dump(), "trainer": {"device": "cuda"}})
    with pytest.raises(ConfigError, match="trainer.device: 'cuda' asked for"):
        start_run(config)
    assert not home.runs_dir().exists() or not any(home.runs_dir().iterdir())


@no_cuda_here
def test_the_trainer_refuses_cuda_without_it_before_its_inference_server_starts(chat_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    config = RunConfig.model_validate({"trainer": {"base_model": str(chat_dir), "device": "cuda", "torch_threads": 1}})
    config = config.model_copy(update={"infra": config.infra.model_copy(update={"inference_port": port})})
    with pytest.raises(ConfigError, match="trainer.device: 'cuda' asked for"):
        run(config, tmp_path, threading.Event(), PARTS)
    assert not _listening(port)


@pytest.mark.parametrize(
    ("option", "value", "message"), [("--device", "tpu", "--device: expected"), ("--dtype", "fp8", "--dtype: expected")]
)
def test_the_standalone_server_refuses_a_bad_device_or_dtype(
    chat_dir: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    argv = ["--model", str(chat_dir), "--port", str(free_port()), option, value]
    assert standalone.main(argv) == standalone.USAGE_ERROR
    assert message in capsys.readouterr().err


# --- what a real backend holds and computes ---------------------------------------------------------------------


def test_the_run_config_reaches_the_backend(chat_dir: Path) -> None:
    config = RunConfig.model_validate(
        {"trainer": {"base_model": str(chat_dir), "device": "cpu", "dtype": "bfloat16", "gradient_checkpointing": True}}
    )
    backend = make_backend(config)
    assert isinstance(backend, LocalBackend)
    assert (backend.hardware.device, backend.hardware.dtype) == (torch.device("cpu"), torch.bfloat16)
    assert backend.gradient_checkpointing and backend.pack_batches  # the lean forward checkpoints with its cache


def _output_dtypes(module: torch.nn.Module) -> tuple[list[torch.dtype], Any]:
    seen: list[torch.dtype] = []
    handle = module.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    return seen, handle


@pytest.mark.parametrize("architecture", ["chat_dir", "llama_dir"])
def test_bfloat16_on_cpu_trains_float32_weights_with_bfloat16_compute(
    architecture: str, request: pytest.FixtureRequest
) -> None:
    backend = LocalBackend(request.getfixturevalue(architecture), device="cpu", dtype="bfloat16")
    before = {name: p.detach().clone() for name, p in backend.model.named_parameters()}
    assert {(p.dtype, p.device.type) for p in backend.model.parameters()} == {(torch.float32, "cpu")}
    seen, handle = _output_dtypes(backend.model.lm_head)
    out = backend.forward_backward(_batch(), "importance_sampling")
    handle.remove()
    assert seen and set(seen) == {torch.bfloat16}  # the forward pass computed in bfloat16
    assert math.isfinite(out.loss) and out.num_trained_tokens == 3 + 3 + 2
    assert {p.grad.dtype for p in backend.model.parameters() if p.grad is not None} == {torch.float32}
    step = backend.optim_step(AdamParams(learning_rate=1e-3))
    assert math.isfinite(step.metrics["grad_norm"]) and step.metrics["grad_norm"] > 0
    assert backend._optimizer is not None
    moments = [s["exp_avg"] for s in backend._optimizer.state.values()]
    assert moments and {(m.dtype, m.device.type) for m in moments} == {(torch.float32, "cpu")}
    assert any(not torch.equal(before[name], p) for name, p in backend.model.named_parameters())


def test_an_adam_step_that_bfloat16_weights_would_round_away_is_kept(chat_dir: Path) -> None:
    """Why the trained weights stay float32: at a typical learning rate most of an Adam step is below half of
    bfloat16's resolution, so bfloat16 weights would not move."""
    backend = LocalBackend(chat_dir, device="cpu", dtype="bfloat16")
    before = {name: p.detach().clone() for name, p in backend.model.named_parameters()}
    backend.forward_backward(_batch(), "importance_sampling")
    backend.optim_step(AdamParams(learning_rate=1e-5))
    kept = rounded_away = 0
    for name, after in backend.model.named_parameters():
        update, weight_bf16 = after.detach() - before[name], before[name].bfloat16()
        kept += int((update != 0).sum())
        # The same update applied to bfloat16 weights (the exact sum, rounded to bfloat16): lost where unchanged.
        rounded_away += int(((weight_bf16.float() + update).bfloat16() == weight_bf16).sum())
    assert rounded_away > 0.75 * kept  # measured: 84% of this step would be lost


def test_the_sampler_holds_and_samples_in_the_compute_dtype(chat_dir: Path) -> None:
    backend = LocalBackend(chat_dir, device="cpu", dtype="bfloat16")
    sampler = backend.sampler_model()
    assert {p.dtype for p in sampler.parameters()} == {torch.bfloat16}
    assert {b.dtype for b in sampler.buffers()} == {torch.float32}  # RoPE frequencies keep their precision
    backend.forward_backward(_batch(), "importance_sampling")
    backend.optim_step(AdamParams(learning_rate=1e-2))
    handle = backend.save_weights_for_sampler("step_1")
    assert {t.dtype for t in handle.policy.values()} == {torch.bfloat16}
    engine = InferenceEngine()
    engine.publish(Policy(model=sampler, tokenizer=backend.tokenizer, version=0, name="bf16"))
    engine.publish_weights(handle.policy, 1)
    try:
        rows = [SampleRow(prompt=PROMPT, max_tokens=6, temperature=1.0, seed=i) for i in range(4)]
        results, version = asyncio.run(engine.sample(rows))
    finally:
        engine.close()
    assert version == 1
    assert {p.dtype for p in sampler.parameters()} == {torch.bfloat16}  # the published weights kept it
    sampled = [completion_datum(PROMPT, r.token_ids, 1.0) for r in results]
    trainer_logprobs = backend.forward(sampled)
    for result, datum, logprobs in zip(results, sampled, trainer_logprobs, strict=True):
        trained = logprobs[len(PROMPT) - 1 :]
        assert all(math.isfinite(lp) and lp <= 0 for lp in result.logprobs)
        assert len(trained) == len(result.logprobs) == len(datum.input_tokens_T) - len(PROMPT) + 1
        # Both compute in bfloat16 (the sampler from bfloat16 weights, the trainer from float32 ones under
        # autocast): the importance ratio starts near 1.
        assert max(abs(a - b) for a, b in zip(trained, result.logprobs, strict=True)) < 0.05


def test_a_bfloat16_run_saves_float32_checkpoints_of_the_trained_weights(chat_dir: Path, tmp_path: Path) -> None:
    backend = LocalBackend(chat_dir, device="cpu", dtype="bfloat16")
    backend.forward_backward(_batch(), "importance_sampling")
    backend.optim_step(AdamParams(learning_rate=1e-2))
    backend.save_state(tmp_path / "ckpt", {"step": 1})
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ckpt"))
    assert loaded.config.dtype == torch.float32
    trained = dict(backend.model.named_parameters())
    assert all(torch.equal(p, trained[name]) for name, p in loaded.named_parameters())


def test_float16_scales_the_loss_and_the_scale_is_restored_on_resume(chat_dir: Path, tmp_path: Path) -> None:
    backend = LocalBackend(chat_dir, device="cpu", dtype="float16")
    assert backend._scaler.is_enabled()
    before = [p.detach().clone() for p in backend.model.parameters()]
    out = backend.forward_backward(_batch(), "importance_sampling")
    scale = backend._scaler.get_scale()
    grad_norm = backend.optim_step(AdamParams(learning_rate=1e-2)).metrics["grad_norm"]
    assert math.isfinite(out.loss) and math.isfinite(grad_norm)
    # The norm is taken of unscaled gradients: the same order as float32's, not scale (65536) times it.
    reference = LocalBackend(chat_dir, device="cpu", dtype="float32")
    reference.forward_backward(_batch(), "importance_sampling")
    assert grad_norm == pytest.approx(float(_grads(reference).norm()), rel=0.05)
    assert any(not torch.equal(b, p) for b, p in zip(before, backend.model.parameters(), strict=True))
    backend.save_state(tmp_path / "ckpt", {"step": 1})
    restored = LocalBackend(chat_dir, device="cpu", dtype="float16")
    restored.load_state(tmp_path / "ckpt")
    assert restored._scaler.get_scale() == backend._scaler.get_scale() == scale


def _checkpointed_step(model_dir: Path, checkpointing: bool) -> tuple[float, torch.Tensor, int]:
    """Loss, gradients, and how often the first layer's attention ran in one forward and backward pass."""
    # Unpacked: the packed pass's lean forward calls no module to count.
    backend = LocalBackend(
        model_dir, device="cpu", dtype="float32", gradient_checkpointing=checkpointing, pack_batches=False
    )
    calls: list[int] = []
    # The recomputation re-runs the layer's inner forward: its attention module is called a second time.
    handle = backend.model.model.layers[0].self_attn.register_forward_hook(lambda *_: calls.append(1))
    out = backend.forward_backward(_batch(), "ppo")
    handle.remove()
    return out.loss, _grads(backend), len(calls)


def test_gradient_checkpointing_gives_the_same_loss_and_gradients_and_recomputes_layers(chat_dir: Path) -> None:
    plain_loss, plain_grad, plain_calls = _checkpointed_step(chat_dir, checkpointing=False)
    ckpt_loss, ckpt_grad, ckpt_calls = _checkpointed_step(chat_dir, checkpointing=True)
    assert ckpt_loss == pytest.approx(plain_loss, abs=1e-6)
    assert torch.allclose(ckpt_grad, plain_grad, atol=1e-6)
    assert (plain_calls, ckpt_calls) == (1, 2)  # the layer ran again in the backward pass


def test_a_packed_step_under_gradient_checkpointing_equals_the_plain_one(chat_dir: Path) -> None:
    plain_loss, plain_grad, _ = _checkpointed_step(chat_dir, checkpointing=False)
    backend = LocalBackend(chat_dir, device="cpu", dtype="float32", gradient_checkpointing=True)
    assert backend.pack_batches
    out = backend.forward_backward(_batch(), "ppo")
    assert out.loss == pytest.approx(plain_loss, abs=1e-6)
    assert torch.allclose(_grads(backend), plain_grad, atol=1e-6)


def test_a_lora_model_under_gradient_checkpointing_trains_unpacked(chat_dir: Path) -> None:
    """peft models take transformers' forward, whose KV cache checkpointing turns off: the packed pass needs it."""
    backend = LocalBackend(chat_dir, device="cpu", lora_rank=4, gradient_checkpointing=True)
    assert not backend.pack_batches
    assert math.isfinite(backend.forward_backward(_batch(), "ppo").loss)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in backend.model.parameters())
