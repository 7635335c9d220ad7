"""Writing ``run.json`` (``hermes_nb.protocol.run_state``) so that no reader ever sees half of it.

Atomic: a temp file, then a rename. While the run is live its directory keeps a small reserve of disk space,
freed when a write of ``run.json`` finds the disk full: a run that fails for lack of space can still record that
it failed, and why.
"""

from __future__ import annotations

import os
from pathlib import Path

from hermes_nb.protocol.run_files import DISK_RESERVE_FILE, RUN_STATE_FILE
from hermes_nb.protocol.run_state import RunState
from hermes_nb.system.disk import DiskFullError, Reserve, disk_full_errno


def write_run_state(run_dir: Path, state: RunState) -> None:
    """Replace ``run.json`` atomically. A full disk frees the run's reserve and tries once more, then raises
    ``DiskFullError`` with the old ``run.json`` in place. A terminal state gives the reserve back."""
    reserve = Reserve(run_dir / DISK_RESERVE_FILE)
    try:
        _replace_state(run_dir, state)
    except OSError as exc:
        code = disk_full_errno(exc)
        if code is None:
            raise
        if not reserve.release():
            raise DiskFullError(code, run_dir / RUN_STATE_FILE) from exc
        try:
            _replace_state(run_dir, state)
        except OSError as again:
            raise DiskFullError(code, run_dir / RUN_STATE_FILE) from again
    if state.is_terminal:
        reserve.release()
    else:
        reserve.ensure()


def _replace_state(run_dir: Path, state: RunState) -> None:
    path = run_dir / RUN_STATE_FILE
    tmp = path.with_name(f".{RUN_STATE_FILE}.{os.getpid()}.tmp")
    try:
        tmp.write_text(state.model_dump_json(indent=2), encoding="utf-8")
    except OSError:
        tmp.unlink(missing_ok=True)  # half a temp file holds space a retry needs
        raise
    tmp.replace(path)
