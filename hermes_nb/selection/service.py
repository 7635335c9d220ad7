"""The synchronous selection service: list and select environments; read, edit and reset the session's config,
each change under one lock.

Nothing here is async: the ``rl_*`` selection commands (``selection/commands.py``) are thin async faces over it
(what waits, the scan of the search path and the schema read in a child process, they run in a worker thread), and
the picker and the config form call it directly from a button's callback. ``apply_checked`` is the form's Apply:
one validation of every edit together, and only when that refuses, a check of each edit alone to put each refusal
beside its own field.
"""

from __future__ import annotations

import difflib
import threading
from dataclasses import dataclass, field
from typing import Any, NoReturn

from hermes_nb.errors import (
    AmbiguousEnvironmentError,
    ConfigError,
    EnvironmentLoadError,
    HermesNBError,
    UnknownEnvironmentError,
)
from hermes_nb.frameworks import registry
from hermes_nb.selection import discovery, editing, listeners, session
from hermes_nb.selection.current import ensure_started
from hermes_nb.selection.discovery import EnvironmentInfo
from hermes_nb.selection.results import ConfigView, EditResult, EnvironmentList, SelectionResult
from hermes_nb.selection.schema import read_schema_sync
from hermes_nb.selection.session import SessionState
from hermes_nb.system import home

# Serialises read-modify-write of the session within this process (the notebook, a widget thread, run_sync).
EDIT_LOCK = threading.Lock()


@dataclass(frozen=True)
class CheckedEdit:
    """What an Apply did: the result when every edit was taken, else why not (nothing was changed)."""

    applied: EditResult | None = None
    refused: dict[str, str] = field(default_factory=dict)  # field -> why, each refused on its own
    message: str = ""  # a refusal no single field explains (a rule across fields)


def list_environments() -> EnvironmentList:
    """Every environment on the search path (shipped + ``HERMES_NB_ENV_PATH``), and files that failed to parse."""
    ensure_started()
    environments, errors = discovery.scan()
    return EnvironmentList(environments=environments, errors=errors)


def select_environment(name: str) -> SelectionResult:
    """Select ``name`` and load its default config (read in a child process; the caller never imports it)."""
    ensure_started()
    info = find_environment(name)
    env_schema = read_schema_sync(info.file, info.class_name, framework=info.framework)
    with EDIT_LOCK:
        state = editing.selected_state(session.load(), info, env_schema)
        session.save(state)
    listeners.selected()
    view = editing.build_view(state)
    return SelectionResult(environment=info, config=view, message=f"Selected environment: {_described(info)}")


def find_environment(name: str) -> EnvironmentInfo:
    """The environment ``name`` selects on the search path: a listed name, or ``NAME@WHERE`` (the package folder
    or file it comes from) for a name several environments share. Refused naming the closest names and those
    there are; a shared bare name, naming each one's qualified name and where it comes from; one that cannot run
    here, saying why."""
    environments, _ = discovery.scan()
    bare, _, where = name.partition(discovery.QUALIFIER)
    called = [e for e in environments if e.name == bare]
    chosen = [e for e in called if e.comes_from(where)] if where else called
    if len(chosen) == 1:
        return _runnable(chosen[0])
    if chosen:
        raise AmbiguousEnvironmentError(f"{len(chosen)} environments are called {bare!r}: {_choices(chosen)}")
    if called:
        raise UnknownEnvironmentError(f"no environment {bare!r} comes from {where}: {_choices(called)}")
    _refuse_unknown(name, environments)


def _choices(environments: list[EnvironmentInfo]) -> str:
    """How to select each of ``environments``: its qualified name NAME@WHERE, and where it comes from."""
    each = "; ".join(f"{e.qualified_name} ({e.source})" for e in environments)
    form = f"NAME{discovery.QUALIFIER}WHERE"
    return f"select one by its qualified name, {form} (the folder or file it comes from): {each}"


def _runnable(info: EnvironmentInfo) -> EnvironmentInfo:
    if info.unsupported:
        raise EnvironmentLoadError(f"environment {info.name!r} ({info.source}) cannot run here: {info.unsupported}")
    return info


def _refuse_unknown(name: str, environments: list[EnvironmentInfo]) -> NoReturn:
    names = sorted({e.name for e in environments})
    if not names:
        dirs = ", ".join(str(p) for p in home.environment_search_path())
        raise UnknownEnvironmentError(f"unknown environment {name!r}: no environments found in {dirs}")
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"; closest: {', '.join(close)}" if close else ""
    raise UnknownEnvironmentError(f"unknown environment {name!r}{hint}; available: {', '.join(names)}")


def _described(info: EnvironmentInfo) -> str:
    """The name, as its framework names it (an atroposlib one: with the Python that runs it)."""
    return registry.adapter(info.framework).described(info.name)


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
