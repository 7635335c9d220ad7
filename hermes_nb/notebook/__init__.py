"""The notebook layer: ``%rl_*`` magics, widgets (picker, config form, run monitor, rollout viewer, runs table,
live metrics plot, dashboard; all in ``widgets/``), and the headless runner of ``make main`` (``headless/``).

Magics and widgets hold no logic of their own. The magics are made from the command table
(``hermes_nb.command_table``) and run a coroutine core through ``run_sync``. The widgets call the synchronous
services the ``rl_*`` commands are the async faces of (``hermes_nb.selection.service``, ``hermes_nb.runs.service``,
rollouts' reader), never ``run_sync``: a button's callback or a refresh thread has no loop to re-enter. Importing
this package pulls in ipywidgets and matplotlib, so ``hermes_nb`` imports it only when a notebook asks for it
(``%load_ext hermes_nb``, ``hermes_nb.dashboard()``).
"""

from __future__ import annotations

from typing import Any

from hermes_nb.notebook.widgets.config_form import ConfigForm
from hermes_nb.notebook.widgets.dashboard import Dashboard, dashboard
from hermes_nb.notebook.widgets.live_plot import LivePlot
from hermes_nb.notebook.widgets.monitor import RunMonitor
from hermes_nb.notebook.widgets.picker import EnvironmentPicker
from hermes_nb.notebook.widgets.samples import SamplesViewer
from hermes_nb.plotting.plot import save_metrics_plot

__all__ = [
    "ConfigForm",
    "Dashboard",
    "EnvironmentPicker",
    "LivePlot",
    "RunMonitor",
    "SamplesViewer",
    "dashboard",
    "load_ipython_extension",
    "save_metrics_plot",
]


def load_ipython_extension(ipython: Any) -> None:
    from hermes_nb.notebook.magics import load_ipython_extension as load

    load(ipython)
