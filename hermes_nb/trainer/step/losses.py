"""Policy-gradient losses: the objectives of ``hermes_nb.objectives`` (Tinker's names), with what they all share,
aggregated and regularised as TRL's ``GRPOTrainer`` does.

Every term is per token, on the positions a datum trains on (``weights_T > 0``), with the importance ratio
``ratio = exp(logp_current - logp_old)``. ``logp_old`` is the sampling policy's logprob (``sampling_logprobs_T``),
or the trainer's own before the step (``old_logprobs_T``) when the sampler/trainer mismatch is corrected (below).
The objective (``loss_fn``) turns the ratio, the advantage and the current logprob into its surrogate, whose
negative is the token's loss; each one's formula is in its definition (``importance_sampling``, ``ppo``,
``cispo``).

Modifiers (``LossConfig``):

- ``importance_sampling_level: sequence`` (GSPO): the ratio is ``exp`` of the sequence's mean log-ratio over its
  trained tokens, shared by all of them.
- ``importance_sampling_cap`` (truncated importance sampling, Yao et al. 2025; TRL's
  ``vllm_importance_sampling_mode: token_truncate``): each token's loss is weighted by
  ``min(exp(old - sampling), cap)``, detached, and the ratio's denominator becomes ``old_logprobs_T``.
- ``beta > 0``: ``beta * KL`` is added per token (after the weight above, as TRL does), with Schulman's estimators
  of ``KL(current || reference)`` on the sampled token: ``k1 = logp - ref``, ``k2 = (logp - ref)^2 / 2``,
  ``k3 = exp(ref - logp) - (ref - logp) - 1`` (non-negative; GRPO's and TRL's only one).

Aggregation (``loss_type``, TRL's names): ``dapo`` and ``bnpo`` divide the sum over every trained token of the
batch by the number of those tokens (one local batch per step, so they coincide; DAPO's token-mean, and the
default: the learning rate does not scale with batch size or completion length); ``grpo`` takes each sequence's
token-mean, then the mean over sequences (DeepSeekMath; long completions get less weight per token); ``dr_grpo``
divides the sum by ``sequences x max_completion_length`` (Dr. GRPO: a constant, so no length bias). Tinker sums
over tokens instead (its service fixes the aggregation). Every sequence of the batch counts in ``grpo`` and
``dr_grpo``, including one whose tokens are all masked (as TRL's ``B``).

``policy_loss_sum`` returns *sums* over a (micro-)batch: the caller divides them once, by
``loss_normaliser`` of the whole batch, which keeps micro-batched gradient accumulation and a packed batch (one
row standing for ``counts_B`` identical sequences) exact. The diagnostics are TRL's: the clip fractions low and
high where the objective says it clipped (``Surrogate``), over tokens (over sequences at sequence level), the mean
KL to the reference, and the policy's mean entropy at the trained positions.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from hermes_nb.objectives import Surrogate, SurrogateInputs, objective
from hermes_nb.trainer.types import LossConfig

if TYPE_CHECKING:
    import torch

# Upper bound on logits elements (rows x positions x vocab) per forward pass of the local backend: 64M float32 =
# 256 MB, so a large vocabulary or batch is split into micro-batches instead of exhausting memory. Gradients
# accumulate exactly. (Here, torch-free, so the memory model reads it too.)
MAX_LOGITS_ELEMENTS = 64 * 1024 * 1024
# Logprobs and the entropy metric are computed in blocks of this many logits (16 MB of float32).
LOGITS_CHUNK_ELEMENTS = 1 << 22


@dataclass
class LossStats:
    """Sums over the trained tokens of a (micro-)batch, counted with multiplicity; ``+`` adds micro-batches."""

    tokens: float = 0.0
    sequences: float = 0.0
    ratio: float = 0.0
    # Sum of log(current / sampling): the sampling policy's distance from the current one.
    log_ratio: float = 0.0
    clipped_low: float = 0.0
    clipped_high: float = 0.0
    # What the clip fractions are over: tokens, or sequences at sequence level (TRL's).
    clip_units: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0

    def __add__(self, other: LossStats) -> LossStats:
        return LossStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def metrics(self, config: LossConfig) -> dict[str, float]:
        """Means by the names ``protocol.metrics.train_key`` maps (``kl`` -> ``train/kl``); ``kl`` only with beta."""
        tokens, units = max(self.tokens, 1.0), max(self.clip_units, 1.0)
        values = {
            "ratio_mean": self.ratio / tokens,
            "clip_fraction": (self.clipped_low + self.clipped_high) / units,
            "clip_fraction_low": self.clipped_low / units,
            "clip_fraction_high": self.clipped_high / units,
            "kl_sample_current": -self.log_ratio / tokens,
            "entropy": self.entropy / tokens,
        }
        if config.beta > 0:
            values["kl"] = self.kl / tokens
        return values


@dataclass
class LossSums:
    """The loss summed over a (micro-)batch, to be divided by ``loss_normaliser`` of the whole batch."""

    loss: torch.Tensor
    stats: LossStats

    # The names the Tinker route reads (hermes_nb.tinker.datums): sums over trained tokens.
    @property
    def ratio(self) -> float:
        return self.stats.ratio

    @property
    def clipped(self) -> float:
        return self.stats.clipped_low + self.stats.clipped_high

    @property
    def log_ratio(self) -> float:
        return self.stats.log_ratio


def loss_normaliser(config: LossConfig | None, tokens: float, sequences: float) -> float:
    """What the whole batch's summed loss is divided by under ``config.loss_type`` (see the module doc)."""
    config = config or LossConfig()
    if config.loss_type == "grpo":
        return max(sequences, 1.0)
    if config.loss_type == "dr_grpo":
        return max(sequences, 1.0) * config.max_completion_length
    return max(tokens, 1.0)


