"""``run.json``: the state of one run, the only state shared between the kernel, the CLI and the supervisor.

The record and its reader; ``hermes_nb.runs.supervision.state_file`` writes it (atomically, temp file + rename, by the
supervisor), so any reader in any process always sees a whole, valid record. A process is identified by pid *and*
start time, so a reused pid is never mistaken for the run's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hermes_nb.protocol.run_files import RUN_STATE_FILE, ProcessName

# "unknown" is never written: readers show it when run.json cannot be read and no process of the run is running
# (hermes_nb.runs.supervision.damage). Nothing will change such a run any more, so it counts as ended.
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
    # Why the run stopped when no one asked it to: the health finding named in ``health.stop_on`` that stopped it.
    stopped_by: str | None = None
    resumed_from: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class RunStateUnreadable(Exception):
    pass


def read_run_state(run_dir: Path) -> RunState:
    path = run_dir / RUN_STATE_FILE
    try:
        return RunState.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError, json.JSONDecodeError) as exc:
        raise RunStateUnreadable(f"{path}: {exc}") from exc
