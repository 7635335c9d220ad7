"""Incremental reading of ``metrics.jsonl`` / ``env_metrics.jsonl`` while a writer is still appending to it.

Readers (status, the live plot) poll: each call resumes at the byte offset the previous call returned and
consumes only complete lines, so a row the writer has half-written is picked up whole by the next poll.
``read_metrics_file`` reads a whole file and also says what it skipped, for the readers that report damage.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class MetricsFileRead:
    """A whole metrics file: its rows, and what was not a row."""

    rows: list[MetricsRow] = field(default_factory=list)
    # 1-based numbers of complete lines that are not metrics rows (skipped).
    bad_lines: list[int] = field(default_factory=list)
    # Bytes after the last newline: a row being written, or one a crash or truncation cut short (ignored).
    partial_bytes: int = 0


def read_metrics_file(path: str | Path) -> MetricsFileRead:
    """Every complete row of ``path`` (a missing file reads as empty), the lines skipped, the partial tail."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return MetricsFileRead()
    end = data.rfind(b"\n") + 1
    rows: list[MetricsRow] = []
    bad: list[int] = []
    for number, raw in enumerate(data[:end].split(b"\n")[:-1], start=1):
        if not raw.strip():
            continue
        row = _parse_line(raw, path)
        if row is None:
            bad.append(number)
        else:
            rows.append(row)
    return MetricsFileRead(rows=rows, bad_lines=bad, partial_bytes=len(data) - end)


def last_complete_line(path: str | Path, chunk: int = 8192) -> bytes | None:
    """The last newline-terminated line of ``path`` (a cut-short line after it is passed over), if any."""
    try:
        with Path(path).open("rb") as handle:
            end = handle.seek(0, 2)
            data = b""
            while end > 0 and data.count(b"\n") < 2:
                start = max(0, end - chunk)
                handle.seek(start)
                data = handle.read(end - start) + data
                end = start
    except FileNotFoundError:
        return None
    lines = data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]
    return lines[-1] if lines else None


def _parse_line(raw: bytes, path: Path) -> MetricsRow | None:
    if not raw.strip():
        return None
    try:
        return MetricsRow.model_validate_json(raw)
    except ValidationError as exc:
        logger.warning("%s: skipping a line that is not a metrics row (%s)", path, exc.errors()[0]["msg"])
        return None
