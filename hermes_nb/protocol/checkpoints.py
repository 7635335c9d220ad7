"""One line of ``checkpoints.jsonl`` (the trainer appends one per completed checkpoint) and its one reader.

The trainer writes the line only after ``step_<N>/`` was renamed into place; status, stop, results, resume and
transfer read the file back with ``read_checkpoints``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

CheckpointKind = Literal["interval", "final", "stop"]


class CheckpointRecord(BaseModel):
    """A saved checkpoint: its step, directory, wall time, why it was saved, and the step's scalar metrics."""

    step: int
    path: str
    time: float
    kind: CheckpointKind
    metrics: dict[str, float] = Field(default_factory=dict)
    # Where the state lives when a server keeps it (the Tinker backend: ``tinker://...``); ``path`` then holds
    # the step's local record (its config, step and RNG, and the Tinker paths in ``tinker_checkpoint.json``).
    tinker_path: str | None = None

    @field_validator("metrics", mode="before")
    @classmethod
    def _drop_non_finite(cls, value: Any) -> Any:
        # pydantic writes a NaN/inf metric (a diverged loss) as null; without this the whole line, and with it
        # the checkpoint, would be unreadable.
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if v is not None}
        return value


class CheckpointIndex(BaseModel):
    """``checkpoints.jsonl`` as read: the checkpoints it lists, and what in it could not be used."""

    # One record per step (the newest line of a step listed twice), oldest step first; directories not checked.
    listed: list[CheckpointRecord] = Field(default_factory=list)
    # 1-based numbers of complete lines that are not checkpoint records (skipped).
    bad_lines: list[int] = Field(default_factory=list)
    # The file ends in a line without its newline that is not a record: cut short by a crash or a truncation
    # (or, while the trainer writes it, not finished yet).
    partial_tail: bool = False

    @property
    def existing(self) -> list[CheckpointRecord]:
        return [record for record in self.listed if Path(record.path).exists()]

    @property
    def missing(self) -> list[CheckpointRecord]:
        return [record for record in self.listed if not Path(record.path).exists()]


def read_checkpoint_index(index: Path) -> CheckpointIndex:
    """Every record ``index`` lists (a missing file lists none), the lines skipped, and a cut-short tail."""
    try:
        text = index.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return CheckpointIndex()
    found: dict[int, CheckpointRecord] = {}
    bad: list[int] = []
    partial = False
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = CheckpointRecord.model_validate_json(line)
        except ValueError:  # pydantic's ValidationError is a ValueError
            if number == len(lines):  # no newline after it
                partial = True
            else:
                bad.append(number)
            continue
        found[record.step] = record
    listed = sorted(found.values(), key=lambda r: r.step)
    return CheckpointIndex(listed=listed, bad_lines=bad, partial_tail=partial)


def read_checkpoints(index: Path) -> list[CheckpointRecord]:
    """Every checkpoint listed in ``index`` whose directory still exists, oldest step first.

    Unreadable lines (a torn last line after a crash) are skipped. A step listed twice (a stop right after an
    interval checkpoint of the same step rewrites ``step_<n>``) is one checkpoint, described by its newest line.
    ``read_checkpoint_index`` says what was skipped.
    """
    return read_checkpoint_index(index).existing
