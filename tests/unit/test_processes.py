"""Ending processes that live outside the run's process groups (W&B's service starts a session of its own)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

from hermes_nb.system import processes

# SIGTERM ignored, and the ignoring survives exec: only SIGKILL ends it.
STUBBORN = ["bash", "-c", "trap '' TERM; exec sleep 60"]
POLITE = ["sleep", "60"]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    popens: list[subprocess.Popen[bytes]] = []
    yield popens
    for popen in popens:
        popen.kill()
        popen.wait()


def start(argv: list[str], popens: list[subprocess.Popen[bytes]]) -> psutil.Process:
    popen = subprocess.Popen(argv, start_new_session=True)
    popens.append(popen)
    return psutil.Process(popen.pid)


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
    processes.end_processes([proc], grace_seconds=10.0)

    assert not running(proc)
    assert time.monotonic() - began < 5.0


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(started: list[subprocess.Popen[bytes]]) -> None:
    proc = start(STUBBORN, started)
    time.sleep(0.2)  # let bash install its trap

    began = time.monotonic()
    processes.end_processes([proc], grace_seconds=0.5)

    assert not running(proc)
    assert time.monotonic() - began >= 0.5


def test_processes_already_gone_are_skipped(started: list[subprocess.Popen[bytes]]) -> None:
    proc = start(POLITE, started)
    started[0].kill()
    started[0].wait()

    processes.end_processes([proc], grace_seconds=5.0)

    assert not running(proc)
