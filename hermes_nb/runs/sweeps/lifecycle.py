"""A sweep's life: a grid of config overrides run as normal runs by a detached driver (``runs/sweeps/driver.py``),
so the sweep outlives the kernel that asked for it; created, followed (its driver reconciled, its best variant
named) and stopped here, under the thin ``rl_*`` layer in ``commands.py``.

Every variant is checked before anything starts (its overrides on the current config, as ``rl_edit_config``
checks them, then what a start checks): one bad value refuses the whole sweep, naming the variant and the field.

A sweep's health stop rule (``stop_on_health``) is each variant's ``health.stop_on``, not a rule of the driver's:
a finding is evaluated where the run's metrics are written and the run stops itself at once, gracefully with its
checkpoint, even while the driver is slow or gone; the driver then sees a stopped run and starts the next variant.
A rule of the driver's would read the same findings later and stop the run the same way, a second copy of
``health.stop_on``. (The driver's own rule, ``stop_if``, compares variants with each other, which no run can.)
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping, Sequence
from typing import Any

from hermes_nb.config import RunConfig
from hermes_nb.errors import HermesNBError, InvalidValueError, NoEnvironmentSelectedError, RunStateError
from hermes_nb.health import HEALTH_CHECKS
from hermes_nb.protocol.run_state import TERMINAL_STATUSES
from hermes_nb.protocol.sweep_state import StopRule, SweepState, Variant
from hermes_nb.runs import launcher
from hermes_nb.runs.launcher import new_run_id
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.runs.supervision import graces, stop
from hermes_nb.runs.sweep_dirs import driver_log, known_sweep_ids, read_sweep, sweep_dir, variant_config, write_sweep
from hermes_nb.runs.sweeps.driver import run_is_live
from hermes_nb.runs.sweeps.results import BestVariant, SweepStatus, VariantRow
from hermes_nb.runs.sweeps.variants import Grid, expand
from hermes_nb.runs.table.compare import run_row
from hermes_nb.selection import editing
from hermes_nb.selection.session import SessionState
from hermes_nb.system import processes, secrets
from hermes_nb.system.home import run_paths

DRIVER_MODULE = "hermes_nb.runs.sweeps.driver"
# The driver records itself within a second of being forked; a sweep without a driver after this never got one.
DRIVER_START_SECONDS = 30.0
# A variant with no run to wait for (it could not start, or its run was deleted since) counts as done.
_DONE_WITHOUT_RUN = ("not started", "deleted")


def variant_configs(
    state: SessionState, overrides: list[dict[str, Any]], stop_on_health: Sequence[str] = ()
) -> list[RunConfig]:
    """Each variant's whole config, checked as a start would check it; the first refusal names its variant.
    ``stop_on_health``: added to each variant's ``health.stop_on`` (see ``edited_config``)."""
    configs = []
    for index, edits in enumerate(overrides):
        try:
            config = edited_config(state, edits, stop_on_health)
            launcher.validate_for_start(config)
        except HermesNBError as exc:
            raise type(exc)(f"variant {index} ({_shown(edits)}): {exc}") from None
        configs.append(config)
    return configs


def edited_config(state: SessionState, edits: dict[str, Any], stop_on_health: Sequence[str]) -> RunConfig:
    """``edits`` on the current config, with the sweep's health stop rule joined to the checks the variant already
    stops on (its own ``health.stop_on``, else the config's): the sweep adds to them, never drops one."""
    config = editing.apply_edits(state, edits)[0].config
    if not stop_on_health:
        return config
    joined = list(dict.fromkeys([*config.health.stop_on, *stop_on_health]))
    return editing.apply_edits(state, {**edits, "health.stop_on": joined})[0].config


def check_health_names(names: Sequence[str]) -> list[str]:
    """The sweep's ``stop_on_health``, refused naming the unknown check and those there are."""
    unknown = [name for name in names if name not in HEALTH_CHECKS]
    if unknown:
        raise InvalidValueError(
            f"stop_on_health: no health check {', '.join(map(repr, unknown))}; choose from {', '.join(HEALTH_CHECKS)}"
        )
    return list(names)


