"""An Agg canvas whose renderer remembers each font's line metrics and each text's bitmap.

Text is most of what drawing the metrics figure's axes costs, and the same few strings ("0.2", "2000", a title)
are drawn again and again, by every panel and by every plot of a kernel. Two caches make them cheap:

- **Line metrics.** matplotlib's text layout needs a font's ascent, descent and line gap, the same three numbers
  for every text of one font and size. Unless the renderer gives them, it finds the font file and reads its
  tables for every text it lays out. Its layout asks the renderer first (``_get_font_height_metrics``, the hook
  its vector backends answer); this renderer answers once per font and size, from the same tables (OS/2
  typographic metrics, else hhea). Layout is unchanged by it.
- **Text bitmaps.** matplotlib (from 3.10) lays out and renders every glyph of a text on each draw, at the
  text's sub-pixel position. This renderer renders a string once per font into one bitmap, glyph by glyph as
  matplotlib does, for an origin on a whole pixel, and puts that bitmap at the whole pixel nearest the text's
  place (as matplotlib up to 3.9 did with all text): each text lands within half a pixel of where matplotlib
  draws it, with the same ink, and a cached label costs one blend. Rotated text, mathtext and texts with font
  features or a language are drawn by matplotlib itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg, get_hinting_flag
from matplotlib.font_manager import FontProperties, findfont, get_font
from matplotlib.ft2font import FT2Font

try:
    from matplotlib.ft2font import RenderMode
except ImportError:  # matplotlib before 3.10, which draws a text as one bitmap itself
    RenderMode = None  # type: ignore[misc, assignment]

LineMetrics = tuple[float, float, float] | tuple[None, None, None]  # ascent, descent, line gap (pixels)
# matplotlib 3.10 and later render text glyph by glyph, through these; before, draw_text is already one bitmap.
_GLYPHS_RENDERED_ONE_BY_ONE = RenderMode is not None and all(
    hasattr(FT2Font, name) for name in ("_layout", "_set_transform", "_render_glyph")
)
_IDENTITY = [[0x10000, 0], [0, 0x10000]]  # FreeType's 16.16 fixed-point unit matrix


class TextBitmap:
    """One string rendered in one font at a whole-pixel origin: the glyphs' coverage, and where the bitmap's left
    and bottom edges sit from that origin (pixels, y upwards)."""

    __slots__ = ("bottom", "coverage", "left")

    def __init__(self, coverage: np.ndarray, left: int, bottom: int) -> None:
        self.coverage = coverage
        self.left = left
        self.bottom = bottom


class TextCachingRenderer(RendererAgg):
    def _get_font_height_metrics(self, prop: FontProperties) -> LineMetrics:
        # matplotlib's own equality of font properties is equality of their hash. Plots draw from their own
        # threads: a lookup that loses a race to clear() only measures again.
        return _METRICS.get_or_make((hash(prop), self.dpi), lambda: _line_metrics(prop, self.dpi))

    def draw_text(
        self, gc: Any, x: float, y: float, s: str, prop: FontProperties, angle: float, ismath: Any = False,
        mtext: Any = None,
    ) -> None:  # fmt: skip
        plain = not (ismath or angle or (mtext is not None and (mtext.get_fontfeatures() or mtext.get_language())))
        if not (plain and _GLYPHS_RENDERED_ONE_BY_ONE):
            super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
            return
        antialiased = bool(gc.get_antialiased())
        key = (s, hash(prop), self.dpi, antialiased)
        bitmap: TextBitmap = _BITMAPS.get_or_make(key, lambda: self._render(s, prop, antialiased))
        # ``y`` counts down from the top; draw_text_image takes the bitmap's left edge and its bottom edge, downwards.
        origin_x, origin_y = round(x), round(self.height - y)
        self._renderer.draw_text_image(
            bitmap.coverage, origin_x + bitmap.left, int(self.height) - origin_y - bitmap.bottom, 0, gc
        )

    def _render(self, s: str, prop: FontProperties, antialiased: bool) -> TextBitmap:
        """``s`` as matplotlib renders it, glyph by glyph at the positions of its layout, for an origin at (0, 0)."""
        font = self._prepare_font(prop)
        size = prop.get_size_in_points()
        glyphs = []
        flags = get_hinting_flag()
        mode = RenderMode.NORMAL if antialiased else RenderMode.MONO
        for item in font._layout(s, flags=flags, features=None, language=None):
            glyph_font = item.ft_object  # the font itself, or a fallback font for a glyph it lacks
            glyph_font.set_size(size, self.dpi)
            glyph_font._set_transform(_IDENTITY, [round(0x40 * item.x), round(0x40 * item.y)])
            bitmap = glyph_font._render_glyph(item.glyph_index, flags, mode)
            coverage = np.array(bitmap.buffer)  # a copy: the buffer is the font's, reused by its next glyph
            glyphs.append((coverage if antialiased else coverage * 0xFF, bitmap.left, bitmap.top))
        return _composed(glyphs)


def _composed(glyphs: list[tuple[np.ndarray, int, int]]) -> TextBitmap:
    """One bitmap holding every glyph's coverage (``left``, ``top``: its corner from the origin, y upwards)."""
    drawn = [(coverage, left, top) for coverage, left, top in glyphs if coverage.size]
    if not drawn:
        return TextBitmap(np.zeros((0, 0), dtype=np.uint8), 0, 0)
    left = min(glyph_left for _, glyph_left, _ in drawn)
    right = max(glyph_left + coverage.shape[1] for coverage, glyph_left, _ in drawn)
    top = max(glyph_top for _, _, glyph_top in drawn)
    bottom = min(glyph_top - coverage.shape[0] for coverage, _, glyph_top in drawn)
    image = np.zeros((top - bottom, right - left), dtype=np.uint8)
    for coverage, glyph_left, glyph_top in drawn:
        rows = slice(top - glyph_top, top - glyph_top + coverage.shape[0])
        columns = slice(glyph_left - left, glyph_left - left + coverage.shape[1])
        np.maximum(image[rows, columns], coverage, out=image[rows, columns])  # glyphs that touch share pixels
    return TextBitmap(image, left, bottom)


