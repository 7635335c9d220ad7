"""hermes-nb's datums in Tinker's shape, and the figures of a step computed from what Tinker returns.

Tinker's ``importance_sampling`` and ``ppo`` losses *sum* over tokens and take no mask. hermes-nb's losses are the
token-mean over the batch's trained tokens (``hermes_nb.trainer.losses``), so the learning rate means the same on
both backends: each trained position's advantage is divided by the batch's trained-token count, and untrained
positions (the prompt) get advantage 0, which removes them from the loss and its gradient exactly as a mask would.

Tinker's ``ForwardBackwardOutput.metrics`` can come back empty (SkyRL 0.3.0 sends none), so the loss and its
diagnostics are computed here from the per-token logprobs it returns (``loss_fn_outputs[i]["logprobs"]``, the
current policy's, taken before the update), with the same function the local backend uses: never a made-up number.
"""

from __future__ import annotations

from typing import Any

from hermes_nb.trainer.losses import policy_loss_sum
from hermes_nb.trainer.types import Datum, ForwardBackwardOutput, LossConfig


def total_trained_tokens(data: list[Datum]) -> int:
    return sum(d.num_trained_tokens for d in data)


def loss_inputs(datum: Datum, scale: float) -> dict[str, list[float] | list[int]]:
    """Target tokens, sampling logprobs and advantages as Tinker's losses read them (lists of one value per
    position; the SDK turns them into its tensors)."""
    trained = [w > 0 for w in datum.weights_T]
    return {
        "target_tokens": list(datum.target_tokens_T),
        # A placeholder where nothing is trained: the advantage there is 0, so the ratio never counts.
        "logprobs": [lp if t else 0.0 for lp, t in zip(datum.sampling_logprobs_T, trained, strict=True)],
        "advantages": [a * scale if t else 0.0 for a, t in zip(datum.advantages_T, trained, strict=True)],
    }


def to_tinker(tinker: Any, data: list[Datum]) -> list[Any]:
    """``tinker.Datum`` for each datum, advantages scaled to the batch's token-mean."""
    total = total_trained_tokens(data)
    scale = 1.0 / total if total else 0.0
    return [
        tinker.Datum(
            model_input=tinker.ModelInput.from_ints(tokens=list(d.input_tokens_T)),
            loss_fn_inputs=loss_inputs(d, scale),
        )
        for d in data
    ]


def to_tinker_forward(tinker: Any, data: list[Datum]) -> list[Any]:
    """Datums for a forward pass that only reads the target tokens' logprobs (``cross_entropy``)."""
    return [
        tinker.Datum(
            model_input=tinker.ModelInput.from_ints(tokens=list(d.input_tokens_T)),
            loss_fn_inputs={"target_tokens": list(d.target_tokens_T)},
        )
        for d in data
    ]


def returned_logprobs(output: Any) -> list[list[float]]:
    """The per-position logprobs of each datum in a Tinker ``ForwardBackwardOutput``."""
    rows = []
    for item in output.loss_fn_outputs:
        tensor = item["logprobs"]
        values = tensor.tolist() if hasattr(tensor, "tolist") else tensor.data
        rows.append([float(v) for v in values])
    return rows


def step_output(
    data: list[Datum], logprobs: list[list[float]], loss_fn: str, config: LossConfig | None
) -> ForwardBackwardOutput:
    """Loss (token-mean) and ``ratio_mean`` / ``clip_fraction`` / ``kl_sample_current``, as the local backend
    reports them, from the logprobs Tinker computed."""
    import torch

    total = total_trained_tokens(data)
    if total == 0:
        return ForwardBackwardOutput(loss=0.0, num_trained_tokens=0)
    loss = ratio = clipped = log_ratio = 0.0
    for datum, current in zip(data, logprobs, strict=True):
        # One datum at a time: shapes [1, T], no padding to get wrong.
        sums = policy_loss_sum(
            loss_fn,
            torch.tensor([current]),
            torch.tensor([datum.sampling_logprobs_T]),
            torch.tensor([datum.advantages_T]),
            torch.tensor([datum.weights_T]),
            config,
        )
        loss += float(sums.loss)
        ratio, clipped, log_ratio = ratio + sums.ratio, clipped + sums.clipped, log_ratio + sums.log_ratio
    metrics = {"ratio_mean": ratio / total, "clip_fraction": clipped / total, "kl_sample_current": -log_ratio / total}
    return ForwardBackwardOutput(loss=loss / total, num_trained_tokens=total, metrics=metrics)


def loss_fn_config(loss_fn: str, config: LossConfig | None) -> dict[str, float] | None:
    """Tinker's ``ppo`` takes its clip range as ratio thresholds; ``importance_sampling`` takes no config."""
    if loss_fn != "ppo":
        return None
    config = config or LossConfig()
    return {"clip_low_threshold": 1.0 - config.clip_epsilon_low, "clip_high_threshold": 1.0 + config.clip_epsilon_high}
