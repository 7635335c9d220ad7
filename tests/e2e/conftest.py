"""Real runs on the embedded default: the shipped base model, a shipped environment, three real processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest

from hermes_nb.api import rl_check_status, rl_load_config, rl_select_environment, rl_stop_training
from hermes_nb.runs.registry import known_run_ids
from hermes_nb.runs.reports import RunStatus
from hermes_nb.runs.state import read_run_state
from hermes_nb import home
from tests.conftest import REPO_ROOT

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


def run_pids(run_id: str) -> dict[str, int]:
    state = read_run_state(home.run_dir(run_id))
    return {name: record.pid for name, record in state.processes.items()}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def quick_env() -> Iterator[None]:
    """The arithmetic environment with configs/quick_test.yaml; every run still going at the end is stopped."""
    run(rl_select_environment("arithmetic"))
    run(rl_load_config(QUICK_TEST_CONFIG))
    yield
    for run_id in known_run_ids():
        run(rl_stop_training(run_id))
