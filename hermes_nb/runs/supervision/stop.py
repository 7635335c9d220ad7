"""``rl_stop_training``: graceful, idempotent, and thorough (every process group of the run ends)."""

from __future__ import annotations

import signal
import time
from typing import Any

from hermes_nb.errors import RunStateError
from hermes_nb.protocol.checkpoints import read_checkpoints
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import RunState
from hermes_nb.results import Result
from hermes_nb.runs.run_dirs import load_state, resolve_run
from hermes_nb.runs.supervision import graces
from hermes_nb.runs.supervision.reconcile import reconcile
from hermes_nb.system import processes

# The supervisor writes the terminal state as its last act; its own exit follows within milliseconds. A run
# whose supervisor died is ended by a reader within reconcile.ORPHAN_STOP_GRACE and a SIGKILL.
SUPERVISOR_EXIT_WAIT_SECONDS = 10.0
POLL_SECONDS = 0.1


class StopResult(Result):
    run_id: str
    status: str
    already_stopped: bool = False
    final_checkpoint: str | None = None

    def _dict(self) -> dict[str, Any]:
        verb = "was already" if self.already_stopped else "is now"
        return {
            "success": True,
            **self.model_dump(mode="json"),
            "message": f"Run {self.run_id} {verb} {self.status}",
        }

    def _text_lines(self) -> list[str]:
        verb = "was already" if self.already_stopped else "is now"
        lines = [f"Run {self.run_id} {verb} {self.status}"]
        if self.final_checkpoint:
            lines.append(f"  final checkpoint: {self.final_checkpoint}")
        return lines


def _final_checkpoint(paths: RunPaths) -> str | None:
    checkpoints = read_checkpoints(paths.checkpoints_index)
    return checkpoints[-1].path if checkpoints else None


def _wait_terminal(paths: RunPaths, timeout: float) -> RunState:
    deadline = time.monotonic() + timeout
    state = load_state(paths)
    while not state.is_terminal and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        # A supervisor that dies mid-stop still leaves a stopped run, not a live-looking one.
        state = reconcile(paths, load_state(paths), final_status="stopped", wait=True)
    return state


def _wait_run_exit(state: RunState, timeout: float) -> None:
    """Return once the supervisor and the processes it started have exited, so a stopped run has no process left
    when the caller resumes. The supervisor ends the others before it writes ``stopped``; when it died mid-stop,
    another reader may have written that and be ending them still (``reconcile``)."""
    records = list(state.processes.values())
    processes.wait_while(
        lambda: any(processes.is_same_process_alive(r) for r in records), timeout, poll_seconds=POLL_SECONDS / 10
    )


def stop_run(run_id: str | None, *, wait: bool = True) -> StopResult:
    paths = resolve_run(run_id)
    state = reconcile(paths, load_state(paths), final_status="stopped", wait=True)
    if state.is_terminal:
        return StopResult(
            run_id=state.run_id, status=state.status, already_stopped=True, final_checkpoint=_final_checkpoint(paths)
        )
    supervisor = state.processes.get("supervisor")
    if supervisor is not None and processes.is_same_process_alive(supervisor):
        processes.send_signal(supervisor, signal.SIGTERM)
    if not wait:
        return StopResult(run_id=state.run_id, status="stopping", final_checkpoint=None)
    timeout = graces.stop_wait_seconds()
    state = _wait_terminal(paths, timeout)
    if not state.is_terminal:
        raise RunStateError(f"run {state.run_id} did not stop within {timeout:.0f} s; see {paths.logs['supervisor']}")
    _wait_run_exit(state, SUPERVISOR_EXIT_WAIT_SECONDS)
    return StopResult(run_id=state.run_id, status=state.status, final_checkpoint=_final_checkpoint(paths))
