"""``LivePlot``: a ``MetricsPlot`` in one ``ipywidgets.Image``, refreshed from a daemon thread.

Why an image widget: a widget's new value reaches the browser as a comm message, which the frontend applies
whenever it arrives, also after the cell that made the plot has finished; no ``clear_output`` loop, no flicker,
and the notebook does not grow a frame per update.

Why also one display handle: a saved or headless-executed notebook keeps a widget only as a reference, not a
picture. When displayed from IPython, the plot also leaves an empty output with a display id; when every run
has ended it puts the final PNG there once (``update_display``), and hides the widget's image so a live page
shows that one picture. ``wait()`` publishes it again from the calling cell, so nbclient, which only listens
during a cell, records it too (an update replaces, so this never adds a second picture).

The last panel is one click away from the others people check now and then (the loss, train accuracy, clip
fractions, the learning rate): a dropdown over the picture swaps it, redrawn from the rows already read.
"""

from __future__ import annotations

import concurrent.futures
import html
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import ipywidgets as widgets

from hermes_nb.notebook.widgets.refresher import Refresher
from hermes_nb.plotting.panels import DEFAULT_PANELS, PANEL_CHOICES
from hermes_nb.plotting.plot import MetricsPlot
from hermes_nb.plotting.sources import MetricsSource

# "At most about once a second": a training step takes longer than that, and each redraw costs kernel CPU.
DEFAULT_REFRESH_INTERVAL_S = 1.0
PLOT_CLASS = "hermes-nb-plot"

T = TypeVar("T")
# What the dropdown offers for the last panel: the default's KL (or entropy) and what people look at less often.
LAST_PANEL_OPTIONS = ("kl", "loss", "train_correct", "clip_fraction", "learning_rate", "entropy")

# Every live plot of the process redraws on this one long-lived thread, whichever refresher thread asks. matplotlib
# keeps the fonts it opens per drawing thread (and no public API releases them), so a thread per plot would leave
# each ended thread's fonts and their file descriptors open: a kernel that watches run after run would grow by a
# few descriptors a run. One drawing thread holds one set.
_DRAWING = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="hermes-nb-plot-drawing")


def on_drawing_thread(draw: Callable[..., T], *args: object) -> T:
    """``draw(*args)`` run on the plots' drawing thread; its result (or its exception) comes back here."""
    return _DRAWING.submit(draw, *args).result()


class LivePlot:
    def __init__(
        self,
        runs: Sequence[str | MetricsSource],
        smoothing: float = 0.0,
        interval_s: float = DEFAULT_REFRESH_INTERVAL_S,
        panels: Sequence[str] | None = None,
        colors: Mapping[str, str] | None = None,
    ) -> None:
        self.plot = MetricsPlot(runs, smoothing=smoothing, panels=panels, colors=colors)
        self.panels = list(panels or DEFAULT_PANELS)
        self.image = widgets.Image(format="png", layout=widgets.Layout(width="100%", max_width="800px"))
        self.image.add_class(PLOT_CLASS)
        self.caption = widgets.HTML()
        self.caption.add_class("hermes-nb-plot-caption")
        offered = dict.fromkeys((*LAST_PANEL_OPTIONS, self.panels[-1]))
        self.last_panel = widgets.Dropdown(
            options=[(PANEL_CHOICES[name].title, name) for name in offered],
            value=self.panels[-1],
            description="last panel",
            layout=widgets.Layout(width="auto"),
        )
        self.last_panel.observe(self._on_last_panel, names="value")
        self.widget = widgets.VBox([widgets.HBox([self.caption, self.last_panel]), self.image])
        self.widget.add_class("hermes-nb-live-plot")
        self.finished = False
        self._final_display_id: str | None = None
        self._refresher = Refresher("hermes-nb-live-plot", interval_s, self._tick)
        self.refresh()  # the first frame now, so the image is never blank

    @property
    def running(self) -> bool:
        return self._refresher.running

    def refresh(self, final: bool = False) -> bool:
        """Read new rows and redraw if they changed anything (what the thread does every interval); ``final``:
        every run had ended before this read, so the axes end at the data."""
        redrawn = on_drawing_thread(self.plot.refresh, final)
        if redrawn:
            self.image.value = self.plot.png
        self._update_caption()
        return redrawn

    def show_panels(self, panels: Sequence[str]) -> None:
        """Draw these four panels from now on (what the dropdown does for the last one)."""
        on_drawing_thread(self.plot.set_panels, panels)
        self.panels = list(panels)
        self.image.value = self.plot.png

    def _on_last_panel(self, change: dict[str, object]) -> None:
        self.show_panels([*self.panels[:-1], str(change["new"])])
        if self.finished:
            self._publish_final()

    def start(self) -> LivePlot:
        if not self.finished:
            self._refresher.start()
        return self

    def close(self) -> None:
        """Stop refreshing; the last frame stays on screen."""
        self._refresher.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every run has ended and the final frame is drawn (True), or ``timeout`` seconds (False)."""
        self.start()
        self._refresher.join(timeout)
        if self.finished:
            self._publish_final()
        return self.finished

    def save(self, path: str) -> str:
        return str(on_drawing_thread(self.plot.save, path))

    def _tick(self) -> bool:
        done = self.plot.all_finished()  # before reading: rows written before the end are then all on disk
        self.refresh(final=done)
        if not done:
            return True
        self.finished = True
        self._update_caption()
        self._publish_final()
        return False

    def _publish_final(self) -> None:
        if self._final_display_id is None:
            return  # never displayed from IPython (a dashboard part, a test): the widget is the picture
        from IPython.display import Image, update_display

        update_display(Image(data=self.plot.png, format="png"), display_id=self._final_display_id)
        self.image.layout.display = "none"

    def _update_caption(self) -> None:
        step = self.plot.latest_step()
        runs = ", ".join(html.escape(source.label) for source in self.plot.sources)
        state = "finished" if self.finished else "live"
        at = "no metrics yet" if step is None else f"step {step}"
        self.caption.value = f"<b>{runs}</b> · {at} · {state}"

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
        if self._final_display_id is None:
            self._final_display_id = f"hermes-nb-final-plot-{uuid.uuid4().hex}"
            display({"text/plain": ""}, raw=True, display_id=self._final_display_id)
        self.start()

    def __repr__(self) -> str:
        runs = [source.label for source in self.plot.sources]
        return f"LivePlot(runs={runs}, frames={self.plot.frames}, finished={self.finished})"
