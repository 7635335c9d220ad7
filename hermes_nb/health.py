"""Run health: named checks over the metrics stream, each with its threshold and the reason for it, in one table.

Each check reads the rows of one metrics file (the trainer's or the environment's) and is evaluated where that file
is written (``HealthWatch``, fed by ``hermes_nb.metrics.logger.MetricsLogger``), so every reader of the run directory
sees the same verdicts in ``health.jsonl`` (``hermes_nb.protocol.health``). A finding is written once, at the step it
began; ``health.stop_on`` in the config names the checks that stop a run (the supervisor acts on them).

Why here, below ``config.py``: the config offers and checks the names, the metrics logger evaluates the checks;
both read this one table. It imports only the protocol.

The thresholds were sized from measured runs (``docs/health.md``): a healthy quickstart stays well inside each, a
run with a learning rate 1,000x the quickstart's crosses the entropy or non-finite check within a few steps.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.health import Finding, HealthSource, Severity, append_finding

logger = logging.getLogger(__name__)

# Rows kept per watch: the baselines need the first few, the windows the newest few.
BASELINE_ROWS = 5
KEPT_ROWS = 64

Values = dict[str, float]


@dataclass
class History:
    """What a check sees: the first rows of the stream (its baseline) and the newest (its window), values as
    logged, non-finite ones included."""

    first: list[Values] = field(default_factory=list)
    recent: list[Values] = field(default_factory=list)
    # Held-out accuracy by the step it was measured, and the reward mean of the rows up to it.
    evals: list[tuple[float, float]] = field(default_factory=list)
    # When each of the recent rows was written, and when the checks last looked.
    times: list[float] = field(default_factory=list)
    now: float = 0.0

    def add(self, values: Values, at: float) -> None:
        if len(self.first) < BASELINE_ROWS:
            self.first.append(values)
        self.recent = [*self.recent[-(KEPT_ROWS - 1) :], values]
        self.times = [*self.times[-(KEPT_ROWS - 1) :], at]

    def baseline(self, key: str) -> float | None:
        """The largest finite ``key`` of the first rows: a collapse lowers the rows after the first within a step
        or two (a 1,000x learning rate: entropy 0.73, 0.27, 0.24, 0.0), the largest stays the run's start."""
        found = [v[key] for v in self.first if key in v and math.isfinite(v[key])]
        return max(found) if found else None

    def newest(self, key: str, count: int) -> list[float] | None:
        """``key`` in each of the newest ``count`` rows, or None when one of them lacks it."""
        window = self.recent[-count:]
        if len(window) < count or any(key not in v for v in window):
            return None
        return [v[key] for v in window]


@dataclass(frozen=True)
class HealthCheck:
    """One check. ``test`` returns the figures that trigger it (None: healthy); ``threshold`` and ``rows`` (how many
    newest rows in a row must cross it) are what it compares with; ``reason``: why that threshold."""

    name: str
    source: HealthSource
    severity: Severity
    threshold: float
    rows: int
    summary: str
    reason: str
    hint: str
    test: Callable[[History, HealthCheck], Values | None]


def _non_finite(history: History, check: HealthCheck) -> Values | None:
    newest = history.recent[-1] if history.recent else {}
    # JSON has no NaN: each non-finite key is named with 1.0 (how many of it the row had).
    return {f"non_finite:{key}": 1.0 for key, value in newest.items() if not math.isfinite(value)} or None


def _away_from_start(key: str, *, below: bool) -> Callable[[History, HealthCheck], Values | None]:
    """``key`` below (or above) ``threshold`` times its start (``History.baseline``) in each of the newest rows."""

    def test(history: History, check: HealthCheck) -> Values | None:
        base, window = history.baseline(key), history.newest(key, check.rows)
        if base is None or base <= 0 or window is None or len(history.recent) <= check.rows:
            return None
        bound = check.threshold * base
        if all(v < bound if below else v > bound for v in window):
            return {key: window[-1], "baseline": base}
        return None

    return test


# How many rows before the window a sudden fall is measured against.
FALL_SPAN_ROWS = 20


def _fell_suddenly(key: str) -> Callable[[History, HealthCheck], Values | None]:
    """``key`` below ``threshold`` times its largest value in the ``FALL_SPAN_ROWS`` rows before the window: a
    collapse takes a step or two, a policy that sharpens as it learns takes hundreds."""

    def test(history: History, check: HealthCheck) -> Values | None:
        window = history.newest(key, check.rows)
        before = [v[key] for v in history.recent[-FALL_SPAN_ROWS - check.rows : -check.rows] if key in v]
        before = [v for v in before if math.isfinite(v)]
        if window is None or not before or max(before) <= 0:
            return None
        if all(v < check.threshold * max(before) for v in window):
            return {key: window[-1], "before": max(before)}
        return None

    return test


