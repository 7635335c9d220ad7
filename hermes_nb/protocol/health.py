"""Run health and run cost, as the run directory records them: ``health.jsonl`` and ``cost.json``.

A finding is written once, when it begins, by the process that writes the metrics it was read from (the trainer
or the environment, ``hermes_nb.health``), so status, the CLI, a restarted kernel and the widgets all read the same
verdicts. Both processes append to one file: one short line per ``write``, so lines never interleave.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

Severity = Literal["warning", "error"]
# Who evaluates a check: the trainer (its metrics.jsonl rows), the environment (its env_metrics.jsonl rows), or the
# supervisor (the trainer's rows against the clock: a stalled trainer writes no row to be evaluated at).
HealthSource = Literal["trainer", "env", "supervisor"]


class Finding(BaseModel):
    """A check that fired: its name (``hermes_nb.health.HEALTH_CHECKS``), severity, the trainer step it began at,
    the figures that triggered it, and what to change."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    severity: Severity
    step: int
    time: float
    figures: dict[str, float] = Field(default_factory=dict)
    message: str
    hint: str

    def text(self) -> str:
        return f"{self.severity} {self.name} from step {self.step}: {self.message} ({self.hint})"


def append_finding(path: Path, finding: Finding) -> None:
    """One line, one ``write`` on an ``O_APPEND`` descriptor: the trainer's and the environment's never mix."""
    line = (finding.model_dump_json() + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_findings(path: Path) -> list[Finding]:
    """The findings in the order they began; a line cut short (a process killed mid-write) is left out."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    findings = []
    for line in text.splitlines():
        try:
            findings.append(Finding.model_validate_json(line))
        except ValidationError:
            continue
    return sorted(findings, key=lambda f: (f.step, f.time))


class ProcessCost(BaseModel):
    """One process of a run as the supervisor sampled it (``psutil``), children of its own included."""

    model_config = ConfigDict(extra="forbid")

    cpu_seconds: float = 0.0
    peak_rss_bytes: int = 0
    # Where the process computes on a GPU (the local trainer on CUDA): its GPU time and peak allocated GPU memory,
    # read with torch's CUDA API (``trainer/local/gpu_clock.py``). None, not zero, where no GPU is used.
    gpu_seconds: float | None = None
    gpu_peak_bytes: int | None = None


class CostFigures(BaseModel):
    """What a run took, or (item 1 of issue 40, the pre-run estimate) what it is expected to take: the same shape
    on both sides, so the estimate's error is the difference of two of these."""

    model_config = ConfigDict(extra="forbid")

    # Wall seconds by phase: "start" (created to running), "train" (running to ended).
    wall_seconds: dict[str, float] = Field(default_factory=dict)
    processes: dict[str, ProcessCost] = Field(default_factory=dict)
    tokens_sampled: int | None = None
    tokens_trained: int | None = None
    # Money where a price applies (the Tinker backend, hosted model tests); None for a local run.
    price_usd: float | None = None
    # A judge model's calls and tokens (prompt and completion), where the environment scores with one.
    judge_calls: int | None = None
    judge_tokens: int | None = None

    @property
    def cpu_seconds(self) -> float:
        return sum(p.cpu_seconds for p in self.processes.values())

    @property
    def peak_rss_bytes(self) -> int:
        return max((p.peak_rss_bytes for p in self.processes.values()), default=0)

    @property
    def gpu_seconds(self) -> float | None:
        """Every process's GPU-seconds; None where no process used a GPU (not zero: none was measured)."""
        measured = [p.gpu_seconds for p in self.processes.values() if p.gpu_seconds is not None]
        return sum(measured) if measured else None


class RunCost(BaseModel):
    """``cost.json``: the actual figures (rewritten by the supervisor while the run lives, final once it ends) and,
    once the estimate exists, the estimate the run started with."""

    model_config = ConfigDict(extra="forbid")

    actual: CostFigures = Field(default_factory=CostFigures)
    estimate: CostFigures | None = None
    final: bool = False

    def text(self) -> str:
        a = self.actual
        walls = ", ".join(f"{phase} {seconds:.0f} s" for phase, seconds in a.wall_seconds.items())
        tokens = f"{a.tokens_sampled or 0} tokens sampled, {a.tokens_trained or 0} trained"
        memory = f"peak memory {a.peak_rss_bytes / 2**20:.0f} MiB"
        judge = [] if a.judge_calls is None else [f"judge {a.judge_calls} calls, {a.judge_tokens or 0} tokens"]
        parts = [walls, f"{a.cpu_seconds:.0f} CPU-s", *_gpu_parts(a), memory, tokens, *judge, *_money_parts(a)]
        return "; ".join(parts) + self._estimate_text()

    def _estimate_text(self) -> str:
        """The estimate's figures beside the actual ones (it models no CPU-seconds and no start phase)."""
        e = self.estimate
        if e is None:
            return ""
        train = e.wall_seconds.get("train")
        time_part = "" if train is None else f"train {train:.0f} s, "
        money = "".join(f", {part}" for part in _money_parts(e))
        return f" (estimated: {time_part}peak memory {e.peak_rss_bytes / 2**20:.0f} MiB{money})"


def _gpu_parts(figures: CostFigures) -> list[str]:
    """The GPU figures where a process used one; nothing at all on a CPU run."""
    seconds = figures.gpu_seconds
    if seconds is None:
        return []
    peak = max((p.gpu_peak_bytes or 0 for p in figures.processes.values()), default=0)
    return [f"{seconds:.0f} GPU-s", f"peak GPU memory {peak / 2**20:.0f} MiB"]


def _money_parts(figures: CostFigures) -> list[str]:
    return [] if figures.price_usd is None else [format_usd(figures.price_usd)]


def format_usd(dollars: float) -> str:
    """Money as every cost is shown: cents from a dollar up, four decimals below (a short test costs fractions of a
    cent, which ``$0.00`` would hide)."""
    return f"${dollars:,.2f}" if dollars >= 1 else f"${dollars:.4f}"


def write_cost(path: Path, cost: RunCost) -> None:
    """Atomically: a reader never sees half a record."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(cost.model_dump_json(indent=1), encoding="utf-8")
    tmp.replace(path)


def read_cost(path: Path) -> RunCost | None:
    try:
        return RunCost.model_validate_json(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValidationError):
        return None
