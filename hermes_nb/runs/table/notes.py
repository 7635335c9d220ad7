"""A run's note (``rl_tag_run``): one line the user writes on a run, kept in its directory and shown by the table.

The note is the user's, not the run's: the kernel writes it (atomically), no process of the run reads it, and it
goes wherever the run directory goes (deleted or archived with it).
"""

from __future__ import annotations

import os

from hermes_nb.errors import InvalidValueError
from hermes_nb.protocol.run_files import RUN_NOTE_FILE, RunPaths
from hermes_nb.results import Result
from hermes_nb.runs.run_dirs import resolve_run

# A note is a table cell: a few words ("best so far", "lr too high"), not a lab notebook.
MAX_NOTE_CHARS = 200


class TagResult(Result):
    run_id: str
    note: str

    def _text_lines(self) -> list[str]:
        return [f"{self.run_id}: note {self.note!r}" if self.note else f"{self.run_id}: note removed"]


def read_note(paths: RunPaths) -> str:
    try:
        return (paths.run_dir / RUN_NOTE_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def tag_run(run_id: str, note: str) -> tuple[str, str]:
    """Set the note of ``run_id`` (an empty note removes it); returns the run id and the note now stored."""
    text = note.strip()
    if "\n" in text or "\r" in text:
        raise InvalidValueError("note: one line of text, without line breaks")
    if len(text) > MAX_NOTE_CHARS:
        raise InvalidValueError(f"note: at most {MAX_NOTE_CHARS} characters, got {len(text)}")
    paths = resolve_run(run_id)
    path = paths.run_dir / RUN_NOTE_FILE
    if not text:
        path.unlink(missing_ok=True)
        return paths.run_id, ""
    tmp = path.with_name(f".{RUN_NOTE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)
    return paths.run_id, text