def _above(*summed: str) -> Callable[[History, HealthCheck], Values | None]:
    """The sum of ``summed`` above the threshold in each of the newest rows (a row lacking a key counts it 0)."""

    def test(history: History, check: HealthCheck) -> Values | None:
        window = history.recent[-check.rows :]
        if len(window) < check.rows or not all(any(k in v for k in summed) for v in window):
            return None
        totals = [sum(v.get(k, 0.0) for k in summed) for v in window]
        return {"+".join(summed): totals[-1]} if all(t > check.threshold for t in totals) else None

    return test


# A no-signal verdict needs this many groups scored: fewer say little about a run (one batch of the quickstart is 8).
MIN_GROUPS_FOR_SIGNAL = 8


def _no_signal(history: History, check: HealthCheck) -> Values | None:
    """The share of the groups scored (in the newest row: since the trainer's last step) that were dropped."""
    if not history.recent:
        return None
    newest = history.recent[-1]
    skipped = newest.get(keys.ENV_GROUPS_SKIPPED, 0.0)
    total = skipped + newest.get(keys.ENV_GROUPS_POSTED, 0.0)
    if total < MIN_GROUPS_FOR_SIGNAL or skipped / total < check.threshold:
        return None
    return {keys.ENV_GROUPS_SKIPPED: skipped, "groups": total}


# How far the reward must have risen while held-out accuracy fell from its best, to call it over-optimisation.
REWARD_RISE = 0.05


def _over_optimisation(history: History, check: HealthCheck) -> Values | None:
    """The newest evaluation ``threshold`` below the best one while the reward rose since that best."""
    if len(history.evals) < 2:
        return None
    best_at = max(range(len(history.evals)), key=lambda i: history.evals[i][0])
    best, reward_at_best = history.evals[best_at]
    newest, reward_now = history.evals[-1]
    if best - newest >= check.threshold and reward_now - reward_at_best >= REWARD_RISE:
        return {keys.EVAL_PERCENT_CORRECT: newest, "best_eval": best, keys.ENV_REWARD_MEAN: reward_now}
    return None


# A stall is called no sooner than this: an evaluation, a checkpoint or a busy machine can hold a fast run's step
# for tens of seconds.
MIN_STALL_S = 60.0


def _stall(history: History, check: HealthCheck) -> Values | None:
    """No row for ``threshold`` times the median time between the recent rows (and ``MIN_STALL_S``)."""
    if len(history.times) < 3:
        return None
    gaps = [later - earlier for earlier, later in zip(history.times, history.times[1:], strict=False)]
    median = statistics.median(gaps)
    waited = history.now - history.times[-1]
    if waited < max(check.threshold * median, MIN_STALL_S):
        return None
    return {"seconds_since_step": waited, "median_step_seconds": median}


