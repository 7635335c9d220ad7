"""The metrics figure's canvas: text drawn from cached bitmaps lands within a pixel of where matplotlib's own canvas
puts it, with the same ink, and everything else is the very same picture; each font's tables are read once per
font and size, and each string is rendered once per font, however many texts and draws use them."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from hermes_nb.plotting import canvas
from hermes_nb.plotting.canvas import TextCachingCanvas

# How far a text may move: matplotlib places it at a sub-pixel position, the cache on the nearest whole pixel,
# so half a pixel each way (the centre of its ink is measured, hence a little more).
MAX_SHIFT_PX = 0.55
MAX_INK_CHANGE = 0.01


@pytest.fixture(autouse=True)
def empty_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(canvas, "_METRICS", canvas._BoundedCache(64))
    monkeypatch.setattr(canvas, "_BITMAPS", canvas._BoundedCache(2048))


def busy_figure() -> Figure:
    """Tick labels, titles of two sizes, a two-line text, a rotated one, a serif one and descenders."""
    figure = Figure(figsize=(4, 3), dpi=80)
    axes = figure.subplots(1, 2)
    for index, ax in enumerate(axes):
        ax.plot([0, 1, 2], [index, 3, -1])
        ax.set_title(f"panel {index}", fontsize=10 + 2 * index)
        ax.set_xlabel("step")
    figure.text(0.4, 0.5, "two\nlines", fontsize=9)
    figure.text(0.2, 0.2, "rotated", rotation=30)
    figure.text(0.65, 0.15, "serif", family="serif")
    figure.text(0.05, 0.9, "gjpq Ég", fontsize=11)
    return figure


def pixels(figure: Figure, canvas_class: type[FigureCanvasAgg]) -> np.ndarray:
    drawing = canvas_class(figure)
    drawing.draw()
    return np.asarray(drawing.buffer_rgba())[..., :3].astype(float)


def text_boxes(figure: Figure) -> list[tuple[Text, Bbox]]:
    """Every visible text with its box in the picture (rows from the top), a little padded."""
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    height = figure.bbox.height
    texts = [artist for artist in figure.findobj(Text) if isinstance(artist, Text) and artist.get_visible()]
    boxes = []
    for text in texts:
        if text.get_text():
            box = text.get_window_extent(renderer).padded(3)
            boxes.append((text, Bbox.from_extents(box.x0, height - box.y1, box.x1, height - box.y0)))
    return boxes


def inside(figure: Figure, box: Bbox) -> bool:
    return box.x0 >= 0 and box.y0 >= 0 and box.x1 <= figure.bbox.width and box.y1 <= figure.bbox.height


def ink(picture: np.ndarray, box: Bbox) -> tuple[float, np.ndarray]:
    """How much darker than white the box is, and the centre of that darkness (x, y in pixels)."""
    rows, columns = slice(int(box.y0), int(box.y1)), slice(int(box.x0), int(box.x1))
    darkness = 255.0 - picture[rows, columns].mean(axis=2)
    ys, xs = np.mgrid[rows, columns]
    total = float(darkness.sum())
    if total == 0:  # a tick label of a tick outside the limits: matplotlib draws nothing there
        return total, np.zeros(2)
    return total, np.array([(darkness * xs).sum(), (darkness * ys).sum()]) / total


def test_each_text_lands_within_a_pixel_of_matplotlibs_with_the_same_ink_and_the_rest_is_the_same_picture() -> None:
    stock_figure = busy_figure()
    stock, cached = pixels(stock_figure, FigureCanvasAgg), pixels(busy_figure(), TextCachingCanvas)
    texts = text_boxes(stock_figure)
    whole = [(text, box) for text, box in texts if inside(stock_figure, box)]  # not cut by the figure's edge
    assert len(whole) > 15

    for text, box in whole:
        (stock_ink, stock_centre), (cached_ink, cached_centre) = ink(stock, box), ink(cached, box)
        if text.get_rotation() or stock_ink == 0:
            assert cached_ink == stock_ink and np.array_equal(cached_centre, stock_centre)  # drawn by matplotlib
            continue
        assert abs(cached_ink / stock_ink - 1) <= MAX_INK_CHANGE, text.get_text()
        assert np.abs(cached_centre - stock_centre).max() <= MAX_SHIFT_PX, text.get_text()
    outside_text = np.ones(stock.shape[:2], dtype=bool)
    for _, box in texts:
        outside_text[max(0, int(box.y0)) : max(0, int(box.y1)), max(0, int(box.x0)) : max(0, int(box.x1))] = False
    assert np.array_equal(stock[outside_text], cached[outside_text])
    assert not np.array_equal(stock, cached)  # the comparison would see a text moved by a pixel


def test_a_text_drawn_again_in_another_size_is_rendered_in_that_size() -> None:
    resized = busy_figure()
    pixels(resized, TextCachingCanvas)
    resized.axes[0].title.set_fontsize(20)
    fresh = busy_figure()
    fresh.axes[0].title.set_fontsize(20)

    assert np.array_equal(pixels(resized, TextCachingCanvas), pixels(fresh, TextCachingCanvas))


def test_each_string_is_rendered_once_per_font_however_often_it_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered: list[tuple[str, float]] = []
    original = canvas.TextCachingRenderer._render

    def counted(self: canvas.TextCachingRenderer, s: str, prop: FontProperties, antialiased: bool) -> canvas.TextBitmap:
        rendered.append((s, prop.get_size_in_points()))
        return original(self, s, prop, antialiased)

    monkeypatch.setattr(canvas.TextCachingRenderer, "_render", counted)
    figure = busy_figure()

    pixels(figure, TextCachingCanvas)
    pixels(figure, TextCachingCanvas)  # a second draw renders nothing

    assert len(rendered) == len(set(rendered))
    # "step" is drawn twice, and each panel's tick labels repeat the other's, yet each is rendered once
    assert ("step", 10.0) in rendered and len(rendered) < len(text_boxes(figure))


def test_each_font_and_size_is_read_once_however_many_texts_use_it(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    original = canvas._line_metrics

    def counted(prop: FontProperties, dpi: float) -> canvas.LineMetrics:
        reads.append(prop.get_name())
        return original(prop, dpi)

    monkeypatch.setattr(canvas, "_line_metrics", counted)
    figure = busy_figure()

    pixels(figure, TextCachingCanvas)
    pixels(figure, TextCachingCanvas)  # a second draw reads nothing

    texts = len(figure.findobj(lambda artist: hasattr(artist, "get_text") and bool(artist.get_text())))

    # sizes: ticks, the two titles, the two-line text, the descenders, labels and the rest at the default; serif
    assert texts > 15
    assert 2 <= len(reads) <= 7