def _shown(edits: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in edits.items())


def _threads_per_run(config: RunConfig) -> int:
    from hermes_nb.trainer.run.main import default_torch_threads

    # The trainer runs two torch workloads side by side (the step and the sampler), each this many threads wide.
    return 2 * (config.trainer.torch_threads or default_torch_threads())


def oversubscription(configs: list[RunConfig], max_concurrent: int) -> list[str]:
    """A warning when ``max_concurrent`` runs' torch threads are more than this machine's cores."""
    cores = os.cpu_count() or 1
    at_once = min(max_concurrent, len(configs))
    threads = at_once * max((_threads_per_run(c) for c in configs), default=1)
    if at_once <= 1 or threads <= cores:
        return []
    return [
        f"max_concurrent={max_concurrent}: {at_once} runs at once use {threads} torch threads on {cores} cores "
        f"(os.cpu_count()); each run will be slower (set trainer.torch_threads, or run fewer at once)"
    ]


def create_sweep(
    state: SessionState,
    grid: Grid,
    max_concurrent: int,
    stop_if: StopRule | None,
    name: str | None,
    stop_on_health: Sequence[str] = (),
) -> tuple[SweepState, list[str]]:
    if state.config.environment is None:
        raise NoEnvironmentSelectedError(f"no environment selected: {editing.SELECT_FIRST}")
    if not isinstance(max_concurrent, int) or max_concurrent < 1:
        raise InvalidValueError(f"max_concurrent: a whole number of runs at once, at least 1; got {max_concurrent!r}")
    stop_on_health = check_health_names(stop_on_health)
    overrides = expand(grid)
    configs = variant_configs(state, overrides, stop_on_health)
    sweep_id = new_run_id()
    secrets.private_home()
    secrets.private_dir(sweep_dir(sweep_id))
    for index, config in enumerate(configs):
        launcher.save_redacted(config, variant_config(sweep_id, index))
    sweep = SweepState(
        sweep_id=sweep_id,
        name=name or sweep_id,
        environment=state.config.environment.name,
        max_concurrent=max_concurrent,
        stop_if=stop_if,
        stop_on_health=stop_on_health,
        variants=[Variant(index=i, overrides=edits) for i, edits in enumerate(overrides)],
    )
    write_sweep(sweep)
    launcher.spawn_detached("sweep driver", DRIVER_MODULE, sweep_id, driver_log(sweep_id))
    return sweep, oversubscription(configs, max_concurrent)


def reconciled(sweep: SweepState) -> SweepState:
    """The sweep, marked failed first when it looks live but its driver is gone (killed, or never started)."""
    if sweep.is_terminal:
        return sweep
    driver = sweep.driver
    if driver is None and time.time() - sweep.created_at < DRIVER_START_SECONDS:
        return sweep
    if driver is not None and processes.is_same_process_alive(driver):
        return sweep
    gone = f"its driver (pid {driver.pid}) is gone" if driver else "its driver never started"
    failed = sweep.model_copy(
        update={"status": "failed", "ended_at": time.time(), "error": f"{gone}; log: {driver_log(sweep.sweep_id)}"}
    )
    write_sweep(failed)  # the driver is gone, so this reader is the only writer
    return failed


def _variant_row(sweep_id: str, variant: Variant) -> VariantRow:
    if variant.run_id is None:
        status = "not started" if variant.start_error else "pending"
        return VariantRow(index=variant.index, overrides=variant.overrides, status=status,
                          note=variant.start_error or "")  # fmt: skip
    if variant.run_id not in known_run_ids():
        return VariantRow(index=variant.index, overrides=variant.overrides, status="deleted",
                          note=f"run {variant.run_id} was deleted or archived")  # fmt: skip
    row = run_row(variant.run_id, sweep_id)
    stopped_by = f"stopped by health.stop_on: {row.stopped_by}" if row.stopped_by else ""
    return VariantRow(index=variant.index, overrides=variant.overrides, status=row.status, run=row,
                      note=variant.early_stopped or stopped_by)  # fmt: skip


