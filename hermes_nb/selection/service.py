"""The synchronous selection service: read, edit and reset the session's config, each change under one lock.

Nothing here waits on I/O worth a thread (the session file is small and local), so nothing here is async: the
``rl_*`` config commands (``selection/commands.py``) are thin async faces over it, and the config form calls it
directly from a button's callback. ``apply_checked`` is the form's Apply: one validation of every edit together,
and only when that refuses, a check of each edit alone to put each refusal beside its own field.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from hermes_nb.errors import ConfigError, HermesNBError
from hermes_nb.selection import editing, session
from hermes_nb.selection.current import ensure_started
from hermes_nb.selection.results import ConfigView, EditResult
from hermes_nb.selection.session import SessionState

# Serialises read-modify-write of the session within this process (the notebook, a widget thread, run_sync).
EDIT_LOCK = threading.Lock()


@dataclass(frozen=True)
class CheckedEdit:
    """What an Apply did: the result when every edit was taken, else why not (nothing was changed)."""

    applied: EditResult | None = None
    refused: dict[str, str] = field(default_factory=dict)  # field -> why, each refused on its own
    message: str = ""  # a refusal no single field explains (a rule across fields)


def config_view() -> ConfigView:
    """Configurable fields (type, default, value, constraints) and locked fields with their values."""
    ensure_started()
    return editing.build_view(session.load())


def edit_config(edits: dict[str, Any]) -> EditResult:
    """Apply ``edits`` (dotted or bare names, text or typed values) all together, or raise and change nothing."""
    ensure_started()
    with EDIT_LOCK:
        before = session.load()
        state, changed, previous = editing.apply_edits(before, edits)
        if changed:
            session.save(state)
    return EditResult(changed=changed, previous=previous, config=editing.build_view(state))


def reset_config() -> ConfigView:
    """Back to the defaults of the selected environment (its ``config_init()``), trainer and W&B."""
    ensure_started()
    with EDIT_LOCK:
        state = editing.reset_state(session.load())
        session.save(state)
    return editing.build_view(state)


def apply_checked(edits: dict[str, Any]) -> CheckedEdit:
    """``edit_config(edits)``, answering a refusal as an outcome with each refused field's own reason."""
    ensure_started()
    with EDIT_LOCK:
        before = session.load()
        try:
            state, changed, previous = editing.apply_edits(before, edits)
        except HermesNBError as exc:
            refused = field_refusals(before, edits)
            return CheckedEdit(refused=refused, message="" if refused else str(exc))
        if changed:
            session.save(state)
    return CheckedEdit(applied=EditResult(changed=changed, previous=previous, config=editing.build_view(state)))


def field_refusals(state: SessionState, edits: dict[str, Any]) -> dict[str, str]:
    """Each edit checked alone against ``state``: field -> why it is refused (its name not repeated)."""
    refusals: dict[str, str] = {}
    for name, value in edits.items():
        try:
            editing.apply_edits(state, {name: value})
        except ConfigError as exc:
            refusals[name] = str(exc).removeprefix(f"{name}: ")
    return refusals
