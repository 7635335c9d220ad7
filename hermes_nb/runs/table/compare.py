"""``rl_compare_runs``: the runs table, one row per run with what differs from a baseline run and how it did.

Every number comes from where the run's other readers take it: metrics from ``history.get_results``, status from
``run.json`` (brought in line with reality), the note from ``notes``, the sweep from the sweeps' records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from hermes_nb.config import RunConfig
from hermes_nb.errors import ConfigError, InvalidValueError
from hermes_nb.protocol import metrics as keys
from hermes_nb.runs.run_dirs import known_run_ids, resolve_run
from hermes_nb.runs.supervision.damage import current_state
from hermes_nb.runs.sweep_dirs import read_sweep, sweep_of_runs
from hermes_nb.runs.table import history
from hermes_nb.runs.table.config_diff import differences, flat_config, label, ordered
from hermes_nb.runs.table.notes import read_note
from hermes_nb.runs.table.rows import RunRow, RunsTable

# Column -> the value it sorts by, and whether larger comes first by default (best runs first, newest first).
_SORTS: dict[str, tuple[Callable[[RunRow], Any], bool]] = {
    "created": (lambda r: r.created_at, True),
    "run": (lambda r: r.run_id, False),
    "status": (lambda r: r.status, False),
    "environment": (lambda r: r.environment, False),
    "sweep": (lambda r: r.sweep_id or "", False),
    "best_eval": (lambda r: r.best_eval_accuracy, True),
    "last_eval": (lambda r: r.last_eval_accuracy, True),
    "best_reward": (lambda r: r.best_reward, True),
    "last_reward": (lambda r: r.last_reward, True),
    "steps": (lambda r: r.step, True),
    "wall": (lambda r: r.wall_s, True),
    "note": (lambda r: r.note, False),
}
SORT_COLUMNS = tuple(_SORTS)


def _config(run_id: str) -> dict[str, Any]:
    try:
        return flat_config(RunConfig.load(resolve_run(run_id).config))
    except (ConfigError, OSError):
        return {}  # a run whose config.yaml is gone is compared on nothing (its damage shows in its results)


def run_row(run_id: str, sweep_id: str | None) -> RunRow:
    paths = resolve_run(run_id)
    state, _ = current_state(paths)
    results = history.get_results(run_id)
    cost = results.cost
    end = state.ended_at if state.is_terminal else time.time()
    return RunRow(
        run_id=run_id,
        status=state.status,
        environment=state.environment,
        created_at=state.created_at,
        sweep_id=sweep_id,
        label=run_id,
        best_eval_accuracy=results.best_metrics.get(keys.EVAL_PERCENT_CORRECT),
        last_eval_accuracy=results.final_metrics.get(keys.EVAL_PERCENT_CORRECT),
        best_reward=results.best_metrics.get(keys.TRAIN_REWARD_MEAN),
        last_reward=results.final_metrics.get(keys.TRAIN_REWARD_MEAN),
        step=int(results.history[-1]["step"]) if results.history else 0,
        total_steps=state.total_steps,
        wall_s=(end - state.created_at) if end is not None else None,
        note=read_note(paths),
        health=results.health,
        stopped_by=state.stopped_by,
        cpu_seconds=cost.actual.cpu_seconds if cost else None,
        gpu_seconds=cost.actual.gpu_seconds if cost else None,
        price_usd=cost.actual.price_usd if cost else None,
        estimated_price_usd=cost.estimate.price_usd if cost and cost.estimate else None,
    )


def _chosen(runs: Sequence[str] | None, sweep: str | None) -> list[str]:
    if sweep is not None:
        known = set(known_run_ids())  # a finished sweep's run may have been deleted since
        return [v.run_id for v in read_sweep(sweep).variants if v.run_id in known]
    if runs is None:
        return known_run_ids()
    return list(dict.fromkeys(resolve_run(run_id).run_id for run_id in runs))  # unknown ids: named, with the known


def sorted_rows(rows: list[RunRow], sort_by: str, descending: bool | None) -> tuple[list[RunRow], bool]:
    """``rows`` sorted by the column ``sort_by``; a row without a value there goes last either way."""
    if sort_by not in _SORTS:
        raise InvalidValueError(f"sort_by: {sort_by!r} is not a column; choose one of {', '.join(SORT_COLUMNS)}")
    key, larger_first = _SORTS[sort_by]
    down = larger_first if descending is None else descending
    known = [row for row in rows if key(row) is not None]
    unknown = [row for row in rows if key(row) is None]
    return sorted(known, key=key, reverse=down) + unknown, down


def compare_runs(
    runs: Sequence[str] | None = None,
    baseline: str | None = None,
    sort_by: str = "created",
    descending: bool | None = None,
    sweep: str | None = None,
) -> RunsTable:
    if sort_by not in _SORTS:  # refused before any run is read
        raise InvalidValueError(f"sort_by: {sort_by!r} is not a column; choose one of {', '.join(SORT_COLUMNS)}")
    run_ids = _chosen(runs, sweep)
    owners = sweep_of_runs()
    rows = [run_row(run_id, owners.get(run_id)) for run_id in run_ids]
    base_id = resolve_run(baseline).run_id if baseline is not None else None
    if base_id is None and rows:
        base_id = min(rows, key=lambda r: (r.created_at, r.run_id)).run_id
    configs = {row.run_id: _config(row.run_id) for row in rows}
    base_config = configs[base_id] if base_id in configs else (_config(base_id) if base_id else {})
    varying: set[str] = set()
    for row in rows:
        row.differs = differences(configs[row.run_id], base_config)
        varying.update(row.differs)
    fields = ordered(varying)
    for row in rows:
        row.label = label(configs[row.run_id], fields) if fields else row.run_id
    rows, down = sorted_rows(rows, sort_by, descending)
    return RunsTable(rows=rows, baseline=base_id, varying=fields, sort_by=sort_by, descending=down)