def best_variant(rows: list[VariantRow]) -> BestVariant | None:
    """The variant with the best held-out accuracy (then reward); early-stopped ones count with what they had."""
    ran = [r for r in rows if r.run is not None]
    if not ran:
        return None

    def score(row: VariantRow) -> tuple[float, float]:
        assert row.run is not None
        accuracy, reward = row.run.best_eval_accuracy, row.run.best_reward
        return (-1.0 if accuracy is None else accuracy, float("-inf") if reward is None else reward)

    top = max(ran, key=score)
    assert top.run is not None
    if top.run.best_eval_accuracy is None and top.run.best_reward is None:
        return None
    return BestVariant(
        index=top.index,
        run_id=top.run.run_id,
        overrides=top.overrides,
        best_eval_accuracy=top.run.best_eval_accuracy,
        best_reward=top.run.best_reward,
        config_path=str(run_paths(top.run.run_id).config),
    )


def sweep_status(sweep_id: str | None, warnings: list[str] | None = None) -> SweepStatus:
    if sweep_id is None:
        ids = known_sweep_ids()
        if not ids:
            raise HermesNBError("no sweeps yet: start one with rl_sweep({'trainer.learning_rate': [1e-4, 3e-4]})")
        sweep_id = ids[0]
    sweep = reconciled(read_sweep(sweep_id))
    rows = [_variant_row(sweep.sweep_id, v) for v in sweep.variants]
    done = sum(1 for r in rows if r.status in TERMINAL_STATUSES or r.status in _DONE_WITHOUT_RUN)
    return SweepStatus(
        sweep_id=sweep.sweep_id,
        name=sweep.name,
        environment=sweep.environment,
        status=sweep.status,
        max_concurrent=sweep.max_concurrent,
        stop_if=sweep.stop_if,
        stop_on_health=sweep.stop_on_health,
        variants=rows,
        done=done,
        best=best_variant(rows),
        sweep_dir=str(sweep_dir(sweep.sweep_id)),
        log_path=str(driver_log(sweep.sweep_id)),
        error=sweep.error,
        warnings=warnings or [],
    )


def stop_sweep(sweep_id: str | None, wait: bool = True) -> SweepStatus:
    """Ask the driver to stop (SIGTERM): it stops the live runs through the normal stop and starts no more. A
    sweep whose driver is gone has its live runs stopped here."""
    status = sweep_status(sweep_id)
    sweep = read_sweep(status.sweep_id)
    if sweep.is_terminal:
        for variant in sweep.variants:
            if variant.run_id and run_is_live(variant.run_id):
                stop.stop_run(variant.run_id, wait=wait)
        return sweep_status(sweep.sweep_id)
    deadline = time.monotonic() + DRIVER_START_SECONDS
    while sweep.driver is None and time.monotonic() < deadline:  # just started: the driver is recording itself
        time.sleep(0.1)
        sweep = read_sweep(sweep.sweep_id)
    if sweep.driver is not None:
        processes.send_signal(sweep.driver, signal.SIGTERM)
    if not wait:
        return sweep_status(sweep.sweep_id)
    timeout = graces.stop_wait_seconds() + DRIVER_START_SECONDS
    processes.wait_while(lambda: not reconciled(read_sweep(sweep.sweep_id)).is_terminal, timeout, poll_seconds=0.2)
    if not read_sweep(sweep.sweep_id).is_terminal:
        raise RunStateError(
            f"sweep {sweep.sweep_id} did not stop within {timeout:.0f} s; see {driver_log(sweep.sweep_id)}"
        )
    return sweep_status(sweep.sweep_id)
