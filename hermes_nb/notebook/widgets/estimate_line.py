"""The pre-run estimate beside Start: memory per process against what is free, seconds per step and for the whole
run, tokens, and the price where one applies, of the run the config form would start (its unapplied edits
included), through the run service (``runs/service.py``).

An estimate takes about 0.08 s (the session read, the edits checked, earlier runs' step times read): too long for
every keystroke of a text field. A change waits ``DEBOUNCE_S`` in a timer thread and only the last change of a
burst is estimated, so typing is never held up and a burst costs one estimate.
"""

from __future__ import annotations

import html
import logging
import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from hermes_nb.errors import HermesNBError
from hermes_nb.runs import service
from hermes_nb.runs.estimate import RunEstimate

logger = logging.getLogger(__name__)

# Longer than the pause between two keystrokes, short enough that the figures follow a change at once.
DEBOUNCE_S = 0.4
THREAD_NAME = "hermes-nb-estimate"
Edits = Callable[[], dict[str, Any]]
Shown = Callable[[RunEstimate | None], None]


class EstimateLine:
    """One HTML line (``widget``) showing the estimate of ``edits()`` applied to the session's config."""

    def __init__(self, edits: Edits, on_shown: Shown | None = None, debounce_s: float = DEBOUNCE_S) -> None:
        self.widget = widgets.HTML()
        self.widget.add_class("hermes-nb-estimate")
        self.last: RunEstimate | None = None
        self._edits = edits
        self._on_shown = on_shown
        self._debounce_s = debounce_s
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def changed(self, _change: object = None) -> None:
        """A field changed: estimate once the changes have stopped for ``debounce_s``."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self._debounce_s, self._refresh_in_thread)
            self._timer.name = THREAD_NAME
            self._timer.daemon = True
            self._timer.start()

    @property
    def pending(self) -> bool:
        """True while a change waits to be estimated (or is being)."""
        timer = self._timer
        return timer is not None and timer.is_alive()

    def refresh(self) -> RunEstimate | None:
        """Estimate now and show it; a config the estimate cannot be made of says why instead."""
        edits = self._edits()
        estimate: RunEstimate | None = None
        try:
            estimate = service.estimate_run(**edits)
            shown = estimate_html(estimate, unapplied=sorted(edits))
        except HermesNBError as exc:
            shown = f"<span class='hermes-nb-estimate-unknown'>No estimate: {html.escape(str(exc))}</span>"
        self.widget.value = shown
        self.last = estimate
        if self._on_shown is not None:
            self._on_shown(estimate)
        return estimate

    def refresh_now(self) -> RunEstimate | None:
        """Estimate now, in place of any change still waiting."""
        self.close()
        return self.refresh()

    def _refresh_in_thread(self) -> None:
        try:
            self.refresh()
        except Exception:  # a timer thread has no caller to raise to: say so and keep the form usable
            logger.exception("%s: the estimate failed", THREAD_NAME)

    def close(self) -> None:
        """Drop a change still waiting to be estimated."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()


def estimate_html(estimate: RunEstimate, unapplied: list[str]) -> str:
    """The estimate's own text lines, red (with the fields to change) when the run cannot fit; ``unapplied``: the
    edited fields it counts that Start would not use until applied."""
    style = "color:#b00020" if not estimate.fits else "color:#444"
    verdict = "fits" if estimate.fits else "does-not-fit"
    note = f"\n  with unapplied edits to {', '.join(unapplied)}: Apply before Start" if unapplied else ""
    return (
        f"<pre class='hermes-nb-estimate-{verdict}' style='{style};margin:2px 0'>"
        f"<b>Estimate</b> {html.escape(str(estimate) + note)}</pre>"
    )


def fields_named(estimate: RunEstimate | None) -> set[str]:
    """The dotted field names among the estimate's fields to change (``env.group_size / env.batch_size`` is two)."""
    if estimate is None:
        return set()
    return {name.strip() for entry in estimate.to_change for name in entry.split("/")}
