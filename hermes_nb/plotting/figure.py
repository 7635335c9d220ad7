"""The four-panel metrics figure, drawn off-screen with matplotlib's Agg canvas.

No pyplot: a ``Figure`` with its own ``FigureCanvasAgg`` touches no global state, so the plot never leaks into
(or is shown twice by) the notebook's inline backend.

Redraws are blits. Drawing the axes, ticks and labels is most of the cost of a frame (the lines are cheap), so
they are a cached background (``background.AxesBackground``, drawn again only where an axis limit grew); a
frame restores it and draws only the lines, which are created once per run and panel and moved with
``set_data``. The axis limits grow ahead of the data (``limits.grow``), so that happens a handful of times per
run, and titles and axis labels have fixed places, so no draw measures text only to place other text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from hermes_nb.plotting.background import AxesBackground
from hermes_nb.plotting.limits import Limits, grow
from hermes_nb.plotting.png import encode_rgb_png
from hermes_nb.plotting.series import RunSeries, decimate
from hermes_nb.protocol.metrics import (
    EVAL_PERCENT_CORRECT,
    TRAIN_LOSS,
    TRAIN_PERCENT_CORRECT,
    TRAIN_REWARD_MEAN,
)


@dataclass(frozen=True)
class Panel:
    title: str
    key: str


PANELS = (
    Panel("Reward (mean)", TRAIN_REWARD_MEAN),
    Panel("Percent correct (train)", TRAIN_PERCENT_CORRECT),
    Panel("Percent correct (eval)", EVAL_PERCENT_CORRECT),
    Panel("Loss", TRAIN_LOSS),
)
PLOTTED_KEYS = tuple(panel.key for panel in PANELS)

# 10 x 6.4 in at 80 dpi = 800 x 512 px: readable in a notebook column, small enough that encoding the PNG stays
# well inside the 100 ms redraw budget.
FIGSIZE_IN = (10.0, 6.4)
DPI = 80
# About one bin per pixel column of a panel (the figure is 800 px wide, two panels across): see decimate().
DECIMATE_BINS = 400
# The titles' height in axes coordinates: on the top edge (matplotlib's default), lifted by the title's own pad.
TITLE_Y = 1.0
# Tick intervals per axis (MaxNLocator's nbins): enough to read a curve, and each label costs draw time.
TICKS_PER_AXIS = 5
# Fixed margins: constrained layout re-measures every tick label on every draw, about half a full redraw.
# 2.5% (20 px) on the right: a tick label at the end of the step axis ("100000") sticks out half its width.
# Between the columns (80 px): that half label of the left panels, then the right panels' value labels (up to
# 8 characters, "-0.00025"), each inside its panel's cell (see background.COLUMN_SPLIT).
MARGINS = {"left": 0.07, "right": 0.975, "bottom": 0.08, "top": 0.95, "wspace": 0.25, "hspace": 0.28}
# The raw curve stays visible behind the smoothed one, faintly, as TensorBoard does.
RAW_ALPHA_WHEN_SMOOTHED = 0.25
# A line through one point draws nothing, so a panel would stay empty until its second point (the eval panel
# for a whole eval interval). Marking only the newest point makes a lone point visible and shows where the run
# is now; one marker per line keeps a frame about as cheap as one without.
# Unclipped: the first point sits on the step axis's left edge (0), where a clipped marker shows only half.
# The axis limits always hold the data (limits.grow), so nothing else is drawn outside a panel.
LATEST_POINT_MARKER: dict[str, Any] = {"marker": "o", "markersize": 4.0, "markevery": [-1], "clip_on": False}


@dataclass
class _RunLines:
    raw: list[Line2D]
    smooth: list[Line2D]


class MetricsFigure:
    """One figure, four panels, one colour per run: ``update(series)`` then ``render_png()``."""

    def __init__(self, labels: Sequence[str], smoothing: float = 0.0, colors: Mapping[str, str] | None = None) -> None:
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = smoothing
        self.figure = Figure(figsize=FIGSIZE_IN, dpi=DPI)
        self.figure.subplots_adjust(**MARGINS)
        self._canvas = FigureCanvasAgg(self.figure)
        self._axes: list[Axes] = list(self.figure.subplots(2, 2).flat)
        for index, (ax, panel) in enumerate(zip(self._axes, PANELS, strict=True)):
            # A title at a given height: left to place it, matplotlib measures every tick label on each draw to see
            # whether one is in the way, which none is here (no ticks along the top).
            ax.set_title(panel.title, fontsize=10, y=TITLE_Y)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)
            # Text is most of a full draw: at most ~6 ticks per axis, and the step axis (shared by all panels,
            # see _fit_panel) labelled on the bottom row only.
            ax.xaxis.set_major_locator(MaxNLocator(nbins=TICKS_PER_AXIS))
            ax.yaxis.set_major_locator(MaxNLocator(nbins=TICKS_PER_AXIS))
            if index < len(PANELS) - 2:
                ax.tick_params(labelbottom=False)
            else:
                ax.set_xlabel("step", fontsize=8)
        renderer = self._canvas.get_renderer()
        for ax in self._axes:
            _pin_label(ax.xaxis, renderer)
            _pin_label(ax.yaxis, renderer)
        self._limits: list[Limits | None] = [None] * len(PANELS)
        chosen = colors or {}
        self._lines = {
            label: self._make_lines(label, chosen.get(label, f"C{index % 10}")) for index, label in enumerate(labels)
        }
        if len(labels) > 1:
            self._axes[0].legend(fontsize=8, loc="best")
        self._background = AxesBackground(self._canvas, self._axes)  # last: it draws what is fixed by now

    @property
    def background_draws(self) -> int:
        """How often the axes had to be drawn again (benchmarks and tests read it)."""
        return self._background.draws

    def _make_lines(self, label: str, color: str) -> _RunLines:
        raw_alpha = RAW_ALPHA_WHEN_SMOOTHED if self.smoothing > 0 else 1.0
        # animated: left out of the background draw, drawn by the blit in render_png.
        raw_marker: dict[str, Any] = {} if self.smoothing > 0 else LATEST_POINT_MARKER
        raw = [
            ax.plot([], [], color=color, alpha=raw_alpha, lw=1.0, animated=True, **raw_marker)[0] for ax in self._axes
        ]
        # The marker goes on the line drawn at full strength: the smoothed one when there is one.
        smooth = [ax.plot([], [], color=color, lw=1.5, animated=True, **LATEST_POINT_MARKER)[0] for ax in self._axes]
        # The legend names one line per run: the one drawn at full strength.
        (smooth if self.smoothing > 0 else raw)[0].set_label(label)
        return _RunLines(raw=raw, smooth=smooth)

    def update(self, series: Mapping[str, RunSeries]) -> None:
        """Point every line at the current data; widen an axis only when the data leaves its limits."""
        for label, run in series.items():
            lines = self._lines[label]
            for index, panel in enumerate(PANELS):
                steps, values = run.arrays(panel.key)
                lines.raw[index].set_data(*decimate(steps, values, DECIMATE_BINS))
                if self.smoothing > 0:
                    smoothed = run.smoothed(panel.key, self.smoothing)
                    lines.smooth[index].set_data(*decimate(steps, smoothed, DECIMATE_BINS))
        # One step axis for all panels (only the bottom row labels it): the furthest step any panel has.
        last_steps = [steps[-1] for run in series.values() for steps, _ in map(run.arrays, PLOTTED_KEYS) if steps.size]
        if not last_steps:
            return
        for index in range(len(PANELS)):
            self._fit_panel(index, series, float(max(last_steps)))

    def _fit_panel(self, index: int, series: Mapping[str, RunSeries], last_step: float) -> None:
        arrays = [run.arrays(PANELS[index].key) for run in series.values()]
        values = [v for _, v in arrays if v.size]
        if not values:
            return
        every = np.concatenate(values)
        data = Limits(x=(0.0, last_step), y=(float(np.nanmin(every)), float(np.nanmax(every))))
        new = grow(self._limits[index], data)
        if new == self._limits[index]:
            return
        self._limits[index] = new
        self._background.set_limits(index, new.x, new.y)

    def render_png(self) -> bytes:
        self._background.restore()
        for lines in self._lines.values():
            for ax, raw, smooth in zip(self._axes, lines.raw, lines.smooth, strict=True):
                ax.draw_artist(raw)
                ax.draw_artist(smooth)
        return encode_rgb_png(np.asarray(self._canvas.buffer_rgba()))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_bytes(self.render_png())
        return path


def _pin_label(axis: Axis, renderer: RendererAgg) -> None:
    """Fix the axis label where matplotlib places it now (its tick labels are one line of the same font whatever
    the limits), so a draw does not measure every tick label of every panel again to place it. An axis without a
    label text draws none: its label is pinned where it is, unmeasured (measuring is most of building a figure)."""
    if axis.label.get_text():
        axis.get_tightbbox(renderer)  # places the label
    axis.set_label_coords(*axis.label.get_position(), transform=axis.label.get_transform())
