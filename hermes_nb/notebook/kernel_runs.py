"""Which run a magic or widget means when none is named: the latest started from this kernel, else the newest.

Kept per process (a kernel is one process), and checked against the current home, so after
``%config HermesNB.home = ...`` a run of the previous home is not picked by mistake.
"""

from __future__ import annotations

import threading

from hermes_nb import home
from hermes_nb.errors import UnknownRunError
from hermes_nb.runs.registry import latest_run_id

_LOCK = threading.Lock()
_started: list[str] = []


def remember_started(run_id: str) -> None:
    with _LOCK:
        _started.append(run_id)


def forget_started() -> None:
    """For tests: a fresh kernel."""
    with _LOCK:
        _started.clear()


def default_run(run_id: str | None = None) -> str | None:
    """``run_id`` if given, else the latest run started here that exists in this home, else None (= newest)."""
    if run_id:
        return run_id
    with _LOCK:
        started = list(_started)
    for candidate in reversed(started):
        if home.run_dir(candidate).is_dir():
            return candidate
    return None


def require_run(run_id: str | None = None) -> str:
    """Like ``default_run`` but resolved to a run id now; raises when there is no run at all."""
    chosen = default_run(run_id) or latest_run_id()
    if chosen is None:
        raise UnknownRunError("no runs yet: start one with %rl_start (or rl_start_training())")
    return chosen
