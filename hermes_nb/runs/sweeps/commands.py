"""``rl_sweep``, ``rl_sweep_status`` and ``rl_stop_sweep``: the async face of a sweep's life (``lifecycle.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from hermes_nb.errors import InvalidValueError
from hermes_nb.protocol.sweep_state import StopRule
from hermes_nb.runs.sweeps.lifecycle import create_sweep, stop_sweep, sweep_status
from hermes_nb.runs.sweeps.results import SweepStatus
from hermes_nb.runs.sweeps.variants import Grid
from hermes_nb.selection import session


def _stop_rule(stop_if: StopRule | Mapping[str, Any] | None) -> StopRule | None:
    if stop_if is None or isinstance(stop_if, StopRule):
        return stop_if
    try:
        return StopRule.model_validate(dict(stop_if))
    except (ValidationError, TypeError, ValueError) as exc:
        detail = exc.errors()[0] if isinstance(exc, ValidationError) else {"loc": (), "msg": str(exc)}
        where = ".".join(str(p) for p in detail["loc"])
        raise InvalidValueError(
            f"stop_if{'.' + where if where else ''}: {detail['msg']} (e.g. StopRule(step=10, below_best_by=15))"
        ) from None


async def rl_sweep(
    grid: Grid,
    max_concurrent: int = 1,
    stop_if: StopRule | Mapping[str, Any] | None = None,
    name: str | None = None,
    stop_on_health: Sequence[str] | None = None,
) -> SweepStatus:
    """Run the selected environment once per variant of ``grid``, each a normal run of the current config with
    the variant's overrides, ``max_concurrent`` at a time, by a detached driver (the sweep survives the kernel).

    ``grid``: ``{"trainer.learning_rate": [1e-4, 3e-4], "env.group_size": [8, 16]}`` (every combination) or a list
    of overrides (``[{"trainer.learning_rate": 1e-4}, ...]``), with ``rl_edit_config``'s names. Every variant is
    checked before any run starts. ``stop_if=StopRule(step=10, below_best_by=15)`` stops a run whose held-out
    accuracy at step 10 is more than 15 points below the best run's there. ``stop_on_health=["entropy_collapse",
    "no_signal"]`` stops a variant's run on those health findings (added to each variant's ``health.stop_on``).
    ``rl_sweep_status`` follows it and names the best variant, whose ``config_path`` ``rl_load_config`` takes.
    """
    rule = _stop_rule(stop_if)
    state = session.load()
    health = list(stop_on_health or [])
    sweep, warnings = await asyncio.to_thread(create_sweep, state, grid, max_concurrent, rule, name, health)
    return await asyncio.to_thread(sweep_status, sweep.sweep_id, warnings)


async def rl_sweep_status(sweep_id: str | None = None) -> SweepStatus:
    """Progress of a sweep (the newest when ``sweep_id`` is None): each variant's run, status and accuracy, and the
    best variant so far with its config."""
    return await asyncio.to_thread(sweep_status, sweep_id)


async def rl_stop_sweep(sweep_id: str | None = None, wait: bool = True) -> SweepStatus:
    """Stop a sweep: its live runs stop gracefully (final checkpoints), and no more variants start."""
    return await asyncio.to_thread(stop_sweep, sweep_id, wait)
