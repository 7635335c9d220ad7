"""``rl_delete_run``: a run's directory and its logs go together, deleted or moved to ``<home>/archive``.

Never a live run: one whose processes may still write its files is refused, naming it. Without ``confirm`` nothing
changes; the answer lists what would go, so a widget or an agent can ask first.
"""

from __future__ import annotations

import shutil
from typing import Any

from hermes_nb.errors import RunStateError
from hermes_nb.protocol.run_files import LOGS_DIR, RUNS_DIR, RunPaths
from hermes_nb.results import Result
from hermes_nb.runs.run_dirs import resolve_run
from hermes_nb.runs.supervision.damage import current_state
from hermes_nb.runs.sweep_dirs import read_sweep, sweep_of_runs
from hermes_nb.system import home


class RemovalResult(Result):
    run_id: str
    action: str  # "delete" or "archive"
    done: bool  # False: nothing changed yet (no confirmation); the paths are what would go
    paths: list[str]
    archived_to: str | None = None

    def _dict(self) -> dict[str, Any]:
        message = (
            f"{self.action}d run {self.run_id}" if self.done
            else f"nothing changed: call again with confirm=True to {self.action} run {self.run_id}"
        )  # fmt: skip
        return {**self.model_dump(mode="json"), "message": message}

    def _text_lines(self) -> list[str]:
        return [str(self._dict()["message"]), *(f"  {path}" for path in self.paths)]


def _files(paths: RunPaths) -> list[str]:
    return [str(paths.run_dir)] + [str(log) for log in paths.logs.values() if log.exists()]


def _refuse_live(paths: RunPaths) -> None:
    state, _ = current_state(paths)
    if not state.is_terminal:
        raise RunStateError(
            f"run {paths.run_id} is {state.status}: stop it first (rl_stop_training({paths.run_id!r})); a live run "
            "is never deleted or archived"
        )


def _archive(paths: RunPaths) -> str:
    target = home.archive_dir()
    (target / RUNS_DIR).mkdir(parents=True, exist_ok=True, mode=0o700)
    (target / LOGS_DIR).mkdir(parents=True, exist_ok=True, mode=0o700)
    destination = target / RUNS_DIR / paths.run_id
    shutil.move(str(paths.run_dir), str(destination))
    for log in paths.logs.values():
        if log.exists():
            shutil.move(str(log), str(target / LOGS_DIR / log.name))
    return str(destination)


def remove_run(run_id: str, *, confirm: bool = False, archive: bool = False) -> RemovalResult:
    paths = resolve_run(run_id)
    _refuse_live(paths)
    action = "archive" if archive else "delete"
    files = _files(paths)
    if not confirm:
        return RemovalResult(run_id=paths.run_id, action=action, done=False, paths=files)
    owner = sweep_of_runs().get(paths.run_id)
    if owner is not None and not read_sweep(owner).is_terminal:
        raise RunStateError(f"run {paths.run_id} belongs to sweep {owner}, which is still running: stop it first")
    if archive:
        return RemovalResult(run_id=paths.run_id, action=action, done=True, paths=files, archived_to=_archive(paths))
    # run.json first: from then on no reader lists the run, even if removing the rest is interrupted.
    paths.state.unlink(missing_ok=True)
    shutil.rmtree(paths.run_dir, ignore_errors=True)
    for log in paths.logs.values():
        log.unlink(missing_ok=True)
    return RemovalResult(run_id=paths.run_id, action=action, done=True, paths=files)
