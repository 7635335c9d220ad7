"""A live plot whose thread has ended gives back the fonts matplotlib opened for that thread."""

from __future__ import annotations

import gc
import threading

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from hermes_nb.notebook.live_plot import release_thread_fonts
from hermes_nb.system.footprint import footprint, leaks


def draw_text_in_a_thread() -> None:
    def draw() -> None:
        figure = Figure()
        FigureCanvasAgg(figure)
        figure.text(0.5, 0.5, "step 1")
        figure.canvas.draw()

    thread = threading.Thread(target=draw)
    thread.start()
    thread.join()


def font_files(targets: list[str]) -> list[str]:
    return [target for target in targets if target.endswith((".ttf", ".otf"))]


def test_fonts_of_ended_drawing_threads_stay_open_until_released() -> None:
    before = footprint()
    for _ in range(3):
        draw_text_in_a_thread()
    held = font_files(leaks(before, footprint()).new_fd_targets)

    release_thread_fonts()
    gc.collect()

    assert len(held) >= 3  # one per ended thread, at least: matplotlib keys its font cache by thread
    assert font_files(leaks(before, footprint()).new_fd_targets) == []
