"""Helpers for tests of real runs: wait on a status, find a run's processes."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from hermes_nb.api import rl_check_status
from hermes_nb.protocol.run_state import read_run_state
from hermes_nb.runs.table.results import RunStatus
from hermes_nb.system import home

REPO_ROOT = Path(__file__).resolve().parents[2]
QUICK_TEST_CONFIG = REPO_ROOT / "configs" / "quick_test.yaml"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def wait_for_status(run_id: str, done: Callable[[RunStatus], bool], timeout: float) -> RunStatus:
    deadline = time.monotonic() + timeout
    status = run(rl_check_status(run_id))
    while not done(status):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s; last status:\n{status}")
        time.sleep(0.2)
        status = run(rl_check_status(run_id))
    return status


def finite(value: float | None) -> bool:
    """A metric that was logged and is a number: NaN and infinities pass ``is not None`` but mean a broken run."""
    return value is not None and math.isfinite(value)


def run_pids(run_id: str) -> dict[str, int]:
    state = read_run_state(home.run_dir(run_id))
    return {name: record.pid for name, record in state.processes.items()}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def survivors(processes: list[psutil.Process]) -> list[str]:
    """The processes still running, each as "pid command line", for an assertion message that names them."""
    named = []
    for proc in processes:
        if not alive(proc.pid):
            continue
        try:
            named.append(f"{proc.pid} {' '.join(proc.cmdline())}")
        except psutil.NoSuchProcess:
            continue
    return named


def alive_after(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive once ``seconds`` have passed (returns as soon as none is)."""
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]