def kl_estimate(logprobs_BT: torch.Tensor, reference_logprobs_BT: torch.Tensor, estimator: str) -> torch.Tensor:
    """Schulman's per-token estimators of KL(current || reference) from the sampled tokens' logprobs."""
    import torch

    log_ref_over_current = reference_logprobs_BT - logprobs_BT
    if estimator == "k1":
        return -log_ref_over_current
    if estimator == "k2":
        return log_ref_over_current**2 / 2
    if estimator == "k3":
        return torch.exp(log_ref_over_current) - log_ref_over_current - 1
    raise ValueError(f"kl_estimator: {estimator!r} is not one of k1, k2, k3")


def truncated_importance_weight(
    old_logprobs_BT: torch.Tensor, sampling_logprobs_BT: torch.Tensor, cap: float
) -> torch.Tensor:
    """``min(p_trainer / p_sampler, cap)`` per token, detached: the sampler/trainer mismatch correction."""
    import torch

    return torch.clamp(torch.exp(old_logprobs_BT - sampling_logprobs_BT), max=cap).detach()


def _needed(tensor: torch.Tensor | None, field: str, why: str) -> torch.Tensor:
    if tensor is None:
        raise ValueError(f"{field}: the batch has none, and {why} needs it")
    return tensor


@dataclass(frozen=True)
class _Positions:
    """Which positions of a ``[B, T]`` batch train, and how many sequences and tokens each row stands for."""

    trained_BT: torch.Tensor
    # Each trained position's count: the number of identical sequences its row stands for.
    multiplicity_BT: torch.Tensor
    counts_B: torch.Tensor
    tokens_B: torch.Tensor


def _positions(weights_BT: torch.Tensor, dtype: torch.dtype, counts_B: torch.Tensor | None) -> _Positions:
    import torch

    trained = weights_BT > 0
    counts = counts_B if counts_B is not None else torch.ones(trained.shape[0], dtype=dtype, device=trained.device)
    multiplicity_BT = trained.to(dtype)
    if counts_B is not None:
        multiplicity_BT = multiplicity_BT * counts_B[:, None]
    return _Positions(trained, multiplicity_BT, counts, trained.sum(-1).clamp(min=1).to(dtype))


def _log_ratio(logprobs_BT: torch.Tensor, denominator_BT: torch.Tensor, at: _Positions) -> torch.Tensor:
    """``log(current / denominator)`` per position; 0 where nothing is trained."""
    import torch

    # Untrained positions carry placeholder logprobs (1.0 on the wire); zero every difference there so exp()
    # never sees garbage and no gradient flows through them.
    return torch.where(at.trained_BT, logprobs_BT - denominator_BT, torch.zeros_like(logprobs_BT))


def _ratio(log_ratio_BT: torch.Tensor, at: _Positions, config: LossConfig) -> torch.Tensor:
    """The importance ratio at the config's level: per token, or GSPO's per sequence."""
    import torch

    if config.importance_sampling_level == "sequence":
        # [B] mean log-ratio of each sequence's trained tokens, shared by its [B, T] positions.
        log_ratio_BT = (log_ratio_BT.sum(-1) / at.tokens_B)[:, None].expand_as(log_ratio_BT)
    return torch.exp(log_ratio_BT)


