"""The four-panel metrics figure (``panels.py`` says which four), drawn off-screen with matplotlib's Agg canvas.

No pyplot: a ``Figure`` with its own ``FigureCanvasAgg`` touches no global state, so the plot never leaks into
(or is shown twice by) the notebook's inline backend.

Redraws are blits. Drawing the axes, ticks and labels is most of the cost of a frame (the lines are cheap), so
they are a cached background (``background.AxesBackground``, drawn again only where an axis limit grew); a
frame restores it and draws only the lines, which are created once per run and panel and moved with
``set_data``. The axis limits grow ahead of the data (``limits.grow``), so that happens a handful of times per
run, and titles and axis labels have fixed places, so no draw measures text only to place other text. A panel
that switches to its fallback (or back: a KL panel whose first KL point arrives) is retitled and the whole
background drawn again, once per switch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.ticker import MaxNLocator

from hermes_nb.plotting.background import AxesBackground
from hermes_nb.plotting.limits import Limits, grow
from hermes_nb.plotting.panels import PANEL_COUNT, Panel, resolve_panels
from hermes_nb.plotting.png import encode_rgb_png
from hermes_nb.plotting.series import RunSeries, decimate, decimate_band

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
# A panel that always has a smoothed line (the reward: one step's batch is a few groups, noisy) uses this EMA
# weight when the figure is drawn unsmoothed: about a 5-step window (1 / (1 - 0.8)), short enough for a 20-step run.
PANEL_SMOOTHING = 0.8
# The group spread around the reward: faint enough that the lines of an overlaid run read through it.
BAND_ALPHA = 0.15
# The second line of a panel (the longest completion): thin, so the mean stays the panel's curve.
THIN_LINE_WIDTH = 0.6
# A line through one point draws nothing, so a panel would stay empty until its second point (the eval panel
# for a whole eval interval). Marking only the newest point makes a lone point visible and shows where the run
# is now; one marker per line keeps a frame about as cheap as one without.
# Unclipped: the first point sits on the step axis's left edge (0), where a clipped marker shows only half.
# The axis limits always hold the data (limits.grow), so nothing else is drawn outside a panel.
LATEST_POINT_MARKER: dict[str, Any] = {"marker": "o", "markersize": 4.0, "markevery": [-1], "clip_on": False}
EMPTY_BAND = np.empty((0, 2))
# The value range of a panel with no data yet (its step axis keeps up with the others).
EMPTY_PANEL_Y = (0.0, 1.0)


@dataclass
class PanelLines:
    """One run's artists in one panel, in drawing order (the band under the lines)."""

    band: PolyCollection
    raw: Line2D
    smooth: Line2D
    thin: Line2D
    # A dotted vertical line at each step where a health finding began (``hermes_nb.health``).
    marks: Line2D

    @property
    def artists(self) -> list[Artist]:
        return [self.band, self.raw, self.smooth, self.thin, self.marks]


