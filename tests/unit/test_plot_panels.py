"""The panels the metrics plot draws: what people watch by default (reward with its group std as a band, held-out
accuracy, completion length, KL or entropy), a fallback or a "no data" note where a run has not logged a key, and
the loss (or any other choice) one argument or one dropdown away."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from notebook_runs import make_run
from PIL import Image
from plot_checks import assert_same_as_a_full_draw

from hermes_nb.errors import HermesNBError
from hermes_nb.notebook.widgets.live_plot import LivePlot
from hermes_nb.plotting import (
    DEFAULT_PANELS,
    PANEL_CHOICES,
    PLOTTED_KEYS,
    MetricsFigure,
    MetricsPlot,
    save_metrics_plot,
)
from hermes_nb.plotting.figure import BAND_ALPHA
from hermes_nb.plotting.series import RunSeries
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.health import Finding, append_finding
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_files import ENV_METRICS_FILE, HEALTH_FILE, TRAINER_METRICS_FILE
from hermes_nb.system import home

RUN = "20260101-000000-aaaaaaaaaa"
OTHER = "20260101-000001-bbbbbbbbbb"
LAST = DEFAULT_PANELS.index("kl")


def write_rows(run_id: str, name: str, rows: list[dict[str, float]]) -> None:
    with (home.run_dir(run_id) / name).open("a", encoding="utf-8") as handle:
        for step, values in enumerate(rows):
            handle.write(MetricsRow(step=step, time=1000.0 + step, values=values).to_json_line())


def trained(step: int, **extra: float) -> dict[str, float]:
    """A trainer row as a run logs it: reward, its spread, completion lengths, and ``extra`` keys."""
    return {
        keys.TRAIN_REWARD_MEAN: step / 10,
        keys.TRAIN_PERCENT_CORRECT: step / 10,  # an exact-match environment: the same curve as the reward
        keys.TRAIN_REWARD_STD: 0.2,
        keys.TRAIN_LOSS: 0.01,
        keys.TRAIN_COMPLETION_LENGTH: 12.0 + step,
        keys.TRAIN_COMPLETION_LENGTH_MAX: 30.0 + step,
        **extra,
    }


def run_with(run_id: str, **extra: float) -> None:
    make_run(run_id)
    write_rows(run_id, TRAINER_METRICS_FILE, [trained(step, **extra) for step in range(6)])


def titles(plot: MetricsPlot) -> list[str]:
    return [ax.get_title() for ax in plot.figure.figure.axes]


def drawn_plot(runs: list[str], panels: list[str] | None = None) -> MetricsPlot:
    plot = MetricsPlot(runs, panels=panels)
    plot.refresh()
    return plot


def test_the_default_panels_are_reward_held_out_accuracy_length_and_kl_not_the_loss() -> None:
    run_with(RUN, **{keys.TRAIN_KL: 0.01})

    assert titles(drawn_plot([RUN])) == [PANEL_CHOICES[name].title for name in ("reward", "eval", "length", "kl")]
    assert keys.TRAIN_LOSS not in [panel.key for panel in drawn_plot([RUN]).figure.shown]
    assert keys.TRAIN_PERCENT_CORRECT not in [panel.key for panel in drawn_plot([RUN]).figure.shown]


def test_a_run_whose_metrics_have_kl_shows_kl() -> None:
    run_with(RUN, **{keys.TRAIN_KL: 0.01, keys.TRAIN_ENTROPY: 1.5})

    plot = drawn_plot([RUN])

    assert plot.figure.shown[LAST].key == keys.TRAIN_KL
    assert titles(plot)[LAST] == "KL to the reference"


def test_a_run_whose_metrics_lack_kl_shows_entropy_instead() -> None:
    run_with(RUN, **{keys.TRAIN_ENTROPY: 1.5})

    plot = drawn_plot([RUN])

    assert plot.figure.shown[LAST].key == keys.TRAIN_ENTROPY
    assert titles(plot)[LAST] == "Entropy"
    assert plot.figure.figure.axes[LAST].get_ylim()[0] <= 1.5 <= plot.figure.figure.axes[LAST].get_ylim()[1]


def test_a_panel_switches_to_kl_when_the_first_kl_point_arrives() -> None:
    series = RunSeries(PLOTTED_KEYS)
    figure = MetricsFigure([RUN])
    series.add_rows([MetricsRow(step=0, time=0.0, values={keys.TRAIN_ENTROPY: 2.0})])
    figure.update({RUN: series})
    figure.render_png()
    series.add_rows([MetricsRow(step=1, time=1.0, values={keys.TRAIN_KL: 0.003})])

    figure.update({RUN: series})
    png = figure.render_png()

    assert figure.figure.axes[LAST].get_title() == "KL to the reference"
    assert_same_as_a_full_draw(figure, png)  # the old title and value axis are gone from the picture
    low, high = figure.figure.axes[LAST].get_ylim()
    assert low <= 0.003 <= high and high - low < 0.1  # fitted to the KL, not kept from the entropy's range


def test_a_panel_with_no_data_says_which_keys_it_waits_for_and_keeps_up_with_the_step_axis() -> None:
    run_with(RUN)  # no KL, no entropy, no evaluation yet

    plot = drawn_plot([RUN])

    assert plot.figure.notes() == {
        DEFAULT_PANELS.index("eval"): f"no {keys.EVAL_PERCENT_CORRECT} logged yet",
        LAST: f"no {keys.TRAIN_KL} or {keys.TRAIN_ENTROPY} logged yet",
    }
    axes = plot.figure.figure.axes
    assert {ax.get_xlim() for ax in axes} == {axes[0].get_xlim()}


def test_completion_length_falls_back_to_the_environments_count() -> None:
    make_run(RUN)
    write_rows(RUN, TRAINER_METRICS_FILE, [{keys.TRAIN_REWARD_MEAN: 0.5}])
    write_rows(RUN, ENV_METRICS_FILE, [{keys.ENV_COMPLETION_TOKENS_MEAN: 40.0}])

    plot = drawn_plot([RUN])

    assert plot.figure.shown[DEFAULT_PANELS.index("length")].key == keys.ENV_COMPLETION_TOKENS_MEAN


def test_the_longest_completion_is_a_thin_line_above_the_mean() -> None:
    run_with(RUN)

    plot = drawn_plot([RUN])

    lines = plot.figure.lines[RUN][DEFAULT_PANELS.index("length")]
    assert list(lines.thin.get_ydata()) == [30.0 + step for step in range(6)]
    assert lines.thin.get_linewidth() < lines.raw.get_linewidth()


def test_the_reward_band_is_the_mean_plus_and_minus_the_group_std() -> None:
    run_with(RUN)

    plot = drawn_plot([RUN])

    (polygon,) = plot.figure.lines[RUN][0].band.get_paths()
    vertices = polygon.vertices
    means = np.array([step / 10 for step in range(6)])
    assert vertices[:, 1].max() == pytest.approx(means.max() + 0.2)
    assert vertices[:, 1].min() == pytest.approx(means.min() - 0.2)
    low, high = plot.figure.figure.axes[0].get_ylim()
    assert low < means.min() - 0.2 and means.max() + 0.2 < high  # the value axis holds the band


def test_the_reward_band_stays_within_the_rewards_range() -> None:
    """A 0/1 reward: mean 0.5 +- std 0.5 reaches 0 and 1, and a mean of 0.1 +- 0.3 must not reach below 0."""
    make_run(RUN)
    rows = [trained(step, **{keys.TRAIN_REWARD_MIN: 0.0, keys.TRAIN_REWARD_MAX: 1.0}) for step in range(6)]
    for row, std in zip(rows, (0.3, 0.5, 0.5, 0.5, 0.5, 0.5), strict=True):
        row[keys.TRAIN_REWARD_STD] = std
    write_rows(RUN, TRAINER_METRICS_FILE, rows)

    plot = drawn_plot([RUN])

    (polygon,) = plot.figure.lines[RUN][0].band.get_paths()
    assert polygon.vertices[:, 1].min() == pytest.approx(0.0)
    assert polygon.vertices[:, 1].max() == pytest.approx(1.0)


def test_a_finished_runs_step_axis_ends_at_its_last_step() -> None:
    make_run(RUN, status="completed", total_steps=120)
    write_rows(RUN, TRAINER_METRICS_FILE, [trained(step) for step in range(121)])
    live = MetricsPlot([RUN])
    live.refresh()
    assert live.figure.figure.axes[0].get_xlim()[1] > 120  # room ahead while it may grow

    live.refresh(final=live.all_finished())

    assert live.figure.figure.axes[0].get_xlim() == (0.0, 120.0)


def test_the_plot_marks_the_step_where_each_health_finding_began_in_every_panel() -> None:
    run_with(RUN)
    finding = Finding(name="clip_high", severity="warning", step=3, time=0.0, message="m", hint="h")
    append_finding(home.run_dir(RUN) / HEALTH_FILE, finding)

    plot = drawn_plot([RUN])

    for lines in plot.figure.lines[RUN]:
        xs, ys = lines.marks.get_data()
        assert list(xs[:2]) == [3.0, 3.0] and list(ys[:2]) == [0.0, 1.0]
    assert not plot.refresh()  # the same findings: nothing to draw again


def test_the_reward_band_is_drawn_faintly_in_the_runs_colour() -> None:
    run_with(RUN)
    plot = drawn_plot([RUN])
    ax = plot.figure.figure.axes[0]
    image = np.asarray(Image.open(io.BytesIO(plot.png)).convert("RGB")).astype(float) / 255
    height = image.shape[0]
    # The band's colour over white, at a step between two points and a value inside the band but off the lines.
    x, y = ax.transData.transform((2.5, 0.25 + 0.15))
    expected = BAND_ALPHA * np.array(to_rgb("C0")) + (1 - BAND_ALPHA)

    assert image[int(height - y), int(x)] == pytest.approx(expected, abs=0.03)


def test_the_reward_panel_draws_a_smoothed_line_even_unsmoothed() -> None:
    run_with(RUN)

    lines = drawn_plot([RUN]).figure.lines[RUN][0]

    assert lines.smooth.get_ydata().size == 6
    assert list(lines.smooth.get_ydata()) != list(lines.raw.get_ydata())


def test_the_loss_is_one_panels_argument_away() -> None:
    run_with(RUN)

    plot = drawn_plot([RUN], panels=["reward", "eval", "length", "loss"])

    assert titles(plot)[LAST] == "Loss"
    assert list(plot.figure.lines[RUN][LAST].raw.get_ydata()) == [0.01] * 6


def test_the_live_plots_dropdown_swaps_the_last_panel_for_the_loss() -> None:
    run_with(RUN, **{keys.TRAIN_KL: 0.01})
    live = LivePlot([RUN])
    before = live.image.value

    live.last_panel.value = "loss"

    assert [ax.get_title() for ax in live.plot.figure.figure.axes][LAST] == "Loss"
    assert live.panels == ["reward", "eval", "length", "loss"]
    assert live.image.value != before
    live.close()


def test_overlaid_runs_share_the_new_panels_with_a_band_each() -> None:
    run_with(RUN, **{keys.TRAIN_KL: 0.01})
    run_with(OTHER)

    plot = drawn_plot([RUN, OTHER])

    assert plot.figure.shown[LAST].key == keys.TRAIN_KL  # one run's KL is shown; the other has none to draw
    assert all(plot.figure.lines[label][0].band.get_paths() for label in (RUN, OTHER))
    legend = plot.figure.figure.axes[0].get_legend()
    assert [text.get_text() for text in legend.get_texts()] == [RUN, OTHER]


@pytest.mark.parametrize("panels", [["reward", "eval", "length"], ["reward", "eval", "length", "losss"]])
def test_panels_other_than_four_known_names_are_refused_naming_the_choices(panels: list[str]) -> None:
    run_with(RUN)

    with pytest.raises(HermesNBError, match="panels must be 4 names of: reward, eval, length, kl, entropy, loss"):
        MetricsPlot([RUN], panels=panels)


def test_the_saved_picture_uses_the_same_panels(tmp_path: Path) -> None:
    run_with(RUN, **{keys.TRAIN_KL: 0.01})

    path = save_metrics_plot([RUN], tmp_path / "metrics.png")

    with Image.open(path) as saved, Image.open(io.BytesIO(drawn_plot([RUN]).png)) as shown:
        assert np.array_equal(np.asarray(saved), np.asarray(shown))
