"""A sweep's directory: ``<home>/sweeps/<sweep_id>/`` with ``sweep.json`` (``hermes_nb.protocol.sweep_state``)
and one ``variant_<i>.yaml`` per variant (the whole config its run starts from, checked before the sweep began).

Writing is atomic (temp file, rename); the driver is the only writer while it lives. Also here: a grid or a list
of overrides made into variants, and the reading of runs a sweep needs (a variant's held-out accuracy at a step).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hermes_nb.errors import HermesNBError, InvalidValueError
from hermes_nb.metrics.reader import read_metrics_file
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.run_files import SWEEP_FILE, SWEEP_VARIANT_CONFIG, sweep_log_file_name
from hermes_nb.protocol.sweep_state import SweepState
from hermes_nb.system import home
from hermes_nb.system.home import run_paths

# A sweep runs each variant to its end: hundreds of runs would be days of a machine, and likely a typo.
MAX_VARIANTS = 256

Grid = Mapping[str, Any] | Sequence[Mapping[str, Any]]


def sweep_dir(sweep_id: str) -> Path:
    return home.sweeps_dir() / sweep_id


def sweep_file(sweep_id: str) -> Path:
    return sweep_dir(sweep_id) / SWEEP_FILE


def variant_config(sweep_id: str, index: int) -> Path:
    return sweep_dir(sweep_id) / SWEEP_VARIANT_CONFIG.format(index=index)


def driver_log(sweep_id: str) -> Path:
    return home.logs_dir() / sweep_log_file_name(sweep_id)


def known_sweep_ids() -> list[str]:
    """Sweep ids, newest first (they start with their UTC creation time, like run ids)."""
    root = home.sweeps_dir()
    if not root.is_dir():
        return []
    return sorted((p.name for p in root.iterdir() if (p / SWEEP_FILE).is_file()), reverse=True)


def read_sweep(sweep_id: str) -> SweepState:
    path = sweep_file(sweep_id)
    if not path.is_file():
        known = ", ".join(known_sweep_ids()[:10]) or "none yet"
        raise HermesNBError(f"unknown sweep {sweep_id!r}; known sweeps: {known}")
    try:
        return SweepState.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError) as exc:
        raise HermesNBError(f"sweep {sweep_id}: {path} cannot be read ({str(exc).splitlines()[0]})") from None


def write_sweep(state: SweepState) -> None:
    path = sweep_file(state.sweep_id)
    tmp = path.with_name(f".{SWEEP_FILE}.{os.getpid()}.tmp")
    tmp.write_text(state.model_dump_json(indent=2), encoding="utf-8")
    tmp.replace(path)


def sweep_of_runs() -> dict[str, str]:
    """Run id -> the sweep that started it, for every sweep in this home (the runs table's sweep column)."""
    owners: dict[str, str] = {}
    for sweep_id in known_sweep_ids():
        try:
            state = read_sweep(sweep_id)
        except HermesNBError:
            continue  # an unreadable sweep claims no runs; rl_sweep_status names its problem
        owners.update({v.run_id: sweep_id for v in state.variants if v.run_id})
    return owners


# ---------------------------------------------------------------- variants


def expand(grid: Grid) -> list[dict[str, Any]]:
    """The variants of ``grid``: a mapping of field -> values is every combination (in the order given, the last
    field varying fastest); a list of mappings is those overrides, one variant each."""
    if isinstance(grid, Mapping):
        variants = _combinations(grid)
    elif isinstance(grid, Sequence) and not isinstance(grid, str):
        variants = [_overrides(item, index) for index, item in enumerate(grid)]
    else:
        raise InvalidValueError(f"grid: a mapping of field -> values or a list of overrides, got {type(grid).__name__}")
    if not variants:
        raise InvalidValueError("grid: no variants (give at least one field with at least one value)")
    if len(variants) > MAX_VARIANTS:
        raise InvalidValueError(f"grid: {len(variants)} variants; at most {MAX_VARIANTS} in one sweep")
    return variants


def _combinations(grid: Mapping[str, Any]) -> list[dict[str, Any]]:
    if not grid:
        return []  # product() of nothing is one empty variant: a sweep of the current config, surely not meant
    names, choices = [], []
    for name, values in grid.items():
        listed = list(values) if isinstance(values, (list, tuple)) else [values]
        if not listed:
            raise InvalidValueError(f"grid: {name} has no values")
        names.append(name)
        choices.append(listed)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*choices)]


def _overrides(item: Any, index: int) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        raise InvalidValueError(f"grid[{index}]: a mapping of field -> value, got {type(item).__name__}")
    return dict(item)


def parse_grid_items(items: Sequence[str]) -> dict[str, list[str]]:
    """``["trainer.learning_rate=1e-4,3e-4", "env.group_size=8,16"]`` (a magic's line) -> a grid of texts."""
    grid: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name.strip() or not values.strip():
            raise HermesNBError(f"expected field=value,value (e.g. trainer.learning_rate=1e-4,3e-4), got {item!r}")
        grid[name.strip()] = [value.strip() for value in values.split(",") if value.strip()]
    return grid


# ---------------------------------------------------------------- reading the runs


def eval_accuracy_at(run_id: str, step: int) -> float | None:
    """The run's held-out accuracy at ``step``: its first evaluation at that step or later (None: none yet)."""
    for row in read_metrics_file(run_paths(run_id).env_metrics).rows:
        if row.step >= step and keys.EVAL_PERCENT_CORRECT in row.values:
            return row.values[keys.EVAL_PERCENT_CORRECT]
    return None
