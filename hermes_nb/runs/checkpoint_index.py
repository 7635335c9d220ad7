"""Reading ``checkpoints.jsonl`` (written by the trainer, one line per completed checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from hermes_nb.runs.reports import CheckpointInfo


def read_checkpoints(index: Path) -> list[CheckpointInfo]:
    """Every checkpoint listed whose directory still exists, oldest first; unreadable lines are skipped.

    A directory listed twice (a stop right after an interval checkpoint of the same step rewrites ``step_<n>``)
    is one checkpoint, described by its newest line.
    """
    if not index.is_file():
        return []
    found: dict[str, CheckpointInfo] = {}
    for line in index.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            info = CheckpointInfo.model_validate(json.loads(line))
        except (ValueError, ValidationError):
            continue
        if Path(info.path).exists():
            found.pop(info.path, None)  # re-insert, so the newest line decides the order among equal steps
            found[info.path] = info
    return sorted(found.values(), key=lambda c: c.step)
