"""The supervisor's cost meter: CPU and peak memory of each process tree, written to cost.json with wall time by
phase, keeping an estimate already recorded there."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hermes_nb.protocol.health import CostFigures, RunCost, read_cost, write_cost
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import RunState
from hermes_nb.runs.supervision.cost_meter import CostMeter
from hermes_nb.system import processes


def test_a_process_is_measured_and_its_figures_only_grow(tmp_path: Path) -> None:
    meter = CostMeter()
    record = processes.process_record("trainer", os.getpid(), tmp_path / "trainer.log")
    meter.sample({"trainer": record})
    first = meter.processes["trainer"]
    sum(i * i for i in range(200_000))  # some CPU to count
    meter.sample({"trainer": record})
    assert first.peak_rss_bytes > 0
    assert meter.processes["trainer"].cpu_seconds >= first.cpu_seconds > 0


def test_the_record_has_wall_time_by_phase_and_keeps_the_estimate(tmp_path: Path) -> None:
    paths = RunPaths.under(tmp_path, "run1")
    paths.run_dir.mkdir(parents=True)
    estimate = CostFigures(wall_seconds={"train": 10.0})
    write_cost(paths.cost, RunCost(estimate=estimate))
    now = time.time()
    state = RunState(run_id="run1", environment="e", total_steps=1, created_at=now - 30, started_at=now - 20,
                     ended_at=now)  # fmt: skip
    CostMeter().write(paths, state, group_size=4, final=True)
    cost = read_cost(paths.cost)
    assert cost is not None and cost.final and cost.estimate == estimate
    assert cost.actual.wall_seconds == {"start": 10.0, "train": 20.0}
    assert (cost.actual.tokens_sampled, cost.actual.tokens_trained) == (0, 0)
