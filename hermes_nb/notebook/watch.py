"""``%rl_watch``'s core: a live metrics plot of runs, returned to be shown, or shown and waited on.

A plain function over ``LivePlot``, so a cell can do the same as the magic: ``watch([run_id], wait=True)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_nb.notebook import kernel_runs
from hermes_nb.notebook.widgets.live_plot import DEFAULT_REFRESH_INTERVAL_S, LivePlot


def watch(
    runs: Sequence[str] = (),
    smoothing: float = 0.0,
    wait: bool = False,
    timeout: float | None = None,
    interval_s: float = DEFAULT_REFRESH_INTERVAL_S,
    panels: Sequence[str] | None = None,
) -> LivePlot | None:
    """A live plot of ``runs`` (default: the kernel's run); with ``wait``, shown now and returned (None) once every
    run has ended or ``timeout`` seconds have passed. A returned plot starts refreshing when it is displayed.
    ``panels``: four names of ``hermes_nb.plotting.PANEL_CHOICES`` (default: reward, eval, length, kl)."""
    plot = LivePlot(
        list(runs) or [kernel_runs.require_run()], smoothing=smoothing, interval_s=interval_s, panels=panels
    )
    if not wait:
        return plot
    from IPython.display import display

    display(plot)
    plot.wait(timeout)
    return None
