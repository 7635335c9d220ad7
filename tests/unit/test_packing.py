"""Packed training batches (shared contexts once, repeated sequences once) give exactly the plain loss, metrics
and gradients; and packing really removes the repetition."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hermes_nb.inference.sampler import _TransformersStepper
from hermes_nb.testing import make_tiny_model
from hermes_nb.trainer.local import local_backend
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.local.packing import can_pack, deduplicate, pack
from hermes_nb.trainer.types import Datum, ForwardBackwardOutput

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def _datum(prompt: list[int], completion: list[int], advantage: float, sampled: float = -1.5) -> Datum:
    tokens = prompt + completion
    n = len(tokens) - 1
    trained = [t + 1 >= len(prompt) for t in range(n)]
    return Datum(
        input_tokens_T=tokens[:-1],
        target_tokens_T=tokens[1:],
        weights_T=[1.0 if t else 0.0 for t in trained],
        sampling_logprobs_T=[sampled - 0.1 * t if tr else 1.0 for t, tr in enumerate(trained)],
        advantages_T=[advantage] * n,
    )


def grpo_like_batch() -> list[Datum]:
    """Two groups (prompts of different lengths), repeated completions inside each, completions of different
    lengths, and one completion shared by both groups."""
    first, second = [1, 30, 31, 32], [1, 40, 41]
    return [
        _datum(first, [50, 51, 2], 1.0),
        _datum(first, [50, 51, 2], 1.0),
        _datum(first, [50, 51, 2], 1.0),
        _datum(first, [52, 2], -0.5),
        _datum(first, [53, 54, 55, 2], -1.5),
        _datum(second, [60, 2], 0.7),
        _datum(second, [60, 2], 0.7),
        _datum(second, [50, 51, 2], -0.7),
    ]


def _loss_and_grad(
    model_dir: Path, data: list[Datum], loss_fn: str, *, packed: bool
) -> tuple[ForwardBackwardOutput, torch.Tensor]:
    backend = LocalBackend(model_dir, pack_batches=packed)
    out = backend.forward_backward(data, loss_fn)
    grad = torch.cat([p.grad.flatten() for p in backend.model.parameters() if p.grad is not None])
    return out, grad


@pytest.mark.parametrize(("loss_fn", "lean"), [("importance_sampling", True), ("ppo", True), ("ppo", False)])
def test_packed_loss_metrics_and_gradient_equal_the_plain_computation(
    model_dir: Path, loss_fn: str, lean: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = grpo_like_batch()
    plain, plain_grad = _loss_and_grad(model_dir, data, loss_fn, packed=False)
    if not lean:  # the transformers forward with its DynamicCache instead of the lean Llama forward
        monkeypatch.setattr(local_backend, "stepper_for", _TransformersStepper)
    packed, packed_grad = _loss_and_grad(model_dir, data, loss_fn, packed=True)
    assert packed.num_trained_tokens == plain.num_trained_tokens == 3 * 3 + 2 + 4 + 2 * 2 + 3
    assert packed.loss == pytest.approx(plain.loss, abs=1e-6)
    for name, value in plain.metrics.items():
        assert packed.metrics[name] == pytest.approx(value, abs=1e-6), name
    assert plain.metrics["clip_fraction"] > 0 or loss_fn == "importance_sampling"
    assert torch.allclose(packed_grad, plain_grad, atol=1e-6)
    assert plain_grad.abs().sum() > 0


def test_packing_runs_each_context_and_each_distinct_sequence_once() -> None:
    data = grpo_like_batch()
    distinct, counts = deduplicate(data)
    assert counts == [3, 1, 1, 2, 1]
    assert distinct == [data[0], data[3], data[4], data[5], data[7]]
    packed = pack(data, pad_id=0)
    assert packed.context_ids_PC.tolist() == [[1, 30, 31], [0, 1, 40]]  # left-padded, each prompt once
    assert packed.row_context_R.tolist() == [0, 0, 0, 1, 1]
    assert packed.counts_R.tolist() == [3.0, 1.0, 1.0, 2.0, 1.0]
    # Continuations start at the last prompt token; their positions continue the context's own.
    assert packed.ids_RS[0].tolist() == [32, 50, 51, 0]
    assert packed.positions_RS[0].tolist() == [3, 4, 5, 6]
    assert packed.positions_RS[3].tolist() == [2, 3, 4, 5]
    computed = packed.context_ids_PC.numel() + packed.ids_RS.numel()
    assert computed < sum(len(d.input_tokens_T) for d in data) * 0.75


def test_a_datum_trained_from_its_first_position_falls_back_to_the_plain_pass(model_dir: Path) -> None:
    no_context = Datum(
        input_tokens_T=[5, 6, 7],
        target_tokens_T=[6, 7, 2],
        weights_T=[1.0, 1.0, 1.0],
        sampling_logprobs_T=[-2.0, -2.0, -2.0],
        advantages_T=[1.0, 1.0, 1.0],
    )
    data = [*grpo_like_batch(), no_context]
    assert not can_pack(data)
    plain, plain_grad = _loss_and_grad(model_dir, data, "ppo", packed=False)
    fallback, fallback_grad = _loss_and_grad(model_dir, data, "ppo", packed=True)
    assert fallback.loss == pytest.approx(plain.loss, abs=1e-7)
    assert torch.allclose(fallback_grad, plain_grad, atol=1e-7)
