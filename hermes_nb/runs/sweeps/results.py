"""Typed results of the sweep commands (``rl_sweep``, ``rl_sweep_status``, ``rl_stop_sweep``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from hermes_nb.protocol.sweep_state import StopRule
from hermes_nb.results import Result, html_table
from hermes_nb.runs.table.config_diff import short_name, value_label
from hermes_nb.runs.table.rows import RunRow, row_cells


class VariantRow(BaseModel):
    index: int
    overrides: dict[str, Any]
    # "pending" before its run starts, "not started" when it could not start, "deleted" when its run was deleted
    # or archived since, else its run's status.
    status: str
    run: RunRow | None = None
    note: str = ""  # why it was stopped early, or why it could not start

    def overrides_text(self) -> str:
        return ", ".join(f"{short_name(n)}={value_label(v)}" for n, v in self.overrides.items())


class BestVariant(BaseModel):
    index: int
    run_id: str
    overrides: dict[str, Any]
    best_eval_accuracy: float | None
    best_reward: float | None
    config_path: str  # the run's config.yaml: rl_load_config(config_path) makes it the current config


class SweepStatus(Result):
    sweep_id: str
    name: str
    environment: str
    status: str
    max_concurrent: int
    stop_if: StopRule | None = None
    stop_on_health: list[str] = Field(default_factory=list)  # added to every variant's health.stop_on
    variants: list[VariantRow]
    done: int  # variants whose run has ended, or that could not start
    best: BestVariant | None = None
    sweep_dir: str
    log_path: str
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)

    def _dict(self) -> dict[str, Any]:
        best = f"; best: variant {self.best.index} (run {self.best.run_id})" if self.best else ""
        message = f"Sweep {self.sweep_id} is {self.status}: {self.done}/{len(self.variants)} variants done{best}."
        return {**self.model_dump(mode="json"), "message": message}

    def _text_lines(self) -> list[str]:
        lines = [f"sweep {self.sweep_id} ({self.name}, {self.environment}): {self.status}, "
                 f"{self.done}/{len(self.variants)} done, {self.max_concurrent} at a time"]  # fmt: skip
        lines += [f"warning: {warning}" for warning in self.warnings]
        if self.stop_on_health:
            lines.append(f"a variant's run stops on the health finding {', '.join(self.stop_on_health)}")
        for row in self.variants:
            run = f" run {row.run.run_id} step {row.run.step}/{row.run.total_steps}" if row.run else ""
            note = f" ({row.note})" if row.note else ""
            lines.append(f"  [{row.index}] {row.overrides_text()}: {row.status}{run}{note}")
        if self.best:
            lines.append(f"best: [{self.best.index}] run {self.best.run_id}; rl_load_config({self.best.config_path!r})")
        if self.error:
            lines.append(f"error: {self.error}")
        return lines

    def _html_body(self) -> str:
        head = "<br>".join(self._text_lines()[:1] + [f"warning: {w}" for w in self.warnings])
        rows = [[str(r.index), r.overrides_text(), r.status, *(row_cells(r.run)[5:10] if r.run else [""] * 5), r.note]
                for r in self.variants]  # fmt: skip
        headers = ["#", "overrides", "status", "best eval", "last eval", "best reward", "last reward", "steps", "note"]
        best = f"<p>best: variant {self.best.index}, run <code>{self.best.run_id}</code></p>" if self.best else ""
        return f"<p>{head}</p>" + html_table(headers, rows) + best
