"""A sweep's health stop rule: the named findings join every variant's ``health.stop_on`` (so each run stops
itself where its metrics are written), unknown names refuse the sweep, and a run stopped that way says so in the
sweep's status."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from run_dirs import make_run

from hermes_nb import api
from hermes_nb.config import EnvironmentRef, RunConfig
from hermes_nb.errors import InvalidValueError
from hermes_nb.protocol.sweep_state import SweepState, Variant
from hermes_nb.runs.sweep_dirs import variant_config, write_sweep
from hermes_nb.runs.sweeps.lifecycle import sweep_status, variant_configs
from hermes_nb.selection import session
from hermes_nb.system import home

SWEEP_ID = "20250101-090000-hhhhhhhhhh"
RUN_ID = "20250101-100000-hhhhhhhhhh"


def test_the_sweeps_findings_join_each_variants_own_stop_on() -> None:
    asyncio.run(api.rl_select_environment("arithmetic"))
    asyncio.run(api.rl_edit_config({"health.stop_on": ["non_finite"]}))
    grid = [{"trainer.learning_rate": 1e-4}, {"trainer.learning_rate": 3e-4, "health.stop_on": ["stall"]}]
    first, second = variant_configs(session.load(), grid, ["entropy_collapse", "non_finite"])
    assert first.health.stop_on == ["non_finite", "entropy_collapse"]
    assert second.health.stop_on == ["stall", "entropy_collapse", "non_finite"]
    assert [c.trainer.learning_rate for c in (first, second)] == [1e-4, 3e-4]


def test_an_unknown_finding_refuses_the_sweep_naming_it_with_nothing_laid_out() -> None:
    asyncio.run(api.rl_select_environment("arithmetic"))
    with pytest.raises(InvalidValueError, match="stop_on_health: no health check 'entropy'; choose from .*no_signal"):
        asyncio.run(api.rl_sweep({"trainer.learning_rate": ["1e-4"]}, stop_on_health=["entropy"]))
    assert not home.sweeps_dir().exists()


def test_a_variant_stopped_by_its_health_says_so_in_the_sweeps_status(tmp_path: Path) -> None:
    ref = EnvironmentRef(name="gone", class_name="Gone", file=str(tmp_path / "gone.py"))
    sweep = SweepState(sweep_id=SWEEP_ID, name="t", environment="gone", max_concurrent=1, status="completed",
                       stop_on_health=["entropy_collapse"],
                       variants=[Variant(index=0, overrides={"seed": 0}, run_id=RUN_ID)])  # fmt: skip
    (home.sweeps_dir() / SWEEP_ID).mkdir(parents=True)
    RunConfig(environment=ref).save(variant_config(SWEEP_ID, 0))
    write_sweep(sweep)
    make_run(RUN_ID, 1e-4, 8, 1.0, status="stopped", stopped_by="warning entropy_collapse from step 4: entropy fell")
    status = sweep_status(SWEEP_ID)
    assert status.stop_on_health == ["entropy_collapse"]
    assert status.variants[0].note == "stopped by health.stop_on: warning entropy_collapse from step 4: entropy fell"
    assert "stops on the health finding entropy_collapse" in str(status)
