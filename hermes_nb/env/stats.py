"""What the environment runtime counts between two metric rows, and the keys it logs them under."""

from __future__ import annotations

from dataclasses import dataclass, field

from hermes_nb.protocol.metrics import TRAIN_REWARD_MEAN
from hermes_nb.protocol.trajectory import MASK_IGNORE, ScoredDataGroup

ENV_GROUPS_POSTED = "env/groups_posted"
ENV_GROUPS_SKIPPED = "env/groups_skipped"
ENV_GROUPS_FAILED = "env/groups_failed"
ENV_SECONDS_PER_GROUP = "env/seconds_per_group"
ENV_COMPLETION_TOKENS_MEAN = "env/completion_tokens_mean"
ENV_QUEUE_SIZE = "env/api_queue_groups"
EVAL_SECONDS = "eval/seconds"


@dataclass
class GroupStats:
    """Counters of the groups finished since the last metrics row."""

    scores: list[float] = field(default_factory=list)
    completion_tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    posted: int = 0
    skipped: int = 0
    failed: int = 0

    def record_posted(self, group: ScoredDataGroup, seconds: float) -> None:
        self.posted += 1
        self.scores.extend(group.scores)
        self.seconds.append(seconds)
        self.completion_tokens.extend(sum(m != MASK_IGNORE for m in mask) for mask in group.masks)

    def record_skipped(self, seconds: float) -> None:
        self.skipped += 1
        self.seconds.append(seconds)

    def record_failed(self) -> None:
        self.failed += 1

    @property
    def empty(self) -> bool:
        return not (self.posted or self.skipped or self.failed)

    def row(self) -> dict[str, float]:
        """The metric values of these counters (start a fresh ``GroupStats`` for the next row)."""
        values: dict[str, float] = {
            ENV_GROUPS_POSTED: float(self.posted),
            ENV_GROUPS_SKIPPED: float(self.skipped),
            ENV_GROUPS_FAILED: float(self.failed),
        }
        if self.scores:
            values[TRAIN_REWARD_MEAN] = sum(self.scores) / len(self.scores)
        if self.seconds:
            values[ENV_SECONDS_PER_GROUP] = sum(self.seconds) / len(self.seconds)
        if self.completion_tokens:
            values[ENV_COMPLETION_TOKENS_MEAN] = sum(self.completion_tokens) / len(self.completion_tokens)
        return values
