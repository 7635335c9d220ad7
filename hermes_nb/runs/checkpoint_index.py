"""Reading ``checkpoints.jsonl`` (written by the trainer, one line per completed checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from hermes_nb.runs.reports import CheckpointInfo


def read_checkpoints(index: Path) -> list[CheckpointInfo]:
    """Every checkpoint listed whose directory still exists, oldest first; unreadable lines are skipped."""
    if not index.is_file():
        return []
    found = []
    for line in index.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            info = CheckpointInfo.model_validate(json.loads(line))
        except (ValueError, ValidationError):
            continue
        if Path(info.path).exists():
            found.append(info)
    return sorted(found, key=lambda c: c.step)
