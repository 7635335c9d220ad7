"""Each metric key has one writer: readers take train/* from the trainer's rows, eval/* from the environment's."""

from __future__ import annotations

from hermes_nb.plotting.sources import RunFilesSource
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_files import ENV_METRICS_FILE, TRAINER_METRICS_FILE
from hermes_nb.runs.table.status import latest_metrics
from hermes_nb.system import home

TRAINER_ROW = MetricsRow(
    step=3, time=1.0, values={"train/loss": 0.1, "train/percent_correct": 0.9, "train/reward_mean": 0.9}
)
ENV_ROW = MetricsRow(
    step=3, time=1.0, values={"env/percent_correct": 0.3, "env/reward_mean": 0.3, "eval/percent_correct": 0.5}
)
# env_metrics.jsonl of a run logged before env/* existed: the environment's own count under the trainer's key.
OLDER_ENV_ROW = MetricsRow(step=3, time=1.0, values={"train/percent_correct": 0.3, "train/reward_mean": 0.2})


def test_status_shows_the_trained_batchs_reward_and_percent_correct_and_the_environments_eval() -> None:
    latest = latest_metrics([TRAINER_ROW], [ENV_ROW])
    assert (latest.reward_mean, latest.percent_correct, latest.loss) == (0.9, 0.9, 0.1)
    assert latest.eval_percent_correct == 0.5


def test_status_never_takes_a_train_key_from_the_environments_rows() -> None:
    latest = latest_metrics([], [OLDER_ENV_ROW])
    assert (latest.reward_mean, latest.percent_correct) == (None, None)


def test_the_plot_takes_each_train_key_from_the_trainer_alone() -> None:
    run_dir = home.run_dir("20260101-000000-plotplotpl")
    run_dir.mkdir(parents=True)
    (run_dir / TRAINER_METRICS_FILE).write_text(TRAINER_ROW.to_json_line())
    (run_dir / ENV_METRICS_FILE).write_text(OLDER_ENV_ROW.to_json_line() + ENV_ROW.to_json_line())

    rows = RunFilesSource("20260101-000000-plotplotpl").poll()

    percent = [row.values["train/percent_correct"] for row in rows if "train/percent_correct" in row.values]
    assert percent == [0.9]
    assert [row.values["eval/percent_correct"] for row in rows if "eval/percent_correct" in row.values] == [0.5]
