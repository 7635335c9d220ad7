"""Incremental reading of ``metrics.jsonl`` / ``env_metrics.jsonl`` while a writer is still appending to it.

Readers (status, the live plot) poll: each call resumes at the byte offset the previous call returned and
consumes only complete lines, so a row the writer has half-written is picked up whole by the next poll.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import ValidationError

from hermes_nb.protocol.metrics import MetricsRow

logger = logging.getLogger(__name__)


def read_metrics(path: str | Path, start_offset: int = 0) -> tuple[list[MetricsRow], int]:
    """Rows from the complete lines after byte ``start_offset``, and the offset to resume from.

    A missing file reads as empty. A file shorter than ``start_offset`` was replaced (a run restarted in the
    same directory), so it is read again from the start. A line that is not a valid row is skipped with a
    warning rather than hiding every row after it.
    """
    path = Path(path)
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            offset = start_offset if 0 <= start_offset <= size else 0
            handle.seek(offset)
            data = handle.read(size - offset)
    except FileNotFoundError:
        return [], 0
    end = data.rfind(b"\n") + 1  # 0 when no complete line yet: consume nothing
    rows = [row for raw in data[:end].splitlines() if (row := _parse_line(raw, path)) is not None]
    return rows, offset + end


def read_all_metrics(path: str | Path) -> list[MetricsRow]:
    """Every complete row in the file."""
    return read_metrics(path, 0)[0]


def _parse_line(raw: bytes, path: Path) -> MetricsRow | None:
    if not raw.strip():
        return None
    try:
        return MetricsRow.model_validate_json(raw)
    except ValidationError as exc:
        logger.warning("%s: skipping a line that is not a metrics row (%s)", path, exc.errors()[0]["msg"])
        return None
