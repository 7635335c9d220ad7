"""atroposlib's metric names onto the run's, and the rows an atroposlib environment adds to ``env_metrics.jsonl``.

atroposlib logs only to W&B, through ``BaseEnv.wandb_log``; the bridge hands every dict it logs (and every
``evaluate_log``'s metrics) to ``EnvMetricsSink``, which writes them as ``MetricsRow``s, so status, the live plot
and results read an atroposlib environment as they read a native one. Runs inside the environment Python: the
standard library, pydantic and ``hermes_nb.protocol`` only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.trajectory import ScoredDataGroup

# atroposlib's key -> the run's key, where both name the same quantity. Keys shared already
# (eval/percent_correct in atroposlib's own environments) and keys the run has no name for pass through unchanged,
# except that train/* is the trainer's: any other train/ key of the environment's becomes env/ (env_key).
RENAMED_KEYS: dict[str, str] = {
    # An environment's own count over its own buffer: train/percent_correct is the trainer's (the trained batch),
    # env/percent_correct the bridge's (the same completions as env/reward_mean), so it keeps a name of its own.
    "train/percent_correct": keys.ENV_REPORTED_PERCENT_CORRECT,
    # BaseEnv.wandb_log: mean trained (unmasked) tokens per sequence since the last log.
    "train/completion_lengths": keys.ENV_COMPLETION_TOKENS_MEAN,
    # BaseEnv.perf_stats: the mean time of one collect_trajectories call. (Its train/items_rejected is not the
    # run's env/failed_groups: it also counts calls that returned nothing on purpose, as a group whose scores are
    # all equal, so it keeps a name of its own, env/items_rejected.)
    "train_perf/task_duration_mean": keys.ENV_SECONDS_PER_GROUP,
}
# atroposlib's count of successful collect_trajectories calls: the bridge counts the groups actually posted and
# skipped (ENV_GROUPS_POSTED / ENV_GROUPS_SKIPPED) instead, as the native runtime does.
DROPPED_KEYS = frozenset({"train/items_sent_to_api"})


def run_metric_values(logged: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries of a ``wandb_log`` dict under the run's names; tables, text and NaN are left out."""
    values: dict[str, float] = {}
    for key, value in logged.items():
        number = _number(value)
        if key in DROPPED_KEYS or number is None:
            continue
        values[RENAMED_KEYS.get(key) or env_key(key)] = number
    return values


def env_key(key: str) -> str:
    """An environment's ``train/`` key under ``env/`` (``train/items_rejected`` -> ``env/items_rejected``): the
    trainer alone writes ``train/*``, so a key never names two populations in two files."""
    return keys.ENV_PREFIX + key.removeprefix(keys.TRAIN_PREFIX) if key.startswith(keys.TRAIN_PREFIX) else key


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not hasattr(value, "__float__"):
        return None  # a wandb.Table, a string, a histogram
    try:
        number = float(value)  # numpy scalars too
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass
class EnvMetricsSink:
    """Appends one ``MetricsRow`` per logged dict to ``path``, flushed at once (a reader polls the file)."""

    path: Path
    # Since the last row: the scores and verdicts of every completion scored, the groups scored and posted.
    scores: list[float] = field(default_factory=list)
    verdicts: list[bool] = field(default_factory=list)
    groups_seen: int = 0
    groups_posted: int = 0
    # An evaluation's numbers as evaluate_log recorded them, at the step it ran; atroposlib's environments also
    # keep them for their next wandb_log (a later step), where they are not written a second time.
    eval_logged: dict[str, float] = field(default_factory=dict)

    def observe_groups(self, groups: Iterable[Mapping[str, Any] | None]) -> None:
        """Every group the environment scored, before atroposlib drops any: the reward covers every completion."""
        for group in groups:
            if group is None:
                continue
            self.groups_seen += 1
            try:
                checked = ScoredDataGroup.model_validate(dict(group))
            except ValidationError:
                continue  # atroposlib skips a malformed group itself, with a warning in the log
            self.scores += checked.scores
            self.verdicts += checked.verdicts()

    def observe_posted(self, count: int) -> None:
        self.groups_posted += count

    def log(self, step: int, logged: Mapping[str, Any]) -> dict[str, float]:
        """A ``wandb_log`` dict at trainer step ``step``: the row written (none when there is nothing to say).

        The reward and percent correct of the completions the bridge saw are its own to write (``env/*``, one
        population, verdicts by ``ScoredDataGroup.verdicts``); the environment's own count is written beside
        them as ``env/reported_percent_correct``."""
        values = run_metric_values(logged)
        for key, value in self.eval_logged.items():
            if values.get(key) == value:
                del values[key]
        self.eval_logged = {}
        values.update(self._sampling_values())
        self._write(step, values)
        return values

    def log_evaluation(self, step: int, metrics: Mapping[str, Any], seconds: float | None) -> dict[str, float]:
        """An ``evaluate_log`` call's metrics at trainer step ``step``, with the evaluation's duration if known."""
        values = run_metric_values(metrics)
        self.eval_logged.update(values)
        if seconds is not None and values:
            values[keys.EVAL_SECONDS] = seconds
        self._write(step, values)
        return values

    def _sampling_values(self) -> dict[str, float]:
        values: dict[str, float] = {}
        if self.scores:
            values[keys.ENV_REWARD_MEAN] = sum(self.scores) / len(self.scores)
            values[keys.ENV_PERCENT_CORRECT] = sum(self.verdicts) / len(self.verdicts)
        if self.groups_seen or self.groups_posted:
            values[keys.ENV_GROUPS_POSTED] = float(self.groups_posted)
            values[keys.ENV_GROUPS_SKIPPED] = float(max(0, self.groups_seen - self.groups_posted))
        self.scores, self.verdicts, self.groups_seen, self.groups_posted = [], [], 0, 0
        return values

    def _write(self, step: int, values: dict[str, float]) -> None:
        if not values:
            return
        row = keys.MetricsRow(step=step, time=time.time(), values=values)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(row.to_json_line())
