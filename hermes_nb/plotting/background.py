"""The metrics figure's cached background: everything but the lines, drawn again only where axis limits grew.

Text is most of what a draw costs, so a redraw draws only what the grown limits change:

- what never changes (the figure, the panels, their titles) is a fixed layer, drawn once when the figure is built;
- each panel owns a cell of the figure (2 x 2, together the whole figure). Its value axis (ticks, grid lines,
  tick labels) is drawn over the fixed layer and the cell kept, then its step axis and frame go on top. A step
  axis that grows (the panels share it, so all four at once) redraws only the step axes, over the kept cells; a
  value axis that grows redraws only its own cell.

A tick label wider than its cell would be cut by the next redraw of the cell it reaches into, so while one does,
every redraw draws the whole background. Which labels reach out is measured by the first frame after a whole draw
that has nothing to draw (a blit, the cheap kind), not by the whole draw itself (the dearest kind); a limit that
grows before that is drawn whole again. The value axis goes under the step axis (matplotlib draws them the
other way round): where two faint grid lines cross, the blend differs by rounding only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.transforms import Bbox, BboxBase

# Where the cells of the left and right panels meet, as a share of the gap between them from the left panels'
# frame: the left panels carry at most half a tick label on that side (20 px holds half of "100000"), the right
# panels a column of tick labels.
COLUMN_SPLIT = 0.25
# Room around a panel's frame for its tick marks (3.5 points = 4 px long at 80 dpi), in pixels.
TICK_ROOM_PX = 6.0


class AxesBackground:
    """Panels get their limits through ``set_limits``; ``restore()`` puts the background on the canvas."""

    def __init__(self, canvas: FigureCanvasAgg, axes: Sequence[Axes]) -> None:
        """``axes``: the 2 x 2 panels, row by row, already laid out and titled."""
        self._canvas = canvas
        self._axes = list(axes)
        self._cells = _cells(self._axes, canvas.figure.bbox)
        self._fixed, self._fixed_cells = self._draw_fixed()
        self._value_axis_cells: list[object | None] = [None] * len(self._axes)  # fixed layer + value axis
        self._whole: object | None = None  # the background last drawn
        self._to_draw: set[int] = set()  # panels whose limits changed since
        self._value_axis_to_draw: set[int] = set()  # ... and of those, the ones whose value axis changed
        # Panels whose axes, as drawn, reach out of their cell; None: not measured since the last whole draw.
        self._crossing: set[int] | None = None
        self.draws = 0

    def set_limits(self, index: int, x: tuple[float, float], y: tuple[float, float]) -> None:
        """Give a panel new limits: its axes are drawn again by the next ``restore``."""
        ax = self._axes[index]
        if ax.get_ylim() != y:
            self._value_axis_to_draw.add(index)
        ax.set_xlim(*x)
        ax.set_ylim(*y)
        self._to_draw.add(index)

    def redraw_fixed(self) -> None:
        """Something of the fixed layer changed (a panel's title): draw it, and then every panel, again."""
        self._fixed, self._fixed_cells = self._draw_fixed()
        self._value_axis_cells = [None] * len(self._axes)
        self._whole = None

    def restore(self) -> None:
        """Put the background on the canvas, drawing again what changed since the last time."""
        if self._whole is not None and not self._to_draw:
            self._canvas.restore_region(self._whole)
            if self._crossing is None:
                self._crossing = {index for index in range(len(self._axes)) if not self._fits_cell(index, both=True)}
            return
        if self._whole is None or self._crossing is None or self._crossing:  # ... or had: that must be wiped too
            self._draw_every_panel()
            self._crossing = None
        else:
            self._draw_changed_panels()
        self._whole = self._canvas.copy_from_bbox(self._canvas.figure.bbox)
        self._to_draw.clear()
        self._value_axis_to_draw.clear()
        self.draws += 1

    def _draw_changed_panels(self) -> None:
        """Only the panels whose limits changed, unless one of them now reaches out of its cell."""
        if any(not self._fits_cell(index, both=False) for index in sorted(self._to_draw)):
            self._draw_every_panel()
            self._crossing = None
            return
        self._canvas.restore_region(self._whole)
        for index in sorted(self._to_draw):
            self._draw_panel(index)

    def _draw_fixed(self) -> tuple[object, list[object]]:
        """The figure without the lines and the panels' axes, whole and per cell."""
        with _hidden([artist for index in range(len(self._axes)) for artist in self._axes_of(index)]):
            self._canvas.draw()  # not the animated lines either
        return (
            self._canvas.copy_from_bbox(self._canvas.figure.bbox),
            [self._canvas.copy_from_bbox(cell) for cell in self._cells],
        )

    def _draw_panel(self, index: int) -> None:
        """One panel's axes, in its cell: the value axis (kept, unless it grew), then the step axis and frame."""
        kept = self._value_axis_cells[index]
        if index in self._value_axis_to_draw or kept is None:
            self._canvas.restore_region(self._fixed_cells[index])
            self._canvas.figure.draw_artist(self._axes[index].yaxis)
            kept = self._value_axis_cells[index] = self._canvas.copy_from_bbox(self._cells[index])
        self._canvas.restore_region(kept)
        for artist in self._axes_of(index)[1:]:
            self._canvas.figure.draw_artist(artist)

    def _draw_every_panel(self) -> None:
        """Every panel's axes over the whole fixed layer, in the same order and keeping the same cells as
        _draw_panel (while a tick label reaches out of its cell no panel is drawn alone, so no cell holding a
        piece of it is used)."""
        self._canvas.restore_region(self._fixed)
        for ax in self._axes:
            self._canvas.figure.draw_artist(ax.yaxis)
        self._value_axis_cells = [self._canvas.copy_from_bbox(cell) for cell in self._cells]
        for index in range(len(self._axes)):
            for artist in self._axes_of(index)[1:]:
                self._canvas.figure.draw_artist(artist)

    def _axes_of(self, index: int) -> list[Artist]:
        """What grown limits change in a panel, in drawing order: the value axis, the step axis, the frame over
        the grid lines at the edges, the legend (its "best" place avoids the lines)."""
        ax = self._axes[index]
        legend = ax.get_legend()
        return [ax.yaxis, ax.xaxis, *ax.spines.values(), *([legend] if legend is not None else [])]

    def _fits_cell(self, index: int, both: bool) -> bool:
        """Whether the panel's axes, as they will be drawn, stay in its cell: both, or those drawn again (a value
        axis that did not change was checked before)."""
        renderer = self._canvas.get_renderer()
        ax = self._axes[index]
        axes = [ax.xaxis, ax.yaxis] if both or index in self._value_axis_to_draw else [ax.xaxis]
        boxes = [ax.bbox.padded(TICK_ROOM_PX), *(axis.get_tightbbox(renderer) for axis in axes)]
        # Nothing is drawn past the figure's edge: a tick label cut there reaches into no cell.
        drawn = [Bbox.intersection(box, self._canvas.figure.bbox) for box in boxes if box is not None]
        cell = self._cells[index]
        return all(
            box is None or (cell.x0 <= box.x0 and box.x1 <= cell.x1 and cell.y0 <= box.y0 and box.y1 <= cell.y1)
            for box in drawn
        )


def _cells(axes: Sequence[Axes], figure_box: BboxBase) -> list[Bbox]:
    """One rectangle of the figure per panel (row by row, in whole pixels), together the whole figure."""
    top_left, _, bottom_left, top_right = axes
    split_x = round(top_left.bbox.x1 + COLUMN_SPLIT * (top_right.bbox.x0 - top_left.bbox.x1))
    split_y = round((top_left.bbox.y0 + bottom_left.bbox.y1) / 2)
    columns = [(0.0, split_x), (split_x, figure_box.width)]
    rows = [(split_y, figure_box.height), (0.0, split_y)]  # display y grows upwards: the top row first
    return [Bbox.from_extents(x0, y0, x1, y1) for y0, y1 in rows for x0, x1 in columns]


@contextmanager
def _hidden(artists: Sequence[Artist]) -> Iterator[None]:
    shown = [artist.get_visible() for artist in artists]
    for artist in artists:
        artist.set_visible(False)
    try:
        yield
    finally:
        for artist, visible in zip(artists, shown, strict=True):
            artist.set_visible(visible)
