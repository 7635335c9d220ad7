"""What is wrong with a run's files, one line each, for every reader that shows a run.

Readers never stop at a damaged file: they use what can be read and say what could not, in the ``damaged``
field of their results (``Damage``: the file, and the problem with what was done about it). The kinds:

- ``run.json`` that cannot be read: the run is shown from its other files (``stand_in_state``): environment
  and steps from ``config.yaml``, status ``unknown`` when no process of the run is running (nothing will change
  it; it can be resumed), ``running`` while its supervisor still is (it rewrites ``run.json`` when it ends);
- lines of ``metrics.jsonl`` / ``env_metrics.jsonl`` / ``checkpoints.jsonl`` that are not records (skipped),
  and a last line cut short (ignored; only said once the run has ended: while it is live, that is a line being
  written);
- a checkpoint listed in ``checkpoints.jsonl`` whose directory is gone (not offered for resume or transfer);
- ``trajectories.jsonl.gz`` ending in a cut-short batch (replay skips it), checked once the run has ended.
"""

from __future__ import annotations

import calendar
import os
import time
from pathlib import Path

import psutil
from pydantic import BaseModel, ValidationError

from hermes_nb.config import RunConfig
from hermes_nb.errors import ConfigError
from hermes_nb.metrics.reader import MetricsFileRead
from hermes_nb.protocol.checkpoints import CheckpointIndex, read_checkpoint_index
from hermes_nb.protocol.recorded_batches import trajectories_tail
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import ProcessRecord, RunState, RunStateUnreadable, read_run_state
from hermes_nb.runs.supervision.reconcile import reconcile
from hermes_nb.runs.supervision.warm_kit import KIT_MODULE

# The supervisor's command line names its module and the run id (hermes_nb.runs.launcher.spawn_supervisor); a warm
# kit that became a run's supervisor (hermes_nb.runs.supervision.warm_kit) is known by its output, the run's
# supervisor log.
SUPERVISOR_MODULE = "hermes_nb.runs.supervision.supervisor"
# How much of an unreadable run.json's complaint is shown: enough to recognise it, never a screenful.
_DETAIL_CHARS = 160


class Damage(BaseModel):
    """One thing wrong with a run's files: which file, and what is wrong with it and was done about it."""

    file: str
    problem: str

    def __str__(self) -> str:
        return f"{Path(self.file).name}: {self.problem}"


def live_supervisor(paths: RunPaths) -> ProcessRecord | None:
    """The run's supervisor if one is running, found by its command line or, for a warm kit, by the log its output
    goes to (for when run.json cannot say)."""
    for proc in psutil.process_iter(["pid", "cmdline", "create_time"]):
        cmdline = proc.info.get("cmdline") or []
        cold = SUPERVISOR_MODULE in cmdline and paths.run_id in cmdline
        if cold or (KIT_MODULE in cmdline and _writes_to(proc.info["pid"], paths.logs["supervisor"])):
            return ProcessRecord(name="supervisor", pid=proc.info["pid"], started_at=proc.info["create_time"])
    return None


def _writes_to(pid: int, log_path: Path) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/fd/1")) == log_path
    except OSError:
        return False


def read_state(paths: RunPaths) -> tuple[RunState, list[Damage]]:
    """``run.json``, or when it cannot be read, a stand-in made from the run's other files and the damage."""
    try:
        return read_run_state(paths.run_dir), []
    except RunStateUnreadable as exc:
        supervisor = live_supervisor(paths)
        return stand_in_state(paths, supervisor), [_unreadable_state(paths, exc, supervisor)]


def current_state(paths: RunPaths) -> tuple[RunState, list[Damage]]:
    """``read_state``, with a readable state brought in line with reality first (``reconcile``)."""
    state, damaged = read_state(paths)
    return (state if damaged else reconcile(paths, state)), damaged


def _unreadable_state(paths: RunPaths, exc: RunStateUnreadable, supervisor: ProcessRecord | None) -> Damage:
    if supervisor is None:
        then = "no process of the run is running; status, steps and metrics come from its other files"
    else:
        then = f"its supervisor (pid {supervisor.pid}) is still running and rewrites it when the run ends"
    return Damage(file=str(paths.state), problem=f"cannot be read ({_why(exc.__cause__ or exc)}); {then}")


