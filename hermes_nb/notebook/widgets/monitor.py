"""Run monitor: status, progress with ETA, health badges, process states, Start and Stop, and a log tail.

A daemon thread re-reads the run's status every ``interval_s`` (a few small file reads through the core) and
stops by itself once the run has ended, after showing the final state; the message under the buttons then
says how the run ended, so "Stop requested" or "Started" never outlives the run it was about.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from hermes_nb.errors import HermesNBError
from hermes_nb.notebook import kernel_runs
from hermes_nb.notebook.widgets.log_view import log_html, tail_lines
from hermes_nb.notebook.widgets.refresher import Refresher
from hermes_nb.results import format_duration
from hermes_nb.runs import service
from hermes_nb.runs.table.results import RunStatus, StartResult

# The run monitor re-reads run.json and the log tail this often; a status read is a few small file reads.
DEFAULT_STATUS_INTERVAL_S = 2.0
LOG_LINES = 30
LOG_PROCESSES = ("trainer", "env", "api", "supervisor")
# A health finding's badge colour by its severity (``hermes_nb.protocol.health.Severity``).
BADGE_COLOURS = {"error": "#b00020", "warning": "#a56a00"}
StartCallback = Callable[[StartResult], None]
StatusCallback = Callable[[RunStatus], None]


def format_eta(seconds: float | None) -> str:
    return f"ETA {format_duration(seconds)}"


class RunMonitor:
    def __init__(
        self,
        run_id: str | None = None,
        interval_s: float = DEFAULT_STATUS_INTERVAL_S,
        beside_start: widgets.Widget | None = None,
    ) -> None:
        """``beside_start``: shown under Start and Stop (the dashboard's pre-run estimate)."""
        self.run_id = kernel_runs.default_run(run_id) or _newest_run()
        self.status = widgets.HTML()
        self.status.add_class("hermes-nb-status")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="Step")
        self.progress.add_class("hermes-nb-progress")
        self.eta = widgets.HTML()
        self.eta.add_class("hermes-nb-eta")
        self.health = widgets.HTML()
        self.health.add_class("hermes-nb-health")
        self.processes = widgets.HTML()
        self.processes.add_class("hermes-nb-processes")
        self.start_button = widgets.Button(description="Start", button_style="success", tooltip="Start a run")
        self.start_button.add_class("hermes-nb-start")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", tooltip="Stop the run")
        self.stop_button.add_class("hermes-nb-stop")
        self.log_process = widgets.Dropdown(options=LOG_PROCESSES, value="trainer", description="Log")
        self.log = widgets.HTML(log_html([]), layout=widgets.Layout(width="100%"))
        self.log.add_class("hermes-nb-log")
        self.message = widgets.HTML()
        self.message.add_class("hermes-nb-monitor-message")
        controls = widgets.HBox([self.start_button, self.stop_button, self.message])
        progress = widgets.HBox([self.progress, self.eta])
        beside = [beside_start] if beside_start is not None else []
        parts = [self.status, progress, self.health, self.processes, controls, *beside, self.log_process, self.log]
        self.widget = widgets.VBox(parts)
        self.widget.add_class("hermes-nb-run-monitor")
        self.last_status: RunStatus | None = None
        self._callbacks: list[StartCallback] = []
        self._status_callbacks: list[StatusCallback] = []
        self._refresher = Refresher("hermes-nb-run-monitor", interval_s, self.refresh)
        self.start_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.stop())
        self.log_process.observe(lambda _: self._update_log(), names="value")
        if self.refresh():
            self._refresher.start()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        """A cell whose value is this object shows its widget (IPython asks for this bundle)."""
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def refreshing(self) -> bool:
        return self._refresher.running

    def on_start(self, callback: StartCallback) -> None:
        self._callbacks.append(callback)

    def on_status(self, callback: StatusCallback) -> None:
        """Call ``callback`` after each status read (the dashboard refreshes its plot then, so both show a step
        read at the same moment)."""
        self._status_callbacks.append(callback)

    def start(self) -> StartResult | None:
        """Start a run with the current config and follow it."""
        self._say("Starting …")
        try:
            result = service.start_training()
        except HermesNBError as exc:
            self._say(str(exc), error=True)
            return None
        kernel_runs.remember_started(result.run_id)
        self.follow(result.run_id)
        self._say(f"Started {result.run_id}")
        for callback in self._callbacks:
            callback(result)
        return result

    def stop(self) -> None:
        """Ask the run to stop; the refresh shows ``stopping`` and then ``stopped``."""
        if self.run_id is None:
            self._say("No run to stop.", error=True)
            return
        try:
            result = service.stop_training(self.run_id, wait=False)
        except HermesNBError as exc:
            self._say(str(exc), error=True)
            return
        self._say(f"Stop requested: {result.status}")
        self.refresh()

    def follow(self, run_id: str) -> None:
        self.run_id = run_id
        if self.refresh():
            self._refresher.start()

    def refresh(self) -> bool:
        """Show the run's current state; True while the run goes on (the refresh thread's tick)."""
        if self.run_id is None:
            self.status.value = "No run yet: choose an environment and press <b>Start</b>."
            self._set_buttons(running=False)
            return False
        try:
            status = service.check_status(self.run_id)
        except HermesNBError as exc:
            self.status.value = f"<span style='color:#b00020'>{html.escape(str(exc))}</span>"
            return False
        self._show(status)
        self._update_log()
        for callback in self._status_callbacks:
            callback(status)
        return not status.is_terminal

    def close(self) -> None:
        self._refresher.stop()

    def _show(self, status: RunStatus) -> None:
        self.last_status = status
        error = f" — {html.escape(status.error)}" if status.error else ""
        self.status.value = (
            f"Run <b>{html.escape(status.run_id)}</b> ({html.escape(status.environment)}): "
            f"<b class='hermes-nb-status-{status.status}'>{status.status}</b>{error}"
        )
        self.progress.max = max(status.total_steps, 1)
        self.progress.value = min(status.step, self.progress.max)
        self.progress.description = f"{status.step}/{status.total_steps}"
        self.eta.value = "" if status.is_terminal else format_eta(status.eta_seconds)
        self.health.value = health_badges(status)
        rows = "".join(
            f"<tr><td>{html.escape(p.name)}</td><td>{html.escape(p.state)}</td>"
            f"<td>{'' if p.exit_code is None else f'exit {p.exit_code}'}</td></tr>"
            for p in status.processes
        )
        self.processes.value = f"<table>{rows}</table>" if rows else ""
        self._set_buttons(running=not status.is_terminal)
        if status.is_terminal:
            self._say(_ending(status), error=status.status == "failed")

    def _update_log(self) -> None:
        # The log paths come with the status just read: no second call into the core per refresh.
        logs = self.last_status.logs if self.last_status is not None else {}
        path = logs.get(str(self.log_process.value))
        self.log.value = log_html(tail_lines(path, LOG_LINES) if path else [])

    def _set_buttons(self, running: bool) -> None:
        self.start_button.disabled = running
        self.stop_button.disabled = not running

    def _say(self, message: str, error: bool = False) -> None:
        style = " style='color:#b00020'" if error else ""
        self.message.value = f"<span{style}>{html.escape(message)}</span>"


def health_badges(status: RunStatus) -> str:
    """One badge per health finding (name and step; the figures and the hint in its tooltip), and what stopped
    the run when ``health.stop_on`` did."""
    badges = "".join(
        f"<span class='hermes-nb-health-{f.severity}' title='{html.escape(f.text(), quote=True)}' "
        f"style='background:{BADGE_COLOURS[f.severity]};color:white;border-radius:4px;padding:1px 6px;"
        f"margin-right:4px'>{html.escape(f.name)} @ {f.step}</span>"
        for f in status.health
    )
    stopped = f" stopped by health.stop_on: {html.escape(status.stopped_by)}" if status.stopped_by else ""
    return badges + stopped


def _ending(status: RunStatus) -> str:
    """The message once a run has ended: how, and at which step."""
    ended = f"Run {status.status} at step {status.step}/{status.total_steps}."
    return f"{ended} See the {status.failed_process or 'trainer'} log below." if status.status == "failed" else ended


def _newest_run() -> str | None:
    from hermes_nb.runs.run_dirs import latest_run_id

    return latest_run_id()
