"""The end of a log file as a person would see it in a terminal.

A progress bar (tqdm, the trainer's step counter) rewrites its line with carriage returns; a terminal shows
only what was written after the last one. Splitting on every ``\\r`` instead (as ``str.splitlines`` does) would
turn one bar into dozens of lines and push the real lines out of a tail, so lines are split on ``\\n`` only and
each keeps its last non-empty ``\\r`` segment. Only the end of the file is read: logs grow large, tails are small.
"""

from __future__ import annotations

import os
from pathlib import Path

READ_CHUNK_BYTES = 8192


def tail_lines(path: str | Path, lines: int) -> list[str]:
    """The last ``lines`` lines of a text file, each as a terminal shows it (after its last ``\\r``)."""
    path = Path(path)
    if lines <= 0 or not path.is_file():
        return []
    with open(path, "rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        data = b""
        while end > 0 and data.count(b"\n") <= lines:
            start = max(0, end - READ_CHUNK_BYTES)
            handle.seek(start)
            data = handle.read(end - start) + data
            end = start
    text = data.decode("utf-8", errors="replace")
    shown = [terminal_line(line) for line in text.split("\n")]
    if shown and shown[-1] == "":
        shown.pop()  # the newline that ends the last line starts no line of its own
    return shown[-lines:]


def terminal_line(line: str) -> str:
    """What a terminal shows for one ``\\n``-terminated line: its last non-empty carriage-return segment."""
    segments = [segment for segment in line.split("\r") if segment.strip()]
    return segments[-1] if segments else ""
