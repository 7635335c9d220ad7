"""``run.json``: the state of one run, the only state shared between the kernel, the CLI and the supervisor.

Written atomically (temp file + rename) by the supervisor, so any reader in any process always sees a whole,
valid record. A process is identified by pid *and* start time, so a reused pid is never mistaken for the run's.
While the run is live its directory keeps a small reserve of disk space, freed when a write of ``run.json``
finds the disk full: a run that fails for lack of space can still record that it failed, and why.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hermes_nb.protocol.run_layout import DISK_RESERVE_FILE, RUN_STATE_FILE, ProcessName
from hermes_nb.system.disk import DiskFullError, Reserve, disk_full_errno

# "unknown" is never written: readers show it when run.json cannot be read and no process of the run is running
# (hermes_nb.runs.damage). Nothing will change such a run any more, so it counts as ended.
RunStatusName = Literal["starting", "running", "stopping", "stopped", "completed", "failed", "unknown"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"stopped", "completed", "failed", "unknown"})


class ProcessRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: ProcessName
    pid: int
    # psutil's create_time(): together with the pid it names one process for its whole life.
    started_at: float
    log_path: str | None = None
    exit_code: int | None = None
    ended_at: float | None = None


class RunState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    environment: str
    status: RunStatusName = "starting"
    created_at: float = Field(default_factory=time.time)
    started_at: float | None = None  # when every process was up and registered
    ended_at: float | None = None
    total_steps: int
    api_port: int | None = None
    inference_port: int | None = None
    wandb_project: str | None = None
    wandb_run_name: str | None = None
    processes: dict[str, ProcessRecord] = Field(default_factory=dict)
    error: str | None = None
    failed_process: str | None = None
    stop_requested_at: float | None = None
    resumed_from: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class RunStateUnreadable(Exception):
    pass


def write_run_state(run_dir: Path, state: RunState) -> None:
    """Replace ``run.json`` atomically. A full disk frees the run's reserve and tries once more, then raises
    ``DiskFullError`` with the old ``run.json`` in place. A terminal state gives the reserve back."""
    reserve = Reserve(run_dir / DISK_RESERVE_FILE)
    try:
        _replace_state(run_dir, state)
    except OSError as exc:
        code = disk_full_errno(exc)
        if code is None:
            raise
        if not reserve.release():
            raise DiskFullError(code, run_dir / RUN_STATE_FILE) from exc
        try:
            _replace_state(run_dir, state)
        except OSError as again:
            raise DiskFullError(code, run_dir / RUN_STATE_FILE) from again
    if state.is_terminal:
        reserve.release()
    else:
        reserve.ensure()


def _replace_state(run_dir: Path, state: RunState) -> None:
    path = run_dir / RUN_STATE_FILE
    tmp = path.with_name(f".{RUN_STATE_FILE}.{os.getpid()}.tmp")
    try:
        tmp.write_text(state.model_dump_json(indent=2), encoding="utf-8")
    except OSError:
        tmp.unlink(missing_ok=True)  # half a temp file holds space a retry needs
        raise
    tmp.replace(path)


def read_run_state(run_dir: Path) -> RunState:
    path = run_dir / RUN_STATE_FILE
    try:
        return RunState.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError, json.JSONDecodeError) as exc:
        raise RunStateUnreadable(f"{path}: {exc}") from exc
