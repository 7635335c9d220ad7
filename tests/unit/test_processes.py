"""Ending processes that live outside the run's process groups (W&B's service starts a session of its own)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

from hermes_nb.system import processes

POLITE = ["sleep", "60"]
# Longer than any stall of a loaded machine: a call that returns before it did not wait the grace out.
LONG_GRACE_S = 60.0


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    popens: list[subprocess.Popen[bytes]] = []
    yield popens
    for popen in popens:
        popen.kill()
        popen.wait()


def start(argv: list[str], popens: list[subprocess.Popen[bytes]], *, ignore_sigterm: bool = False) -> psutil.Process:
    # SIG_IGN set before exec survives it, so the process ignores SIGTERM from its first instruction: no wait
    # for a shell to install a trap.
    preexec = (lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)) if ignore_sigterm else None
    popen = subprocess.Popen(argv, start_new_session=True, preexec_fn=preexec)
    popens.append(popen)
    return psutil.Process(popen.pid)


def ended_by(popens: list[subprocess.Popen[bytes]]) -> int:
    """The signal that ended the test's first process (it is reaped here)."""
    return -popens[0].wait(timeout=10)


def running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_process_that_honours_sigterm_is_gone_when_the_call_returns_without_waiting_out_the_grace(
    started: list[subprocess.Popen[bytes]],
) -> None:
    proc = start(POLITE, started)

    began = time.monotonic()
    processes.end_processes([proc], grace_seconds=LONG_GRACE_S)

    assert not running(proc)
    assert time.monotonic() - began < LONG_GRACE_S
    assert ended_by(started) == signal.SIGTERM


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(started: list[subprocess.Popen[bytes]]) -> None:
    proc = start(POLITE, started, ignore_sigterm=True)

    began = time.monotonic()
    processes.end_processes([proc], grace_seconds=0.5)

    assert not running(proc)
    assert time.monotonic() - began >= 0.5  # a lower bound: a loaded machine only adds to it
    assert ended_by(started) == signal.SIGKILL


def test_processes_already_gone_are_skipped(started: list[subprocess.Popen[bytes]]) -> None:
    proc = start(POLITE, started)
    started[0].kill()
    started[0].wait()

    processes.end_processes([proc], grace_seconds=5.0)

    assert not running(proc)
