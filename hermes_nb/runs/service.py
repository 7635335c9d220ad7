"""The synchronous run service: start, check, stop and resume a run; the runs table and removal of a run.

Beside ``selection/service.py`` and for the same reason: the work is blocking file and process handling, so it is
plain functions. The async ``rl_*`` run commands (``runs/commands.py``) are their face, each call in a worker
thread so a notebook's loop is never blocked; the widgets call these from a button's callback or their refresh
thread, with no loop to re-enter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hermes_nb.config import InfraConfig, RunConfig
from hermes_nb.errors import NoEnvironmentSelectedError
from hermes_nb.runs import launcher
from hermes_nb.runs.estimate import RunEstimate, estimate_config
from hermes_nb.runs.run_dirs import resolve_run
from hermes_nb.runs.supervision import stop
from hermes_nb.runs.supervision.stop import StopResult
from hermes_nb.runs.table import compare, removal, status
from hermes_nb.runs.table.removal import RemovalResult
from hermes_nb.runs.table.results import RunStatus, StartResult
from hermes_nb.runs.table.rows import RunsTable
from hermes_nb.runs.transfer import resolve as transfer
from hermes_nb.selection import editing, session
from hermes_nb.selection.discovery import EnvironmentInfo
from hermes_nb.selection.schema import read_schema_sync
from hermes_nb.selection.session import SessionState


def resume_state(run_id: str) -> SessionState:
    """The config of the run to resume (its environment, env, trainer and W&B settings), fresh infrastructure."""
    source = RunConfig.load(resolve_run(run_id).config)
    env = source.environment
    if env is None:
        raise NoEnvironmentSelectedError(f"trainer.resume_from: run {run_id} has no environment in its config")
    trainer = source.trainer.model_copy(
        update={"resume_from": run_id, "pretrained_model_path": None, "transfer_learning": False}
    )
    config = source.model_copy(update={"infra": InfraConfig(), "trainer": trainer})
    config = config.model_copy(update={"wandb": config.wandb.model_copy(update={"run_name": None})})
    info = EnvironmentInfo(name=env.name, class_name=env.class_name, file=env.file, description="", config_class="")
    return SessionState(environment=info, env_schema=read_schema_sync(env.file, env.class_name), config=config)


def start_training(resume_from: str | None = None, **overrides: Any) -> StartResult:
    """Start a run of the selected environment (or continue ``resume_from``), as ``rl_start_training`` says."""
    state = resume_state(resume_from) if resume_from else session.load()
    if state.config.environment is None:
        raise NoEnvironmentSelectedError(f"no environment selected: {editing.SELECT_FIRST}")
    if overrides:
        state, _, _ = editing.apply_edits(state, overrides)
    resolved, run_state, paths = launcher.start_run(state.config)
    damaged = transfer.resume_damage(resume_from) if resume_from else []
    return StartResult(
        run_id=run_state.run_id,
        status=run_state.status,
        environment=run_state.environment,
        run_dir=str(paths.run_dir),
        logs={name: str(path) for name, path in paths.logs.items()},
        wandb_project=resolved.wandb.project,
        wandb_run_name=resolved.wandb.run_name or "",
        total_steps=run_state.total_steps,
        damaged=damaged,
    )


def estimate_run(**overrides: Any) -> RunEstimate:
    """The pre-run estimate of the run ``start_training(**overrides)`` would start; nothing is started or saved."""
    state = session.load()
    if state.config.environment is None:
        raise NoEnvironmentSelectedError(f"no environment selected: {editing.SELECT_FIRST}")
    if overrides:
        state, _, _ = editing.apply_edits(state, overrides)
    return estimate_config(state.config)


def check_status(run_id: str | None = None) -> RunStatus:
    """Status of a run (the newest when ``run_id`` is None): processes, progress, latest metrics, errors."""
    return status.check_status(run_id)


def stop_training(run_id: str | None = None, wait: bool = True) -> StopResult:
    """Stop a run gracefully (final checkpoint first); idempotent. ``wait=False`` returns once it is asked."""
    return stop.stop_run(run_id, wait=wait)


def compare_runs(
    runs: Sequence[str] | None = None,
    baseline: str | None = None,
    sort_by: str = "created",
    descending: bool | None = None,
    sweep: str | None = None,
) -> RunsTable:
    """The runs table, as ``rl_compare_runs`` says."""
    return compare.compare_runs(runs, baseline, sort_by, descending, sweep)


def delete_run(run_id: str, confirm: bool = False, archive: bool = False) -> RemovalResult:
    """Delete (or ``archive``) a run's directory and logs, never a live run's; without ``confirm`` only list them."""
    return removal.remove_run(run_id, confirm=confirm, archive=archive)
