"""Sweeps: grids made into variants, every variant checked before anything starts, the detached driver as a real
process, the stop rule and a driver that died, on real files (runs fabricated where a run's own processes are not
the point)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from run_dirs import dead_process, eval_row, group_leader, write_rows, write_state

from hermes_nb import api
from hermes_nb.config import EnvironmentRef, RunConfig, TrainerConfig
from hermes_nb.errors import HermesNBError, InvalidValueError
from hermes_nb.protocol.sweep_state import StopRule, SweepState, Variant
from hermes_nb.runs import launcher
from hermes_nb.runs.sweep_dirs import driver_log, read_sweep, variant_config, write_sweep
from hermes_nb.runs.sweeps.driver import Driver, early_stop_reason
from hermes_nb.runs.sweeps.lifecycle import DRIVER_MODULE, oversubscription, reconciled, sweep_status
from hermes_nb.runs.sweeps.variants import expand, parse_grid_items
from hermes_nb.system import home, processes

SWEEP_ID = "20250101-090000-ssssssssss"


def test_a_grid_is_every_combination_the_last_field_fastest() -> None:
    grid = {"trainer.learning_rate": [1e-4, 3e-4], "env.group_size": [8, 16]}
    assert expand(grid) == [
        {"trainer.learning_rate": 1e-4, "env.group_size": 8},
        {"trainer.learning_rate": 1e-4, "env.group_size": 16},
        {"trainer.learning_rate": 3e-4, "env.group_size": 8},
        {"trainer.learning_rate": 3e-4, "env.group_size": 16},
    ]


def test_a_list_of_overrides_is_one_variant_each() -> None:
    assert expand([{"lr": 1}, {"lr": 2, "group_size": 4}]) == [{"lr": 1}, {"lr": 2, "group_size": 4}]


BAD_GRIDS = [({}, "no variants"), ({"lr": []}, "lr has no values"), ([3], r"grid\[0\]: a mapping"),
             ("lr=1", "a mapping of field")]  # fmt: skip


@pytest.mark.parametrize(("grid", "message"), BAD_GRIDS)
def test_a_bad_grid_is_refused_naming_what_is_wrong(grid: Any, message: str) -> None:
    with pytest.raises(InvalidValueError, match=message):
        expand(grid)


def test_a_magic_line_is_fields_with_comma_separated_values() -> None:
    items = ["trainer.learning_rate=1e-4,3e-4", "env.group_size=8"]
    assert parse_grid_items(items) == {"trainer.learning_rate": ["1e-4", "3e-4"], "env.group_size": ["8"]}
    with pytest.raises(HermesNBError, match="expected field=value,value"):
        parse_grid_items(["lr"])


def test_the_stop_rule_stops_a_run_more_than_the_margin_below_the_best() -> None:
    rule = StopRule(step=3, below_best_by=10)
    assert early_stop_reason(rule, 0.5, 0.55) is None
    assert early_stop_reason(rule, 0.3, 0.5) == (
        "held-out accuracy 30.0% at step 3 is more than 10 points below the best run's 50.0%"
    )


def test_a_bad_override_refuses_the_whole_sweep_naming_variant_and_field() -> None:
    asyncio.run(api.rl_select_environment("arithmetic"))
    with pytest.raises(InvalidValueError, match=r"variant 1 \(trainer.learning_rate=fast\): .*learning_rate"):
        asyncio.run(api.rl_sweep({"trainer.learning_rate": ["1e-4", "fast"]}))
    with pytest.raises(InvalidValueError, match="stop_if.step"):
        asyncio.run(api.rl_sweep({"trainer.learning_rate": ["1e-4"]}, stop_if={"step": 0, "below_best_by": 5}))
    assert not home.sweeps_dir().exists()  # nothing was laid out, no driver started


def _unstartable_sweep(tmp_path: Path, variants: int) -> SweepState:
    """A sweep whose variants' environment file is gone: each start is refused, which the driver records."""
    ref = EnvironmentRef(name="gone", class_name="Gone", file=str(tmp_path / "gone.py"))
    sweep = SweepState(sweep_id=SWEEP_ID, name="t", environment="gone", max_concurrent=1,
                       variants=[Variant(index=i, overrides={"seed": i}) for i in range(variants)])  # fmt: skip
    (home.sweeps_dir() / SWEEP_ID).mkdir(parents=True)
    for i in range(variants):
        RunConfig(environment=ref).save(variant_config(SWEEP_ID, i))
    write_sweep(sweep)
    return sweep


