"""An Agg canvas whose renderer remembers each font's line metrics.

matplotlib's text layout needs a font's ascent, descent and line gap, the same three numbers for every tick label
of one font and size. Unless the renderer gives them, it finds the font file and reads its tables for every text
it lays out, about a fifth of the text cost of a full draw of the metrics figure. Its layout asks the renderer
first (``_get_font_height_metrics``, the hook its vector backends answer); this renderer answers once per font and
size, from the same tables (OS/2 typographic metrics, else hhea). A matplotlib that does not ask lays text out
as before.
"""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.font_manager import FontProperties, findfont, get_font

LineMetrics = tuple[float, float, float] | tuple[None, None, None]  # ascent, descent, line gap (pixels)


class MetricsCachingRenderer(RendererAgg):
    def _get_font_height_metrics(self, prop: FontProperties) -> LineMetrics:
        # matplotlib's own equality of font properties is equality of their hash. Plots draw from their own
        # threads: a lookup that loses a race to clear() only measures again.
        key = (hash(prop), self.dpi)
        metrics = _CACHE.get(key)
        if metrics is None:
            if len(_CACHE) >= _CACHE_SIZE:
                _CACHE.clear()
            metrics = _CACHE[key] = _line_metrics(prop, self.dpi)
        return metrics


class MetricsCachingCanvas(FigureCanvasAgg):
    """``FigureCanvasAgg`` drawing with a ``MetricsCachingRenderer`` (made again when the size or dpi change)."""

    def get_renderer(self) -> RendererAgg:
        width, height = self.get_width_height(physical=True)
        key = (width, height, self.figure.dpi)
        if self._lastKey != key:  # the check FigureCanvasAgg makes, so its renderer is never used
            self.renderer = MetricsCachingRenderer(width, height, self.figure.dpi)
            self._lastKey = key
        return self.renderer


# A figure uses a handful of fonts and sizes; the bound only keeps a long-lived kernel's cache small.
_CACHE_SIZE = 64
_CACHE: dict[tuple[int, float], LineMetrics] = {}


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
