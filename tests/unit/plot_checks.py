"""Checks on drawn plots that several test files share."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from hermes_nb.plotting import MetricsFigure


def assert_same_as_a_full_draw(figure: MetricsFigure, png: bytes) -> None:
    """``png`` (the blitted picture) shows what matplotlib's own full draw of ``figure`` shows."""
    canvas = figure.figure.canvas
    canvas.draw()  # matplotlib's own full draw: everything but the animated artists, then those
    for ax in figure.figure.axes:
        for artist in ax.get_children():
            if artist.get_animated() and artist.get_visible():
                ax.draw_artist(artist)
    full = np.asarray(canvas.buffer_rgba())[..., :3].astype(int)  # type: ignore[attr-defined]
    ours = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    # Only the blend where two faint grid lines cross may differ (by rounding): matplotlib draws the step axis
    # first, the figure the value axis.
    worst = int(np.abs(ours - full).max())
    assert worst <= 2
