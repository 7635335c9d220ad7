"""The local torch backend: logprobs, a policy-gradient step, exact micro-batching, state round trips."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hermes_nb.testing import make_tiny_model
from hermes_nb.trainer.local import local_backend
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.types import AdamParams, Datum

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def _datum(tokens: list[int], advantage: float, prompt_len: int = 2) -> Datum:
    n = len(tokens) - 1
    weights = [0.0 if t + 1 < prompt_len else 1.0 for t in range(n)]
    return Datum(
        input_tokens_T=tokens[:-1],
        target_tokens_T=tokens[1:],
        weights_T=weights,
        sampling_logprobs_T=[0.0] * n,
        advantages_T=[advantage] * n,
    )


def _on_policy(backend: LocalBackend, data: list[Datum]) -> list[Datum]:
    logprobs = backend.forward(data)
    return [d.model_copy(update={"sampling_logprobs_T": lp}) for d, lp in zip(data, logprobs, strict=True)]


def test_forward_logprobs_equal_a_plain_forward_pass(model_dir: Path) -> None:
    backend = LocalBackend(model_dir)
    datum = _datum([10, 11, 12, 13, 14], 1.0)
    (logprobs,) = backend.forward([datum, _datum([10, 11, 12], 1.0)])[:1]
    with torch.no_grad():
        logits = backend.model(input_ids=torch.tensor([datum.input_tokens_T])).logits
    expected = torch.log_softmax(logits, -1)[0].gather(-1, torch.tensor(datum.target_tokens_T)[:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-5)


def test_a_step_raises_the_logprob_of_a_positive_advantage_sequence(model_dir: Path) -> None:
    backend = LocalBackend(model_dir)
    good, bad = _datum([20, 21, 22, 23, 24], 1.0), _datum([60, 61, 70, 71, 72], -1.0)
    data = _on_policy(backend, [good, bad])
    before = backend.forward(data)
    out = backend.forward_backward(data, "importance_sampling")
    assert out.num_trained_tokens == 6
    assert out.metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    backend.optim_step(AdamParams(learning_rate=1e-2))
    after = backend.forward(data)
    assert sum(after[0][1:]) > sum(before[0][1:])
    assert sum(after[1][1:]) < sum(before[1][1:])


def test_micro_batches_give_the_same_gradient(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = [_datum([20, 21, 22, 23, 24], 1.0), _datum([20, 21, 30], -1.0), _datum([5, 6, 7, 8], 0.5)]
    grads = []
    for limit in (local_backend.MAX_LOGITS_ELEMENTS, 1):  # 1 = one row per micro-batch
        monkeypatch.setattr(local_backend, "MAX_LOGITS_ELEMENTS", limit)
        backend = LocalBackend(model_dir)
        backend.forward_backward(_on_policy(backend, data), "ppo")
        grads.append(torch.cat([p.grad.flatten() for p in backend.model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_save_and_load_state_restore_weights_and_optimizer(model_dir: Path, tmp_path: Path) -> None:
    backend = LocalBackend(model_dir)
    data = _on_policy(backend, [_datum([20, 21, 22, 23], 1.0), _datum([20, 21, 9, 9], -1.0)])
    backend.forward_backward(data, "importance_sampling")
    backend.optim_step(AdamParams(learning_rate=1e-2))
    backend.save_state(tmp_path / "ckpt", {"step": 7})
    restored = LocalBackend(model_dir)
    assert restored.load_state(tmp_path / "ckpt") == {"step": 7}
    for a, b in zip(backend.model.parameters(), restored.model.parameters(), strict=True):
        assert torch.equal(a, b)
    # Same next step from both: identical weights and identical Adam moments.
    for b in (backend, restored):
        b.forward_backward(data, "importance_sampling")
        b.optim_step(AdamParams(learning_rate=1e-2))
    for a, b in zip(backend.model.parameters(), restored.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-7)


def test_sampler_snapshot_does_not_change_when_training_continues(model_dir: Path) -> None:
    backend = LocalBackend(model_dir)
    handle = backend.save_weights_for_sampler("v1")
    sampler = backend.sampler_model()
    frozen = {k: t.clone() for k, t in handle.policy.items()}
    assert frozen.keys() == sampler.state_dict().keys()
    data = _on_policy(backend, [_datum([20, 21, 22, 23], 1.0), _datum([20, 21, 9, 9], -1.0)])
    backend.forward_backward(data, "importance_sampling")
    backend.optim_step(AdamParams(learning_rate=1e-2))
    assert all(torch.equal(frozen[k], t) for k, t in handle.policy.items())
    assert all(torch.equal(frozen[k], t) for k, t in sampler.state_dict().items())
    newer = backend.save_weights_for_sampler("v2")
    assert newer.version == handle.version + 1
    assert any(not torch.equal(frozen[k], t) for k, t in newer.policy.items())
