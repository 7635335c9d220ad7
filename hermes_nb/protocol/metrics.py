"""Metric keys and the per-step row shared by the trainer, the environment, W&B and ``metrics.jsonl``.

The key names are the contract between whoever logs and whoever reads (status, plots, benchmarks): every writer
and every reader imports these constants, so a reader cannot look up a key that no writer logs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

TRAIN_LOSS = "train/loss"
# The trained batch, written by the trainer to metrics.jsonl and nowhere else: every sequence of the groups a step
# trained on, which the environment runtime chose among the groups sampled (it drops groups without signal,
# ensure_scores_are_not_same), so on a hard task they read higher than ENV_REWARD_MEAN / ENV_PERCENT_CORRECT.
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
# The algorithm's view of a step (hermes_nb.trainer.step.losses, .loop): the spread of the batch's scores, the KL to
# the reference policy (only with trainer.beta > 0), the mean entropy of the policy at the trained positions, the
# share of trained tokens whose ratio was clipped below (advantage < 0) or above (advantage > 0), completion lengths
# in tokens, the share of completions cut off at max_token_length, groups without signal dropped from the batch
# (dynamic sampling), and optimizer steps taken so far (num_iterations per batch).
TRAIN_REWARD_STD = "train/reward_std"
# The lowest and highest score of the trained batch: the range the reward's mean +- std is drawn within.
TRAIN_REWARD_MIN = "train/reward_min"
TRAIN_REWARD_MAX = "train/reward_max"
TRAIN_KL = "train/kl"
# On-policy distillation (trainer.teacher_model): the mean over trained tokens of log p_student - log p_teacher on
# the sampled tokens, the per-token reverse KL to the teacher (hermes_nb.trainer.step.distillation).
TRAIN_TEACHER_KL = "train/teacher_kl"
TRAIN_ENTROPY = "train/entropy"
TRAIN_CLIP_FRACTION_LOW = "train/clip_fraction_low"
TRAIN_CLIP_FRACTION_HIGH = "train/clip_fraction_high"
TRAIN_COMPLETION_LENGTH = "train/completion_length"
TRAIN_COMPLETION_LENGTH_MAX = "train/completion_length_max"
TRAIN_TRUNCATED_FRACTION = "train/truncated_fraction"
TRAIN_GROUPS_DROPPED = "train/groups_dropped"
TRAIN_OPTIMIZER_STEPS = "train/optimizer_steps"
# The local trainer's GPU time and peak allocated GPU memory so far, running totals of its process, written only
# where it computes on CUDA (hermes_nb.trainer.local.gpu_clock), so a CPU run's rows have neither: cost.json's GPU
# figures. The backend reports them under GPU_SECONDS / GPU_PEAK_BYTES (train_key makes these keys of them).
GPU_SECONDS = "gpu_seconds"
GPU_PEAK_BYTES = "gpu_peak_bytes"
TRAIN_GPU_SECONDS = "train/" + GPU_SECONDS
TRAIN_GPU_PEAK_BYTES = "train/" + GPU_PEAK_BYTES

# Everything the environment sampled, written by the environment to env_metrics.jsonl and nowhere else: every
# completion of every group it scored since the trainer's previous step, groups then dropped (equal scores, too
# long) included. Both come from one tally of the same completions, so where the reward is 1 or 0 they are equal.
ENV_REWARD_MEAN = "env/reward_mean"
ENV_PERCENT_CORRECT = "env/percent_correct"
# An atroposlib environment's own train/percent_correct, under its own name: it counts its own buffer with its own
# verdict (often over other completions than the groups it hands on), so it is not ENV_PERCENT_CORRECT.
ENV_REPORTED_PERCENT_CORRECT = "env/reported_percent_correct"

# The environment runtime's counters, per metrics row.
ENV_GROUPS_POSTED = "env/groups_posted"
ENV_GROUPS_SKIPPED = "env/groups_skipped"
# Groups lost to a fault of the environment: collect_trajectories raised, the group was malformed (the runtime's
# check or the API's 4xx), or the post failed. Timed-out calls are counted apart, under ENV_TIMEOUTS.
ENV_GROUPS_FAILED = "env/failed_groups"
ENV_TIMEOUTS = "env/timeouts"
ENV_SECONDS_PER_GROUP = "env/seconds_per_group"
ENV_COMPLETION_TOKENS_MEAN = "env/completion_tokens_mean"
# A judge model's counters (hermes_nb.env.judge), running totals of the environment process, read into cost.json.
JUDGE_CALLS = "env/judge_calls"
JUDGE_PROMPT_TOKENS = "env/judge_prompt_tokens"
JUDGE_COMPLETION_TOKENS = "env/judge_completion_tokens"
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

# Runs logged before ENV_REWARD_MEAN existed have these in env_metrics.jsonl too, counted over the environment's
# completions: a reader of that file leaves them out, so each of them keeps the trainer's one population.
TRAINER_ONLY_KEYS = frozenset({TRAIN_REWARD_MEAN, TRAIN_PERCENT_CORRECT})

# Every training metric's key starts with TRAIN_PREFIX (the trainer's, metrics.jsonl), every evaluation metric's
# with EVAL_PREFIX, every other metric of the environment's with ENV_PREFIX (env_metrics.jsonl).
TRAIN_PREFIX = "train/"
EVAL_PREFIX = "eval/"
ENV_PREFIX = "env/"


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
