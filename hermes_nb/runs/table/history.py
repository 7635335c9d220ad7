"""``rl_list_runs``, ``rl_get_results`` and ``rl_tail_logs``: reading finished or running runs from disk."""

from __future__ import annotations

import json

from hermes_nb.errors import HermesNBError
from hermes_nb.metrics.reader import last_complete_line, read_metrics_file
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.checkpoints import read_checkpoint_index
from hermes_nb.protocol.health import read_cost, read_findings
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_files import LOGGED_PROCESSES, RunPaths
from hermes_nb.runs.run_dirs import known_run_ids, resolve_run
from hermes_nb.runs.supervision.damage import current_state, file_damage
from hermes_nb.runs.table.results import AlgorithmMetrics, LogTail, RunList, RunResults, RunSummary
from hermes_nb.runs.table.wandb_remote import TRAINER_RUN_FILE
from hermes_nb.runs.transfer.lineage import predecessor_rows
from hermes_nb.system.home import run_paths
from hermes_nb.system.logtail import tail_lines

# Metrics where higher is better; loss is the one where lower is.
_HIGHER_IS_BETTER = (keys.TRAIN_REWARD_MEAN, keys.TRAIN_PERCENT_CORRECT, keys.EVAL_PERCENT_CORRECT)
MAX_LOG_LINES = 10_000


def _last_step(paths: RunPaths) -> int:
    line = last_complete_line(paths.metrics)  # a cut-short last line is damage, not the last step
    if line is None:
        return 0
    try:
        return MetricsRow.model_validate_json(line).step
    except ValueError:
        return 0


def list_runs() -> RunList:
    summaries = []
    for run_id in known_run_ids():
        paths = run_paths(run_id)
        state, damaged = current_state(paths)
        summaries.append(
            RunSummary(
                run_id=run_id,
                environment=state.environment,
                status=state.status,
                created_at=state.created_at,
                step=_last_step(paths),
                total_steps=state.total_steps,
                damaged=damaged + file_damage(paths, ended=state.is_terminal),
            )
        )
    return RunList(runs=summaries)


def _best(rows: list[MetricsRow]) -> dict[str, float]:
    best: dict[str, float] = {}
    for row in rows:
        for key, value in row.values.items():
            if key in _HIGHER_IS_BETTER:
                best[key] = max(value, best.get(key, value))
            elif key == keys.TRAIN_LOSS:
                best[key] = min(value, best.get(key, value))
    return best


def _wandb_url(paths: RunPaths) -> str | None:
    try:
        info = json.loads((paths.run_dir / TRAINER_RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    url = info.get("url") if isinstance(info, dict) else None
    return url if isinstance(url, str) else None


def get_results(run_id: str | None) -> RunResults:
    paths = resolve_run(run_id)
    state, damaged = current_state(paths)
    trainer_read, env_read = read_metrics_file(paths.metrics), read_metrics_file(paths.env_metrics)
    index = read_checkpoint_index(paths.checkpoints_index)
    damaged += file_damage(paths, ended=state.is_terminal, trainer=trainer_read, env=env_read, index=index)
    # A resumed run's history continues the run it resumed from.
    rows = predecessor_rows(state.run_id, paths.metrics.name) + trainer_read.rows
    env_rows = predecessor_rows(state.run_id, paths.env_metrics.name) + env_read.rows
    evals = [r for r in env_rows if keys.EVAL_PERCENT_CORRECT in r.values]
    checkpoints = index.existing
    final = dict(rows[-1].values) if rows else {}
    if evals:
        # The latest evaluation's own keys only: an environment's row may also carry train/* values of its own,
        # which must not overwrite (or compete with) the trainer's.
        final.update({k: v for k, v in evals[-1].values.items() if k.startswith(keys.EVAL_PREFIX)})
    eval_only = [
        r.model_copy(update={"values": {keys.EVAL_PERCENT_CORRECT: r.values[keys.EVAL_PERCENT_CORRECT]}}) for r in evals
    ]
    return RunResults(
        run_id=state.run_id,
        environment=state.environment,
        status=state.status,
        final_metrics=final,
        best_metrics=_best(rows + eval_only),
        algorithm=AlgorithmMetrics.newest(rows),
        history=[{"step": r.step, "time": r.time, **r.values} for r in rows],
        eval_history=[{"step": r.step, "time": r.time, **r.values} for r in evals],
        checkpoints=checkpoints,
        final_weights_path=checkpoints[-1].path if checkpoints else None,
        wandb_url=_wandb_url(paths),
        damaged=damaged,
        health=read_findings(paths.health),
        cost=read_cost(paths.cost),
    )


def tail_logs(run_id: str | None, process: str = "trainer", lines: int = 50) -> LogTail:
    if process not in LOGGED_PROCESSES:
        choices = ", ".join(LOGGED_PROCESSES)
        raise HermesNBError(f"process: {process!r} is not a process of a run; choose one of {choices}")
    if not 1 <= lines <= MAX_LOG_LINES:
        raise HermesNBError(f"lines: {lines} is out of range; choose 1 to {MAX_LOG_LINES}")
    paths = resolve_run(run_id)
    path = paths.logs[process]
    return LogTail(run_id=paths.run_id, process=process, path=str(path), lines=tail_lines(path, lines))
