"""Metric keys and the per-step row shared by the trainer, the environment, W&B and ``metrics.jsonl``.

The key names are the contract between whoever logs and whoever reads (status, plots, benchmarks): every writer
and every reader imports these constants, so a reader cannot look up a key that no writer logs.
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
# Of a step's batch: the sequences and tokens that carried a learning signal (the rest cost no gradient).
TRAIN_TRAINED_SEQUENCES = "train/trained_sequences"
TRAIN_TRAINED_TOKENS = "train/trained_tokens"
# A step's wall time split: waiting for the batch, then computing on it.
TRAIN_WAIT_SECONDS = "train/wait_seconds"
TRAIN_COMPUTE_SECONDS = "train/compute_seconds"
# The share of a step's batch that came from a replayed earlier run (transfer learning).
TRAIN_REPLAY_FRACTION = "train/replay_fraction"

# The environment runtime's counters, per metrics row.
ENV_GROUPS_POSTED = "env/groups_posted"
ENV_GROUPS_SKIPPED = "env/groups_skipped"
# Groups lost to a fault of the environment: collect_trajectories raised, the group was malformed (the runtime's
# check or the API's 4xx), or the post failed. Timed-out calls are counted apart, under ENV_TIMEOUTS.
ENV_GROUPS_FAILED = "env/failed_groups"
ENV_TIMEOUTS = "env/timeouts"
ENV_SECONDS_PER_GROUP = "env/seconds_per_group"
ENV_COMPLETION_TOKENS_MEAN = "env/completion_tokens_mean"
ENV_QUEUE_SIZE = "env/api_queue_groups"
# Multi-turn agent environments (hermes_nb.env.agent), per metrics row: episodes that raised (left out of their
# group), episodes that used every turn of env.max_turns without an answer, and assistant turns per episode.
ENV_FAILED_EPISODES = "env/failed_episodes"
ENV_TURN_LIMIT_EPISODES = "env/turn_limit_episodes"
ENV_TURNS_MEAN = "env/turns_mean"
# Held-out episodes of an evaluation that raised (each counted as wrong).
EVAL_FAILED_EPISODES = "eval/failed_episodes"
EVAL_SECONDS = "eval/seconds"

# The W&B key that carries the trainer step of every row: the x-axis of every chart, next to W&B's own _step.
WANDB_STEP_KEY = "trainer/step"

# Both the trainer and the environment log these. The environment's value covers every completion it sampled;
# the trainer's only the sequences in the batch it trained on, which excludes groups dropped for having equal
# scores (ensure_scores_are_not_same) and so reads higher. Readers showing "how often the policy is right"
# (status, the plot) take the environment's value and fall back to the trainer's.
ENV_PREFERRED_KEYS = frozenset({TRAIN_REWARD_MEAN, TRAIN_PERCENT_CORRECT})

# Every training metric's key starts with TRAIN_PREFIX, every evaluation metric's with EVAL_PREFIX.
TRAIN_PREFIX = "train/"
EVAL_PREFIX = "eval/"


def train_key(name: str) -> str:
    """The key of a training metric a backend reports under its own name (``grad_norm`` -> ``train/grad_norm``)."""
    return TRAIN_PREFIX + name


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