class MetricsFigure:
    """One figure, four panels, one colour per run: ``update(series)`` then ``render_png()``.

    ``panels``: four names of ``panels.PANEL_CHOICES`` (default ``panels.DEFAULT_PANELS``); ``colors``: label ->
    a matplotlib colour, for a caller that keeps a run's colour across plots (default: the colour cycle)."""

    def __init__(
        self,
        labels: Sequence[str],
        smoothing: float = 0.0,
        panels: Sequence[str] | None = None,
        colors: Mapping[str, str] | None = None,
    ) -> None:
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = smoothing
        self.panels = resolve_panels(panels)
        self.shown = list(self.panels)  # what each panel draws now: itself or one of its fallbacks
        self.figure = Figure(figsize=FIGSIZE_IN, dpi=DPI)
        self.figure.subplots_adjust(**MARGINS)
        self._canvas = FigureCanvasAgg(self.figure)
        self._axes: list[Axes] = list(self.figure.subplots(2, 2).flat)
        for index, (ax, panel) in enumerate(zip(self._axes, self.panels, strict=True)):
            # A title at a given height: left to place it, matplotlib measures every tick label on each draw to see
            # whether one is in the way, which none is here (no ticks along the top).
            ax.set_title(panel.title, fontsize=10, y=TITLE_Y)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)
            # Text is most of a full draw: at most ~6 ticks per axis, and the step axis (shared by all panels,
            # see _fit_panel) labelled on the bottom row only.
            ax.xaxis.set_major_locator(MaxNLocator(nbins=TICKS_PER_AXIS))
            ax.yaxis.set_major_locator(MaxNLocator(nbins=TICKS_PER_AXIS))
            if index < PANEL_COUNT - 2:
                ax.tick_params(labelbottom=False)
            else:
                ax.set_xlabel("step", fontsize=8)
        renderer = self._canvas.get_renderer()
        for ax in self._axes:
            _pin_label(ax.xaxis, renderer)
            _pin_label(ax.yaxis, renderer)
        self._limits: list[Limits | None] = [None] * PANEL_COUNT
        self._unfitted = [True] * PANEL_COUNT  # value axes not fitted to data yet
        chosen = colors or {}
        self.lines = {
            label: self._make_lines(label, chosen.get(label, f"C{index % 10}")) for index, label in enumerate(labels)
        }
        # Said in a panel none of whose keys any run has logged yet; drawn over the lines, so made after them.
        self._no_data = [_no_data_text(ax) for ax in self._axes]
        if len(labels) > 1:
            self._axes[0].legend(fontsize=8, loc="best")
        self._background = AxesBackground(self._canvas, self._axes)  # last: it draws what is fixed by now

    @property
    def background_draws(self) -> int:
        """How often the axes had to be drawn again (benchmarks and tests read it)."""
        return self._background.draws

    def notes(self) -> dict[int, str]:
        """The panels that say they have no data, by index, with what they say."""
        return {index: text.get_text() for index, text in enumerate(self._no_data) if text.get_visible()}

    def _smoothing_of(self, index: int) -> float:
        if self.smoothing > 0:
            return self.smoothing
        return PANEL_SMOOTHING if self.panels[index].smoothed else 0.0

    def _make_lines(self, label: str, color: str) -> list[PanelLines]:
        made = []
        for index, ax in enumerate(self._axes):
            smoothed = self._smoothing_of(index) > 0
            # animated: left out of the background draw, drawn by the blit in render_png.
            band = PolyCollection([], facecolors=color, edgecolors="none", alpha=BAND_ALPHA, animated=True)
            ax.add_collection(band, autolim=False)
            raw_style: dict[str, Any] = {"alpha": RAW_ALPHA_WHEN_SMOOTHED} if smoothed else LATEST_POINT_MARKER
            raw = ax.plot([], [], color=color, lw=1.0, animated=True, **raw_style)[0]
            # The marker goes on the line drawn at full strength: the smoothed one when there is one.
            smooth = ax.plot([], [], color=color, lw=1.5, animated=True, **LATEST_POINT_MARKER)[0]
            thin = ax.plot([], [], color=color, lw=THIN_LINE_WIDTH, animated=True)[0]
            # x in steps, y in the panel's height (0 to 1): a mark spans the panel whatever its value axis.
            marks = ax.plot([], [], color=color, lw=1.0, ls=":", animated=True, transform=ax.get_xaxis_transform())[0]
            if index == 0:  # the legend names one line per run: the one drawn at full strength
                (smooth if smoothed else raw).set_label(label)
            made.append(PanelLines(band=band, raw=raw, smooth=smooth, thin=thin, marks=marks))
        return made

    def update(self, series: Mapping[str, RunSeries], *, final: bool = False) -> None:
        """Point every line at the current data; widen an axis only when the data leaves its limits. ``final``:
        every run has ended, so the step axis ends at the last step (no room left for steps to come)."""
        for index, panel in enumerate(self.panels):
            self._show(index, _panel_with_data(panel, series))
        for label, run in series.items():
            for index, panel in enumerate(self.shown):
                self._set_lines(self.lines[label][index], run, panel, self._smoothing_of(index))
        for index, panel in enumerate(self.shown):
            empty = not _has_points(panel.key, series)
            self._no_data[index].set_visible(empty)
            if empty:  # what is missing: the panel's key, then its fallbacks'
                self._no_data[index].set_text(f"no {' or '.join(_chain_keys(panel))} logged yet")
        # One step axis for all panels (only the bottom row labels it): the furthest step any panel has.
        last_steps = [
            steps[-1]
            for run in series.values()
            for panel in self.shown
            for steps, _ in map(run.arrays, (panel.key, panel.thin_key or panel.key))
            if steps.size
        ]
        if not last_steps:
            return
        for index in range(PANEL_COUNT):
            self._fit_panel(index, series, float(max(last_steps)), final)

    def mark(self, label: str, steps: Sequence[int]) -> None:
        """Mark the steps where run ``label``'s health findings began, in every panel."""
        xs = np.repeat(np.asarray(steps, dtype=float), 3)  # (3N,): each step twice, then a gap
        ys = np.tile([0.0, 1.0, np.nan], len(steps))  # (3N,): bottom to top of the panel, then a gap
        xs[2::3] = np.nan
        for lines in self.lines[label]:
            lines.marks.set_data(xs, ys)

    def _show(self, index: int, panel: Panel) -> None:
        """Draw ``panel`` in panel ``index`` from now on: a new title (the fixed layer again) and new limits."""
        if panel == self.shown[index]:
            return
        self.shown[index] = panel
        self._axes[index].set_title(panel.title, fontsize=10, y=TITLE_Y)
        self._unfitted[index] = True  # the same step axis, a value axis fitted to the new key's data
        self._background.redraw_fixed()

    def _set_lines(self, lines: PanelLines, run: RunSeries, panel: Panel, smoothing: float) -> None:
        steps, values = run.arrays(panel.key)
        lines.raw.set_data(*decimate(steps, values, DECIMATE_BINS))
        smoothed = run.smoothed(panel.key, smoothing) if smoothing > 0 else np.empty(0)
        lines.smooth.set_data(*decimate(steps[: smoothed.size], smoothed, DECIMATE_BINS))
        thin_steps, thin_values = run.arrays(panel.thin_key) if panel.thin_key else (np.empty(0), np.empty(0))
        lines.thin.set_data(*decimate(thin_steps, thin_values, DECIMATE_BINS))
        lines.band.set_verts([_band_polygon(run, panel)])

    def _fit_panel(self, index: int, series: Mapping[str, RunSeries], last_step: float, final: bool) -> None:
        """The shared step axis, and a value axis that holds what the panel draws. A panel without data keeps up
        with the step axis on a placeholder value range, fitted afresh to its first data."""
        current = self._limits[index]
        values = [v for run in series.values() for v in _panel_values(run, self.shown[index]) if v.size]
        if not values:
            self._unfitted[index] = True
            y = current.y if current is not None else EMPTY_PANEL_Y
            new = Limits(x=grow(current, Limits(x=(0.0, last_step), y=y)).x, y=y)
        else:
            every = np.concatenate(values)
            data = Limits(x=(0.0, last_step), y=(float(np.nanmin(every)), float(np.nanmax(every))))
            new = grow(current, data)
            if self._unfitted[index]:
                new = Limits(x=new.x, y=grow(None, data).y)
                self._unfitted[index] = False
        if final:
            new = Limits(x=(0.0, max(last_step, 1.0)), y=new.y)
        if new == current:
            return
        self._limits[index] = new
        self._background.set_limits(index, new.x, new.y)

    def render_png(self) -> bytes:
        self._background.restore()
        for index, ax in enumerate(self._axes):
            for lines in self.lines.values():
                for artist in lines[index].artists:
                    ax.draw_artist(artist)
            if self._no_data[index].get_visible():
                ax.draw_artist(self._no_data[index])
        return encode_rgb_png(np.asarray(self._canvas.buffer_rgba()))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_bytes(self.render_png())
        return path


