"""A run whose supervisor died: every reader answers at once with the same terminal state, and the processes the
supervisor left behind are still ended (issue #15, item 6: the status is right within 2 s of a ``kill -9``)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest
from run_dirs import dead_process, write_state

from hermes_nb import api
from hermes_nb.protocol.run_state import ProcessRecord, RunStatusName, read_run_state
from hermes_nb.runs.supervision import reconcile
from hermes_nb.system.home import run_paths

RUN_ID = "20250103-100000-abcdefghjk"
# Short, so that the SIGKILL after the grace comes within the test; the real one is 5 s.
GRACE_S = 0.5
# Longer than any stall of a loaded machine: an orphan still alive when a call returns shows the call did not
# wait for its end (its SIGKILL comes only after this grace).
LONG_GRACE_S = 60.0


def _ignore_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@pytest.fixture
def orphan(monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen[bytes]]:
    """A trainer the dead supervisor left behind, in its own group, that ignores SIGTERM (busy saving, say)."""
    monkeypatch.setattr(reconcile, "ORPHAN_STOP_GRACE", GRACE_S)
    # SIG_IGN set before exec survives it, so no SIGTERM can arrive before the process ignores it.
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True, preexec_fn=_ignore_sigterm)
    time.sleep(0.05)  # let it exec, so its create_time is final
    yield proc
    proc.kill()
    proc.wait(10)


def write_orphaned_run(status: RunStatusName, trainer: subprocess.Popen[bytes]) -> None:
    record = ProcessRecord(name="trainer", pid=trainer.pid, started_at=psutil.Process(trainer.pid).create_time())
    write_state(RUN_ID, status, processes={"supervisor": dead_process(), "trainer": record})


def test_status_answers_without_waiting_for_the_orphan_to_end(
    orphan: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconcile, "ORPHAN_STOP_GRACE", LONG_GRACE_S)
    write_orphaned_run("running", orphan)
    status = asyncio.run(api.rl_check_status(RUN_ID))

    assert (status.status, status.failed_process) == ("failed", "supervisor")
    assert orphan.poll() is None  # not held up by a process that takes its time to end


def test_after_status_answers_the_orphan_is_killed_after_its_grace(orphan: subprocess.Popen[bytes]) -> None:
    write_orphaned_run("running", orphan)
    status = asyncio.run(api.rl_check_status(RUN_ID))

    assert status.status == "failed"
    assert orphan.wait(timeout=GRACE_S + 30) == -signal.SIGKILL


def test_a_supervisor_that_died_while_stopping_leaves_the_run_stopped_for_any_reader(
    orphan: subprocess.Popen[bytes],
) -> None:
    write_orphaned_run("stopping", orphan)
    status = asyncio.run(api.rl_check_status(RUN_ID))

    assert (status.status, status.error, status.failed_process) == ("stopped", None, None)
    # Written back: the stop's own reader (and every other) finds the same.
    assert read_run_state(run_paths(RUN_ID).run_dir).status == "stopped"


def test_a_stop_of_a_run_whose_supervisor_died_returns_once_its_processes_are_gone(
    orphan: subprocess.Popen[bytes],
) -> None:
    write_orphaned_run("running", orphan)
    stopped = asyncio.run(api.rl_stop_training(RUN_ID))

    assert stopped.status == "stopped"
    assert orphan.poll() == -signal.SIGKILL
