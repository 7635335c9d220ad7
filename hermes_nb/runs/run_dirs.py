"""Finding runs from their directories: works from any process, after any restart."""

from __future__ import annotations

import difflib

from hermes_nb.errors import UnknownRunError
from hermes_nb.protocol.run_files import RUN_STATE_FILE, RunPaths
from hermes_nb.protocol.run_state import RunState, RunStateUnreadable, read_run_state
from hermes_nb.system import home
from hermes_nb.system.home import run_paths


def known_run_ids() -> list[str]:
    """Run ids, newest first (ids start with their UTC creation time)."""
    root = home.runs_dir()
    if not root.is_dir():
        return []
    ids = [p.name for p in root.iterdir() if (p / RUN_STATE_FILE).is_file()]
    return sorted(ids, reverse=True)


def latest_run_id() -> str | None:
    ids = known_run_ids()
    return ids[0] if ids else None


def resolve_run(run_id: str | None) -> RunPaths:
    """The run named, or the newest run when ``run_id`` is None. Unknown ids list the known ones."""
    ids = known_run_ids()
    if run_id is None:
        if not ids:
            raise UnknownRunError("no runs yet: start one with rl_start_training()")
        return run_paths(ids[0])
    if run_id in ids:
        return run_paths(run_id)
    if not ids:
        raise UnknownRunError(f"unknown run {run_id!r}: there are no runs yet")
    close = difflib.get_close_matches(run_id, ids, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    shown = ", ".join(ids[:10]) + (f" (and {len(ids) - 10} more)" if len(ids) > 10 else "")
    raise UnknownRunError(f"unknown run {run_id!r}{hint} known runs: {shown}")


def load_state(paths: RunPaths) -> RunState:
    try:
        return read_run_state(paths.run_dir)
    except RunStateUnreadable as exc:
        # A validation error spans several lines; the user gets one, naming the file.
        detail = "; ".join(line.strip() for line in str(exc.__cause__ or exc).splitlines() if line.strip())
        raise UnknownRunError(f"run {paths.run_id}: {paths.state} cannot be read ({detail})") from None
