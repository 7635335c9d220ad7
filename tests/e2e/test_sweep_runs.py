"""A sweep's driver on real runs: stopping the sweep stops its live run through the normal stop (a final
checkpoint, every process gone) and starts no more variants."""

from __future__ import annotations

import time

import pytest
from run_helpers import alive, run, run_pids, wait_for_status

from hermes_nb.api import rl_get_results, rl_stop_sweep, rl_sweep, rl_sweep_status
from hermes_nb.runs.sweep_dirs import read_sweep

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

TIMEOUT = 240.0


def test_stopping_a_sweep_stops_its_live_run_cleanly_and_starts_no_more() -> None:
    started = run(rl_sweep({"total_steps": [500], "trainer.learning_rate": [1e-4, 3e-4]}, name="stopped early"))
    assert [v.status for v in started.variants][1] == "pending"
    sweep_id = started.sweep_id
    deadline = time.monotonic() + TIMEOUT
    while (first := read_sweep(sweep_id).variants[0].run_id) is None:  # the driver starts it within a poll
        assert time.monotonic() < deadline, read_sweep(sweep_id)
        time.sleep(0.1)
    wait_for_status(first, lambda s: s.step >= 1, TIMEOUT)
    pids = run_pids(first)

    stopped = run(rl_stop_sweep(sweep_id))

    assert stopped.status == "stopped"
    assert [v.status for v in stopped.variants] == ["stopped", "pending"]
    results = run(rl_get_results(first))
    # The stop saved the last step trained: a stop checkpoint, or the interval checkpoint that step wrote already.
    assert results.checkpoints[-1].kind in ("stop", "interval")
    assert results.checkpoints[-1].step == results.history[-1]["step"]
    assert not any(alive(pid) for pid in pids.values())
    driver = read_sweep(sweep_id).driver
    assert driver is not None and not alive(driver.pid)
    assert run(rl_sweep_status(sweep_id)).variants[1].run is None