class TextCachingCanvas(FigureCanvasAgg):
    """``FigureCanvasAgg`` drawing with a ``TextCachingRenderer`` (made again when the size or dpi change)."""

    def get_renderer(self) -> RendererAgg:
        width, height = self.get_width_height(physical=True)
        key = (width, height, self.figure.dpi)
        if self._lastKey != key:  # the check FigureCanvasAgg makes, so its renderer is never used
            self.renderer = TextCachingRenderer(width, height, self.figure.dpi)
            self._lastKey = key
        return self.renderer


class _BoundedCache:
    """A dict that forgets everything when full: a figure uses a handful of fonts and sizes, and its texts are
    short labels, so the bound only keeps a long-lived kernel's cache small."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.values: dict[Any, Any] = {}

    def get_or_make(self, key: Any, make: Callable[[], Any]) -> Any:
        value = self.values.get(key)
        if value is None:
            if len(self.values) >= self.size:
                self.values.clear()
            value = self.values[key] = make()
        return value


_METRICS = _BoundedCache(64)
_BITMAPS = _BoundedCache(2048)  # full: a few hundred KiB of label bitmaps


def _line_metrics(prop: FontProperties, dpi: float) -> LineMetrics:
    """Ascent, descent and line gap in pixels: a font's typographic metrics (OS/2, else hhea, the order matplotlib
    reads them in), scaled to its size at ``dpi``; none where the font has neither (matplotlib then measures)."""
    font = get_font(findfont(prop))
    head = font.get_sfnt_table("head")
    if head is None:
        return None, None, None
    scale = prop.get_size_in_points() * dpi / 72 / head["unitsPerEm"]
    os2 = font.get_sfnt_table("OS/2")
    if os2 is not None:
        return os2["sTypoAscender"] * scale, -os2["sTypoDescender"] * scale, os2["sTypoLineGap"] * scale
    hhea = font.get_sfnt_table("hhea")
    if hhea is not None:
        return hhea["ascent"] * scale, -hhea["descent"] * scale, hhea["lineGap"] * scale
    return None, None, None