def test_the_driver_is_a_detached_process_that_goes_through_every_variant(tmp_path: Path) -> None:
    _unstartable_sweep(tmp_path, 2)
    launcher.spawn_detached("sweep driver", DRIVER_MODULE, SWEEP_ID, driver_log(SWEEP_ID))
    processes.wait_while(lambda: not read_sweep(SWEEP_ID).is_terminal, 60, poll_seconds=0.1)
    sweep = read_sweep(SWEEP_ID)
    assert sweep.status == "completed" and sweep.driver is not None
    assert all("gone.py no longer exists" in str(v.start_error) for v in sweep.variants)
    processes.wait_while(lambda: processes.is_same_process_alive(sweep.driver), 10, poll_seconds=0.05)  # type: ignore[arg-type]
    assert not processes.is_same_process_alive(sweep.driver)
    status = sweep_status(SWEEP_ID)
    assert [v.status for v in status.variants] == ["not started", "not started"] and status.done == 2
    assert "variant 1 could not start" in driver_log(SWEEP_ID).read_text(encoding="utf-8")


def test_a_sweep_whose_driver_died_is_marked_failed_naming_its_log(tmp_path: Path) -> None:
    sweep = _unstartable_sweep(tmp_path, 1)
    write_sweep(sweep.model_copy(update={"driver": dead_process("sweep")}))
    failed = reconciled(read_sweep(SWEEP_ID))
    assert failed.status == "failed" and str(driver_log(SWEEP_ID)) in str(failed.error)
    assert read_sweep(SWEEP_ID).status == "failed"


def test_the_stop_rule_stops_the_run_below_the_best_through_the_normal_stop(tmp_path: Path) -> None:
    _unstartable_sweep(tmp_path, 2)
    best, worse = "20250101-100000-aaaaaaaaaa", "20250101-100001-bbbbbbbbbb"
    write_rows(write_state(best).env_metrics, [eval_row(2, 0.2), eval_row(4, 0.8)])
    with group_leader() as supervisor:
        started = processes.process_start_time(supervisor.pid) or time.time()
        record = processes.ProcessRecord(name="supervisor", pid=supervisor.pid, started_at=started)
        write_rows(write_state(worse, "running", processes={"supervisor": record}).env_metrics, [eval_row(4, 0.5)])
        sweep = read_sweep(SWEEP_ID)
        sweep.stop_if = StopRule(step=3, below_best_by=20)
        sweep.variants[0].run_id, sweep.variants[1].run_id = best, worse
        driver = Driver(state=sweep)
        driver.apply_stop_rule()
        assert supervisor.wait(10) is not None  # the run's supervisor got the normal stop's SIGTERM
    assert driver.state.variants[0].early_stopped is None
    assert "50.0% at step 3 is more than 20 points below the best run's 80.0%" in str(
        read_sweep(SWEEP_ID).variants[1].early_stopped
    )


def test_runs_at_once_that_oversubscribe_the_cores_are_warned_about_naming_them() -> None:
    import os

    config = RunConfig(trainer=TrainerConfig(torch_threads=os.cpu_count() or 1))
    [warning] = oversubscription([config, config, config], max_concurrent=2)
    assert f"2 runs at once use {4 * (os.cpu_count() or 1)} torch threads on {os.cpu_count()} cores" in warning
    assert oversubscription([config, config], max_concurrent=1) == []


def test_a_deleted_run_of_a_finished_sweep_shows_as_deleted(tmp_path: Path) -> None:
    sweep = _unstartable_sweep(tmp_path, 1)
    sweep.variants[0].run_id = "20250101-100000-aaaaaaaaaa"
    write_sweep(sweep.model_copy(update={"status": "completed"}))
    status = sweep_status(SWEEP_ID)
    assert status.variants[0].status == "deleted" and status.best is None
    assert asyncio.run(api.rl_compare_runs(sweep=SWEEP_ID)).rows == []