def _why(cause: BaseException) -> str:
    """One short line: pydantic's first complaint, or an OS error's reason."""
    if isinstance(cause, ValidationError) and cause.errors():
        first = cause.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        detail = f"{where}: {first['msg']}" if where else first["msg"]
    elif isinstance(cause, OSError):
        detail = cause.strerror or str(cause)
    else:
        detail = " ".join(str(cause).split())
    return detail if len(detail) <= _DETAIL_CHARS else detail[:_DETAIL_CHARS] + "..."


def stand_in_state(paths: RunPaths, supervisor: ProcessRecord | None) -> RunState:
    """What the run's other files tell of it: never written, only shown."""
    try:
        config: RunConfig | None = RunConfig.load(paths.config)
    except (ConfigError, OSError, ValueError):
        config = None
    environment = config.environment.name if config and config.environment else "?"
    return RunState(
        run_id=paths.run_id,
        environment=environment,
        status="running" if supervisor else "unknown",
        created_at=_created_at(paths),
        total_steps=(int(config.env_value("total_steps")) or 1) if config else 1,
        wandb_project=config.wandb.project if config else None,
        wandb_run_name=config.wandb.run_name if config else None,
        processes={"supervisor": supervisor} if supervisor else {},
        resumed_from=config.trainer.resume_from if config else None,
    )


def _created_at(paths: RunPaths) -> float:
    """From the run id, which starts with its UTC creation time; else the directory's change time."""
    try:
        return float(calendar.timegm(time.strptime(paths.run_id[:15], "%Y%m%d-%H%M%S")))
    except ValueError:
        return paths.run_dir.stat().st_mtime


def metrics_damage(path: Path, read: MetricsFileRead, *, ended: bool) -> list[Damage]:
    found = []
    if read.bad_lines:
        found.append(Damage(file=str(path), problem=f"{_lines(read.bad_lines)} not metrics rows; skipped"))
    if ended and read.partial_bytes:
        found.append(Damage(file=str(path), problem=_cut_short(read.partial_bytes)))
    return found


def partial_line_damage(path: Path, *, ended: bool) -> list[Damage]:
    """A cut-short last line, read from the end of the file only (for listings of many runs)."""
    if not ended:
        return []
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            if size == 0:
                return []
            handle.seek(max(0, size - 65536))
            tail = handle.read()
    except FileNotFoundError:
        return []
    partial = len(tail) - (tail.rfind(b"\n") + 1)
    return [Damage(file=str(path), problem=_cut_short(partial))] if partial else []


def checkpoint_damage(paths: RunPaths, index: CheckpointIndex, *, ended: bool) -> list[Damage]:
    found = []
    file = str(paths.checkpoints_index)
    if index.bad_lines:
        found.append(Damage(file=file, problem=f"{_lines(index.bad_lines)} not checkpoint records; skipped"))
    if ended and index.partial_tail:
        found.append(Damage(file=file, problem="its last line is cut short; the checkpoint it listed is not used"))
    for record in index.missing:
        found.append(Damage(file=record.path, problem=f"step {record.step} is listed but its directory is missing"))
    return found


def trajectories_damage(paths: RunPaths, *, ended: bool) -> list[Damage]:
    if not ended or trajectories_tail(paths.trajectories) != "truncated":
        return []
    problem = "its last batch is cut short; a replay of this run skips it"
    return [Damage(file=str(paths.trajectories), problem=problem)]


def file_damage(
    paths: RunPaths,
    *,
    ended: bool,
    trainer: MetricsFileRead | None = None,
    env: MetricsFileRead | None = None,
    index: CheckpointIndex | None = None,
) -> list[Damage]:
    """Everything wrong with the run's files. Metrics files read whole are checked line by line; without them
    only their last line is (a listing of many runs reads no more than that)."""
    index = index if index is not None else read_checkpoint_index(paths.checkpoints_index)
    found: list[Damage] = []
    for path, read in ((paths.metrics, trainer), (paths.env_metrics, env)):
        found += metrics_damage(path, read, ended=ended) if read else partial_line_damage(path, ended=ended)
    return found + checkpoint_damage(paths, index, ended=ended) + trajectories_damage(paths, ended=ended)


def _lines(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:5]) + (f" and {len(numbers) - 5} more" if len(numbers) > 5 else "")
    return f"line {shown} is" if len(numbers) == 1 else f"lines {shown} are"


def _cut_short(partial_bytes: int) -> str:
    return f"its last line is cut short ({partial_bytes} bytes without a newline); ignored"
