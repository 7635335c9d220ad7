"""Two runs at once on one machine (what a sweep with max_concurrent=2 does): each has its own ports, files,
secret, logs and status, and stopping one leaves the other running to completion."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import run, run_pids, wait_for_status

from hermes_nb.api import rl_check_status, rl_start_training, rl_stop_training
from hermes_nb.protocol.run_state import read_run_state
from hermes_nb.system import home
from hermes_nb.system.secrets import read_run_secret

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

TIMEOUT = 240.0
SHORT = {"total_steps": 10}
LONG = {"total_steps": 500}


def test_two_runs_at_once_do_not_interfere_and_stopping_one_leaves_the_other_running() -> None:
    long_run = run(rl_start_training(**LONG))
    short_run = run(rl_start_training(**SHORT))
    wait_for_status(long_run.run_id, lambda s: s.step >= 1, TIMEOUT)
    wait_for_status(short_run.run_id, lambda s: s.status == "running", TIMEOUT)
    states = [read_run_state(home.run_dir(r.run_id)) for r in (long_run, short_run)]
    ports = [port for s in states for port in (s.api_port, s.inference_port)]
    assert None not in ports and len(set(ports)) == 4, ports
    assert read_run_secret(home.run_dir(long_run.run_id)) != read_run_secret(home.run_dir(short_run.run_id))
    assert set(long_run.logs.values()).isdisjoint(short_run.logs.values())
    assert set(run_pids(long_run.run_id).values()).isdisjoint(run_pids(short_run.run_id).values())

    stopped = run(rl_stop_training(long_run.run_id))

    assert stopped.status == "stopped"
    after = run(rl_check_status(short_run.run_id))
    # The other run's stop did not touch it: still running (or done already, on a fast machine), never stopped.
    assert after.status in ("running", "completed"), after.error
    done = wait_for_status(short_run.run_id, lambda s: s.is_terminal, TIMEOUT)
    assert done.status == "completed", done.error
    assert done.step == SHORT["total_steps"]
    for r in (long_run, short_run):  # each log speaks of its own run only
        other = short_run.run_id if r is long_run else long_run.run_id
        assert other not in Path(r.logs["supervisor"]).read_text(encoding="utf-8")
