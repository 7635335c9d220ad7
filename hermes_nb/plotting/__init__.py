"""The four-panel metrics plot, drawn off-screen: by default reward (with its group std as a band), held-out
accuracy, completion length, and KL to the reference (entropy on a run without one); ``panels=`` picks others
(``PANEL_CHOICES``: the loss, train accuracy, clip fractions, learning rate ...).

The reward, length, KL and entropy are the trainer's ``train/*``, one population: the batch each step trained on
(``hermes_nb.protocol.metrics``); held-out accuracy is the environment's ``eval/percent_correct``.

No widgets and no threads here: ``hermes_nb.notebook.LivePlot`` puts a ``MetricsPlot`` in a widget and
refreshes it from a thread. ``save_metrics_plot`` writes a PNG from plain code.
"""

from hermes_nb.plotting.figure import MetricsFigure
from hermes_nb.plotting.panels import DEFAULT_PANELS, PANEL_CHOICES, PANELS, PLOTTED_KEYS
from hermes_nb.plotting.plot import MetricsPlot, save_metrics_plot
from hermes_nb.plotting.sources import MetricsSource, RunFilesSource, WandbRunSource, source_for

__all__ = [
    "DEFAULT_PANELS",
    "PANELS",
    "PANEL_CHOICES",
    "PLOTTED_KEYS",
    "MetricsFigure",
    "MetricsPlot",
    "MetricsSource",
    "RunFilesSource",
    "WandbRunSource",
    "save_metrics_plot",
    "source_for",
]
