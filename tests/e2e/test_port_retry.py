"""A port found free can be taken before the run's process binds it: the run comes up on a new port anyway."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest
from run_helpers import run, wait_for_status

from hermes_nb.api import rl_start_training, rl_stop_training
from hermes_nb.config import RunConfig
from hermes_nb.protocol.run_state import read_run_state
from hermes_nb.runs.supervision import ports
from hermes_nb.system.home import run_paths
from hermes_nb.system.net import LOOPBACK, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

START_TIMEOUT = 180.0
# The launcher picks the API's port first, then the inference server's (which the trainer binds).
PICK_ORDER = {"api": 0, "trainer": 1}


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process holds (listening on 127.0.0.1) for the whole test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _launcher_picks(taken: int, position: int) -> Callable[[str], int]:
    """``free_port`` as the launcher sees it when the port it picks at ``position`` is taken right after."""
    calls = iter(range(1_000))

    def pick(host: str = LOOPBACK) -> int:
        return taken if next(calls) == position else free_port(host)

    return pick


@pytest.mark.parametrize("process", ["api", "trainer"])
def test_a_port_taken_before_the_process_binds_it_is_replaced_and_the_run_comes_up(
    process: str, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "free_port", _launcher_picks(taken_port, PICK_ORDER[process]))

    start = run(rl_start_training(total_steps=500))
    status = wait_for_status(start.run_id, lambda s: s.status != "starting", START_TIMEOUT)

    assert status.status == "running", status.error
    paths = run_paths(start.run_id)
    state, infra = read_run_state(paths.run_dir), RunConfig.load(paths.config).infra
    assert taken_port not in (state.api_port, state.inference_port)
    assert (state.api_port, state.inference_port) == (infra.api_port, infra.inference_port)
    assert infra.api_url == f"http://{LOOPBACK}:{infra.api_port}"
    assert infra.inference_url == f"http://{LOOPBACK}:{infra.inference_port}"
    assert run(rl_stop_training(start.run_id)).status == "stopped"
