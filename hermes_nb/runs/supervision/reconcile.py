"""Bringing ``run.json`` in line with reality when its supervisor is gone.

Only the supervisor writes ``run.json`` while it lives. If it died (killed, machine rebooted), the first reader
that notices marks the run failed, names the cause, and ends whatever of the run is still running. A supervisor
that died while stopping the run leaves it ``stopped``: the stop was asked for, whichever reader notices first.
"""

from __future__ import annotations

import contextlib
import threading
import time

import psutil

from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import ProcessRecord, RunState, read_run_state
from hermes_nb.runs.supervision.state_file import write_run_state
from hermes_nb.system import processes
from hermes_nb.system.disk import DiskFullError
from hermes_nb.system.logtail import tail_lines

# The supervisor records itself a fraction of a second after launch; past this it never started.
SUPERVISOR_APPEAR_TIMEOUT = 30.0
ORPHAN_STOP_GRACE = 5.0
# The same tolerance as processes.is_same_process_alive: platforms round create_time differently, and a reused
# pid starts far more than a second after the original.
_SAME_START_TOLERANCE = 1.0


def supervisor_gone_cause(state: RunState) -> str | None:
    supervisor = state.processes.get("supervisor")
    if supervisor is None:
        if time.time() - state.created_at < SUPERVISOR_APPEAR_TIMEOUT:
            return None
        return "the run supervisor never started"
    if processes.is_same_process_alive(supervisor):
        return None
    return "the run supervisor died unexpectedly"


def _group_is_the_runs(record: ProcessRecord) -> bool:
    """Whether the process group named by ``record.pid`` can still be the one the run started.

    Linux does not hand out a pid again while a process group of that id exists. So if a *different* process now
    has the pid (other start time), the run's group is gone and that id belongs to someone else: never signal it.
    If no process has the pid, the group (if any) is the run's orphaned children.
    """
    try:
        started_at = psutil.Process(record.pid).create_time()
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        return False
    return abs(started_at - record.started_at) < _SAME_START_TOLERANCE


def reconcile(paths: RunPaths, state: RunState, *, final_status: str = "failed", wait: bool = False) -> RunState:
    """Return the state, first marking a live-looking run whose supervisor is gone as ``final_status``, or as
    ``stopped`` when it died while stopping.

    The state is written first, so this reader and every later one answer at once; then the run's orphaned
    process groups are ended (SIGTERM, ``ORPHAN_STOP_GRACE``, SIGKILL). They got SIGTERM already when the
    supervisor died (its children die with it) and the trainer may be saving a last checkpoint: ``wait`` returns
    once they are gone (a stop returns with nothing of the run left), else a thread of this process ends them.
    """
    if state.is_terminal:
        return state
    cause = supervisor_gone_cause(state)
    if cause is None:
        return state
    # The supervisor may have written a terminal state between our read and its exit.
    state = read_run_state(paths.run_dir)
    if state.is_terminal:
        return state
    if state.status == "stopping":
        final_status = "stopped"
    tail = tail_lines(paths.logs["supervisor"], 10)
    detail = "\n".join(f"    {line}" for line in tail)
    error = f"{cause} (log: {paths.logs['supervisor']})" + (f"\n  last lines of the log:\n{detail}" if tail else "")
    updated = state.model_copy(
        update={
            "status": final_status,
            "ended_at": time.time(),
            "error": None if final_status == "stopped" else error,
            "failed_process": None if final_status == "stopped" else "supervisor",
        }
    )
    # On a full disk the next reader finds the same and tries again; this one still answers with the truth.
    with contextlib.suppress(DiskFullError):
        write_run_state(paths.run_dir, updated)
    _end_orphans([r for name, r in state.processes.items() if name != "supervisor" and _group_is_the_runs(r)], wait)
    return updated


def _end_orphans(children: list[ProcessRecord], wait: bool) -> None:
    if not children:
        return
    if wait:
        processes.terminate_groups(children, grace_seconds=ORPHAN_STOP_GRACE)
        return
    # Not a daemon: a CLI that printed the status still ends the run's processes before it exits.
    threading.Thread(
        target=processes.terminate_groups,
        args=(children,),
        kwargs={"grace_seconds": ORPHAN_STOP_GRACE},
        name="hermes-nb ending an orphaned run",
    ).start()
