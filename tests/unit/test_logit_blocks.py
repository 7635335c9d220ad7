"""Logprobs and the entropy metric are computed a block of positions at a time, never as a float32 log-softmax of
the whole batch; the result is the unblocked computation's: logprobs, their gradients, the loss and its metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from datums import completion_datum

from hermes_nb.testing import make_tiny_model
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.step import losses
from hermes_nb.trainer.step.losses import token_logprobs_and_entropy

torch.set_num_threads(1)
VOCAB = 11


def _batch(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    logits = (torch.randn(3, 5, VOCAB, generator=generator) * 3).to(dtype).requires_grad_()
    targets = torch.randint(0, VOCAB, (3, 5), generator=generator)
    weights = (torch.rand(3, 5, generator=generator) > 0.4).float()
    return logits, targets, weights


def _unblocked(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
    logp_BTV = torch.log_softmax(logits.float(), -1)
    entropy = -(logp_BTV.exp() * logp_BTV).sum(-1) * (weights > 0)
    return logp_BTV.gather(-1, targets[..., None])[..., 0], entropy.detach()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_blocks_give_the_unblocked_logprobs_gradients_and_entropy(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    logits, targets, weights = _batch(dtype)
    expected_logp, expected_entropy = _unblocked(logits, targets, weights)
    (expected_grad,) = torch.autograd.grad((expected_logp * weights).sum(), logits)
    monkeypatch.setattr(losses, "LOGITS_CHUNK_ELEMENTS", 2 * VOCAB)  # two positions per block, 8 blocks
    logp, entropy = token_logprobs_and_entropy(logits, targets, weights)
    (grad,) = torch.autograd.grad((logp * weights).sum(), logits)
    torch.testing.assert_close(logp, expected_logp, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(entropy, expected_entropy, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(grad, expected_grad)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def _step(model_dir: Path, packed: bool) -> tuple[float, dict[str, float], torch.Tensor]:
    backend = LocalBackend(model_dir, pack_batches=packed)
    data = [completion_datum([1, 40, 41], [50, 51, 2], 1.0), completion_datum([1, 43], [60, 61, 62, 2], -0.5)]
    out = backend.forward_backward(data, "ppo")
    grads = torch.cat([p.grad.flatten() for p in backend.model.parameters() if p.grad is not None])
    return out.loss, out.metrics, grads


@pytest.mark.parametrize("packed", [False, True])
def test_a_step_in_blocks_equals_the_step_in_one_block(
    model_dir: Path, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _step(model_dir, packed)
    monkeypatch.setattr(losses, "LOGITS_CHUNK_ELEMENTS", 1)  # one position per block
    loss, metrics, grads = _step(model_dir, packed)
    assert loss == pytest.approx(whole[0], abs=1e-6)
    assert metrics == pytest.approx(whole[1], abs=1e-6)
    torch.testing.assert_close(grads, whole[2], atol=1e-6, rtol=1e-5)
