"""Policy-gradient losses by the names the Tinker service uses.

Both are applied token-wise, on the positions a datum trains on (``weights_T > 0``), with
``ratio = exp(logp_current - logp_sampling)`` (current policy over the policy that sampled the token):

- ``importance_sampling``: ``-(ratio * A)``. Its gradient is the REINFORCE gradient corrected for the sampling
  policy being a step (or a temperature) away from the current one.
- ``ppo``: ``-min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)``.

Aggregation differs from Tinker on purpose: Tinker sums over tokens, we take the token-mean over the trained
tokens of the whole batch, so the learning rate does not scale with batch size or completion length. The
functions here return *sums*; the caller divides by the batch's trained-token count, which keeps micro-batched
gradient accumulation exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_nb.trainer.types import LossConfig

if TYPE_CHECKING:
    import torch

LOSS_NAMES = ("importance_sampling", "ppo")


class LossSums:
    """Sums over trained tokens: the loss and the diagnostics, each to be divided by the token count."""

    def __init__(self, loss: torch.Tensor, ratio: float, clipped: float, log_ratio: float) -> None:
        self.loss = loss
        self.ratio = ratio
        self.clipped = clipped
        self.log_ratio = log_ratio


def policy_loss_sum(
    loss_fn: str,
    logprobs_BT: torch.Tensor,
    sampling_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    weights_BT: torch.Tensor,
    config: LossConfig | None = None,
    counts_B: torch.Tensor | None = None,
) -> LossSums:
    """The summed loss of ``loss_fn`` over positions with ``weights_BT > 0`` (all tensors ``[B, T]``).
    ``counts_B`` says how many identical sequences each row stands for (a packed batch); default one each."""
    import torch

    if loss_fn not in LOSS_NAMES:
        raise ValueError(f"loss_fn: {loss_fn!r} is not one of {', '.join(LOSS_NAMES)}")
    config = config or LossConfig()
    trained = weights_BT > 0
    multiplicity_BT = trained.to(logprobs_BT.dtype)
    if counts_B is not None:
        multiplicity_BT = multiplicity_BT * counts_B[:, None]
    # Untrained positions carry placeholder sampling logprobs (1.0 on the wire); zero the difference there so
    # exp() never sees garbage and no gradient flows through them.
    log_ratio = torch.where(trained, logprobs_BT - sampling_logprobs_BT, torch.zeros_like(logprobs_BT))
    ratio = torch.exp(log_ratio)
    surrogate = ratio * advantages_BT
    clipped_fraction = torch.zeros((), dtype=logprobs_BT.dtype)
    if loss_fn == "ppo":
        clipped_ratio = torch.clamp(ratio, 1.0 - config.clip_epsilon_low, 1.0 + config.clip_epsilon_high)
        clipped = clipped_ratio * advantages_BT
        surrogate = torch.minimum(surrogate, clipped)
        clipped_fraction = ((clipped < ratio * advantages_BT).to(logprobs_BT.dtype) * multiplicity_BT).sum()
    per_token = -surrogate * weights_BT
    if counts_B is not None:
        per_token = per_token * counts_B[:, None]
    with torch.no_grad():
        ratio_sum = float((ratio * multiplicity_BT).sum())
        log_ratio_sum = float((log_ratio * multiplicity_BT).sum())
    return LossSums(per_token.sum(), ratio_sum, float(clipped_fraction), log_ratio_sum)


def token_logprobs(logits_BTV: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
    """Logprob of each target token under ``logits`` (float32 log-softmax for accuracy): ``[B, T]``."""
    import torch

    logp_BTV = torch.log_softmax(logits_BTV.float(), dim=-1)
    return logp_BTV.gather(-1, targets_BT.unsqueeze(-1)).squeeze(-1)
