"""The trainer and the environment both log reward and percent correct; readers take the environment's."""

from __future__ import annotations

from hermes_nb.plotting.sources import RunFilesSource
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_files import ENV_METRICS_FILE, TRAINER_METRICS_FILE
from hermes_nb.runs.status import latest_metrics
from hermes_nb.system import home

TRAINER_ROW = MetricsRow(step=3, time=1.0, values={"train/loss": 0.1, "train/percent_correct": 0.9})
ENV_ROW = MetricsRow(step=3, time=1.0, values={"train/percent_correct": 0.3, "train/reward_mean": 0.3})


def test_status_shows_the_environments_percent_correct_over_the_trainers_batch_value() -> None:
    latest = latest_metrics([TRAINER_ROW], [ENV_ROW])
    assert latest.percent_correct == 0.3
    assert latest.reward_mean == 0.3
    assert latest.loss == 0.1


def test_status_falls_back_to_the_trainer_when_the_environment_logs_no_such_key() -> None:
    assert latest_metrics([TRAINER_ROW], []).percent_correct == 0.9


def test_the_plot_drops_the_trainers_value_of_a_key_the_environment_logs() -> None:
    run_dir = home.run_dir("20260101-000000-plotplotpl")
    run_dir.mkdir(parents=True)
    (run_dir / TRAINER_METRICS_FILE).write_text(TRAINER_ROW.to_json_line())
    (run_dir / ENV_METRICS_FILE).write_text(ENV_ROW.to_json_line())

    rows = RunFilesSource("20260101-000000-plotplotpl").poll()

    percent = [row.values["train/percent_correct"] for row in rows if "train/percent_correct" in row.values]
    assert percent == [0.3]
    assert any(row.values.get("train/loss") == 0.1 for row in rows)
