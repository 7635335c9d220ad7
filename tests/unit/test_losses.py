"""The policy-gradient losses equal a plain per-token reference computation, value and gradient."""

from __future__ import annotations

import math

import pytest
import torch

from hermes_nb.trainer.step.losses import policy_loss_sum
from hermes_nb.trainer.types import LossConfig

torch.set_num_threads(1)


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand((3, 5), generator=g) * 2
    sampling = logp.detach() + (torch.rand((3, 5), generator=g) - 0.5)  # ratios on both sides of the clip range
    advantages = torch.tensor([[1.0] * 5, [-0.5] * 5, [2.0, 2.0, -1.0, -1.0, 0.5]])
    weights = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.float32)
    return logp, sampling, advantages, weights


def _reference(loss_fn: str, logp: list[list[float]], sampling, advantages, weights, eps: float) -> float:
    """Token-mean over trained tokens, one token at a time in plain Python."""
    total, count = 0.0, 0
    for b in range(len(logp)):
        for t in range(len(logp[b])):
            if weights[b][t] == 0:
                continue
            ratio = math.exp(logp[b][t] - sampling[b][t])
            a = advantages[b][t]
            term = (
                ratio * a if loss_fn == "importance_sampling" else min(ratio * a, min(max(ratio, 1 - eps), 1 + eps) * a)
            )
            total += -term
            count += 1
    return total / count


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo"])
def test_loss_and_gradient_equal_reference(loss_fn: str) -> None:
    logp, sampling, advantages, weights = _batch()
    params = logp.clone().requires_grad_(True)
    sums = policy_loss_sum(loss_fn, params, sampling, advantages, weights, LossConfig())
    loss = sums.loss / weights.sum()
    loss.backward()
    expected = _reference(loss_fn, params.tolist(), sampling.tolist(), advantages.tolist(), weights.tolist(), 0.2)
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-6)
    # Numerical gradient of the reference, per position.
    h = 1e-4
    for b in range(3):
        for t in range(5):
            plus, minus = params.detach().clone(), params.detach().clone()
            plus[b, t] += h
            minus[b, t] -= h
            args = (sampling.tolist(), advantages.tolist(), weights.tolist(), 0.2)
            numeric = (_reference(loss_fn, plus.tolist(), *args) - _reference(loss_fn, minus.tolist(), *args)) / (2 * h)
            assert float(params.grad[b, t]) == pytest.approx(numeric, abs=2e-3)


def test_importance_sampling_on_policy_gradient_is_reinforce() -> None:
    logp, _, advantages, weights = _batch()
    params = logp.clone().requires_grad_(True)
    (policy_loss_sum("importance_sampling", params, logp.detach(), advantages, weights).loss / weights.sum()).backward()
    assert torch.allclose(params.grad, -advantages * weights / weights.sum())


def test_ppo_clips_outside_the_range() -> None:
    logp = torch.tensor([[0.0, 0.0]], requires_grad=True)
    sampling = torch.tensor([[-1.0, 1.0]])  # ratio e (above 1.2) and 1/e (below 0.8)
    advantages = torch.tensor([[1.0, -1.0]])
    sums = policy_loss_sum("ppo", logp, sampling, advantages, torch.ones(1, 2))
    sums.loss.backward()
    assert logp.grad is not None and torch.all(logp.grad == 0)  # both clipped: no gradient
    assert sums.clipped == 2


def test_untrained_positions_get_no_gradient_even_with_placeholder_logprobs() -> None:
    logp = torch.tensor([[-0.5, -0.7]], requires_grad=True)
    sampling = torch.tensor([[1.0, -0.7]])  # 1.0 = the wire's prompt placeholder
    policy_loss_sum("importance_sampling", logp, sampling, torch.ones(1, 2), torch.tensor([[0.0, 1.0]])).loss.backward()
    assert logp.grad is not None and logp.grad[0, 0] == 0


def test_unknown_loss_is_refused() -> None:
    with pytest.raises(ValueError, match="loss_fn"):
        policy_loss_sum("dpo", torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1))
