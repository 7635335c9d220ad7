"""Run directories written the way the supervisor and trainer write them, for the notebook-layer tests."""

from __future__ import annotations

import time
from pathlib import Path

from hermes_nb.protocol.metrics import (
    EVAL_PERCENT_CORRECT,
    TRAIN_LOSS,
    TRAIN_PERCENT_CORRECT,
    TRAIN_REWARD_MEAN,
    MetricsRow,
)
from hermes_nb.protocol.run_files import ENV_METRICS_FILE, TRAINER_METRICS_FILE
from hermes_nb.protocol.run_state import ProcessRecord, RunState, RunStatusName
from hermes_nb.runs.supervision.state_file import write_run_state
from hermes_nb.system import home


def make_run(
    run_id: str,
    status: RunStatusName = "running",
    total_steps: int = 10,
    processes: dict[str, ProcessRecord] | None = None,
) -> Path:
    run_dir = home.run_dir(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    set_status(run_id, status, total_steps=total_steps, processes=processes)
    return run_dir


def set_status(
    run_id: str,
    status: RunStatusName,
    total_steps: int = 10,
    processes: dict[str, ProcessRecord] | None = None,
) -> None:
    state = RunState(
        run_id=run_id,
        environment="arithmetic",
        status=status,
        total_steps=total_steps,
        started_at=time.time(),
        processes=processes or {},
    )
    write_run_state(home.run_dir(run_id), state)


def trainer_row(step: int) -> MetricsRow:
    values = {TRAIN_LOSS: 1.0 / (step + 1), TRAIN_REWARD_MEAN: step / 10, TRAIN_PERCENT_CORRECT: step / 20}
    return MetricsRow(step=step, time=1000.0 + step, values=values)


def append_trainer_rows(run_id: str, steps: range) -> None:
    with (home.run_dir(run_id) / TRAINER_METRICS_FILE).open("a", encoding="utf-8") as handle:
        handle.writelines(trainer_row(step).to_json_line() for step in steps)


def append_eval_row(run_id: str, step: int, value: float) -> None:
    row = MetricsRow(step=step, time=1000.0 + step, values={EVAL_PERCENT_CORRECT: value})
    with (home.run_dir(run_id) / ENV_METRICS_FILE).open("a", encoding="utf-8") as handle:
        handle.write(row.to_json_line())
