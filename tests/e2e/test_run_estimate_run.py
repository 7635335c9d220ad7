"""The pre-run estimate against a real quickstart run on this machine: its step time within 2x, and the next
estimate of the same config reads its time from that run."""

from __future__ import annotations

import statistics
import time

import pytest
from run_helpers import run, wait_for_status

from hermes_nb.api import rl_check_status, rl_estimate_run, rl_load_config, rl_start_training
from hermes_nb.metrics.reader import read_all_metrics
from hermes_nb.protocol.health import read_cost
from hermes_nb.protocol.metrics import TRAIN_STEP_SECONDS
from hermes_nb.system import home

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

TIMEOUT = 300.0
# Long enough for the step time to settle past the first steps' warm-up, short of the first evaluation (step 50).
STEPS = 40


def test_the_quickstart_estimate_is_within_2x_of_its_measured_step_time() -> None:
    run(rl_load_config("quickstart"))
    before = run(rl_estimate_run(total_steps=STEPS))
    assert before.fits and before.time_source == "stated per-step cost"
    started = run(rl_start_training(total_steps=STEPS))
    done = wait_for_status(started.run_id, lambda s: s.is_terminal, TIMEOUT)
    assert done.status == "completed", done.error

    rows = read_all_metrics(home.run_paths(started.run_id).metrics)
    steps = [row for row in rows if TRAIN_STEP_SECONDS in row.values]
    measured = statistics.median(row.values[TRAIN_STEP_SECONDS] for row in steps)
    span = steps[-1].time - steps[0].time  # the steps' wall time, start-up left out (the estimate has none)
    assert before.seconds_per_step is not None and before.total_seconds is not None
    assert measured / 2 <= before.seconds_per_step <= measured * 2, (before.seconds_per_step, measured)
    assert span / 2 <= before.total_seconds * (len(steps) - 1) / STEPS <= span * 2, (before.total_seconds, span)

    after = run(rl_estimate_run(total_steps=STEPS))
    assert after.time_source == "earlier runs"
    assert after.seconds_per_step == pytest.approx(measured)


def test_a_finished_run_records_its_estimate_beside_what_it_cost() -> None:
    run(rl_load_config("quickstart"))
    started = run(rl_start_training(total_steps=STEPS))
    done = wait_for_status(started.run_id, lambda s: s.is_terminal, TIMEOUT)
    assert done.status == "completed", done.error

    # The supervisor writes the final record as it exits, just after the terminal status.
    cost_file = home.run_paths(started.run_id).cost
    deadline = time.monotonic() + 30
    while not ((cost := read_cost(cost_file)) and cost.final) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cost is not None and cost.final and cost.estimate is not None
    assert cost.estimate.wall_seconds["train"] > 0
    assert cost.estimate.processes["trainer"].peak_rss_bytes > 0
    assert cost.estimate.tokens_trained == run(rl_estimate_run(total_steps=STEPS)).tokens_trained
    assert "estimated:" in str(run(rl_check_status(started.run_id)))
