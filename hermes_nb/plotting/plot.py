"""``MetricsPlot``: sources + accumulated series + figure. No widgets and no threads; those are the notebook's.

``refresh`` reads only new rows and redraws only when they changed something, so calling it every second on an
idle run costs two ``stat``-sized reads and no drawing.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from hermes_nb.errors import HermesNBError
from hermes_nb.plotting.figure import MetricsFigure
from hermes_nb.plotting.panels import PLOTTED_KEYS
from hermes_nb.plotting.series import RunSeries
from hermes_nb.plotting.sources import MetricsSource, source_for


class MetricsPlot:
    def __init__(
        self,
        runs: Sequence[str | MetricsSource],
        smoothing: float = 0.0,
        panels: Sequence[str] | None = None,
        colors: Mapping[str, str] | None = None,
    ) -> None:
        """``runs``: run ids, ``entity/project/run_id`` W&B paths, or ready sources; overlaid, one colour each
        (``colors``: label -> a matplotlib colour, for a caller that keeps a run's colour across plots).
        ``panels``: four names of ``PANEL_CHOICES`` (default: reward, eval, length, kl)."""
        if not runs:
            raise HermesNBError("a metrics plot needs at least one run id (see %rl_runs) or W&B run path")
        if not 0.0 <= smoothing < 1.0:
            raise HermesNBError(f"smoothing must be at least 0 and below 1 (0 = raw), got {smoothing}")
        self.sources = [source_for(run) if isinstance(run, str) else run for run in runs]
        labels = [source.label for source in self.sources]
        if len(set(labels)) != len(labels):
            raise HermesNBError(f"each run can be plotted once; got {labels}")
        self.series = {label: RunSeries(PLOTTED_KEYS) for label in labels}
        self.smoothing = smoothing
        self.figure = MetricsFigure(labels, smoothing, panels, colors)
        # The refresh thread and the kernel (refresh, save) may both read and draw; figures are not thread safe.
        self._lock = threading.RLock()
        self.png = b""
        self.frames = 0
        self.final = False  # every run had ended before the last read: the step axis ends at the last step
        self.marked: dict[str, list[int]] = {}  # the steps of each run's health findings, as marked

    def all_finished(self) -> bool:
        return all(source.finished() for source in self.sources)

    def refresh(self, final: bool = False) -> bool:
        """Read new rows; redraw when they changed the data (or nothing was drawn yet). True when redrawn.
        ``final``: every run has ended (the caller asked before this read), so the axes are fitted to the data."""
        with self._lock:
            changed = final and not self.final
            self.final = self.final or final
            for source in self.sources:
                changed |= self.series[source.label].add_rows(source.poll())
                changed |= self._mark(source)
            if not changed and self.png:
                return False
            self.figure.update(self.series, final=self.final)
            self.png = self.figure.render_png()
            self.frames += 1
            return True

    def _mark(self, source: MetricsSource) -> bool:
        """Mark where the run's health findings began; True when that changed."""
        steps = source.health_steps()
        if steps == self.marked.get(source.label, []):
            return False
        self.marked[source.label] = steps
        self.figure.mark(source.label, steps)
        return True

    def set_panels(self, panels: Sequence[str]) -> None:
        """Draw these four panels from now on (the series hold every panel's keys: nothing is read again)."""
        with self._lock:
            self.figure = MetricsFigure(list(self.series), self.smoothing, panels)  # a bad name: refused here
            self.png = b""
            self.marked = {}  # the new figure has no marks yet
            self.refresh(final=self.final)

    def latest_step(self) -> int | None:
        step_arrays = [run.arrays(key)[0] for run in self.series.values() for key in PLOTTED_KEYS]
        steps = [int(s[-1]) for s in step_arrays if s.size]
        return max(steps) if steps else None

    def save(self, path: str | Path) -> Path:
        """Write the current picture as a PNG file."""
        with self._lock:
            if not self.png:
                self.refresh()
            png = self.png
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        return path


def save_metrics_plot(
    runs: Sequence[str], path: str | Path, smoothing: float = 0.0, panels: Sequence[str] | None = None
) -> Path:
    """Plot every row the runs have so far and write it to ``path`` (PNG), e.g. after a headless run."""
    plot = MetricsPlot(runs, smoothing=smoothing, panels=panels)
    plot.refresh(final=plot.all_finished())
    return plot.save(path)
