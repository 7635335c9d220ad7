"""The selected environment and the current run config, shared by every caller through ``<home>/session.json``.

A notebook kernel and a ``hermes-nb`` command in another process see the same selection: the file is written
atomically on every change and re-read when its modification time moves. In one process, callers share the same
state object (no re-read while the file is unchanged). The environment's schema is stored with the selection so
that another process can validate edits without importing the environment again.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from hermes_nb.config import RunConfig
from hermes_nb.protocol.run_files import SESSION_FILE
from hermes_nb.selection.discovery import EnvironmentInfo
from hermes_nb.selection.schema import EnvSchema
from hermes_nb.system import home

logger = logging.getLogger(__name__)


class SessionState(BaseModel):
    environment: EnvironmentInfo | None = None
    env_schema: EnvSchema | None = None
    config: RunConfig = Field(default_factory=RunConfig)


_LOCK = threading.RLock()
# session file path -> (identity of the file when read or written, state). The identity includes the inode
# because every save is a new file (os.replace) and mtime alone ticks only every few ms on Linux.
_FileId = tuple[int, int, int]
_LOADED: dict[str, tuple[_FileId, SessionState]] = {}


def session_path() -> Path:
    return home.home_dir() / SESSION_FILE


def load() -> SessionState:
    """The current state (a copy: changing it changes nothing until ``save``)."""
    path = session_path()
    with _LOCK:
        file_id = _file_id(path)
        cached = _LOADED.get(str(path))
        if cached is not None and cached[0] == file_id:
            return cached[1].model_copy(deep=True)
        state = _read(path) if file_id != _MISSING else SessionState()
        _LOADED[str(path)] = (file_id, state)
        return state.model_copy(deep=True)


def save(state: SessionState) -> None:
    """Replace the state, atomically: another process reads either the old or the new file, never half."""
    path = session_path()
    with _LOCK:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(state.model_dump_json(indent=1), encoding="utf-8")
        os.replace(tmp, path)
        _LOADED[str(path)] = (_file_id(path), state.model_copy(deep=True))


_MISSING: _FileId = (-1, -1, -1)


def file_id() -> _FileId:
    """The session file's identity now: it changes on every save, from this process or another (a widget polls
    it to notice edits made elsewhere without reading the file)."""
    return _file_id(session_path())


def _file_id(path: Path) -> _FileId:
    try:
        st = path.stat()
    except FileNotFoundError:
        return _MISSING
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _read(path: Path) -> SessionState:
    try:
        return SessionState.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError, ValueError) as exc:
        # The session is a convenience, rebuilt by one rl_select_environment; a damaged file must not block work.
        logger.warning("ignoring unreadable session file %s (%s); starting a fresh session", path, exc)
        return SessionState()