def _truncation_weight(
    old_BT: torch.Tensor | None, sampling_BT: torch.Tensor, at: _Positions, cap: float
) -> torch.Tensor:
    import torch

    zeros = torch.zeros_like(sampling_BT)
    old = torch.where(at.trained_BT, _needed(old_BT, "old_logprobs_T", "importance_sampling_cap"), zeros)
    return truncated_importance_weight(old, torch.where(at.trained_BT, sampling_BT, zeros), cap)


def _aggregate(per_token_BT: torch.Tensor, at: _Positions, config: LossConfig, counted: bool) -> torch.Tensor:
    """The per-token losses summed as ``config.loss_type`` asks (``counted``: rows stand for several sequences)."""
    if config.loss_type == "grpo":
        return ((per_token_BT.sum(-1) / at.tokens_B) * at.counts_B).sum()
    if counted:
        per_token_BT = per_token_BT * at.counts_B[:, None]
    return per_token_BT.sum()


def _clipped(mask_BT: torch.Tensor | None, at: _Positions, config: LossConfig) -> float:
    if mask_BT is None:
        return 0.0
    if config.importance_sampling_level == "sequence":
        # TRL counts a sequence-level clip once per sequence (its ratio is one per sequence).
        return float((((mask_BT & at.trained_BT).sum(-1) / at.tokens_B) * at.counts_B).sum())
    return float((mask_BT.to(at.multiplicity_BT.dtype) * at.multiplicity_BT).sum())


def _weighted_sum(values_BT: torch.Tensor | None, at: _Positions) -> float:
    return float((values_BT * at.multiplicity_BT).sum()) if values_BT is not None else 0.0


def _stats(
    surrogate: Surrogate,
    ratio_BT: torch.Tensor,
    sample_log_ratio_BT: torch.Tensor,
    at: _Positions,
    config: LossConfig,
    kl_BT: torch.Tensor | None,
    entropy_BT: torch.Tensor | None,
) -> LossStats:
    sequence_level = config.importance_sampling_level == "sequence"
    return LossStats(
        tokens=float(at.multiplicity_BT.sum()),
        sequences=float(at.counts_B.sum()),
        ratio=_weighted_sum(ratio_BT, at),
        log_ratio=_weighted_sum(sample_log_ratio_BT, at),
        clipped_low=_clipped(surrogate.clipped_low_BT, at, config),
        clipped_high=_clipped(surrogate.clipped_high_BT, at, config),
        clip_units=float(at.counts_B.sum()) if sequence_level else float(at.multiplicity_BT.sum()),
        kl=_weighted_sum(kl_BT, at),
        entropy=_weighted_sum(entropy_BT, at),
    )


def policy_loss_sum(
    loss_fn: str,
    logprobs_BT: torch.Tensor,
    sampling_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    weights_BT: torch.Tensor,
    config: LossConfig | None = None,
    counts_B: torch.Tensor | None = None,
    *,
    old_logprobs_BT: torch.Tensor | None = None,
    reference_logprobs_BT: torch.Tensor | None = None,
    entropy_BT: torch.Tensor | None = None,
) -> LossSums:
    """The summed loss of the objective ``loss_fn`` (``hermes_nb.objectives``) over positions with
    ``weights_BT > 0`` (all tensors ``[B, T]``), and its diagnostics. ``counts_B`` says how many identical sequences
    each row stands for (a packed batch); default one each. ``old_logprobs_BT`` is read when
    ``config.importance_sampling_cap`` is set, ``reference_logprobs_BT`` when ``config.beta > 0``; ``entropy_BT``
    (the policy's entropy per position, no grad) only feeds its metric."""
    import torch

    chosen = objective(loss_fn)
    config = config or LossConfig()
    at = _positions(weights_BT, logprobs_BT.dtype, counts_B)
    sample_log_ratio = _log_ratio(logprobs_BT, sampling_logprobs_BT, at)
    cap = config.importance_sampling_cap
    log_ratio = sample_log_ratio
    if cap is not None:
        log_ratio = _log_ratio(logprobs_BT, _needed(old_logprobs_BT, "old_logprobs_T", "importance_sampling_cap"), at)
    ratio = _ratio(log_ratio, at, config)
    surrogate = chosen.surrogate(
        SurrogateInputs(ratio, advantages_BT, logprobs_BT, config.clip_epsilon_low, config.clip_epsilon_high)
    )
    per_token = -surrogate.value_BT
    if cap is not None:
        per_token = per_token * _truncation_weight(old_logprobs_BT, sampling_logprobs_BT, at, cap)
    kl: torch.Tensor | None = None
    if config.beta > 0:
        reference = _needed(reference_logprobs_BT, "reference_logprobs_T", "beta > 0 (the KL penalty)")
        kl = kl_estimate(logprobs_BT, torch.where(at.trained_BT, reference, logprobs_BT.detach()), config.kl_estimator)
        per_token = per_token + config.beta * kl
    loss = _aggregate(per_token * weights_BT, at, config, counts_B is not None)
    with torch.no_grad():
        stats = _stats(surrogate, ratio, sample_log_ratio, at, config, kl, entropy_BT)
    return LossSums(loss, stats)


