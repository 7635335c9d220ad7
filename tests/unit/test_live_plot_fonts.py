"""Live plots draw on one long-lived thread, so the fonts matplotlib opens per drawing thread do not pile up as
refresher threads come and go (one per plot)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from hermes_nb.notebook.widgets.live_plot import on_drawing_thread
from hermes_nb.system.footprint import footprint, leaks


def draw_text() -> None:
    figure = Figure()
    FigureCanvasAgg(figure)
    figure.text(0.5, 0.5, "step 1")
    figure.canvas.draw()


def in_threads_alive_together(count: int, work: Callable[[], None]) -> None:
    """Threads alive at once, so each has its own ident (an ended thread's ident is reused)."""
    all_done = threading.Barrier(count)

    def run() -> None:
        work()
        all_done.wait(timeout=60)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def font_files(targets: list[str]) -> list[str]:
    return [target for target in targets if target.endswith((".ttf", ".otf"))]


def test_drawing_in_threads_of_their_own_leaves_each_threads_fonts_open() -> None:
    # The behaviour the drawing thread is there for: matplotlib keys its open fonts by the drawing thread.
    before = footprint()
    in_threads_alive_together(3, draw_text)
    assert len(font_files(leaks(before, footprint()).new_fd_targets)) >= 3


def test_plots_refreshed_from_many_threads_open_the_fonts_of_one_drawing_thread() -> None:
    on_drawing_thread(draw_text)  # the drawing thread's own fonts, opened once
    before = footprint()
    in_threads_alive_together(3, lambda: on_drawing_thread(draw_text))
    assert font_files(leaks(before, footprint()).new_fd_targets) == []
