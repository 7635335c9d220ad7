"""The four-panel metrics plot (reward, percent correct train and eval, loss), drawn off-screen.

Reward and "Percent correct (train)" are the trainer's ``train/*``, one population: the batch each step trained on
(``hermes_nb.protocol.metrics``); "Percent correct (eval)" is the environment's held-out ``eval/percent_correct``.

No widgets and no threads here: ``hermes_nb.notebook.LivePlot`` puts a ``MetricsPlot`` in a widget and
refreshes it from a thread. ``save_metrics_plot`` writes a PNG from plain code.
"""

from hermes_nb.plotting.figure import PANELS, PLOTTED_KEYS, MetricsFigure
from hermes_nb.plotting.plot import MetricsPlot, save_metrics_plot
from hermes_nb.plotting.sources import MetricsSource, RunFilesSource, WandbRunSource, source_for

__all__ = [
    "PANELS",
    "PLOTTED_KEYS",
    "MetricsFigure",
    "MetricsPlot",
    "MetricsSource",
    "RunFilesSource",
    "WandbRunSource",
    "save_metrics_plot",
    "source_for",
]
