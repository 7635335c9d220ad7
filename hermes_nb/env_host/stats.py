"""What the environment host counts between two metric rows (its keys are in ``hermes_nb.protocol.metrics``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hermes_nb.protocol.metrics import (
    ENV_COMPLETION_TOKENS_MEAN,
    ENV_GROUPS_FAILED,
    ENV_GROUPS_POSTED,
    ENV_GROUPS_SKIPPED,
    ENV_PERCENT_CORRECT,
    ENV_REWARD_MEAN,
    ENV_SECONDS_PER_GROUP,
    ENV_TIMEOUTS,
)
from hermes_nb.protocol.trajectory import MASK_IGNORE, ScoredDataGroup


@dataclass
class GroupStats:
    """Counters of the groups finished since the last metrics row."""

    # One entry per completion scored, whatever became of its group: its reward and the environment's verdict.
    # ENV_REWARD_MEAN and ENV_PERCENT_CORRECT are both read from these two lists, so they count the same completions.
    scores: list[float] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    completion_tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    posted: int = 0
    skipped: int = 0
    failed: int = 0
    timeouts: int = 0

    def record_scored(self, scores: list[float], correct: list[bool]) -> None:
        """Completions the environment scored, before the host decides whether their group is sent."""
        if len(scores) != len(correct):
            raise ValueError(f"correct: got {len(correct)} verdicts for {len(scores)} scores; they must match")
        self.scores.extend(scores)
        self.correct.extend(correct)

    def record_posted(self, group: ScoredDataGroup, seconds: float) -> None:
        self.posted += 1
        self.seconds.append(seconds)
        self.completion_tokens.extend(sum(m != MASK_IGNORE for m in mask) for mask in group.masks)

    def record_skipped(self, seconds: float) -> None:
        self.skipped += 1
        self.seconds.append(seconds)

    def record_failed(self) -> None:
        self.failed += 1

    def record_timeout(self) -> None:
        self.timeouts += 1

    @property
    def empty(self) -> bool:
        return not (self.posted or self.skipped or self.failed or self.timeouts or self.scores)

    def take_faults(self) -> dict[str, float]:
        """The fault counters as metric values, reset to zero: a fault row goes out at once (status shows it
        while the trainer may be stalled for lack of groups); the other counters wait for the step's row."""
        values = {ENV_GROUPS_FAILED: float(self.failed), ENV_TIMEOUTS: float(self.timeouts)}
        self.failed = self.timeouts = 0
        return values

    def row(self) -> dict[str, float]:
        """The metric values of these counters (start a fresh ``GroupStats`` for the next row)."""
        values: dict[str, float] = {
            ENV_GROUPS_POSTED: float(self.posted),
            ENV_GROUPS_SKIPPED: float(self.skipped),
            ENV_GROUPS_FAILED: float(self.failed),
            ENV_TIMEOUTS: float(self.timeouts),
        }
        if self.scores:
            values[ENV_REWARD_MEAN] = sum(self.scores) / len(self.scores)
            values[ENV_PERCENT_CORRECT] = sum(self.correct) / len(self.correct)
        if self.seconds:
            values[ENV_SECONDS_PER_GROUP] = sum(self.seconds) / len(self.seconds)
        if self.completion_tokens:
            values[ENV_COMPLETION_TOKENS_MEAN] = sum(self.completion_tokens) / len(self.completion_tokens)
        return values
