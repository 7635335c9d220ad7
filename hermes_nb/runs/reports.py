"""Typed results of the run lifecycle calls (start, status, stop, runs, results, logs)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from hermes_nb.protocol.checkpoints import CheckpointRecord
from hermes_nb.results import Result, _table

ProcessStateName = Literal["running", "exited", "not started"]


class ProcessStatus(BaseModel):
    name: str
    state: ProcessStateName
    pid: int | None = None
    exit_code: int | None = None
    log_path: str | None = None


class LatestMetrics(BaseModel):
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


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class StartResult(Result):
    run_id: str
    status: str
    environment: str
    run_dir: str
    logs: dict[str, str]
    wandb_project: str
    wandb_run_name: str
    total_steps: int

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

    @property
    def is_terminal(self) -> bool:
        return self.status in ("stopped", "completed", "failed")

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
            f"  step {self.step}/{self.total_steps}, running {_duration(self.running_seconds)}, "
            f"ETA {_duration(self.eta_seconds)}",
            f"  reward {_fmt(m.reward_mean)}, correct {_fmt(m.percent_correct, True)}, "
            f"eval {_fmt(m.eval_percent_correct, True)}, loss {_fmt(m.loss)}",
            "  processes: "
            + ", ".join(f"{p.name} {p.state}" + (f" ({p.exit_code})" if p.exit_code else "") for p in self.processes),
        ]
        if self.checkpoints:
            lines.append(f"  last checkpoint: {self.checkpoints[-1].path}")
        if self.error:
            lines.append(f"  error: {self.error}")
        return lines

    def _html_body(self) -> str:
        m = self.metrics
        head = f"<b>Run {self.run_id}</b> ({self.environment}): <b>{self.status}</b>"
        rows = [
            ["step", f"{self.step}/{self.total_steps}"],
            ["running", _duration(self.running_seconds)],
            ["ETA", _duration(self.eta_seconds)],
            ["reward mean", _fmt(m.reward_mean)],
            ["percent correct", _fmt(m.percent_correct, True)],
            ["eval percent correct", _fmt(m.eval_percent_correct, True)],
            ["loss", _fmt(m.loss)],
            *[
                [f"process {p.name}", p.state + (f" (exit {p.exit_code})" if p.exit_code is not None else "")]
                for p in self.processes
            ],
        ]
        error = f"<pre style='color:#b00'>{self.error}</pre>" if self.error else ""
        return f"<p>{head}</p>{_table(['', ''], rows)}{error}"


class StopResult(Result):
    run_id: str
    status: str
    already_stopped: bool = False
    final_checkpoint: str | None = None

    def _dict(self) -> dict[str, Any]:
        verb = "was already" if self.already_stopped else "is now"
        return {
            "success": True,
            **self.model_dump(mode="json"),
            "message": f"Run {self.run_id} {verb} {self.status}",
        }

    def _text_lines(self) -> list[str]:
        verb = "was already" if self.already_stopped else "is now"
        lines = [f"Run {self.run_id} {verb} {self.status}"]
        if self.final_checkpoint:
            lines.append(f"  final checkpoint: {self.final_checkpoint}")
        return lines


class RunSummary(BaseModel):
    run_id: str
    environment: str
    status: str
    created_at: float
    step: int = 0
    total_steps: int


class RunList(Result):
    runs: list[RunSummary] = Field(default_factory=list)

    def _dict(self) -> dict[str, Any]:
        return {"runs": [r.model_dump(mode="json") for r in self.runs], "count": len(self.runs)}

    def _text_lines(self) -> list[str]:
        lines = [f"{len(self.runs)} run(s):"]
        lines += [f"  {r.run_id}  {r.environment:<16} {r.status:<10} {r.step}/{r.total_steps}" for r in self.runs]
        return lines

    def _html_body(self) -> str:
        rows = [[r.run_id, r.environment, r.status, f"{r.step}/{r.total_steps}"] for r in self.runs]
        return _table(["run", "environment", "status", "step"], rows)


class RunResults(Result):
    run_id: str
    environment: str
    status: str
    final_metrics: dict[str, float] = Field(default_factory=dict)
    best_metrics: dict[str, float] = Field(default_factory=dict)
    history: list[dict[str, Any]] = Field(default_factory=list)
    eval_history: list[dict[str, Any]] = Field(default_factory=list)
    checkpoints: list[CheckpointRecord] = Field(default_factory=list)
    final_weights_path: str | None = None
    wandb_url: str | None = None

    def _text_lines(self) -> list[str]:
        lines = [f"Run {self.run_id} ({self.environment}): {self.status}, {len(self.history)} steps logged"]
        lines += [f"  final {k}: {v:.4g}" for k, v in sorted(self.final_metrics.items())]
        lines += [f"  best {k}: {v:.4g}" for k, v in sorted(self.best_metrics.items())]
        lines.append(f"  final weights: {self.final_weights_path or '–'}")
        if self.wandb_url:
            lines.append(f"  W&B: {self.wandb_url}")
        return lines


class LogTail(Result):
    run_id: str
    process: str
    path: str
    lines: list[str]

    def _text_lines(self) -> list[str]:
        return [f"== {self.process} log of run {self.run_id} ({self.path}) ==", *self.lines]
