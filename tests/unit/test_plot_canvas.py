"""The metrics figure's canvas: text laid out from cached font metrics draws the very pixels matplotlib's own
canvas draws, and reads each font's tables once per font and size, not once per text."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties

from hermes_nb.plotting import canvas
from hermes_nb.plotting.canvas import MetricsCachingCanvas


def busy_figure() -> Figure:
    """Tick labels, titles of two sizes, a two-line text, a rotated one and a serif one."""
    figure = Figure(figsize=(4, 3), dpi=80)
    axes = figure.subplots(1, 2)
    for index, ax in enumerate(axes):
        ax.plot([0, 1, 2], [index, 3, -1])
        ax.set_title(f"panel {index}", fontsize=10 + 2 * index)
        ax.set_xlabel("step")
    figure.text(0.5, 0.5, "two\nlines", fontsize=9)
    figure.text(0.2, 0.2, "rotated", rotation=30)
    figure.text(0.7, 0.1, "serif", family="serif")
    return figure


def pixels(figure: Figure, canvas_class: type[FigureCanvasAgg]) -> np.ndarray:
    drawing = canvas_class(figure)
    drawing.draw()
    return np.asarray(drawing.buffer_rgba()).copy()


def test_text_drawn_with_cached_metrics_is_the_same_picture_as_matplotlibs() -> None:
    assert np.array_equal(pixels(busy_figure(), MetricsCachingCanvas), pixels(busy_figure(), FigureCanvasAgg))


def test_a_font_changed_after_a_draw_is_measured_again() -> None:
    cached, stock = busy_figure(), busy_figure()
    pixels(cached, MetricsCachingCanvas)
    for figure in (cached, stock):
        figure.axes[0].title.set_fontsize(20)

    assert np.array_equal(pixels(cached, MetricsCachingCanvas), pixels(stock, FigureCanvasAgg))


def test_each_font_and_size_is_read_once_however_many_texts_use_it(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    original = canvas._line_metrics

    def counted(prop: FontProperties, dpi: float) -> canvas.LineMetrics:
        reads.append(prop.get_name())
        return original(prop, dpi)

    monkeypatch.setattr(canvas, "_line_metrics", counted)
    monkeypatch.setattr(canvas, "_CACHE", {})
    figure = busy_figure()

    pixels(figure, MetricsCachingCanvas)
    pixels(figure, MetricsCachingCanvas)  # a second draw reads nothing

    texts = len(figure.findobj(lambda artist: hasattr(artist, "get_text") and bool(artist.get_text())))

    # sizes: ticks, the two titles, the two-line text, labels and the rest at the default; one serif font
    assert texts > 15
    assert 2 <= len(reads) <= 6
