"""Which run a magic or widget means when none is named: the latest started from this kernel, else the newest
run still going, else the newest.

Kept per process (a kernel is one process), and checked against the current home, so after
``%config HermesNB.home = ...`` a run of the previous home is not picked by mistake. A restarted kernel has
started nothing, so it finds its run in the run directories: the newest one still going is the one it was
following (a newer run that already ended, from the CLI or another kernel, does not take its place).
"""

from __future__ import annotations

import threading

from hermes_nb.errors import UnknownRunError
from hermes_nb.protocol.run_state import RunStateUnreadable, read_run_state
from hermes_nb.runs.run_dirs import known_run_ids, latest_run_id
from hermes_nb.runs.supervision.reconcile import supervisor_gone_cause
from hermes_nb.system import home

# How many of the newest runs are looked at for one still going: a run is found among the few newest, and a
# home with thousands of runs must not cost a magic a read of every run.json.
LIVE_RUN_SCAN_LIMIT = 20

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
    """``run_id`` if given, else the latest run started here that exists in this home, else the newest run still
    going, else None (= newest)."""
    if run_id:
        return run_id
    with _LOCK:
        started = list(_started)
    for candidate in reversed(started):
        if home.run_dir(candidate).is_dir():
            return candidate
    return newest_live_run()


def newest_live_run() -> str | None:
    """The newest run whose supervisor is alive and which has not ended (whoever started it), or None."""
    for candidate in known_run_ids()[:LIVE_RUN_SCAN_LIMIT]:
        try:
            state = read_run_state(home.run_dir(candidate))
        except RunStateUnreadable:
            continue  # a damaged run.json: status names the damage when asked for that run
        if not state.is_terminal and supervisor_gone_cause(state) is None:
            return candidate
    return None


def require_run(run_id: str | None = None) -> str:
    """Like ``default_run`` but resolved to a run id now; raises when there is no run at all."""
    chosen = default_run(run_id) or latest_run_id()
    if chosen is None:
        raise UnknownRunError("no runs yet: start one with %rl_start (or rl_start_training())")
    return chosen
