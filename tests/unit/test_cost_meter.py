"""The supervisor's cost meter: CPU and peak memory of each process tree, written to cost.json with wall time by
phase, keeping an estimate already recorded there; the trainer's GPU figures where its rows have them (absent, not
zero, where they do not); money by the user's price table where a price applies."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
import yaml

from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.health import CostFigures, ProcessCost, RunCost, read_cost, write_cost
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import RunState
from hermes_nb.runs import prices
from hermes_nb.runs.supervision.cost_meter import CostMeter
from hermes_nb.system import processes
from hermes_nb.trainer.local.gpu_clock import GpuClock


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


def _run(tmp_path: Path) -> tuple[RunPaths, RunState]:
    paths = RunPaths.under(tmp_path, "run1")
    paths.run_dir.mkdir(parents=True)
    now = time.time()
    state = RunState(run_id="run1", environment="e", total_steps=2, created_at=now - 3, started_at=now - 2,
                     ended_at=now)  # fmt: skip
    return paths, state


def _rows(path: Path, rows: list[dict[str, float]]) -> None:
    lines = [MetricsRow(step=step, time=float(step), values=v).to_json_line() for step, v in enumerate(rows, 1)]
    path.write_text("".join(lines), encoding="utf-8")


def _final_cost(meter: CostMeter, paths: RunPaths, state: RunState, group_size: int = 4) -> CostFigures:
    meter.processes["trainer"] = meter.processes.get("trainer", ProcessCost(cpu_seconds=1.0))
    meter.write(paths, state, group_size=group_size, final=True)
    cost = read_cost(paths.cost)
    assert cost is not None
    return cost.actual


def test_the_trainers_gpu_figures_are_its_newest_rows_running_totals(tmp_path: Path) -> None:
    paths, state = _run(tmp_path)
    gpu = [{keys.TRAIN_GPU_SECONDS: 1.5, keys.TRAIN_GPU_PEAK_BYTES: 2e9},
           {keys.TRAIN_GPU_SECONDS: 3.25, keys.TRAIN_GPU_PEAK_BYTES: 3e9}]  # fmt: skip
    _rows(paths.metrics, gpu)
    trainer = _final_cost(CostMeter(), paths, state).processes["trainer"]
    assert (trainer.gpu_seconds, trainer.gpu_peak_bytes) == (3.25, 3_000_000_000)


def test_rows_without_gpu_figures_leave_them_absent_not_zero(tmp_path: Path) -> None:
    paths, state = _run(tmp_path)
    _rows(paths.metrics, [{keys.TRAIN_TRAINED_TOKENS: 100.0}])
    actual = _final_cost(CostMeter(), paths, state)
    assert actual.processes["trainer"].gpu_seconds is None and actual.gpu_seconds is None
    assert actual.price_usd is None
    assert "GPU" not in RunCost(actual=actual).text() and "$" not in RunCost(actual=actual).text()


def test_a_cpu_trainers_clock_reports_nothing() -> None:
    clock = GpuClock(torch.device("cpu"))
    clock.begin()
    clock.end()
    assert clock.figures() == {} and clock.seconds == 0.0


def test_a_tinker_runs_tokens_are_priced_by_the_users_table(tmp_path: Path) -> None:
    entry = {"sample_per_million_tokens": 0.2, "train_per_million_tokens": 0.6, "source": "my invoice",
             "date": "2026-12-01"}  # fmt: skip
    prices.prices_path().parent.mkdir(parents=True, exist_ok=True)
    prices.prices_path().write_text(yaml.safe_dump({"Qwen/Qwen3-8B": entry}), encoding="utf-8")
    paths, state = _run(tmp_path)
    # As a Tinker run's rows have it: 2 steps of 8 groups of 4 completions, 150 then 250 tokens each on average,
    # and the trainer's count of the tokens it trained.
    env = [{keys.ENV_COMPLETION_TOKENS_MEAN: 150.0, keys.ENV_GROUPS_POSTED: 8.0},
           {keys.ENV_COMPLETION_TOKENS_MEAN: 250.0, keys.ENV_GROUPS_POSTED: 8.0}]  # fmt: skip
    _rows(paths.env_metrics, env)
    _rows(paths.metrics, [{keys.TRAIN_TRAINED_TOKENS: 6000.0}, {keys.TRAIN_TRAINED_TOKENS: 9000.0}])
    price = prices.price_of("Qwen/Qwen3-8B")
    assert price is not None
    actual = _final_cost(CostMeter(price=price), paths, state)
    sampled, trained = (150 + 250) * 8 * 4, 15_000
    assert (actual.tokens_sampled, actual.tokens_trained) == (sampled, trained)
    assert actual.price_usd == pytest.approx(12_800 / 1e6 * 0.2 + 15_000 / 1e6 * 0.6)  # $0.01156
    assert "$0.01" in RunCost(actual=actual).text()
