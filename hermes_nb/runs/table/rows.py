"""The runs table (``rl_compare_runs``): one typed row per run, its text and HTML forms."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from hermes_nb.protocol.health import Finding, format_usd
from hermes_nb.results import Result, format_duration, html_table, value_text
from hermes_nb.runs.table.config_diff import short_name, value_label

# The table shows this many differing fields per row; the row's ``differs`` has them all.
SHOWN_DIFFERENCES = 4


class RunRow(BaseModel):
    run_id: str
    status: str
    environment: str
    created_at: float
    sweep_id: str | None = None
    differs: dict[str, Any] = Field(default_factory=dict)  # dotted name -> this run's value, where not the baseline's
    label: str  # what varies across the runs shown, as this run has it: "lr=3e-4, group=8" (the plot's legend)
    best_eval_accuracy: float | None = None
    last_eval_accuracy: float | None = None
    best_reward: float | None = None
    last_reward: float | None = None
    step: int = 0
    total_steps: int = 0
    wall_s: float | None = None  # from the call that created the run to its end (or now, while it lives)
    note: str = ""
    health: list[Finding] = Field(default_factory=list)  # its findings (``hermes_nb.health``), as they began
    cpu_seconds: float | None = None  # every process's CPU time (``cost.json``)
    stopped_by: str | None = None  # the finding of ``health.stop_on`` that stopped it, as ``run.json`` says
    gpu_seconds: float | None = None  # every process's GPU time; None where none used a GPU (``cost.json``)
    price_usd: float | None = None  # what its tokens cost, where a price applies (``cost.json``)
    estimated_price_usd: float | None = None  # what the pre-run estimate said they would

    def cost_text(self) -> str:
        """GPU time and money where there are any, the estimated price beside the actual one; else ``–``."""
        parts = [] if self.gpu_seconds is None else [f"{format_duration(self.gpu_seconds)} GPU"]
        if self.price_usd is not None:
            estimated = "" if self.estimated_price_usd is None else f" (est. {format_usd(self.estimated_price_usd)})"
            parts.append(f"{format_usd(self.price_usd)}{estimated}")
        return ", ".join(parts) or "–"

    def health_text(self) -> str:
        """``ok``, or the names of the checks that fired, errors first."""
        if not self.health:
            return "ok"
        ordered = sorted(self.health, key=lambda f: f.severity != "error")
        return ", ".join(f.name for f in ordered)

    def differs_text(self) -> str:
        shown = [f"{short_name(n)}={value_label(v)}" for n, v in list(self.differs.items())[:SHOWN_DIFFERENCES]]
        more = len(self.differs) - SHOWN_DIFFERENCES
        return ", ".join(shown) + (f" (+{more} more)" if more > 0 else "")


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


HEADERS = ["run", "status", "environment", "sweep", "differs", "best eval", "last eval", "best reward",
           "last reward", "steps", "wall", "CPU", "GPU, price", "health", "note"]  # fmt: skip


def row_cells(row: RunRow) -> list[str]:
    return [
        row.run_id,
        row.status,
        row.environment,
        row.sweep_id or "",
        row.differs_text() or ("baseline" if not row.differs else ""),
        _percent(row.best_eval_accuracy),
        _percent(row.last_eval_accuracy),
        _number(row.best_reward),
        _number(row.last_reward),
        f"{row.step}/{row.total_steps}",
        format_duration(row.wall_s),
        format_duration(row.cpu_seconds),
        row.cost_text(),
        row.health_text(),
        row.note,
    ]


class RunsTable(Result):
    rows: list[RunRow]
    baseline: str | None  # the run the differences are against (None: no runs)
    varying: list[str]  # the dotted names that differ somewhere among the rows (what the labels show)
    sort_by: str
    descending: bool

    def _dict(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json"), "count": len(self.rows)}

    def _text_lines(self) -> list[str]:
        if not self.rows:
            return ["No runs yet: start one with rl_start_training() or rl_sweep()."]
        cells = [HEADERS] + [row_cells(row) for row in self.rows]
        widths = [max(len(value_text(line[i])) for line in cells) for i in range(len(HEADERS))]
        lines = ["  ".join(value.ljust(width) for value, width in zip(line, widths, strict=True)).rstrip()
                 for line in cells]  # fmt: skip
        return [f"{len(self.rows)} runs, differences against {self.baseline}, sorted by {self.sort_by}", *lines]

    def _html_body(self) -> str:
        if not self.rows:
            return "<p>No runs yet.</p>"
        caption = f"<p>differences against <code>{self.baseline}</code>, sorted by {self.sort_by}</p>"
        return caption + html_table(HEADERS, [row_cells(row) for row in self.rows])
