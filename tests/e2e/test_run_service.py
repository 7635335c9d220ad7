"""The synchronous run service the widgets call (``runs/service.py``): a real run started, checked and stopped as
the run monitor does it, from plain synchronous code with no event loop; and the state a resume starts from."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from run_helpers import alive_after, run_pids

from hermes_nb.config import InfraConfig
from hermes_nb.runs import service
from hermes_nb.runs.table.results import RunStatus

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

STEP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
LONG_RUN = {"total_steps": 500}


def check_until(run_id: str, done: Callable[[RunStatus], bool], timeout: float) -> RunStatus:
    """``service.check_status`` polled as the monitor's refresh thread polls it, until ``done(status)``."""
    deadline = time.monotonic() + timeout
    status = service.check_status(run_id)
    while not done(status):
        assert time.monotonic() < deadline, f"timed out after {timeout} s; last status:\n{status}"
        time.sleep(0.2)
        status = service.check_status(run_id)
    return status


def test_a_run_started_checked_and_stopped_through_the_service_ends_stopped_with_no_process_left() -> None:
    started = service.start_training(**LONG_RUN)
    assert started.status == "starting" and started.total_steps == LONG_RUN["total_steps"]
    check_until(started.run_id, lambda s: s.step >= 1, STEP_TIMEOUT_S)
    pids = list(run_pids(started.run_id).values())

    asked = service.stop_training(started.run_id, wait=False)  # the monitor's Stop: returns once asked

    assert asked.status in ("stopping", "stopped")
    stopped = check_until(started.run_id, lambda s: s.is_terminal, STOP_TIMEOUT_S)
    assert stopped.status == "stopped", stopped.error
    assert alive_after(pids, 10.0) == []


def test_the_resume_state_of_a_stopped_run_is_its_config_with_fresh_infrastructure() -> None:
    started = service.start_training(**LONG_RUN)
    assert service.stop_training(started.run_id).status == "stopped"

    state = service.resume_state(started.run_id)

    assert state.config.trainer.resume_from == started.run_id
    assert state.config.infra == InfraConfig()
    assert state.config.env_value("total_steps") == LONG_RUN["total_steps"]
    assert state.environment is not None and state.environment.name == "arithmetic"