HEALTH_CHECKS: dict[str, HealthCheck] = {
    c.name: c
    for c in (
        HealthCheck(
            name="non_finite",
            source="trainer",
            severity="error",
            threshold=0.0,
            rows=1,
            summary="a metric of a step is NaN or infinite",
            reason="any non-finite loss, entropy or ratio means the weights are no longer numbers",
            hint="lower trainer.learning_rate; check the reward for NaN",
            test=_non_finite,
        ),
        HealthCheck(
            name="entropy_collapse",
            source="trainer",
            severity="error",
            threshold=0.3,
            rows=1,
            summary="the policy's entropy fell below 0.3 of its largest value of the steps just before",
            reason="healthy quickstarts (seeds 0 and 1, 120 and 300 steps) never fell below 0.49 of the largest of "
            "their previous 20 steps; two runs at a 1,000x learning rate fell to 0.32-0.37 by their second or third "
            "step and to 0.01 or less at their fourth, their last",
            hint="lower trainer.learning_rate, or raise trainer.beta to hold the policy near the reference",
            test=_fell_suddenly(keys.TRAIN_ENTROPY),
        ),
        HealthCheck(
            name="no_signal",
            source="env",
            severity="error",
            threshold=0.9,
            rows=1,
            summary="nine in ten groups scored alike and were dropped",
            reason="a group whose members all score the same carries no advantage; healthy quickstarts drop 17-21% "
            "of their groups, at most 60% between two steps",
            hint="raise env.group_size or the temperature, or make the task easier (all wrong) or harder (all right)",
            test=_no_signal,
        ),
        HealthCheck(
            name="kl_high",
            source="trainer",
            severity="warning",
            threshold=1.0,
            rows=3,
            summary="the KL to the reference policy is above 1 nat per token",
            reason="a policy a nat per token from its reference writes text the reference would not",
            hint="raise trainer.beta or lower trainer.learning_rate",
            test=_above(keys.TRAIN_KL),
        ),
        HealthCheck(
            name="clip_high",
            source="trainer",
            severity="warning",
            threshold=0.3,
            rows=3,
            summary="over 30% of trained tokens had their ratio clipped",
            reason="healthy quickstarts clip at most 17% of tokens (low and high); a 1,000x learning rate clips "
            "74-81% from its second step",
            hint="lower trainer.learning_rate or trainer.max_batches_offpolicy",
            test=_above(keys.TRAIN_CLIP_FRACTION_LOW, keys.TRAIN_CLIP_FRACTION_HIGH),
        ),
        HealthCheck(
            name="truncated",
            source="trainer",
            severity="warning",
            threshold=0.5,
            rows=3,
            summary="over half the completions were cut off at the length limit",
            reason="a cut-off completion is scored without its answer, so its reward says little",
            hint="raise env.max_token_length, or reward shorter answers",
            test=_above(keys.TRAIN_TRUNCATED_FRACTION),
        ),
        HealthCheck(
            name="length_collapse",
            source="trainer",
            severity="warning",
            threshold=0.2,
            rows=3,
            summary="completions became under a fifth of their first steps' length",
            reason="a policy that stops answering collapses to its shortest output",
            hint="lower trainer.learning_rate",
            test=_away_from_start(keys.TRAIN_COMPLETION_LENGTH, below=True),
        ),
        HealthCheck(
            name="length_explosion",
            source="trainer",
            severity="warning",
            threshold=5.0,
            rows=3,
            summary="completions became over five times their first steps' length",
            reason="a policy that rambles fills its length limit and the sampler's time",
            hint="lower trainer.learning_rate, or penalise length in the reward",
            test=_away_from_start(keys.TRAIN_COMPLETION_LENGTH, below=False),
        ),
        HealthCheck(
            name="over_optimisation",
            source="env",
            severity="warning",
            threshold=0.1,
            rows=1,
            summary="held-out accuracy fell 10 points from its best while the reward rose",
            reason="held-out items move by about 5 points between evaluations (200 items): 10 is beyond that",
            hint="the reward can be met without solving the task: check the rollouts; stop at the best checkpoint",
            test=_over_optimisation,
        ),
        HealthCheck(
            name="throughput_falling",
            source="trainer",
            severity="warning",
            threshold=0.1,
            rows=10,
            summary="tokens per second stayed under a tenth of the first steps' for ten steps",
            reason="a healthy quickstart's steps vary 30-fold on a shared machine (1,000 to 38,000 tokens/s), one "
            "step at a time: ten in a row under a tenth is more than load",
            hint="see the processes' CPU in the cost record, and completion lengths",
            test=_away_from_start(keys.TRAIN_TOKENS_PER_SECOND, below=True),
        ),
        HealthCheck(
            name="stall",
            source="supervisor",
            severity="error",
            threshold=20.0,
            rows=1,
            summary="no step for 20 times the median step time (and at least a minute)",
            reason="a quickstart step takes 0.1-0.5 s and its longest pauses (evaluations, checkpoints) a few "
            "seconds; a run at 1,000x its learning rate took no step after its fourth, for minutes",
            hint="see no_signal, and the trainer and env logs",
            test=_stall,
        ),
    )
}


def check_names() -> tuple[str, ...]:
    return tuple(HEALTH_CHECKS)


class HealthWatch:
    """The checks of one metrics file, fed each row as it is logged; a finding is appended to ``path`` once."""

    def __init__(self, path: Path, source: HealthSource) -> None:
        self.path = path
        self.checks = [c for c in HEALTH_CHECKS.values() if c.source == source]
        self.history = History()
        self.found: set[str] = set()

    def observe(self, step: int, values: Values, at: float | None = None) -> list[Finding]:
        """Add a row logged at ``at`` (now by default) and write the findings it begins."""
        self.history.add(values, time.time() if at is None else at)
        self._note_eval(values)
        return self._evaluate(step)

    def tick(self, step: int) -> list[Finding]:
        """Evaluate with no new row: what the clock alone can tell (a stall)."""
        return self._evaluate(step)

    def peek(self, step: int, values: Values) -> list[Finding]:
        """Evaluate a row still being counted (the environment's groups before the trainer's next step) without
        keeping it: a run whose every group is dropped never reaches a step, and must still be told."""
        saved = self.history.recent
        self.history.recent = [*saved, values]
        try:
            return self._evaluate(step)
        finally:
            self.history.recent = saved

    def _note_eval(self, values: Values) -> None:
        if keys.EVAL_PERCENT_CORRECT in values:
            rewards = [v[keys.ENV_REWARD_MEAN] for v in self.history.recent if keys.ENV_REWARD_MEAN in v]
            reward = statistics.fmean(rewards[-5:]) if rewards else 0.0
            self.history.evals.append((values[keys.EVAL_PERCENT_CORRECT], reward))

    def _evaluate(self, step: int) -> list[Finding]:
        self.history.now = time.time()
        new = []
        for check in self.checks:
            if check.name in self.found:
                continue
            figures = check.test(self.history, check)
            if figures is None:
                continue
            finding = Finding(
                name=check.name, severity=check.severity, step=step, time=time.time(), figures=figures,
                message=check.summary, hint=check.hint,
            )  # fmt: skip
            self.found.add(check.name)
            try:
                append_finding(self.path, finding)
            except OSError as exc:  # a full disk: the metrics row says so already; training must go on
                logger.warning("health finding %s not recorded in %s: %s", check.name, self.path, exc)
            new.append(finding)
        return new
