"""The frame encoder: a PNG that Pillow (and so any browser) decodes to exactly the frame's pixels."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from hermes_nb.plotting import MetricsFigure
from hermes_nb.plotting.png import PNG_SIGNATURE, encode_rgb_png


def decoded(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as image:
        assert image.mode == "RGB"
        return np.asarray(image)


def test_any_rgba_image_decodes_to_its_rgb_pixels() -> None:
    rgba = np.random.default_rng(0).integers(0, 256, size=(37, 53, 4), dtype=np.uint8)

    png = encode_rgb_png(rgba)

    assert png.startswith(PNG_SIGNATURE)
    assert np.array_equal(decoded(png), rgba[..., :3])


def test_a_rendered_frame_is_the_canvas_and_stays_small() -> None:
    figure = MetricsFigure(["run"])

    png = figure.render_png()

    canvas = np.asarray(figure.figure.canvas.buffer_rgba())  # type: ignore[attr-defined]
    assert np.array_equal(decoded(png), canvas[..., :3])
    assert len(png) < 100_000  # a flat-coloured figure: sent to the notebook every frame
