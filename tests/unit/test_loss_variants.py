"""The loss variants without TRL: the KL estimators are their formulas, the truncated importance weight is capped
and carries no gradient, every aggregation gives the same loss and gradient however the batch is split into
micro-batches or packed, inputs a setting needs are asked for by name, and the local backend's reference policy is
the weights the run started from (a LoRA run: the base with its adapters off)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from hermes_nb.testing import make_tiny_model
from hermes_nb.trainer.local import local_backend
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.step import losses
from hermes_nb.trainer.step.losses import (
    kl_estimate,
    policy_loss_sum,
    token_logprobs_and_entropy,
    truncated_importance_weight,
)
from hermes_nb.trainer.types import AdamParams, Datum, LossConfig

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_kl_estimators_are_their_formulas_and_k3_is_never_negative() -> None:
    generator = torch.Generator().manual_seed(0)
    logp = -torch.rand(200, generator=generator, dtype=torch.float64) * 6
    ref = logp + torch.randn(200, generator=generator, dtype=torch.float64) * 2  # near and far apart
    log_ratio = logp - ref
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), log_ratio)
    torch.testing.assert_close(kl_estimate(logp, ref, "k2"), log_ratio**2 / 2)
    torch.testing.assert_close(kl_estimate(logp, ref, "k3"), torch.exp(ref - logp) - (ref - logp) - 1)
    assert bool((kl_estimate(logp, ref, "k3") >= 0).all())
    assert float(kl_estimate(logp, logp, "k3").abs().max()) == 0.0
    with pytest.raises(ValueError, match="kl_estimator: 'k4'"):
        kl_estimate(logp, ref, "k4")


def test_truncated_importance_weight_is_capped_and_detached() -> None:
    old = torch.tensor([-1.0, -1.0, -1.0], requires_grad=True)
    sampling = torch.tensor([-1.0, -1.5, -4.0])
    weight = truncated_importance_weight(old, sampling, cap=2.0)
    torch.testing.assert_close(weight, torch.tensor([1.0, float(torch.exp(torch.tensor(0.5))), 2.0]))
    assert not weight.requires_grad


def test_entropy_is_the_policys_at_trained_positions_in_any_slicing(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 5, 7, generator=generator) * 3
    targets = torch.randint(0, 7, (3, 5), generator=generator)
    weights = (torch.rand(3, 5, generator=generator) > 0.4).float()
    expected = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1) * (weights > 0)
    logp, entropy = token_logprobs_and_entropy(logits, targets, weights)
    torch.testing.assert_close(entropy, expected)
    torch.testing.assert_close(logp, torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0])
    monkeypatch.setattr(losses, "LOGITS_CHUNK_ELEMENTS", 14)  # two positions per slice
    torch.testing.assert_close(token_logprobs_and_entropy(logits, targets, weights)[1], expected)


def _tensors() -> dict[str, torch.Tensor]:
    weights = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
    return {
        "logprobs_BT": torch.tensor([[-1.0, -1.2, -0.7, -2.0], [-0.3, -0.9, -1.1, -0.4]], requires_grad=True),
        "sampling_logprobs_BT": torch.tensor([[1.0, -1.0, -1.0, 1.0], [1.0, -1.0, -1.0, -1.0]]),
        "advantages_BT": torch.tensor([[0.5] * 4, [-1.0] * 4]),
        "weights_BT": weights,
    }


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (LossConfig(beta=0.1), "reference_logprobs_T"),
        (LossConfig(importance_sampling_cap=2.0), "old_logprobs_T"),
    ],
)
def test_a_setting_without_its_inputs_is_refused_by_name(config: LossConfig, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        policy_loss_sum("ppo", config=config, **_tensors())


def test_the_sequence_ratio_is_the_mean_log_ratio_shared_by_every_token() -> None:
    inputs = _tensors()
    sums = policy_loss_sum("importance_sampling", config=LossConfig(importance_sampling_level="sequence"), **inputs)
    log_ratio = (inputs["logprobs_BT"] - inputs["sampling_logprobs_BT"]).detach()
    first, second = log_ratio[0, 1:3].mean(), log_ratio[1, 1:4].mean()
    expected = -(2 * 0.5 * torch.exp(first) + 3 * -1.0 * torch.exp(second))
    torch.testing.assert_close(sums.loss.detach(), expected)


def _datum(prompt: list[int], completion: list[int], advantage: float, shift: float) -> Datum:
    tokens = prompt + completion
    n = len(tokens) - 1
    context = len(prompt) - 1
    trained = [t >= context for t in range(n)]

    def near(offset: float) -> list[float]:
        return [-1.5 + offset - 0.1 * t if tr else 1.0 for t, tr in enumerate(trained)]

    return Datum(
        input_tokens_T=tokens[:-1],
        target_tokens_T=tokens[1:],
        weights_T=[1.0 if t else 0.0 for t in trained],
        sampling_logprobs_T=near(shift),
        advantages_T=[advantage] * n,
        old_logprobs_T=near(shift / 2),
        reference_logprobs_T=near(-shift),
    )


def grouped_batch() -> list[Datum]:
    first, second = [1, 30, 31, 32], [1, 40, 41]
    return [
        _datum(first, [50, 51, 2], 1.0, 0.3),
        _datum(first, [50, 51, 2], 1.0, 0.3),
        _datum(first, [52, 2], -0.5, -0.4),
        _datum(first, [53, 54, 55, 56, 2], -1.5, 0.2),
        _datum(second, [60, 2], 0.7, 0.1),
        _datum(second, [60, 2], 0.7, 0.1),
        _datum(second, [50, 51, 2], -0.7, -0.2),
    ]


def _flat(rows: list[list[float]]) -> list[float]:
    return [v for row in rows for v in row]


def _step(model_dir: Path, loss_fn: str, config: LossConfig, *, packed: bool) -> tuple[Any, torch.Tensor]:
    backend = LocalBackend(model_dir, pack_batches=packed)
    out = backend.forward_backward(grouped_batch(), loss_fn, config)
    grad = torch.cat([p.grad.flatten() for p in backend.model.parameters() if p.grad is not None])
    return out, grad


CONFIGS = [
    ("importance_sampling", LossConfig()),
    ("ppo", LossConfig(loss_type="bnpo", clip_epsilon_high=0.28)),
    ("ppo", LossConfig(loss_type="grpo", beta=0.1, kl_estimator="k2")),
    ("ppo", LossConfig(loss_type="grpo", importance_sampling_level="sequence")),
    ("cispo", LossConfig(loss_type="dr_grpo", clip_epsilon_high=1.1, max_completion_length=8)),
    ("ppo", LossConfig(loss_type="dapo", importance_sampling_cap=1.5, beta=0.05, kl_estimator="k1")),
]


@pytest.mark.parametrize(("loss_fn", "config"), CONFIGS)
def test_micro_batches_and_packing_change_nothing(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, loss_fn: str, config: LossConfig
) -> None:
    whole, whole_grad = _step(model_dir, loss_fn, config, packed=False)
    packed, packed_grad = _step(model_dir, loss_fn, config, packed=True)
    # Room for two rows' logits per pass: the batch of seven runs as four micro-batches.
    monkeypatch.setattr(local_backend, "MAX_LOGITS_ELEMENTS", 2 * 8 * 100)
    for split, split_grad in (
        _step(model_dir, loss_fn, config, packed=False),
        _step(model_dir, loss_fn, config, packed=True),
        (packed, packed_grad),
    ):
        assert split.loss == pytest.approx(whole.loss, rel=1e-6, abs=1e-7)
        torch.testing.assert_close(split_grad, whole_grad, rtol=1e-5, atol=1e-7)
        for key, value in whole.metrics.items():
            assert split.metrics[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key
    assert whole.metrics["entropy"] > 0
    assert ("kl" in whole.metrics) == (config.beta > 0)


def test_the_reference_of_a_full_fine_tune_is_its_starting_weights(model_dir: Path, tmp_path: Path) -> None:
    data = grouped_batch()
    backend = LocalBackend(model_dir)
    before = backend.forward(data)
    assert backend.reference_forward(data) == before
    backend.forward_backward(data, "importance_sampling")
    backend.optim_step(AdamParams(learning_rate=1e-2))
    assert backend.forward(data) != before
    assert _flat(backend.reference_forward(data)) == pytest.approx(_flat(before), abs=1e-6)
    # A named reference: that directory's weights, whatever the run started from.
    other = make_tiny_model(tmp_path / "other", seed=5)
    named = _flat(LocalBackend(model_dir, reference_weights=other).reference_forward(data))
    assert named == pytest.approx(_flat(LocalBackend(other).forward(data)), abs=1e-6)
    assert named != pytest.approx(_flat(before), abs=1e-3)


def test_the_reference_of_a_lora_run_is_its_base_with_the_adapters_off(model_dir: Path) -> None:
    data = grouped_batch()
    base = _flat(LocalBackend(model_dir).forward(data))
    backend = LocalBackend(model_dir, lora_rank=4)
    for _ in range(3):
        backend.forward_backward(data, "importance_sampling")
        backend.optim_step(AdamParams(learning_rate=5e-2))
    assert _flat(backend.forward(data)) != pytest.approx(base, abs=1e-4)  # the adapters moved the policy
    assert _flat(backend.reference_forward(data)) == pytest.approx(base, abs=1e-6)
    assert _flat(backend.forward(data)) != pytest.approx(base, abs=1e-4)  # and they are on again afterwards
