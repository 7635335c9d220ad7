"""The figures of a step that come from its batch rather than the loss: rewards and correctness of what was
trained, the spread of scores, completion lengths and truncation, and throughput."""

from __future__ import annotations

from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.trajectory import MASK_IGNORE, ScoredDataGroup
from hermes_nb.trainer.step.advantages import population_std


def batch_score_metrics(batch: list[ScoredDataGroup]) -> dict[str, float]:
    """Of the trained batch (``train/*``, the trainer's alone): reward mean over its sequences, and percent correct =
    the share of them the environment judged correct (``ScoredDataGroup.verdicts``)."""
    scores = [s for group in batch for s in group.scores]
    correct = [v for group in batch for v in group.verdicts()]
    return {
        keys.TRAIN_REWARD_MEAN: sum(scores) / len(scores),
        keys.TRAIN_REWARD_MIN: min(scores),
        keys.TRAIN_REWARD_MAX: max(scores),
        keys.TRAIN_PERCENT_CORRECT: sum(correct) / len(correct),
    }


def completion_lengths(batch: list[ScoredDataGroup]) -> list[int]:
    """Completion tokens of each sequence of ``batch``: the trained ones (mask not ``MASK_IGNORE``)."""
    return [sum(1 for m in mask if m != MASK_IGNORE) for group in batch for mask in group.masks]


def batch_shape_metrics(batch: list[ScoredDataGroup], max_token_len: int | None) -> dict[str, float]:
    """What people watch while comparing algorithms, of the batch as it came: the spread of its scores
    (population std), completion lengths in tokens, and the share of completions cut off before they ended."""
    lengths = completion_lengths(batch)
    values = {
        keys.TRAIN_REWARD_STD: population_std([s for group in batch for s in group.scores]),
        keys.TRAIN_COMPLETION_LENGTH: sum(lengths) / len(lengths),
        keys.TRAIN_COMPLETION_LENGTH_MAX: float(max(lengths)),
    }
    if max_token_len is not None:
        cut = [t for group in batch for t in group.truncations(max_token_len)]
        values[keys.TRAIN_TRUNCATED_FRACTION] = sum(cut) / len(cut)
    return values


def throughput(batch: list[ScoredDataGroup], step_seconds: float) -> dict[str, float]:
    sequences = sum(len(g.tokens) for g in batch)
    tokens = sum(len(t) for g in batch for t in g.tokens)
    seconds = max(step_seconds, 1e-9)
    return {
        keys.TRAIN_STEP_SECONDS: step_seconds,
        keys.TRAIN_SEQUENCES_PER_SECOND: sequences / seconds,
        keys.TRAIN_TOKENS_PER_SECOND: tokens / seconds,
    }