def _has_points(key: str, series: Mapping[str, RunSeries]) -> bool:
    return any(run.count(key) for run in series.values())


def _panel_with_data(panel: Panel, series: Mapping[str, RunSeries]) -> Panel:
    """``panel`` or the first of its fallbacks that some run has points of; ``panel`` itself when none has."""
    candidate: Panel | None = panel
    while candidate is not None:
        if _has_points(candidate.key, series):
            return candidate
        candidate = candidate.fallback
    return panel


def _chain_keys(panel: Panel) -> list[str]:
    return [panel.key, *(_chain_keys(panel.fallback) if panel.fallback is not None else [])]


def _band_bounds(run: RunSeries, panel: Panel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(steps_N, low_N, high_N)``: ``key`` -+ ``band_key`` at the steps that have both, within the values the
    run's data can take (a 0/1 reward's mean +- its std would reach below 0 and above 1)."""
    if panel.band_key is None:
        return np.empty(0), np.empty(0), np.empty(0)
    steps, centre = run.arrays(panel.key)
    band_steps, spread = run.arrays(panel.band_key)
    common, at_centre, at_spread = np.intersect1d(steps, band_steps, assume_unique=True, return_indices=True)
    low, high = centre[at_centre] - spread[at_spread], centre[at_centre] + spread[at_spread]
    floor, ceiling = _band_range(run, panel)
    return common, np.clip(low, floor, None), np.clip(high, None, ceiling)


def _band_range(run: RunSeries, panel: Panel) -> tuple[float | None, float | None]:
    """The lowest and highest value the run's data took (``band_range``'s keys), None where it logged neither."""
    if panel.band_range is None:
        return None, None
    lows, highs = (run.arrays(key)[1] for key in panel.band_range)
    return (float(lows.min()) if lows.size else None), (float(highs.max()) if highs.size else None)


def _band_polygon(run: RunSeries, panel: Panel) -> np.ndarray:
    """The band as one closed polygon ``(2N, 2)``: along the top edge, then back along the bottom one."""
    steps, low, high = decimate_band(*_band_bounds(run, panel), DECIMATE_BINS)
    if steps.size < 2:
        return EMPTY_BAND
    return np.concatenate((np.column_stack((steps, high)), np.column_stack((steps[::-1], low[::-1]))))


def _panel_values(run: RunSeries, panel: Panel) -> list[np.ndarray]:
    """Every value the panel draws of ``run``: its value axis holds them all."""
    _, low, high = _band_bounds(run, panel)
    thin = run.arrays(panel.thin_key)[1] if panel.thin_key else np.empty(0)
    return [run.arrays(panel.key)[1], thin, low, high]


def _no_data_text(ax: Axes) -> Text:
    return ax.text(
        0.5, 0.5, "no data yet", transform=ax.transAxes, ha="center", va="center", color="0.45", animated=True
    )


def _pin_label(axis: Axis, renderer: RendererAgg) -> None:
    """Fix the axis label where matplotlib places it now (its tick labels are one line of the same font whatever
    the limits), so a draw does not measure every tick label of every panel again to place it. An axis without a
    label text draws none: its label is pinned where it is, unmeasured (measuring is most of building a figure)."""
    if axis.label.get_text():
        axis.get_tightbbox(renderer)  # places the label
    axis.set_label_coords(*axis.label.get_position(), transform=axis.label.get_transform())
