"""``rl_list_runs``, ``rl_get_results`` and ``rl_tail_logs``: reading finished or running runs from disk."""

from __future__ import annotations

import json

from hermes_nb.errors import HermesNBError
from hermes_nb.logtail import tail_lines
from hermes_nb.metrics.reader import read_all_metrics
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.checkpoints import read_checkpoints
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.runs.layout import PROCESS_NAMES, RunPaths
from hermes_nb.runs.lineage import predecessor_rows
from hermes_nb.runs.reconcile import reconcile
from hermes_nb.runs.registry import known_run_ids, load_state, resolve_run
from hermes_nb.runs.reports import LogTail, RunList, RunResults, RunSummary
from hermes_nb.runs.state import RunStateUnreadable, read_run_state
from hermes_nb.runs.wandb_remote import TRAINER_RUN_FILE

# Metrics where higher is better; loss is the one where lower is.
_HIGHER_IS_BETTER = (keys.TRAIN_REWARD_MEAN, keys.TRAIN_PERCENT_CORRECT, keys.EVAL_PERCENT_CORRECT)
MAX_LOG_LINES = 10_000


def _last_step(paths: RunPaths) -> int:
    tail = tail_lines(paths.metrics, 1)
    if not tail:
        return 0
    try:
        return MetricsRow.from_json_line(tail[0]).step
    except ValueError:
        return 0


def list_runs() -> RunList:
    summaries = []
    for run_id in known_run_ids():
        paths = RunPaths.for_run(run_id)
        try:
            state = reconcile(paths, read_run_state(paths.run_dir))
        except RunStateUnreadable:
            continue
        summaries.append(
            RunSummary(
                run_id=run_id,
                environment=state.environment,
                status=state.status,
                created_at=state.created_at,
                step=_last_step(paths),
                total_steps=state.total_steps,
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
    state = reconcile(paths, load_state(paths))
    # A resumed run's history continues the run it resumed from.
    rows = predecessor_rows(state.run_id, paths.metrics.name) + read_all_metrics(paths.metrics)
    env_rows = predecessor_rows(state.run_id, paths.env_metrics.name) + read_all_metrics(paths.env_metrics)
    evals = [r for r in env_rows if keys.EVAL_PERCENT_CORRECT in r.values]
    checkpoints = read_checkpoints(paths.checkpoints_index)
    final = dict(rows[-1].values) if rows else {}
    if evals:
        # The latest evaluation's own keys only: an environment's row may also carry train/* values of its own,
        # which must not overwrite (or compete with) the trainer's.
        final.update({k: v for k, v in evals[-1].values.items() if k.startswith("eval/")})
    eval_only = [
        r.model_copy(update={"values": {keys.EVAL_PERCENT_CORRECT: r.values[keys.EVAL_PERCENT_CORRECT]}}) for r in evals
    ]
    return RunResults(
        run_id=state.run_id,
        environment=state.environment,
        status=state.status,
        final_metrics=final,
        best_metrics=_best(rows + eval_only),
        history=[{"step": r.step, "time": r.time, **r.values} for r in rows],
        eval_history=[{"step": r.step, "time": r.time, **r.values} for r in evals],
        checkpoints=checkpoints,
        final_weights_path=checkpoints[-1].path if checkpoints else None,
        wandb_url=_wandb_url(paths),
    )


def tail_logs(run_id: str | None, process: str = "trainer", lines: int = 50) -> LogTail:
    choices = (*PROCESS_NAMES, "supervisor")
    if process not in choices:
        raise HermesNBError(f"process: {process!r} is not a process of a run; choose one of {', '.join(choices)}")
    if not 1 <= lines <= MAX_LOG_LINES:
        raise HermesNBError(f"lines: {lines} is out of range; choose 1 to {MAX_LOG_LINES}")
    paths = resolve_run(run_id)
    path = paths.logs[process]
    return LogTail(run_id=paths.run_id, process=process, path=str(path), lines=tail_lines(path, lines))
