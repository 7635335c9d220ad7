"""The supervisor tells a process that lost its port to another process from one that failed otherwise."""

from __future__ import annotations

import pytest

from hermes_nb.config import RunConfig
from hermes_nb.protocol.run_state import RunState
from hermes_nb.runs.supervision.supervisor import Supervisor
from hermes_nb.system.home import run_paths

RUN_ID = "20250101-120000-abcdefghjk"
# What the trajectory API writes when its port is taken.
PORT_TAKEN = "cannot listen on 127.0.0.1:41234: [Errno 98] Address already in use"


@pytest.fixture
def supervisor() -> Supervisor:
    paths = run_paths(RUN_ID)
    paths.run_dir.mkdir(parents=True)
    state = RunState(run_id=RUN_ID, environment="arithmetic", total_steps=10)
    return Supervisor(paths=paths, config=RunConfig(), state=state)


def _launch_and_wait(supervisor: Supervisor, name: str, says: str) -> None:
    child = supervisor.launch(name, ["sh", "-c", f"echo '{says}' >&2; exit 1"])
    child.popen.wait(10)


def test_a_process_that_says_its_address_is_in_use_lost_its_port(supervisor: Supervisor) -> None:
    _launch_and_wait(supervisor, "api", PORT_TAKEN)
    assert supervisor.port_was_taken("api")


def test_a_port_lost_by_an_earlier_launch_does_not_explain_this_launchs_failure(supervisor: Supervisor) -> None:
    _launch_and_wait(supervisor, "api", PORT_TAKEN)
    _launch_and_wait(supervisor, "api", "invalid option port: must be positive")
    assert not supervisor.port_was_taken("api")


def test_a_process_that_binds_no_port_never_lost_one(supervisor: Supervisor) -> None:
    _launch_and_wait(supervisor, "env", PORT_TAKEN)
    assert not supervisor.port_was_taken("env")
