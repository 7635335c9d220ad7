"""The live metrics plot: incremental reading, the refresh thread's life, the final frame, W&B polling."""

from __future__ import annotations

import contextlib
import io
import threading
import time
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from matplotlib import pyplot
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter, StrMethodFormatter
from notebook_runs import append_eval_row, append_trainer_rows, make_run, set_status, trainer_row
from PIL import Image
from plot_checks import assert_same_as_a_full_draw

from hermes_nb.errors import HermesNBError
from hermes_nb.notebook.widgets.live_plot import LivePlot
from hermes_nb.plotting import (
    DEFAULT_PANELS,
    PANELS,
    PLOTTED_KEYS,
    MetricsFigure,
    MetricsPlot,
    RunFilesSource,
    WandbRunSource,
    save_metrics_plot,
)
from hermes_nb.plotting.figure import DPI, FIGSIZE_IN, MARGINS
from hermes_nb.plotting.limits import Limits, grow
from hermes_nb.plotting.series import RunSeries, decimate, ema
from hermes_nb.protocol.metrics import (
    EVAL_PERCENT_CORRECT,
    TRAIN_COMPLETION_LENGTH,
    TRAIN_KL,
    TRAIN_LOSS,
    TRAIN_PERCENT_CORRECT,
    TRAIN_REWARD_MEAN,
    MetricsRow,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FAST_S = 0.05  # refresh interval in tests: fast, so a test waits milliseconds, not seconds
RUN = "20260101-000000-aaaaaaaaaa"
OTHER = "20260101-000001-bbbbbbbbbb"


def plot_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "hermes-nb-live-plot"]


def wait_until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


@pytest.fixture(autouse=True)
def no_thread_left_behind() -> Any:
    yield
    assert plot_threads() == []


def test_run_files_source_returns_only_new_rows() -> None:
    make_run(RUN)
    append_trainer_rows(RUN, range(3))
    source = RunFilesSource(RUN)
    assert [row.step for row in source.poll()] == [0, 1, 2]
    assert source.poll() == []
    append_trainer_rows(RUN, range(3, 5))
    append_eval_row(RUN, 4, 0.5)
    assert [row.step for row in source.poll()] == [3, 4, 4]


