"""Run health (``hermes_nb.health``): each check fires on the figures it names and stays quiet on a healthy run's;
findings reach ``health.jsonl`` once, from the metrics logger, and every reader reads them the same."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from hermes_nb.config import RunConfig
from hermes_nb.errors import ConfigError
from hermes_nb.health import HEALTH_CHECKS, HealthWatch
from hermes_nb.metrics.logger import MetricsLogger
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.health import CostFigures, ProcessCost, RunCost, read_cost, read_findings, write_cost

# Measured (docs/health.md): the entropy of a quickstart run's first steps, and of a run at 1,000x its learning rate.
HEALTHY_ENTROPY = [0.728, 0.686, 0.682, 0.732, 0.618, 0.65, 0.59, 0.70, 0.61, 0.66]
COLLAPSING_ENTROPY = [0.728, 0.272, 0.244, 0.0]
# Another run at 1,000x: the entropy went back up for a step before it collapsed.
COLLAPSING_UNEVENLY = [0.728, 0.232, 0.535, 0.007]


def trainer_row(entropy: float, **more: float) -> dict[str, float]:
    return {keys.TRAIN_ENTROPY: entropy, keys.TRAIN_CLIP_FRACTION_LOW: 0.08, keys.TRAIN_COMPLETION_LENGTH: 3.5, **more}


def feed(watch: HealthWatch, rows: list[dict[str, float]]) -> list[str]:
    return [f.name for step, values in enumerate(rows, start=1) for f in watch.observe(step, values)]


def test_every_check_carries_its_threshold_reason_and_hint() -> None:
    for check in HEALTH_CHECKS.values():
        assert check.reason and check.hint and check.summary, check.name
        assert check.rows >= 1


def test_a_healthy_quickstarts_rows_show_no_finding(tmp_path: Path) -> None:
    watch = HealthWatch(tmp_path / "health.jsonl", "trainer")
    assert feed(watch, [trainer_row(e) for e in HEALTHY_ENTROPY]) == []
    assert read_findings(tmp_path / "health.jsonl") == []


@pytest.mark.parametrize("entropy", [COLLAPSING_ENTROPY, COLLAPSING_UNEVENLY])
def test_entropy_collapsing_within_steps_is_found_at_the_step_it_began(tmp_path: Path, entropy: list[float]) -> None:
    watch = HealthWatch(tmp_path / "health.jsonl", "trainer")
    assert feed(watch, [trainer_row(e) for e in entropy]) == ["entropy_collapse"]
    [finding] = read_findings(tmp_path / "health.jsonl")
    assert (finding.name, finding.severity, finding.step) == ("entropy_collapse", "error", 4)
    assert finding.figures[keys.TRAIN_ENTROPY] == pytest.approx(entropy[-1])


def test_a_finding_is_written_once_however_long_it_lasts(tmp_path: Path) -> None:
    watch = HealthWatch(tmp_path / "health.jsonl", "trainer")
    feed(watch, [trainer_row(0.7, **{keys.TRAIN_CLIP_FRACTION_LOW: 0.8}) for _ in range(10)])
    assert [f.name for f in read_findings(tmp_path / "health.jsonl")] == ["clip_high"]


def test_a_non_finite_value_is_found_although_the_row_drops_it(tmp_path: Path) -> None:
    health = tmp_path / "health.jsonl"
    with MetricsLogger(tmp_path / "metrics.jsonl", health=HealthWatch(health, "trainer")) as metrics:
        row = metrics.log(1, {keys.TRAIN_LOSS: math.nan, keys.TRAIN_ENTROPY: 0.5})
    assert keys.TRAIN_LOSS not in row.values
    [finding] = read_findings(health)
    assert finding.name == "non_finite" and f"non_finite:{keys.TRAIN_LOSS}" in finding.figures


def test_groups_all_dropped_are_found_before_any_row_is_written(tmp_path: Path) -> None:
    health = tmp_path / "health.jsonl"
    metrics = MetricsLogger(tmp_path / "env_metrics.jsonl", health=HealthWatch(health, "env"))
    metrics.peek(0, {keys.ENV_GROUPS_SKIPPED: 12.0, keys.ENV_GROUPS_POSTED: 0.0})
    metrics.close()
    assert (tmp_path / "env_metrics.jsonl").read_text() == ""
    assert [(f.name, f.step) for f in read_findings(health)] == [("no_signal", 0)]


def test_a_healthy_share_of_dropped_groups_is_not_a_finding(tmp_path: Path) -> None:
    watch = HealthWatch(tmp_path / "health.jsonl", "env")
    # The quickstart drops about one group in five (its worst row: half of them).
    assert feed(watch, [{keys.ENV_GROUPS_SKIPPED: 4.0, keys.ENV_GROUPS_POSTED: 4.0}] * 5) == []


def test_held_out_accuracy_falling_while_the_reward_rises_is_over_optimisation(tmp_path: Path) -> None:
    watch = HealthWatch(tmp_path / "health.jsonl", "env")
    rows = [
        {keys.ENV_REWARD_MEAN: 0.3, keys.EVAL_PERCENT_CORRECT: 0.5},
        {keys.ENV_REWARD_MEAN: 0.5},
        {keys.ENV_REWARD_MEAN: 0.6, keys.EVAL_PERCENT_CORRECT: 0.35},
    ]
    assert feed(watch, rows) == ["over_optimisation"]


def test_a_line_cut_short_is_left_out_of_the_findings(tmp_path: Path) -> None:
    health = tmp_path / "health.jsonl"
    feed(HealthWatch(health, "trainer"), [trainer_row(e) for e in COLLAPSING_ENTROPY])
    with health.open("a") as file:
        file.write('{"name": "clip_hi')
    assert [f.name for f in read_findings(health)] == ["entropy_collapse"]


def test_stop_on_accepts_check_names_and_refuses_others() -> None:
    assert RunConfig.model_validate({"health": {"stop_on": ["entropy_collapse"]}}).health.stop_on == [
        "entropy_collapse"
    ]
    with pytest.raises(ConfigError, match="health.stop_on: .*entropy_colapse: not a health check"):
        RunConfig.from_yaml_text("health: {stop_on: [entropy_colapse]}")


def test_the_cost_record_keeps_an_estimate_beside_the_actual_figures(tmp_path: Path) -> None:
    path = tmp_path / "cost.json"
    figures = CostFigures(wall_seconds={"train": 60.0}, processes={"trainer": ProcessCost(cpu_seconds=50.0)})
    write_cost(path, RunCost(actual=figures, estimate=figures.model_copy(update={"wall_seconds": {"train": 90.0}})))
    cost = read_cost(path)
    assert cost is not None and cost.estimate is not None
    assert (cost.actual.wall_seconds["train"], cost.estimate.wall_seconds["train"]) == (60.0, 90.0)
    assert cost.actual.cpu_seconds == 50.0


def test_no_step_for_many_times_the_median_step_is_a_stall(tmp_path: Path) -> None:
    watch = HealthWatch(tmp_path / "health.jsonl", "supervisor")
    now = time.time()
    found = [f for step, at in enumerate((now - 100, now - 99.5, now - 99), start=1)
             for f in watch.observe(step, trainer_row(0.7), at=at)]  # fmt: skip
    [finding] = found + watch.tick(3)
    assert (finding.name, finding.step) == ("stall", 3)
    assert finding.figures["seconds_since_step"] >= 99


def test_steps_that_keep_coming_are_not_a_stall(tmp_path: Path) -> None:
    watch = HealthWatch(tmp_path / "health.jsonl", "supervisor")
    now = time.time()
    found = [f for step, at in enumerate((now - 3, now - 2, now - 1), start=1)
             for f in watch.observe(step, trainer_row(0.7), at=at)]  # fmt: skip
    assert found + watch.tick(3) == []
