"""``rl_check_status``: what a run is doing now, read from its directory (always fresh) and W&B (rate-limited)."""

from __future__ import annotations

import time

from hermes_nb.metrics.reader import read_metrics_file
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.auth import capability_url
from hermes_nb.protocol.checkpoints import read_checkpoint_index
from hermes_nb.protocol.health import read_cost, read_findings
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_files import PROCESS_NAMES, RunPaths
from hermes_nb.protocol.run_state import RunState
from hermes_nb.protocol.tinker import read_run_info
from hermes_nb.runs.run_dirs import resolve_run
from hermes_nb.runs.supervision.damage import Damage, current_state, file_damage
from hermes_nb.runs.table.results import AlgorithmMetrics, LatestMetrics, ProcessStatus, RunStatus
from hermes_nb.runs.table.wandb_remote import remote_summary
from hermes_nb.system import processes
from hermes_nb.system.logtail import tail_lines
from hermes_nb.system.net import LOOPBACK
from hermes_nb.system.secrets import read_run_secret

FAILURE_LOG_LINES = 30


def process_statuses(state: RunState) -> list[ProcessStatus]:
    result = []
    for name in PROCESS_NAMES:
        record = state.processes.get(name)
        if record is None:
            result.append(ProcessStatus(name=name, state="not started"))
            continue
        alive = processes.is_same_process_alive(record)
        result.append(
            ProcessStatus(
                name=name,
                state="running" if alive else "exited",
                pid=record.pid,
                exit_code=None if alive else record.exit_code,
                log_path=record.log_path,
            )
        )
    return result


def _latest(key: str, *row_lists: list[MetricsRow]) -> float | None:
    """The newest value of ``key`` in the first list that has one."""
    for rows in row_lists:
        for row in reversed(rows):
            if key in row.values:
                return row.values[key]
    return None


def latest_metrics(trainer_rows: list[MetricsRow], env_rows: list[MetricsRow]) -> LatestMetrics:
    """Reward and percent correct of the trained batch (the trainer's, as its log and the plot show them), held-out
    accuracy from the environment: each key read from the one file that writes it."""
    return LatestMetrics(
        **AlgorithmMetrics.newest(trainer_rows).model_dump(),
        step=trainer_rows[-1].step if trainer_rows else None,
        reward_mean=_latest(keys.TRAIN_REWARD_MEAN, trainer_rows),
        percent_correct=_latest(keys.TRAIN_PERCENT_CORRECT, trainer_rows),
        loss=_latest(keys.TRAIN_LOSS, trainer_rows),
        eval_percent_correct=_latest(keys.EVAL_PERCENT_CORRECT, env_rows),
    )


def env_fault_totals(env_rows: list[MetricsRow]) -> tuple[int, int]:
    """Failed groups and timed-out calls of the environment over the whole run (its rows count since the last)."""
    failed = sum(row.values.get(keys.ENV_GROUPS_FAILED, 0.0) for row in env_rows)
    timeouts = sum(row.values.get(keys.ENV_TIMEOUTS, 0.0) for row in env_rows)
    return int(failed), int(timeouts)


def eta_seconds(state: RunState, rows: list[MetricsRow]) -> float | None:
    """Remaining steps times the mean step time over the last (up to) 20 steps."""
    if state.is_terminal or len(rows) < 2:
        return None
    recent = rows[-20:]
    per_step = (recent[-1].time - recent[0].time) / max(1, recent[-1].step - recent[0].step)
    return max(0.0, (state.total_steps - rows[-1].step) * per_step)


def running_seconds(state: RunState) -> float | None:
    if state.started_at is None:
        return None
    return (state.ended_at or time.time()) - state.started_at


def run_urls(paths: RunPaths, state: RunState) -> tuple[str | None, str | None]:
    """The live run's inference (OpenAI base) and trajectory API URLs in their working form: capability URLs with
    the run's secret. None once the run has ended (nothing listens), and for a part the run does not serve."""
    if state.is_terminal:
        return None, None
    secret = read_run_secret(paths.run_dir)
    inference = f"http://{LOOPBACK}:{state.inference_port}/v1" if state.inference_port else None
    api = f"http://{LOOPBACK}:{state.api_port}" if state.api_port else None
    return (
        capability_url(inference, secret) if inference else None,
        capability_url(api, secret) if api else None,
    )


def build_status(paths: RunPaths, state: RunState, damaged: list[Damage] | None = None) -> RunStatus:
    """The status from the run's files; ``damaged``: what is already known to be wrong (an unreadable run.json)."""
    trainer_read, env_read = read_metrics_file(paths.metrics), read_metrics_file(paths.env_metrics)
    trainer_rows, env_rows = trainer_read.rows, env_read.rows
    index = read_checkpoint_index(paths.checkpoints_index)
    found = file_damage(paths, ended=state.is_terminal, trainer=trainer_read, env=env_read, index=index)
    failed_log = paths.logs.get(state.failed_process or "")
    tail = tail_lines(failed_log, FAILURE_LOG_LINES) if state.status == "failed" and failed_log else []
    failed_groups, timeouts = env_fault_totals(env_rows)
    inference_url, api_url = run_urls(paths, state)
    return RunStatus(
        run_id=state.run_id,
        environment=state.environment,
        status=state.status,
        running_seconds=running_seconds(state),
        step=trainer_rows[-1].step if trainer_rows else 0,
        total_steps=state.total_steps,
        eta_seconds=eta_seconds(state, trainer_rows),
        metrics=latest_metrics(trainer_rows, env_rows),
        # A run shown from its other files (run.json unreadable) has no process records to show.
        processes=[] if damaged else process_statuses(state),
        checkpoints=index.existing,
        logs={name: str(path) for name, path in paths.logs.items()},
        wandb_project=state.wandb_project,
        wandb_run_name=state.wandb_run_name,
        wandb=remote_summary(paths),
        error=state.error,
        failed_process=state.failed_process,
        log_tail=tail,
        env_failed_groups=failed_groups,
        env_timeouts=timeouts,
        tinker=read_run_info(paths.run_dir),
        damaged=(damaged or []) + found,
        inference_url=inference_url,
        api_url=api_url,
        health=read_findings(paths.health),
        stopped_by=state.stopped_by,
        cost=read_cost(paths.cost),
    )


def check_status(run_id: str | None) -> RunStatus:
    paths = resolve_run(run_id)  # an unknown id fails here, before any W&B window is used
    state, damaged = current_state(paths)
    return build_status(paths, state, damaged)
