"""A sweep's variants: a grid or a list of overrides made into variants, and the reading of runs a sweep needs (a
variant's held-out accuracy at a step)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from hermes_nb.errors import HermesNBError, InvalidValueError
from hermes_nb.metrics.reader import read_metrics_file
from hermes_nb.protocol import metrics as keys
from hermes_nb.system.home import run_paths

# A sweep runs each variant to its end: hundreds of runs would be days of a machine, and likely a typo.
MAX_VARIANTS = 256

Grid = Mapping[str, Any] | Sequence[Mapping[str, Any]]


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
