"""From scored groups (the wire format) to training data: group-normalised advantages and shifted datums.

Advantage of member ``i`` of a group: ``(score_i - mean) / (std + eps)``, ``mean`` the group's mean score and
``std`` by ``trainer.scale_rewards``: the population std of the group's scores (``group``, GRPO; the default), of
the whole batch's scores (``batch``), or no division at all (``none``, Dr. GRPO). The std is the population one
(divided by n), as hermes-nb always computed it; TRL's GRPOTrainer divides by n - 1 (the sample std), so its
advantages are smaller by sqrt((n - 1) / n) for a group of n. A group whose scores are all equal gets zero
advantages: it carries no signal about which completion was better. Precedence, most specific first:

1. ``overrides[i]["set_advantage_to_zero"]`` (or ``group_overrides["set_advantage_to_zero"]``): zero;
2. ``advantages`` sent with the group (per token): used as given;
3. otherwise the group-normalised score, the same for every token of the sequence.
"""

from __future__ import annotations

import math

from hermes_nb.config import RewardScaling
from hermes_nb.protocol.trajectory import MASK_IGNORE, ScoredDataGroup, scores_carry_signal
from hermes_nb.trainer.types import Datum

# Keeps the division finite for a group with a tiny spread; small enough not to shrink real differences.
ADVANTAGE_EPS = 1e-6
ZERO_OVERRIDE = "set_advantage_to_zero"


def population_std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def normalized_scores(scores_G: list[float], eps: float = ADVANTAGE_EPS, std: float | None = None) -> list[float]:
    """``(s - mean) / (std + eps)`` per member, ``std`` the group's own unless given (0.0: no division); all zeros
    when the scores are all equal."""
    if not scores_carry_signal(scores_G):
        return [0.0] * len(scores_G)
    mean = sum(scores_G) / len(scores_G)
    if std == 0.0:
        return [s - mean for s in scores_G]
    divisor = population_std(scores_G) if std is None else std
    return [(s - mean) / (divisor + eps) for s in scores_G]


def batch_std(batch: list[ScoredDataGroup], scale: RewardScaling) -> float | None:
    """The std every group of ``batch`` divides by under ``scale``: None (each group's own), 0.0 (none)."""
    if scale == "group":
        return None
    if scale == "none":
        return 0.0
    return population_std([s for group in batch for s in group.scores])


def _zeroed(group: ScoredDataGroup, index: int) -> bool:
    if group.group_overrides and group.group_overrides.get(ZERO_OVERRIDE):
        return True
    if not group.overrides:
        return False
    return bool(group.overrides[index].get(ZERO_OVERRIDE))


def token_advantages(group: ScoredDataGroup, std: float | None = None) -> list[list[float]]:
    """Per-token advantages of each member, aligned with ``group.tokens`` (see the module doc for precedence);
    ``std`` as ``normalized_scores`` takes it."""
    per_sequence = normalized_scores(group.scores, std=std)
    rows: list[list[float]] = []
    for i, tokens in enumerate(group.tokens):
        if _zeroed(group, i):
            rows.append([0.0] * len(tokens))
        elif group.advantages is not None:
            rows.append([float(a) for a in group.advantages[i]])
        else:
            rows.append([per_sequence[i]] * len(tokens))
    return rows


def with_token_advantages(group: ScoredDataGroup, std: float | None = None) -> ScoredDataGroup:
    """``group`` carrying the per-token advantages it is trained with, as the trainer records it."""
    return group.model_copy(update={"advantages": token_advantages(group, std)})


def with_batch_advantages(batch: list[ScoredDataGroup], scale: RewardScaling) -> list[ScoredDataGroup]:
    """Every group of ``batch`` carrying its advantages under ``trainer.scale_rewards``: what the loop trains on
    and records. Idempotent (advantages a group carries are used as given)."""
    if scale == "group":
        return batch  # each group's own std: token_advantages computes it wherever it is asked
    std = batch_std(batch, scale)
    return [with_token_advantages(group, std) for group in batch]


def sequence_datum(
    tokens: list[int], mask: list[int], advantages_T: list[float], sampling_logprobs: list[float] | None
) -> Datum | None:
    """Shift one sequence into a datum (position t predicts token t+1). ``None`` when nothing is trained on.

    Missing sampling logprobs are left as 0.0; the caller fills them from the current policy (on-policy)."""
    if len(tokens) < 2:
        return None
    weights = [0.0 if m == MASK_IGNORE else 1.0 for m in mask[1:]]
    if not any(weights):
        return None
    logprobs = sampling_logprobs[1:] if sampling_logprobs is not None else [0.0] * (len(tokens) - 1)
    return Datum(
        input_tokens_T=tokens[:-1],
        target_tokens_T=tokens[1:],
        weights_T=weights,
        sampling_logprobs_T=[float(x) for x in logprobs],
        advantages_T=advantages_T[1:],
    )


def group_data(group: ScoredDataGroup) -> tuple[list[Datum], list[bool]]:
    """The datums of one group and, for each, whether its sampling logprobs were sent (else: on-policy).

    None from a test-only group: its token ids were re-made from text, not sampled (the API refuses such groups;
    this keeps one that came another way, e.g. a replayed file, from being trained on)."""
    if group.is_test_only():
        return [], []
    advantages = token_advantages(group)
    data: list[Datum] = []
    has_logprobs: list[bool] = []
    for i, tokens in enumerate(group.tokens):
        sampled = group.inference_logprobs[i] if group.inference_logprobs is not None else None
        datum = sequence_datum(tokens, group.masks[i], advantages[i], sampled)
        if datum is None:
            continue
        data.append(datum)
        has_logprobs.append(sampled is not None)
    return data, has_logprobs


def has_signal(datum: Datum) -> bool:
    """Whether the datum moves the weights at all: with zero advantage everywhere both losses have zero grad."""
    return any(a != 0.0 and w > 0 for a, w in zip(datum.advantages_T, datum.weights_T, strict=True))
