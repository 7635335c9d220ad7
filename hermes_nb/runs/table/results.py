"""Typed results of the run lifecycle calls (start, status, stop, runs, results, logs)."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.checkpoints import CheckpointRecord
from hermes_nb.protocol.health import Finding, RunCost
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_state import TERMINAL_STATUSES
from hermes_nb.protocol.tinker import TinkerRunInfo
from hermes_nb.results import Result, format_duration, html_table
from hermes_nb.runs.supervision.damage import Damage

ProcessStateName = Literal["running", "exited", "not started"]


class ProcessStatus(BaseModel):
    name: str
    state: ProcessStateName
    pid: int | None = None
    exit_code: int | None = None
    log_path: str | None = None


@dataclass(frozen=True)
class _Shown:
    """How one field of ``AlgorithmMetrics`` is read (its metric key) and shown (label, as a percentage or not)."""

    key: str
    label: str
    percent: bool = False


# The trainer's view of what an algorithm does, in the order status shows it (hermes_nb.protocol.metrics).
_ALGORITHM_FIELDS = {
    "reward_std": _Shown(keys.TRAIN_REWARD_STD, "reward std"),
    "kl": _Shown(keys.TRAIN_KL, "KL"),
    "entropy": _Shown(keys.TRAIN_ENTROPY, "entropy"),
    "clip_fraction_low": _Shown(keys.TRAIN_CLIP_FRACTION_LOW, "clipped low", percent=True),
    "clip_fraction_high": _Shown(keys.TRAIN_CLIP_FRACTION_HIGH, "clipped high", percent=True),
    "completion_length": _Shown(keys.TRAIN_COMPLETION_LENGTH, "completion length"),
    "completion_length_max": _Shown(keys.TRAIN_COMPLETION_LENGTH_MAX, "longest"),
    "truncated_fraction": _Shown(keys.TRAIN_TRUNCATED_FRACTION, "truncated", percent=True),
    "groups_dropped": _Shown(keys.TRAIN_GROUPS_DROPPED, "groups dropped"),
    "learning_rate": _Shown(keys.TRAIN_LEARNING_RATE, "learning rate"),
}


class AlgorithmMetrics(BaseModel):
    """The newest value of each algorithm metric the trainer logged; None where a run has not logged it (a KL
    only with ``trainer.beta > 0``, clip fractions only with a clipped loss, a trainer that predates a key)."""

    reward_std: float | None = None
    kl: float | None = None
    entropy: float | None = None
    clip_fraction_low: float | None = None
    clip_fraction_high: float | None = None
    completion_length: float | None = None
    completion_length_max: float | None = None
    truncated_fraction: float | None = None
    groups_dropped: float | None = None
    learning_rate: float | None = None

    @classmethod
    def newest(cls, rows: list[MetricsRow]) -> AlgorithmMetrics:
        """Each field from the newest row of ``rows`` (the trainer's) that has its key."""
        found: dict[str, float] = {}
        for row in reversed(rows):
            for field, shown in _ALGORITHM_FIELDS.items():
                if field not in found and shown.key in row.values:
                    found[field] = row.values[shown.key]
            if len(found) == len(_ALGORITHM_FIELDS):
                break
        return cls(**found)

    def shown(self) -> list[tuple[str, str]]:
        """``(label, value)`` of the fields that were logged, in status's order."""
        values = self.model_dump()
        return [
            (shown.label, _fmt(values[field], shown.percent))
            for field, shown in _ALGORITHM_FIELDS.items()
            if values[field] is not None
        ]

    def text(self) -> str | None:
        """One compact line's worth (``reward std 0.21, KL 0.003, ...``); None when nothing was logged."""
        return ", ".join(f"{label} {value}" for label, value in self.shown()) or None


class LatestMetrics(AlgorithmMetrics):
    step: int | None = None
    reward_mean: float | None = None
    percent_correct: float | None = None
    eval_percent_correct: float | None = None
    loss: float | None = None


class WandbRemote(BaseModel):
    url: str | None = None
    summary: dict[str, Any] = Field(default_factory=dict)
    fetched_at: float | None = None
    age_seconds: float | None = None
    note: str | None = None


def _fmt(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.1f}%" if percent else f"{value:.4g}"


def health_lines(findings: list[Finding]) -> list[str]:
    """One line per finding (``hermes_nb.health``), for status and results."""
    return [f"  health: {finding.text()}" for finding in findings]


def _warning_list_html(label: str, texts: list[str]) -> str:
    """A labelled list of warnings (health findings, damage), or nothing when there are none."""
    if not texts:
        return ""
    items = "".join(f"<li>{html.escape(text)}</li>" for text in texts)
    return f"<div style='color:#a50'><b>{label}:</b><ul>{items}</ul></div>"


def health_html(findings: list[Finding]) -> str:
    return _warning_list_html("health", [finding.text() for finding in findings])


def _cost_lines(cost: RunCost | None) -> list[str]:
    return [] if cost is None else [f"  cost{'' if cost.final else ' so far'}: {cost.text()}"]


def _damage_lines(damaged: list[Damage]) -> list[str]:
    return [f"  damaged: {damage}" for damage in damaged]


def _damage_html(damaged: list[Damage]) -> str:
    return _warning_list_html("damaged", [str(damage) for damage in damaged])


class StartResult(Result):
    run_id: str
    status: str
    environment: str
    run_dir: str
    logs: dict[str, str]
    wandb_project: str
    wandb_run_name: str
    total_steps: int
    # What is wrong with the files of the run this one resumes (the checkpoint chosen takes it into account).
    damaged: list[Damage] = Field(default_factory=list)

    def _dict(self) -> dict[str, Any]:
        return {
            "success": True,
            **self.model_dump(mode="json"),
            "wandb_run": self.wandb_run_name,
            "message": f"Run {self.run_id} is starting; check it with rl_check_status('{self.run_id}').",
        }

    def _text_lines(self) -> list[str]:
        return [
            f"Run {self.run_id} ({self.environment}) is {self.status}: {self.total_steps} steps",
            f"  run directory: {self.run_dir}",
            *(f"  {name} log: {path}" for name, path in self.logs.items()),
            f"  W&B: {self.wandb_project}/{self.wandb_run_name}",
            *_damage_lines(self.damaged),
        ]


class RunStatus(Result):
    run_id: str
    environment: str
    status: str
    running_seconds: float | None = None
    step: int = 0
    total_steps: int
    eta_seconds: float | None = None
    metrics: LatestMetrics = Field(default_factory=LatestMetrics)
    processes: list[ProcessStatus] = Field(default_factory=list)
    checkpoints: list[CheckpointRecord] = Field(default_factory=list)
    logs: dict[str, str] = Field(default_factory=dict)
    wandb_project: str | None = None
    wandb_run_name: str | None = None
    wandb: WandbRemote | None = None
    error: str | None = None
    failed_process: str | None = None
    log_tail: list[str] = Field(default_factory=list)
    # What is wrong with the run's files; everything above was read from what could be read.
    damaged: list[Damage] = Field(default_factory=list)
    # Groups the environment lost to its faults so far (skipped; each logged with its item in the env log).
    env_failed_groups: int = 0
    env_timeouts: int = 0
    # The remote side of a run on the Tinker backend (None for a local run).
    tinker: TinkerRunInfo | None = None
    # While the run is live: working URLs of its inference server (OpenAI base URL) and trajectory API, with the
    # run's secret as their capability prefix (``hermes_nb.protocol.auth``). Every shown form hides the secret
    # (``***``); the attributes hold it, e.g. ``openai.OpenAI(base_url=status.inference_url, api_key="-")``.
    inference_url: str | None = None
    api_url: str | None = None
    # The run's health findings (``hermes_nb.health``), in the order they began; what stopped it when no one asked
    # (a finding named in ``health.stop_on``); and what it cost so far (``cost.json``).
    health: list[Finding] = Field(default_factory=list)
    stopped_by: str | None = None
    cost: RunCost | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def _tinker_text(self) -> str | None:
        t = self.tinker
        if t is None:
            return None
        faults = f", {t.retries} retries" + (f" ({t.rate_limited} rate-limited)" if t.rate_limited else "")
        last = f", last error: {t.last_error}" if t.last_error else ""
        return (
            f"{t.base_model} LoRA rank {t.lora_rank} at {t.base_url}: {t.tokens_trained} tokens trained, "
            f"{t.tokens_sampled} sampled{faults}{last}"
        )

    def _faults_text(self) -> str | None:
        if not (self.env_failed_groups or self.env_timeouts):
            return None
        return (
            f"{self.env_failed_groups} failed groups, {self.env_timeouts} timed out "
            f"(skipped; each is in the env log: {self.logs.get('env', 'env log')})"
        )

    def _dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["running_time_minutes"] = round((self.running_seconds or 0) / 60, 2)
        data["progress"] = f"{self.step}/{self.total_steps}"
        data["wandb_run"] = self.wandb_run_name
        return data

    def _text_lines(self) -> list[str]:
        m = self.metrics
        lines = [
            f"Run {self.run_id} ({self.environment}): {self.status}",
            f"  step {self.step}/{self.total_steps}, running {format_duration(self.running_seconds)}, "
            f"ETA {format_duration(self.eta_seconds)}",
            f"  reward {_fmt(m.reward_mean)}, correct {_fmt(m.percent_correct, True)}, "
            f"eval {_fmt(m.eval_percent_correct, True)}, loss {_fmt(m.loss)}",
        ]
        if (algorithm := m.text()) is not None:
            lines.append(f"  {algorithm}")
        if self.processes:
            lines.append(
                "  processes: "
                + ", ".join(
                    f"{p.name} {p.state}" + (f" ({p.exit_code})" if p.exit_code else "") for p in self.processes
                )
            )
        if self.checkpoints:
            lines.append(f"  last checkpoint: {self.checkpoints[-1].path}")
        if self.inference_url:
            lines.append(f"  inference server: {self.inference_url} (status.inference_url holds the secret)")
        if (faults := self._faults_text()) is not None:
            lines.append(f"  environment faults: {faults}")
        if (remote := self._tinker_text()) is not None:
            lines.append(f"  Tinker: {remote}")
        if self.error:
            lines.append(f"  error: {self.error}")
        if self.stopped_by:
            lines.append(f"  stopped by health.stop_on: {self.stopped_by}")
        return lines + health_lines(self.health) + _cost_lines(self.cost) + _damage_lines(self.damaged)

    def _html_body(self) -> str:
        m = self.metrics
        head = f"<b>Run {self.run_id}</b> ({self.environment}): <b>{self.status}</b>"
        rows = [
            ["step", f"{self.step}/{self.total_steps}"],
            ["running", format_duration(self.running_seconds)],
            ["ETA", format_duration(self.eta_seconds)],
            ["reward mean", _fmt(m.reward_mean)],
            ["percent correct", _fmt(m.percent_correct, True)],
            ["eval percent correct", _fmt(m.eval_percent_correct, True)],
            ["loss", _fmt(m.loss)],
            *[[label, value] for label, value in m.shown()],
            *[
                [f"process {p.name}", p.state + (f" (exit {p.exit_code})" if p.exit_code is not None else "")]
                for p in self.processes
            ],
        ]
        if (faults := self._faults_text()) is not None:
            rows.append(["environment faults", faults])
        if (remote := self._tinker_text()) is not None:
            rows.append(["Tinker", remote])
        if self.cost is not None:
            rows.append(["cost", self.cost.text()])
        error = f"<pre style='color:#b00'>{self.error}</pre>" if self.error else ""
        health = health_html(self.health)
        return f"<p>{head}</p>{html_table(['', ''], rows)}{error}{health}{_damage_html(self.damaged)}"


class RunSummary(BaseModel):
    run_id: str
    environment: str
    status: str
    created_at: float
    step: int = 0
    total_steps: int
    damaged: list[Damage] = Field(default_factory=list)


class RunList(Result):
    runs: list[RunSummary] = Field(default_factory=list)

    def _dict(self) -> dict[str, Any]:
        return {"runs": [r.model_dump(mode="json") for r in self.runs], "count": len(self.runs)}

    def _text_lines(self) -> list[str]:
        lines = [f"{len(self.runs)} run(s):"]
        for r in self.runs:
            lines.append(f"  {r.run_id}  {r.environment:<16} {r.status:<10} {r.step}/{r.total_steps}")
            lines += [f"  {'':<26}  damaged: {damage}" for damage in r.damaged]
        return lines

    def _html_body(self) -> str:
        rows = [
            [r.run_id, r.environment, r.status, f"{r.step}/{r.total_steps}", "; ".join(str(d) for d in r.damaged)]
            for r in self.runs
        ]
        return html_table(["run", "environment", "status", "step", "damaged"], rows)


class RunResults(Result):
    run_id: str
    environment: str
    status: str
    final_metrics: dict[str, float] = Field(default_factory=dict)
    best_metrics: dict[str, float] = Field(default_factory=dict)
    # The newest value of each algorithm metric the trainer logged (reward std, KL, entropy, clip fractions ...).
    algorithm: AlgorithmMetrics = Field(default_factory=AlgorithmMetrics)
    history: list[dict[str, Any]] = Field(default_factory=list)
    eval_history: list[dict[str, Any]] = Field(default_factory=list)
    checkpoints: list[CheckpointRecord] = Field(default_factory=list)
    final_weights_path: str | None = None
    wandb_url: str | None = None
    # What is wrong with the run's files; the history and checkpoints above are what could be read.
    damaged: list[Damage] = Field(default_factory=list)
    health: list[Finding] = Field(default_factory=list)
    cost: RunCost | None = None

    def _text_lines(self) -> list[str]:
        lines = [f"Run {self.run_id} ({self.environment}): {self.status}, {len(self.history)} steps logged"]
        lines += [f"  final {k}: {v:.4g}" for k, v in sorted(self.final_metrics.items())]
        lines += [f"  best {k}: {v:.4g}" for k, v in sorted(self.best_metrics.items())]
        if (algorithm := self.algorithm.text()) is not None:
            lines.append(f"  last logged: {algorithm}")
        lines.append(f"  final weights: {self.final_weights_path or '–'}")
        if self.wandb_url:
            lines.append(f"  W&B: {self.wandb_url}")
        return lines + health_lines(self.health) + _cost_lines(self.cost) + _damage_lines(self.damaged)


class LogTail(Result):
    run_id: str
    process: str
    path: str
    lines: list[str]

    def _text_lines(self) -> list[str]:
        return [f"== {self.process} log of run {self.run_id} ({self.path}) ==", *self.lines]
