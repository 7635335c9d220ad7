"""A live plot whose thread has ended gives back the fonts matplotlib opened for that thread."""

from __future__ import annotations

import gc
import threading

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from hermes_nb.notebook.live_plot import release_thread_fonts
from hermes_nb.system.footprint import footprint, leaks


def draw_text_in_threads(count: int) -> None:
    """Threads that are alive together, so each has its own ident (an ended thread's ident is reused)."""
    all_drawn = threading.Barrier(count)

    def draw() -> None:
        figure = Figure()
        FigureCanvasAgg(figure)
        figure.text(0.5, 0.5, "step 1")
        figure.canvas.draw()
        all_drawn.wait(timeout=60)

    threads = [threading.Thread(target=draw) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def font_files(targets: list[str]) -> list[str]:
    return [target for target in targets if target.endswith((".ttf", ".otf"))]


def test_fonts_of_ended_drawing_threads_stay_open_until_released() -> None:
    before = footprint()
    draw_text_in_threads(3)
    held = font_files(leaks(before, footprint()).new_fd_targets)

    release_thread_fonts()
    gc.collect()

    assert len(held) >= 3  # one per ended thread, at least: matplotlib keys its font cache by thread
    assert font_files(leaks(before, footprint()).new_fd_targets) == []