def test_run_files_source_waits_for_a_half_written_line(hermes_home: Path) -> None:
    run_dir = make_run(RUN)
    line = trainer_row(0).to_json_line()
    (run_dir / "metrics.jsonl").write_text(line[:10], encoding="utf-8")
    source = RunFilesSource(RUN)
    assert source.poll() == []
    with (run_dir / "metrics.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(line[10:])
    assert [row.step for row in source.poll()] == [0]


def test_unknown_run_is_refused_with_its_name() -> None:
    with pytest.raises(HermesNBError, match="nope"):
        MetricsPlot(["nope"])


def test_redraws_only_when_new_rows_arrive() -> None:
    make_run(RUN)
    append_trainer_rows(RUN, range(3))
    plot = MetricsPlot([RUN])
    assert plot.refresh() is True
    assert plot.refresh() is False
    append_trainer_rows(RUN, range(3, 4))
    assert plot.refresh() is True
    assert plot.frames == 2
    assert plot.png.startswith(PNG_MAGIC)


def test_runs_are_overlaid_with_a_legend_entry_each() -> None:
    make_run(RUN)
    make_run(OTHER)
    plot = MetricsPlot([RUN, OTHER])
    legend = plot.figure.figure.axes[0].get_legend()
    assert [text.get_text() for text in legend.get_texts()] == [RUN, OTHER]


def test_no_figure_is_left_in_pyplot() -> None:
    make_run(RUN)
    MetricsPlot([RUN]).refresh()
    assert pyplot.get_fignums() == []


def test_ema_smooths_and_starts_at_the_first_value() -> None:
    values = np.array([1.0, 0.0, 0.0, 0.0])
    smoothed = ema(values, 0.5)
    assert smoothed[0] == pytest.approx(1.0)
    assert smoothed[1] == pytest.approx(1 / 3)  # (0.5*0.5*1) / (1 - 0.25)
    assert np.all(np.diff(smoothed) < 0)
    assert ema(values, 0.0) is values


def test_smoothing_outside_zero_to_one_is_refused() -> None:
    make_run(RUN)
    with pytest.raises(HermesNBError, match="smoothing"):
        MetricsPlot([RUN], smoothing=1.0)


def test_thread_updates_the_image_after_rows_are_appended() -> None:
    make_run(RUN)
    append_trainer_rows(RUN, range(2))
    live = LivePlot([RUN], interval_s=FAST_S).start()
    try:
        first = live.image.value
        append_trainer_rows(RUN, range(2, 6))
        wait_until(lambda: live.image.value != first)
        assert live.running
        assert live.plot.latest_step() == 5
        assert "step 5" in live.caption.value
    finally:
        live.close()
    assert not live.running


def test_thread_stops_by_itself_with_a_final_frame_when_the_run_ends() -> None:
    make_run(RUN)
    live = LivePlot([RUN], interval_s=FAST_S).start()
    wait_until(lambda: len(plot_threads()) == 1)
    append_trainer_rows(RUN, range(7))
    set_status(RUN, "completed")
    assert live.wait(timeout=10)
    assert plot_threads() == []
    assert live.finished
    assert live.plot.latest_step() == 6  # the rows written before the end are in the last frame
    assert "finished" in live.caption.value


def test_thread_waits_for_every_overlaid_run_to_end() -> None:
    make_run(RUN)
    make_run(OTHER)
    live = LivePlot([RUN, OTHER], interval_s=FAST_S).start()
    try:
        set_status(RUN, "stopped")
        time.sleep(10 * FAST_S)
        assert live.running
        set_status(OTHER, "failed")
        assert live.wait(timeout=10)
    finally:
        live.close()


def test_close_stops_the_thread() -> None:
    make_run(RUN)
    live = LivePlot([RUN], interval_s=FAST_S).start()
    wait_until(lambda: len(plot_threads()) == 1)
    live.close()
    assert plot_threads() == []
    assert not live.finished


def test_display_publishes_the_final_png_once_into_its_own_display_slot() -> None:
    InteractiveShell.instance()  # display() publishes through the shell, as in a kernel
    make_run(RUN)
    append_trainer_rows(RUN, range(3))
    live = LivePlot([RUN], interval_s=FAST_S)
    with capture_output() as captured:
        live._ipython_display_()
        set_status(RUN, "completed")
        assert live.wait(timeout=10)
    placeholder = captured.outputs[1]
    display_id = placeholder.transient["display_id"]
    finals = [o for o in captured.outputs if o.update and "image/png" in o.data]
    assert finals
    assert {o.transient["display_id"] for o in finals} == {display_id}
    assert all(o.data["image/png"] == finals[0].data["image/png"] for o in finals)
    assert live.image.layout.display == "none"  # the live image gives way to the saved one


def test_save_metrics_plot_writes_a_png(tmp_path: Path) -> None:
    make_run(RUN)
    append_trainer_rows(RUN, range(5))
    path = save_metrics_plot([RUN], tmp_path / "out" / "plot.png")
    assert path.read_bytes().startswith(PNG_MAGIC)


class FakeWandbService:
    """Stands in for W&B's servers only; records every request the source sends."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.run_state = "running"
        self.requests: list[tuple[str, ...]] = []

    def state(self, path: str) -> str:
        self.requests.append(("state", path))
        return self.run_state

    def history(self, path: str, keys: list[str], min_step: int) -> list[dict[str, Any]]:
        self.requests.append(("history", path, str(min_step)))
        return [row for row in self.rows if row["_step"] >= min_step]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_wandb_source_asks_only_for_new_steps_and_no_more_often_than_its_interval() -> None:
    service = FakeWandbService([{"_step": 0, TRAIN_LOSS: 2.0, "_timestamp": 1.0, "other": "x"}])
    clock = Clock()
    source = WandbRunSource("team/proj/abc123", client=service, min_interval_s=10.0, clock=clock)
    assert not source.finished()
    rows = source.poll()
    assert [(r.step, r.values) for r in rows] == [(0, {TRAIN_LOSS: 2.0})]
    service.rows.append({"_step": 1, TRAIN_REWARD_MEAN: 0.5})
    clock.now = 5.0
    assert source.poll() == []  # within the interval: no request
    clock.now = 10.0
    assert [r.step for r in source.poll()] == [1]
    assert service.requests == [
        ("state", "team/proj/abc123"),
        ("history", "team/proj/abc123", "0"),
        ("history", "team/proj/abc123", "1"),
    ]


def test_wandb_source_reads_once_more_after_the_run_finished() -> None:
    service = FakeWandbService([])
    clock = Clock()
    source = WandbRunSource("team/proj/abc123", client=service, min_interval_s=10.0, clock=clock)
    source.poll()
    service.rows.append({"_step": 3, TRAIN_LOSS: 1.0})
    service.run_state = "finished"
    clock.now = 10.0
    assert source.finished()
    clock.now = 11.0
    assert [r.step for r in source.poll()] == [3]


def test_wandb_path_must_have_three_parts() -> None:
    with pytest.raises(HermesNBError, match="entity/project/run_id"):
        WandbRunSource("proj/abc", client=FakeWandbService([]))


def test_series_keeps_steps_sorted_and_once_when_rows_come_late_or_twice() -> None:
    series = RunSeries([TRAIN_LOSS])
    rows = [MetricsRow(step=s, time=0.0, values={TRAIN_LOSS: v}) for s, v in [(0, 1.0), (2, 3.0), (1, 2.0), (2, 4.0)]]
    assert series.add_rows(rows)
    steps, values = series.arrays(TRAIN_LOSS)
    assert steps.tolist() == [0, 1, 2] and values.tolist() == [1.0, 2.0, 4.0]
    assert not series.add_rows(rows[3:])  # the same value again changes nothing


def test_series_extended_row_by_row_reads_the_same_as_one_built_at_once() -> None:
    steps = [*range(0, 50), 70, 60, *range(50, 60), 65, 30, *range(71, 120)]  # late rows, and steps seen twice
    rows = [MetricsRow(step=s, time=0.0, values={TRAIN_LOSS: ((s * 7919 + i) % 101) / 10}) for i, s in enumerate(steps)]
    grown = RunSeries([TRAIN_LOSS])
    for row in rows:
        grown.add_rows([row])
        grown.arrays(TRAIN_LOSS), grown.smoothed(TRAIN_LOSS, 0.6)  # cached after every row, then extended
    at_once = RunSeries([TRAIN_LOSS])
    at_once.add_rows(rows)
    for got, expected in zip(grown.arrays(TRAIN_LOSS), at_once.arrays(TRAIN_LOSS), strict=True):
        assert got.tolist() == expected.tolist()
    assert grown.smoothed(TRAIN_LOSS, 0.6) == pytest.approx(ema(at_once.arrays(TRAIN_LOSS)[1], 0.6), rel=1e-12)


def test_decimate_keeps_the_envelope_of_each_bin() -> None:
    steps = np.arange(1000, dtype=float)
    values = np.sin(steps)
    few_steps, few_values = decimate(steps, values, 50)
    assert few_steps.size == 100
    assert few_values.max() == values.max() and few_values.min() == values.min()
    assert decimate(steps[:80], values[:80], 50)[0].size == 80  # small series are drawn as they are


def colored_pixels_in_panel(figure: MetricsFigure, png: bytes, panel: int, color: str) -> int:
    """How many pixels of ``panel`` have the line colour ``color`` (a lone point drawn as a line has none)."""
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    box = figure.figure.axes[panel].get_window_extent()
    height = image.shape[0]
    inside = image[int(height - box.y1) : int(height - box.y0), int(box.x0) : int(box.x1)]  # rows count from the top
    target = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(inside - target).sum(axis=2) < 40).sum())


@pytest.mark.parametrize("smoothing", [0.0, 0.6])
def test_a_single_point_is_visible(smoothing: float) -> None:
    series = RunSeries(PLOTTED_KEYS)
    series.add_rows([MetricsRow(step=0, time=0.0, values={EVAL_PERCENT_CORRECT: 0.25})])
    figure = MetricsFigure([RUN], smoothing=smoothing)
    figure.update({RUN: series})

    png = figure.render_png()

    eval_panel = [panel.key for panel in PANELS].index(EVAL_PERCENT_CORRECT)
    assert colored_pixels_in_panel(figure, png, eval_panel, to_hex("C0")) >= 4


def test_panels_share_one_step_axis_labelled_on_the_bottom_row_only() -> None:
    series = RunSeries(PLOTTED_KEYS)
    # Evaluations lag the trainer: the eval panel's own data ends at step 100, the others at step 930.
    series.add_rows(
        MetricsRow(step=s, time=float(s), values={TRAIN_REWARD_MEAN: 0.5, TRAIN_PERCENT_CORRECT: 0.5, TRAIN_LOSS: 0.1})
        for s in range(931)
    )
    series.add_rows([MetricsRow(step=s, time=float(s), values={EVAL_PERCENT_CORRECT: 0.4}) for s in (0, 50, 100)])
    figure = MetricsFigure(["run"])
    figure.update({"run": series})
    figure.render_png()
    axes = figure.figure.axes
    assert {ax.get_xlim() for ax in axes} == {axes[0].get_xlim()}
    assert axes[0].get_xlim()[1] >= 930
    assert [ax.get_xlabel() for ax in axes] == ["", "", "step", "step"]
    shown = [[t.get_text() for t in ax.get_xticklabels() if t.get_visible() and t.get_text()] for ax in axes]
    assert shown[0] == shown[1] == [] and shown[2] and shown[3]
    assert all(len(ax.get_yticks()) <= 8 for ax in axes)  # a handful of ticks: text is most of a full draw


def step_axis_ends(steps: range) -> list[tuple[float, float]]:
    """(newest step, end of the step axis) each time the axis had to move while a run went through ``steps``."""
    limits: Limits | None = None
    moves = []
    for step in steps:
        new = grow(limits, Limits(x=(0.0, float(step)), y=(0.0, 1.0)))
        if limits is None or new.x != limits.x:
            moves.append((float(step), new.x[1]))
        limits = new
    return moves


def test_step_axis_doubles_so_the_curve_fills_at_least_half_of_it() -> None:
    moves = step_axis_ends(range(10, 10_001))
    assert all(step <= end <= 2 * step for step, end in moves)  # the curve fills half of the axis or more
    assert len(moves) <= 11  # about log2(10,000 / 10): a handful of full draws over the whole run


def test_a_plot_opened_late_fits_the_steps_so_far_to_a_round_end() -> None:
    first = grow(None, Limits(x=(0.0, 2_999.0), y=(0.0, 1.0)))
    assert first.x == (0.0, 3_000.0)
    assert grow(first, Limits(x=(0.0, 3_001.0), y=(0.0, 1.0))).x == (0.0, 6_000.0)


def test_value_axis_margins_do_not_pile_up_while_a_curve_climbs() -> None:
    limits: Limits | None = None
    for step in range(1, 2_000):
        limits = grow(limits, Limits(x=(0.0, float(step)), y=(0.0, step / 100)))  # a reward rising to ~20
    assert limits is not None
    low, high = limits.y
    assert low < 0.0 and high > 19.99
    assert 19.99 / (high - low) >= 2 / 3  # the data fills two thirds of the panel's height or more


def test_value_axis_stays_put_while_the_data_fits() -> None:
    limits = grow(None, Limits(x=(0.0, 100.0), y=(0.0, 1.0)))
    assert grow(limits, Limits(x=(0.0, 100.0), y=(0.1, 0.9))) == limits


def test_a_flat_curve_at_zero_gets_a_readable_range() -> None:
    assert grow(None, Limits(x=(0.0, 5.0), y=(0.0, 0.0))).y == (-0.25, 0.25)


def rising_rows(run: int, steps: range) -> list[MetricsRow]:
    values = {TRAIN_REWARD_MEAN: 0.1, TRAIN_COMPLETION_LENGTH: 1.0, EVAL_PERCENT_CORRECT: 2.0, TRAIN_KL: -0.01}
    return [
        MetricsRow(step=s, time=float(s), values={k: v * s * (run + 1) + (s % 7) for k, v in values.items()})
        for s in steps
    ]


def point(step: int, key: str, value: float) -> MetricsRow:
    return MetricsRow(step=step, time=float(step), values={key: value})


def middle(figure: MetricsFigure, panel: int) -> float:
    return sum(figure.figure.axes[panel].get_ylim()) / 2


def draw_after_each(figure: MetricsFigure, series: dict[str, RunSeries], growths: list[Any]) -> None:
    """Add each growth's rows to the first run; each frame must draw axes again and match a full draw, and so must
    the frame after it, which draws nothing new (where the background measures what a whole draw left)."""
    for growth in growths:
        series[RUN].add_rows(growth())
        drawn = figure.background_draws
        figure.update(series)
        png = figure.render_png()
        assert figure.background_draws == drawn + 1
        assert_same_as_a_full_draw(figure, png)
        assert_same_as_a_full_draw(figure, figure.render_png())
        assert figure.background_draws == drawn + 1


def two_runs() -> tuple[MetricsFigure, dict[str, RunSeries]]:
    series = {RUN: RunSeries(PLOTTED_KEYS), OTHER: RunSeries(PLOTTED_KEYS)}  # two runs: the legend is drawn too
    series[RUN].add_rows(rising_rows(0, range(300)))
    series[OTHER].add_rows(rising_rows(1, range(200)))
    return MetricsFigure(list(series), smoothing=0.6), series


def test_every_kind_of_frame_whose_limits_grew_is_the_same_picture_as_a_full_draw() -> None:
    figure, series = two_runs()
    kl = DEFAULT_PANELS.index("kl")
    draw_after_each(
        figure,
        series,
        [
            lambda: [],  # the first frame: every panel
            lambda: [point(int(figure.figure.axes[0].get_xlim()[1]) + 1, TRAIN_KL, middle(figure, kl))],  # steps
            lambda: [point(5, TRAIN_COMPLETION_LENGTH, 5_000.0)],  # one value axis
            lambda: [point(int(figure.figure.axes[0].get_xlim()[1]) + 1, TRAIN_REWARD_MEAN, 5_000.0)],  # both
        ],
    )


def test_tick_labels_too_wide_for_their_cell_are_never_cut() -> None:
    figure, series = two_runs()
    kl = DEFAULT_PANELS.index("kl")
    # Wider than the room between the columns: the KL panel's labels reach into the eval panel's cell.
    value_axis = figure.figure.axes[kl].yaxis
    value_axis.set_major_formatter(StrMethodFormatter("{x:.2f} (a wide label)"))

    def narrow_again() -> list[MetricsRow]:
        value_axis.set_major_formatter(ScalarFormatter())
        return [point(8, TRAIN_KL, -50_000.0)]

    draw_after_each(
        figure,
        series,
        [
            lambda: [],  # the first frame draws them
            lambda: [point(5, EVAL_PERCENT_CORRECT, 5_000.0)],  # the panel whose cell they reach into
            lambda: [point(6, TRAIN_KL, -5_000.0)],  # their own panel
            lambda: [point(int(figure.figure.axes[0].get_xlim()[1]) + 1, TRAIN_KL, -1.0)],  # every panel
            narrow_again,  # drawn narrow: what reached out must go too
        ],
    )


def axis_draws_after(growth: list[MetricsRow]) -> dict[str, list[int]]:
    """How often each panel's step ("x") and value ("y") axis is drawn in the frame after ``growth``."""
    series = RunSeries(PLOTTED_KEYS)
    series.add_rows(rising_rows(0, range(300)))
    figure = MetricsFigure(["run"])
    figure.update({"run": series})
    figure.render_png()
    figure.render_png()  # a frame with nothing new, as most are: what the first frame drew is measured there
    axes = figure.figure.axes
    with contextlib.ExitStack() as stack:

        def spy(axis: Any) -> Any:
            return stack.enter_context(patch.object(axis, "draw", wraps=axis.draw))

        spies = {"x": [spy(ax.xaxis) for ax in axes], "y": [spy(ax.yaxis) for ax in axes]}
        series.add_rows(growth)
        figure.update({"run": series})
        figure.render_png()
    return {name: [spy.call_count for spy in spied] for name, spied in spies.items()}


def test_a_value_axis_that_grows_draws_only_its_own_panel_again() -> None:
    length = DEFAULT_PANELS.index("length")
    drawn = axis_draws_after([point(5, TRAIN_COMPLETION_LENGTH, 5_000.0)])
    assert drawn == {"x": [int(i == length) for i in range(4)], "y": [int(i == length) for i in range(4)]}


def test_a_step_axis_that_grows_draws_the_step_axes_only() -> None:
    assert axis_draws_after([point(1_000, TRAIN_KL, -2.0)]) == {"x": [1, 1, 1, 1], "y": [0, 0, 0, 0]}


def test_titles_and_step_labels_sit_where_matplotlib_places_them() -> None:
    series = RunSeries(PLOTTED_KEYS)
    series.add_rows(rising_rows(0, range(500)))
    figure = MetricsFigure(["run"])
    figure.update({"run": series})
    figure.render_png()
    reference = Figure(figsize=FIGSIZE_IN, dpi=DPI)
    reference.subplots_adjust(**MARGINS)
    FigureCanvasAgg(reference)
    for index, (ax, panel) in enumerate(zip(reference.subplots(2, 2).flat, PANELS, strict=True)):
        ax.set_title(panel.title, fontsize=10)
        ax.tick_params(labelsize=8)
        if index >= 2:
            ax.set_xlabel("step", fontsize=8)
    reference.canvas.draw()
    for ours, theirs in zip(figure.figure.axes, reference.axes, strict=True):
        assert ours.title.get_window_extent().bounds == pytest.approx(theirs.title.get_window_extent().bounds)
    for ours, theirs in zip(figure.figure.axes[2:], reference.axes[2:], strict=True):
        assert ours.xaxis.label.get_window_extent().bounds == pytest.approx(
            theirs.xaxis.label.get_window_extent().bounds
        )


def test_a_new_plots_first_frame_measures_no_tick_label_and_the_next_blit_does() -> None:
    figure, series = two_runs()
    with patch.object(Axis, "get_tightbbox", autospec=True, side_effect=Axis.get_tightbbox) as measured:
        figure.update(series)
        figure.render_png()
        assert measured.call_count == 0

        figure.render_png()

        assert measured.call_count == 2 * len(PANELS)  # every step and value axis, once


def test_limits_that_grow_before_anything_was_measured_are_drawn_whole_and_right() -> None:
    figure, series = two_runs()
    figure.update(series)
    figure.render_png()
    series[RUN].add_rows([point(5, TRAIN_COMPLETION_LENGTH, 5_000.0)])
    figure.update(series)
    with patch.object(Axis, "draw", autospec=True, side_effect=Axis.draw) as drawn:
        png = figure.render_png()

    assert drawn.call_count == 2 * len(PANELS)
    assert_same_as_a_full_draw(figure, png)
