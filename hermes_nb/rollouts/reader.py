"""Reading the samples of a step from a run's ``trajectories.jsonl.gz`` (``hermes_nb.trainer.run.checkpoints``).

Scores, verdicts and advantages are the recorded ones (``ScoredDataGroup.verdicts`` says what correct means; the
trainer records each group with the per-token advantages it trained with). The text is the
groups' recorded ``messages``, else the token ids decoded by the run's tokenizer (``decode``).
"""

from __future__ import annotations

from typing import Any

from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.recorded_batches import read_trajectories
from hermes_nb.protocol.trajectory import JUDGE_REASON_OVERRIDE, MASK_IGNORE, ScoredDataGroup
from hermes_nb.rollouts.decode import decoded_messages, run_tokenizer
from hermes_nb.rollouts.samples import DEFAULT_SAMPLES, Sample, SampleOrder, SampleView
from hermes_nb.runs.run_dirs import resolve_run

ORDERS: tuple[SampleOrder, ...] = ("recorded", "worst", "best")


class NoSamplesError(HermesNBError):
    """The run has recorded no trained batch yet, or not the step asked for."""


def read_samples(
    run_id: str | None = None,
    step: int | None = None,
    order: SampleOrder = "recorded",
    limit: int = DEFAULT_SAMPLES,
    min_score: float | None = None,
    max_score: float | None = None,
) -> SampleView:
    """The samples of ``step`` (default: the last recorded) of a run (default: the newest), those with a score
    in ``[min_score, max_score]``, ordered by ``order``, at most ``limit`` of them."""
    _check_arguments(order, limit, min_score, max_score)
    paths = resolve_run(run_id)
    if not paths.trajectories.is_file():
        raise NoSamplesError(f"run {paths.run_id} has recorded no samples yet ({paths.trajectories} is missing)")
    batches = dict(read_trajectories(paths.trajectories))
    if not batches:
        raise NoSamplesError(f"run {paths.run_id} has recorded no samples yet ({paths.trajectories} is empty)")
    steps = sorted(batches)
    chosen = steps[-1] if step is None else step
    if chosen not in batches:
        raise NoSamplesError(f"step: run {paths.run_id} recorded steps {steps[0]} to {steps[-1]}, not {chosen}")
    groups = batches[chosen]
    tokenizer = run_tokenizer(paths) if any(g.messages is None for g in groups) else None
    every = [s for g, group in enumerate(groups) for s in _group_samples(chosen, g, group, tokenizer)]
    kept = [s for s in every if _in_range(s.score, min_score, max_score)]
    if order != "recorded":
        kept.sort(key=lambda s: s.score, reverse=order == "best")  # stable: ties keep their recorded order
    scores = [s.score for s in every]
    return SampleView(
        run_id=paths.run_id,
        step=chosen,
        steps=steps,
        order=order,
        total=len(every),
        score_range=(min(scores), max(scores)),
        samples=kept[:limit],
    )


def _check_arguments(order: str, limit: int, min_score: float | None, max_score: float | None) -> None:
    if order not in ORDERS:
        raise HermesNBError(f"order: {order!r} is not an order; choose one of {', '.join(ORDERS)}")
    if limit < 1:
        raise HermesNBError(f"n: {limit} samples asked for; ask for at least 1")
    if min_score is not None and max_score is not None and min_score > max_score:
        raise HermesNBError(f"min_score: {min_score} is above max_score {max_score}; nothing could match")


def _in_range(score: float, low: float | None, high: float | None) -> bool:
    return (low is None or score >= low) and (high is None or score <= high)


def _group_samples(step: int, index: int, group: ScoredDataGroup, tokenizer: Any | None) -> list[Sample]:
    """The members of one group; without recorded ``messages``, text decoded by ``tokenizer`` when there is one."""
    advantages_G = group.advantages
    verdicts_G = group.verdicts()
    samples = []
    for i, (tokens, mask) in enumerate(zip(group.tokens, group.masks, strict=True)):
        completion_tokens = sum(1 for m in mask if m != MASK_IGNORE)
        if group.messages is not None:
            messages: list[dict[str, Any]] | None = [m.model_dump(mode="json") for m in group.messages[i]]
        else:
            messages = decoded_messages(tokenizer, tokens, mask) if tokenizer is not None else None
        samples.append(
            Sample(
                step=step,
                group=index,
                member=i,
                score=group.scores[i],
                correct=verdicts_G[i],
                advantage=None if advantages_G is None else _mean_trained(advantages_G[i], mask),
                messages=messages,
                decoded=group.messages is None and messages is not None,
                prompt_tokens=len(tokens) - completion_tokens,
                completion_tokens=completion_tokens,
                judge_reason=_judge_reason(group, i),
            )
        )
    return samples


def _judge_reason(group: ScoredDataGroup, member: int) -> str | None:
    reason = (group.overrides[member] if group.overrides else {}).get(JUDGE_REASON_OVERRIDE)
    return str(reason) if reason is not None else None


def _mean_trained(advantages_T: list[float], mask_T: list[int]) -> float:
    trained = [a for a, m in zip(advantages_T, mask_T, strict=True) if m != MASK_IGNORE]
    return sum(trained) / len(trained) if trained else 0.0
