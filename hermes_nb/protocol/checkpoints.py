"""One line of ``checkpoints.jsonl`` (the trainer appends one per completed checkpoint) and its one reader.

The trainer writes the line only after ``step_<N>/`` was renamed into place; status, stop, results, resume and
transfer read the file back with ``read_checkpoints``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

# File in the run directory, one JSON object per line.
CHECKPOINTS_FILE = "checkpoints.jsonl"
# Inside each checkpoint directory, beside the ``from_pretrained`` files: optimizer, RNG and step (resume needs it).
TRAINER_STATE_FILE = "trainer_state.pt"

CheckpointKind = Literal["interval", "final", "stop"]


class CheckpointRecord(BaseModel):
    """A saved checkpoint: its step, directory, wall time, why it was saved, and the step's scalar metrics."""

    step: int
    path: str
    time: float
    kind: CheckpointKind
    metrics: dict[str, float] = Field(default_factory=dict)

    @field_validator("metrics", mode="before")
    @classmethod
    def _drop_non_finite(cls, value: Any) -> Any:
        # pydantic writes a NaN/inf metric (a diverged loss) as null; without this the whole line, and with it
        # the checkpoint, would be unreadable.
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if v is not None}
        return value


def read_checkpoints(index: Path) -> list[CheckpointRecord]:
    """Every checkpoint listed in ``index`` whose directory still exists, oldest step first.

    Unreadable lines (a torn last line after a crash) are skipped. A step listed twice (a stop right after an
    interval checkpoint of the same step rewrites ``step_<n>``) is one checkpoint, described by its newest line.
    """
    if not index.is_file():
        return []
    found: dict[int, CheckpointRecord] = {}
    for line in index.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = CheckpointRecord.model_validate_json(line)
        except ValueError:  # pydantic's ValidationError is a ValueError
            continue
        if Path(record.path).exists():
            found[record.step] = record
    return sorted(found.values(), key=lambda r: r.step)
