"""Metric keys and the per-step row shared by the trainer, the environment, W&B and ``metrics.jsonl``.

The key names are the contract between whoever logs and whoever reads (status, plots, benchmarks): the tool
this package replaces looked up keys its trainer never logged, so every reader imports these constants.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

TRAIN_LOSS = "train/loss"
TRAIN_REWARD_MEAN = "train/reward_mean"
TRAIN_PERCENT_CORRECT = "train/percent_correct"
EVAL_PERCENT_CORRECT = "eval/percent_correct"
# The trainer step whose weights an evaluation measured (the server's policy version), when the server says.
EVAL_POLICY_STEP = "eval/policy_step"
TRAIN_LEARNING_RATE = "train/learning_rate"
TRAIN_SEQUENCES_PER_SECOND = "train/sequences_per_second"
TRAIN_TOKENS_PER_SECOND = "train/tokens_per_second"
TRAIN_STEP_SECONDS = "train/step_seconds"

# Both the trainer and the environment log these. The environment's value covers every completion it sampled;
# the trainer's only the sequences in the batch it trained on, which excludes groups dropped for having equal
# scores (ensure_scores_are_not_same) and so reads higher. Readers showing "how often the policy is right"
# (status, the plot) take the environment's value and fall back to the trainer's.
ENV_PREFERRED_KEYS = frozenset({TRAIN_REWARD_MEAN, TRAIN_PERCENT_CORRECT})

# Files in the run directory, one JSON object per line.
TRAINER_METRICS_FILE = "metrics.jsonl"
ENV_METRICS_FILE = "env_metrics.jsonl"


class MetricsRow(BaseModel):
    """One line of ``metrics.jsonl`` / ``env_metrics.jsonl``: the trainer step, wall time, and W&B-style keys."""

    model_config = ConfigDict(extra="forbid")

    step: int
    time: float
    values: dict[str, float]

    def to_json_line(self) -> str:
        return self.model_dump_json() + "\n"

    @classmethod
    def from_json_line(cls, line: str) -> MetricsRow:
        return cls.model_validate_json(line)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)
