"""hermes-nb's datums in Tinker's shape, and the figures of a step computed from what Tinker returns.

Tinker's ``importance_sampling`` and ``ppo`` losses *sum* over tokens and take no mask. hermes-nb's losses are the
token-mean over the batch's trained tokens (``hermes_nb.trainer.step.losses``), so the learning rate means the same on
both backends: each trained position's advantage is divided by the batch's trained-token count, and untrained
positions (the prompt) get advantage 0, which removes them from the loss and its gradient exactly as a mask would.

Tinker's ``ForwardBackwardOutput.metrics`` can come back empty (SkyRL 0.3.0 sends none), so the loss and its
diagnostics are computed here from the per-token logprobs it returns (``loss_fn_outputs[i]["logprobs"]``, the
current policy's, taken before the update), with the same function the local backend uses: never a made-up number.
"""

from __future__ import annotations

from typing import Any

from hermes_nb.trainer.step.losses import policy_loss_sum
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


def sampled_kl_T(datum: Datum) -> list[float]:
    """Per position, ``log p_sampler - log p_reference`` of the sampled token (k1's sample of the KL); 0.0 where
    nothing is trained. Needs ``reference_logprobs_T``."""
    assert datum.reference_logprobs_T is not None
    return [
        s - r if w > 0 else 0.0
        for s, r, w in zip(datum.sampling_logprobs_T, datum.reference_logprobs_T, datum.weights_T, strict=True)
    ]


def mean_sampled_kl(data: list[Datum]) -> float:
    """The batch's mean k1 sample of the KL over its trained tokens."""
    total = total_trained_tokens(data)
    return sum(sum(sampled_kl_T(d)) for d in data) / total if total else 0.0


def with_kl_penalty(data: list[Datum], beta: float) -> list[Datum]:
    """The KL penalty as Tinker can take it, folded into the advantages (tinker-cookbook's
    ``incorporate_kl_penalty``): each trained token's advantage gains ``beta * (mean_kl - kl_t)``, with ``kl_t`` the
    token's ``log p_sampler - log p_reference``. A policy-gradient step on that reward is a step down the KL (k1 as a
    reward penalty); centring on the batch's mean leaves the advantages' mean where it was."""
    mean = mean_sampled_kl(data)
    shaped = []
    for datum in data:
        kl_T = sampled_kl_T(datum)
        advantages = [
            a + beta * (mean - kl) if w > 0 else a
            for a, kl, w in zip(datum.advantages_T, kl_T, datum.weights_T, strict=True)
        ]
        shaped.append(datum.model_copy(update={"advantages_T": advantages}))
    return shaped


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


def reference_prompt(datum: Datum) -> list[int]:
    """The whole sequence of a datum (its inputs and the last target), as ``compute_logprobs`` scores it."""
    return [*datum.input_tokens_T, datum.target_tokens_T[-1]]


def aligned_reference_logprobs(datum: Datum, prompt_logprobs: list[float | None]) -> list[float]:
    """``compute_logprobs``'s answer aligned with the datum's targets: position ``t`` is the logprob of
    ``target_tokens_T[t]``. The SDK documents one value per token of the sequence, None for the first (nothing
    predicts it); SkyRL 0.3.0 leaves that first one out. Either shape is read; any other is refused."""
    targets = len(datum.target_tokens_T)
    if len(prompt_logprobs) == targets + 1:
        prompt_logprobs = prompt_logprobs[1:]
    if len(prompt_logprobs) != targets:
        raise ValueError(
            f"compute_logprobs returned {len(prompt_logprobs)} values for a sequence of {targets + 1} tokens"
        )
    return [float(v) if v is not None else 0.0 for v in prompt_logprobs]


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