def token_logprobs(logits_BTV: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
    """Logprob of each target token under ``logits`` (float32 log-softmax for accuracy): ``[B, T]``."""
    return token_logprobs_and_entropy(logits_BTV, targets_BT)[0]


def _block_logprobs(logits_RV: torch.Tensor, targets_R: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[target]`` of a block of positions, in float32, without the ``[R, V]`` log-softmax:
    the target's logit less the log-sum-exp."""
    import torch

    logits_RV = logits_RV.float()
    return logits_RV.gather(-1, targets_R[:, None]).squeeze(-1) - torch.logsumexp(logits_RV, dim=-1)


def _block_entropy(logits_RV: torch.Tensor, logp_R: torch.Tensor, targets_R: torch.Tensor) -> torch.Tensor:
    """The policy's entropy at each position of a block (no gradient), from its log-sum-exp."""
    import torch

    with torch.no_grad():
        logits_RV = logits_RV.float()
        # log-sum-exp = target logit - target logprob: no second reduction over the vocabulary.
        lse_R = logits_RV.gather(-1, targets_R[:, None]).squeeze(-1) - logp_R.detach()
        logp_RV = logits_RV - lse_R[:, None]
        return -(logp_RV.exp() * logp_RV).sum(-1)


def _logprobs_of(logits_RV: torch.Tensor, targets_R: torch.Tensor) -> torch.Tensor:
    import torch
    from torch.utils.checkpoint import checkpoint

    if logits_RV.dtype == torch.float32 or not torch.is_grad_enabled():
        return _block_logprobs(logits_RV, targets_R)
    # Lower-precision logits: the block's float32 copy would be kept for the backward pass, one per block, i.e.
    # the whole batch's float32 logits after all; recomputed from the stored logits instead.
    out: torch.Tensor = checkpoint(_block_logprobs, logits_RV, targets_R, use_reentrant=False)
    return out


def token_logprobs_and_entropy(
    logits_BTV: torch.Tensor, targets_BT: torch.Tensor, weights_BT: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``token_logprobs``, and with ``weights_BT`` the policy's entropy at the positions it trains on (``[B, T]``,
    zero elsewhere, no gradient).

    In blocks of ``LOGITS_CHUNK_ELEMENTS`` logits: a float32 log-softmax of the whole batch would be a second
    ``[B, T, V]`` tensor beside the logits (4.9 GB for 16 x 512 tokens over 151,936 ids), and one ``[N, V]``
    temporary per operation cost 3x the time at a large vocabulary (allocation and memory traffic); blocks stay
    in cache. The result equals the unblocked computation (tests pin loss, gradients and metrics)."""
    import torch

    vocab = logits_BTV.shape[-1]
    flat_NV = logits_BTV.reshape(-1, vocab)  # [B*T, V]: a view of the logits
    targets_N = targets_BT.reshape(-1)
    rows = max(1, LOGITS_CHUNK_ELEMENTS // vocab)
    blocks = range(0, flat_NV.shape[0], rows)
    logp_N = torch.cat([_logprobs_of(flat_NV[i : i + rows], targets_N[i : i + rows]) for i in blocks])
    logp_BT = logp_N.reshape(targets_BT.shape)
    if weights_BT is None:
        return logp_BT, None
    trained_N = (weights_BT > 0).reshape(-1).nonzero().squeeze(-1)
    entropy_N = torch.zeros_like(logp_N, requires_grad=False)
    for index in trained_N.split(rows):  # only the trained positions, a block at a time
        entropy_N[index] = _block_entropy(flat_NV[index], logp_N[index], targets_N[index])
    return logp_BT, entropy_N.reshape(logp_BT.shape)
