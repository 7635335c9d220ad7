"""The live metrics plot: incremental reading, the refresh thread's life, the final frame, W&B polling."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from matplotlib._pylab_helpers import Gcf
from matplotlib.colors import to_hex
from notebook_runs import append_eval_row, append_trainer_rows, make_run, set_status, trainer_row
from PIL import Image

from hermes_nb.errors import HermesNBError
from hermes_nb.notebook.live_plot import LivePlot
from hermes_nb.plotting import (
    PANELS,
    PLOTTED_KEYS,
    MetricsFigure,
    MetricsPlot,
    RunFilesSource,
    WandbRunSource,
    save_metrics_plot,
)
from hermes_nb.plotting.series import RunSeries, decimate, ema
from hermes_nb.protocol.metrics import (
    EVAL_PERCENT_CORRECT,
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
    assert Gcf.get_all_fig_managers() == []


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
