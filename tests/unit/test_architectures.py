"""Every decoder-only family users train runs on the local backend: Llama, Qwen2, Qwen3, Gemma 3, Mistral, Phi-3,
OLMo 2 and SmolLM (a Llama config), each a small random-weight model over the shipped tokenizer
(``architectures.py``). For each: a short run of the real loop completes with finite losses, the sampler and the
trainer agree token by token (the step-1 importance ratio is 1), LoRA trains only its adapters, and gradient
checkpointing gives the gradients of the plain pass."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest
import torch
from architectures import ARCHITECTURES, make_model

from hermes_nb.config import RunConfig, TrainerConfig
from hermes_nb.inference.sampler import SampleRow, device_generator, generate
from hermes_nb.metrics.logger import MetricsLogger
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.local.model_support import lora_targets
from hermes_nb.trainer.run.loop import LoopSettings, run_training
from hermes_nb.trainer.types import AdamParams, Datum

torch.set_num_threads(1)

# Sampler vs trainer logprobs on the same float32 weights: measured at most 4.8e-7 (a few float32 ulps of the
# log-softmax) on every family here; 20x that leaves room for another BLAS without hiding a real mismatch.
LOGPROB_TOLERANCE = 1e-5
PROMPT = [1, 5, 6, 7]
COMPLETION_TOKENS = 10  # with the prompt, longer than the sliding windows of Gemma 3 and Mistral

pytestmark = pytest.mark.parametrize("architecture", list(ARCHITECTURES))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("architectures")
    return {name: make_model(root / name, name) for name in ARCHITECTURES}


class _Batches:
    """The loop's batch source over a fixed list."""

    def __init__(self, batches: list[list[ScoredDataGroup]]) -> None:
        self.batches = batches

    def next_batch(self, stop: threading.Event) -> list[ScoredDataGroup] | None:
        return self.batches.pop(0) if self.batches else None


def _group(first: int) -> ScoredDataGroup:
    tokens = [[1, first, first + 1, *range(20 + i, 30 + i), 2] for i in range(2)]
    masks = [[-100, -100, -100, *t[3:]] for t in tokens]
    return ScoredDataGroup(tokens=tokens, masks=masks, scores=[1.0, 0.0])


def _sampled(backend: LocalBackend) -> list[Datum]:
    """A group sampled by the run's sampler from the trainer's weights, as datums carrying its logprobs."""
    rows = [SampleRow(prompt=PROMPT, max_tokens=COMPLETION_TOKENS, seed=i) for i in range(4)]
    results = generate(
        backend.sampler_model(), rows, pad_id=0, decode=lambda _: "", generator=device_generator(torch.device("cpu"), 0)
    )
    context = len(PROMPT) - 1
    data = []
    for result in results:
        tokens = PROMPT + result.token_ids
        data.append(
            Datum(
                input_tokens_T=tokens[:-1],
                target_tokens_T=tokens[1:],
                weights_T=[0.0] * context + [1.0] * len(result.token_ids),
                sampling_logprobs_T=[0.0] * context + result.logprobs,
                advantages_T=[1.0] * (len(tokens) - 1),
            )
        )
    return data


def test_a_short_run_completes_with_finite_losses(architecture: str, models: dict[str, Path], tmp_path: Path) -> None:
    trainer = TrainerConfig(base_model=str(models[architecture]), save_checkpoint_interval=0, learning_rate=1e-3)
    config = RunConfig(env={"batch_size": 4, "total_steps": 2}, trainer=trainer)
    metrics = MetricsLogger(tmp_path / "metrics.jsonl")
    outcome = run_training(
        LocalBackend(models[architecture]),
        _Batches([[_group(5), _group(7)], [_group(9), _group(11)]]),
        LoopSettings.from_config(config, tmp_path),
        config,
        stop=threading.Event(),
        metrics=metrics,
    )
    metrics.close()
    assert (outcome.reason, outcome.last_step) == ("completed", 2)
    losses = [json.loads(line)["values"][keys.TRAIN_LOSS] for line in (tmp_path / "metrics.jsonl").read_text().split()]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)


def test_the_sampler_and_the_trainer_agree_token_by_token(architecture: str, models: dict[str, Path]) -> None:
    backend = LocalBackend(models[architecture])
    data = _sampled(backend)
    for datum, trained in zip(data, backend.forward(data), strict=True):
        for weight, sampled, computed in zip(datum.weights_T, datum.sampling_logprobs_T, trained, strict=True):
            assert weight == 0 or abs(sampled - computed) <= LOGPROB_TOLERANCE
    # The step's own pass (packed: one prompt, four completions) sees the same ratio.
    ratio = backend.forward_backward(data, "importance_sampling").metrics["ratio_mean"]
    assert ratio == pytest.approx(1.0, abs=LOGPROB_TOLERANCE)


def test_lora_trains_only_the_adapters(architecture: str, models: dict[str, Path]) -> None:
    backend = LocalBackend(models[architecture], lora_rank=4)
    before = {name: p.detach().clone() for name, p in backend.model.named_parameters()}
    trainable = {name for name, p in backend.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    backend.forward_backward(_sampled(backend), "importance_sampling")
    backend.optim_step(AdamParams(learning_rate=1e-2))
    after = dict(backend.model.named_parameters())
    assert all(torch.equal(before[name], after[name]) for name in before if name not in trainable)
    assert any(not torch.equal(before[name], after[name]) for name in trainable)


def test_lora_adapts_peft_targets_or_every_linear_layer(architecture: str, models: dict[str, Path]) -> None:
    backend = LocalBackend(models[architecture], lora_rank=4)
    targets = lora_targets(backend.model.get_base_model())
    # "model.layers.0.self_attn.q_proj.lora_A.default.weight" -> "q_proj"
    adapted = {
        name.split(".lora_A")[0].rsplit(".", 1)[-1] for name, _ in backend.model.named_parameters() if ".lora_A" in name
    }
    if targets == "all-linear":
        assert {"o_proj", "down_proj"} <= adapted  # attention and MLP alike
    else:
        assert set(targets) <= adapted


def test_gradient_checkpointing_gives_the_plain_gradients(architecture: str, models: dict[str, Path]) -> None:
    grads = []
    for checkpointing in (False, True):
        backend = LocalBackend(models[architecture], gradient_checkpointing=checkpointing)
        backend.forward_backward([_group_datum()], "importance_sampling")
        grads.append(torch.cat([p.grad.flatten() for p in backend.model.parameters() if p.grad is not None]))
    assert grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def _group_datum() -> Datum:
    tokens = [1, 5, 6, *range(20, 32), 2]
    return Datum(
        input_tokens_T=tokens[:-1],
        target_tokens_T=tokens[1:],
        weights_T=[0.0, 0.0] + [1.0] * (len(tokens) - 3),
        sampling_logprobs_T=[-4.0] * (len(tokens) - 1),
        advantages_T=[1.0] * (len(tokens) - 1),
    )
