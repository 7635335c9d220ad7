"""``dashboard()``: environment picker, config form, run monitor and live metrics plot in one widget.

The parts talk only through the core: choosing an environment reloads the form from the new config; Start in
the monitor starts a run with the config the form applied, and the plot switches to that run. The form's pre-run
estimate is shown under Start, the button it is about. A config changed
from a cell reaches the form (and the picker) through the form's watch of the session file. Each status read
of the monitor also refreshes the plot, so the step in the progress bar and the plot's caption agree.
"""

from __future__ import annotations

import ipywidgets as widgets

from hermes_nb.notebook.widgets.config_form import ConfigForm
from hermes_nb.notebook.widgets.live_plot import DEFAULT_REFRESH_INTERVAL_S, LivePlot
from hermes_nb.notebook.widgets.monitor import DEFAULT_STATUS_INTERVAL_S, RunMonitor
from hermes_nb.notebook.widgets.picker import EnvironmentPicker
from hermes_nb.runs.table.results import RunStatus, StartResult
from hermes_nb.selection.results import SelectionResult


class Dashboard:
    def __init__(
        self,
        run_id: str | None = None,
        refresh_interval: float = DEFAULT_REFRESH_INTERVAL_S,
        status_interval: float = DEFAULT_STATUS_INTERVAL_S,
        smoothing: float = 0.0,
    ) -> None:
        self._refresh_interval = refresh_interval
        self._smoothing = smoothing
        self.picker = EnvironmentPicker()
        self.form = ConfigForm(watch_interval_s=refresh_interval, show_estimate=False)
        self.monitor = RunMonitor(run_id, interval_s=status_interval, beside_start=self.form.estimate.widget)
        self.plot: LivePlot | None = None
        self.plot_box = widgets.VBox()
        self.plot_box.add_class("hermes-nb-plot-area")
        self.picker.on_select(self._selected)
        self.form.on_reload(lambda view: self.picker.mark_selected(view.environment))
        self.monitor.on_start(self._started)
        self.monitor.on_status(self._status_read)
        if self.monitor.run_id is not None:
            self._watch(self.monitor.run_id)
        self.form.start_watching()
        # Stacked, not side by side: the picker's labels and the form's error column each need the full width.
        self.widget = widgets.VBox([self.picker.widget, self.form.widget, self.monitor.widget, self.plot_box])
        self.widget.add_class("hermes-nb-dashboard")

    def _selected(self, result: SelectionResult) -> None:
        self.form.load(result.config)

    def _started(self, result: StartResult) -> None:
        self._watch(result.run_id)

    def _status_read(self, status: RunStatus) -> None:
        if self.plot is not None and self.plot.plot.sources[0].label == status.run_id and not self.plot.finished:
            self.plot.refresh()

    def _watch(self, run_id: str) -> None:
        if self.plot is not None:
            self.plot.close()
        self.plot = LivePlot([run_id], smoothing=self._smoothing, interval_s=self._refresh_interval).start()
        self.plot_box.children = [self.plot.widget]

    def close(self) -> None:
        """Stop every refresh thread (the widgets stay as they are)."""
        self.monitor.close()
        self.form.close()
        if self.plot is not None:
            self.plot.close()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def dashboard(run_id: str | None = None, smoothing: float = 0.0) -> Dashboard:
    """Picker, config form, run monitor and live plot, following ``run_id`` or the latest run of this kernel.

    Intervals follow ``%config HermesNB.refresh_interval`` / ``status_interval`` when the extension is loaded.
    """
    refresh, status = _configured_intervals()
    return Dashboard(run_id, refresh_interval=refresh, status_interval=status, smoothing=smoothing)


def _configured_intervals() -> tuple[float, float]:
    from hermes_nb.notebook.magics import HermesNB

    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return DEFAULT_REFRESH_INTERVAL_S, DEFAULT_STATUS_INTERVAL_S
    shell = get_ipython()
    magics = [c for c in getattr(shell, "configurables", []) if isinstance(c, HermesNB)]
    if not magics:
        return DEFAULT_REFRESH_INTERVAL_S, DEFAULT_STATUS_INTERVAL_S
    return magics[-1].refresh_interval, magics[-1].status_interval
