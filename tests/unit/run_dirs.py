"""Fabricated run directories, written with the same models and files the supervisor and trainer write.

The lifecycle's read side (status, results, logs, runs) reads only files, so a finished or running run can be
laid out here without starting one; processes in a record are real ones the test controls.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from hermes_nb.config import RunConfig, TrainerConfig
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_files import ProcessName, RunPaths
from hermes_nb.protocol.run_state import ProcessRecord, RunState, RunStatusName
from hermes_nb.runs.supervision.state_file import write_run_state
from hermes_nb.system.home import run_paths

FINISHED_ID = "20250101-120000-abcdefghjk"
OTHER_ID = "20250101-110000-mnpqrstuvw"
T0 = 1_700_000_000.0
STEP_SECONDS = 10.0


def write_state(run_id: str, status: RunStatusName = "completed", **fields: object) -> RunPaths:
    paths = run_paths(run_id)
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    values: dict[str, object] = {
        "run_id": run_id,
        "environment": "arithmetic",
        "status": status,
        "created_at": T0,
        "started_at": T0,
        "total_steps": 10,
        "wandb_project": "hermes-nb",
        "wandb_run_name": f"arithmetic-{run_id}",
    }
    if status in ("stopped", "completed", "failed"):
        values["ended_at"] = T0 + 100
    write_run_state(paths.run_dir, RunState.model_validate({**values, **fields}))
    return paths


def trainer_row(step: int, reward: float, correct: float, loss: float) -> MetricsRow:
    values = {keys.TRAIN_REWARD_MEAN: reward, keys.TRAIN_PERCENT_CORRECT: correct, keys.TRAIN_LOSS: loss}
    return MetricsRow(step=step, time=T0 + STEP_SECONDS * step, values=values)


def eval_row(step: int, correct: float) -> MetricsRow:
    return MetricsRow(step=step, time=T0 + STEP_SECONDS * step + 1, values={keys.EVAL_PERCENT_CORRECT: correct})


def write_rows(path: Path, rows: Sequence[MetricsRow]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.writelines(row.to_json_line() for row in rows)


# Steps 1-4: reward peaks at step 3, loss is lowest at step 4; evals at steps 2 and 4 (best at 2).
TRAINER_ROWS = [
    trainer_row(1, 0.1, 0.10, 2.0),
    trainer_row(2, 0.4, 0.40, 1.5),
    trainer_row(3, 0.9, 0.80, 1.2),
    trainer_row(4, 0.6, 0.70, 1.0),
]
EVAL_ROWS = [eval_row(2, 0.55), eval_row(4, 0.50)]


def write_checkpoint(paths: RunPaths, step: int, kind: str = "interval", exists: bool = True) -> Path:
    directory = paths.checkpoints_dir / f"step_{step}"
    if exists:
        directory.mkdir(parents=True, exist_ok=True)
    line = {"step": step, "path": str(directory), "time": T0 + step, "kind": kind, "metrics": {}}
    with paths.checkpoints_index.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
    return directory


def write_finished_run(run_id: str = FINISHED_ID, status: RunStatusName = "completed") -> RunPaths:
    """A finished 4-step run: metrics, evals, two checkpoints (one deleted since), a trainer log."""
    paths = write_state(run_id, status, total_steps=4)
    write_rows(paths.metrics, TRAINER_ROWS)
    write_rows(paths.env_metrics, EVAL_ROWS)
    write_checkpoint(paths, 2, exists=False)
    write_checkpoint(paths, 4, kind="final")
    paths.logs["trainer"].parent.mkdir(parents=True, exist_ok=True)
    paths.logs["trainer"].write_text("".join(f"trainer line {i}\n" for i in range(1, 101)), encoding="utf-8")
    return paths


def this_process(name: ProcessName = "supervisor") -> ProcessRecord:
    """A record of the test's own process: alive, with its real start time."""
    me = psutil.Process()
    return ProcessRecord(name=name, pid=me.pid, started_at=me.create_time())


def dead_process(name: ProcessName = "supervisor") -> ProcessRecord:
    """A record of a process that really ran (real pid and start time) and has exited."""
    proc = subprocess.Popen(["sleep", "30"])
    started_at = psutil.Process(proc.pid).create_time()
    proc.kill()
    proc.wait(10)
    return ProcessRecord(name=name, pid=proc.pid, started_at=started_at)


@contextmanager
def group_leader() -> Iterator[subprocess.Popen[bytes]]:
    """A live process leading its own process group, ended when the test is done."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        time.sleep(0.05)  # let it exec, so its create_time is final
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


# Three runs the runs table compares: lr 1e-4 / 3e-4 / 3e-4, group 8 / 8 / 16, created in that order.
OLD, MID, NEW = "20250101-100000-aaaaaaaaaa", "20250101-110000-bbbbbbbbbb", "20250101-120000-cccccccccc"


def make_run(run_id: str, lr: float, group: int, created: float, **state: Any) -> RunPaths:
    """A run whose config.yaml has these settings (the W&B run name per run, as the launcher names it)."""
    paths = write_state(run_id, created_at=created, **state)  # type: ignore[arg-type]
    config = RunConfig(env={"group_size": group, "total_steps": 4}, trainer=TrainerConfig(learning_rate=lr))
    config = config.model_copy(update={"wandb": config.wandb.model_copy(update={"run_name": run_id})})
    config.save(paths.config)
    return paths


def write_three_runs() -> None:
    """OLD without metrics, MID with the 4-step rows, NEW with one evaluation at 90%."""
    make_run(OLD, 1e-4, 8, 1.0)
    paths = make_run(MID, 3e-4, 8, 2.0)
    write_rows(paths.metrics, TRAINER_ROWS)
    write_rows(paths.env_metrics, EVAL_ROWS)
    paths = make_run(NEW, 3e-4, 16, 3.0)
    write_rows(paths.env_metrics, [eval_row(2, 0.9)])
