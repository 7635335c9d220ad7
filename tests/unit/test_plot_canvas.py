"""The metrics figure on matplotlib's own Agg canvas: a steady frame is a blit that draws and measures no text, a
frame whose limits grew draws again the labels of the axes that moved (and no other text), and every frame is
the picture a plain full ``canvas.draw()`` makes; plotting/ uses no private matplotlib name to get there."""

from __future__ import annotations

import ast
import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import patch

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from PIL import Image

import hermes_nb.plotting
from hermes_nb.plotting import DEFAULT_PANELS, PLOTTED_KEYS, MetricsFigure
from hermes_nb.plotting.series import RunSeries
from hermes_nb.protocol.metrics import TRAIN_KL, MetricsRow

# matplotlib draws the step axis before the value axis, the figure the other way round: where two faint grid
# lines cross, the blend differs by rounding only.
MAX_PIXEL_DIFFERENCE = 2
PLOTTING_DIR = Path(hermes_nb.plotting.__file__).parent


def rows(steps: range) -> list[MetricsRow]:
    return [MetricsRow(step=s, time=float(s), values={key: 0.5 + (s % 7) / 20 for key in PLOTTED_KEYS}) for s in steps]


def drawn_figure(steps: range) -> tuple[MetricsFigure, RunSeries]:
    """A figure that has drawn its first frame and the blit after it (where what the first frame drew is measured)."""
    series = RunSeries(PLOTTED_KEYS)
    series.add_rows(rows(steps))
    figure = MetricsFigure(["run"])
    figure.update({"run": series})
    figure.render_png()
    figure.render_png()
    return figure, series


def frame(figure: MetricsFigure, series: RunSeries, steps: range) -> bytes:
    series.add_rows(rows(steps))
    figure.update({"run": series})
    return figure.render_png()


@contextmanager
def texts_drawn() -> Iterator[tuple[list[str], list[str]]]:
    """The strings drawn, and those measured, by any Agg renderer while the block runs."""
    drawn: list[str] = []
    measured: list[str] = []
    draw_text, get_text_width_height_descent = RendererAgg.draw_text, RendererAgg.get_text_width_height_descent

    def draw(renderer: RendererAgg, gc: object, x: float, y: float, s: str, *args: object, **kwargs: object) -> None:
        drawn.append(s)
        draw_text(renderer, gc, x, y, s, *args, **kwargs)

    def measure(renderer: RendererAgg, s: str, *args: object, **kwargs: object) -> object:
        measured.append(s)
        return get_text_width_height_descent(renderer, s, *args, **kwargs)

    with (
        patch.object(RendererAgg, "draw_text", autospec=True, side_effect=draw),
        patch.object(RendererAgg, "get_text_width_height_descent", autospec=True, side_effect=measure),
    ):
        yield drawn, measured


def full_draw(figure: MetricsFigure) -> np.ndarray:
    """The picture matplotlib itself makes of the figure: a whole draw, then the animated artists over it (bands,
    lines, a panel's "no data" note), in the order the axes hold them."""
    canvas = figure.figure.canvas
    canvas.draw()
    for ax in figure.figure.axes:
        for artist in ax.get_children():
            if artist.get_animated() and artist.get_visible():
                ax.draw_artist(artist)
    return np.asarray(canvas.buffer_rgba())[..., :3].astype(int)  # type: ignore[attr-defined]


def pixels(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image.convert("RGB")).astype(int)


def test_the_figure_draws_on_matplotlibs_own_agg_canvas() -> None:
    figure, _ = drawn_figure(range(50))

    assert type(figure.figure.canvas) is FigureCanvasAgg


def test_a_steady_frame_draws_and_measures_no_text() -> None:
    figure, series = drawn_figure(range(290))  # a step axis to 300
    drawn_before = figure.background_draws

    with texts_drawn() as (drawn, measured):
        for first in range(290, 296, 2):  # new points inside the limits: only the lines move
            frame(figure, series, range(first, first + 2))

    assert figure.background_draws == drawn_before
    assert (drawn, measured) == ([], [])


def test_a_grown_step_axis_draws_its_new_tick_labels_and_no_other_text() -> None:
    figure, series = drawn_figure(range(300))
    end = figure.figure.axes[0].get_xlim()[1]

    with texts_drawn() as (drawn, _):
        frame(figure, series, range(int(end) + 1, int(end) + 2))

    bottom_row = figure.figure.axes[2:]  # the panels that label the shared step axis
    step_labels = {label.get_text() for ax in bottom_row for label in ax.get_xticklabels()}
    assert figure.figure.axes[0].get_xlim()[1] == 2 * end
    assert f"{2 * end:.0f}" in drawn  # the new end of the step axis
    assert set(drawn) <= step_labels | {"step"}  # no title, no value label: those did not move
    assert drawn.count("step") == len(bottom_row)


def shown_value_labels(ax: Axes) -> list[str]:
    """The value axis's tick labels inside its limits (matplotlib keeps, and does not draw, those outside)."""
    low, high = ax.get_ylim()
    return [
        label.get_text() for loc, label in zip(ax.get_yticks(), ax.get_yticklabels(), strict=True) if low <= loc <= high
    ]


def test_a_grown_value_axis_draws_its_own_tick_labels_again() -> None:
    figure, series = drawn_figure(range(300))
    kl = figure.figure.axes[DEFAULT_PANELS.index("kl")]
    before = shown_value_labels(kl)

    series.add_rows([MetricsRow(step=300, time=300.0, values={TRAIN_KL: 50.0})])
    with texts_drawn() as (drawn, _):
        figure.update({"run": series})
        figure.render_png()

    after = shown_value_labels(kl)
    assert after != before
    assert set(after) - set(before) <= set(drawn)


def test_every_kind_of_frame_is_the_picture_of_a_plain_full_draw() -> None:
    figure, series = drawn_figure(range(290))  # a step axis to 300
    kinds = {"steady": range(290, 292), "steady again": range(292, 293), "step axis grew": range(301, 303)}
    for kind, steps in {**kinds, "steady after it": range(303, 304)}.items():
        drawn = figure.background_draws
        png = frame(figure, series, steps)

        assert figure.background_draws == drawn + (kind == "step axis grew"), kind
        assert int(np.abs(pixels(png) - full_draw(figure)).max()) <= MAX_PIXEL_DIFFERENCE, kind


def private_names(source: str) -> list[str]:
    """Private names a module reaches into: ``obj._name`` on anything but ``self``, imports of ``_`` names, and
    subclasses of matplotlib classes (whose ``self`` reaches the base class's private state)."""
    tree = ast.parse(source)
    from_matplotlib = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("matplotlib")
        for alias in node.names
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(node.attr)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("matplotlib"):
            names = [node.module or "", *(alias.name for alias in node.names)]
            found += [name for name in names if any(part.startswith("_") for part in name.split("."))]
        elif isinstance(node, ast.ClassDef):
            found += [
                f"{node.name}({base.id})"
                for base in node.bases
                if isinstance(base, ast.Name) and base.id in from_matplotlib
            ]
    return found


def test_plotting_uses_no_private_matplotlib_name() -> None:
    modules = sorted(PLOTTING_DIR.glob("*.py"))
    assert len(modules) > 5

    found = {path.name: private_names(path.read_text(encoding="utf-8")) for path in modules}

    assert {name: names for name, names in found.items() if names} == {}
