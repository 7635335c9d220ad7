"""What a caller of the core reads "now": the session's state and run config, after this process has started.

``hermes_nb.api`` re-exports these; modules under it (``hermes_nb.model_test``, the notebook layer) import them
from here, so none of them needs to import ``hermes_nb.api`` back.
"""

from __future__ import annotations

import threading

from hermes_nb.config import RunConfig
from hermes_nb.errors import NoEnvironmentSelectedError
from hermes_nb.selection import editing, session
from hermes_nb.selection.session import SessionState
from hermes_nb.system import home

_STARTED = threading.Event()


def ensure_started() -> None:
    """First call of the core in this process: read API keys from the ``.env`` files (never overriding)."""
    if _STARTED.is_set():
        return
    home.load_keys()
    _STARTED.set()


def current_run_config(require_environment: bool = True) -> RunConfig:
    """The config a run starts with now (a copy). Raises if no environment is selected and one is required."""
    ensure_started()
    state = session.load()
    if require_environment and state.config.environment is None:
        raise NoEnvironmentSelectedError(f"no environment selected: {editing.SELECT_FIRST}")
    return state.config


def current_state() -> SessionState:
    """Selected environment, its schema and config (a copy), for the notebook layer."""
    ensure_started()
    return session.load()
