"""The monitor's log tail: the newest lines of a log as a person would see them in a terminal, kept in view.

A progress bar (tqdm, the trainer's step counter) rewrites its line with carriage returns; a terminal shows
only what was written after the last one. Splitting on every ``\\r`` instead (as ``str.splitlines`` does) would
turn one bar into dozens of lines and push the real lines out of the tail, so lines are split on ``\\n`` only
and each keeps its last non-empty ``\\r`` segment.

The view is a fixed-height box that starts scrolled to its end (a reversed flex column anchors the scroll at
the bottom in every browser), so new lines are what the user sees without scrolling.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

# Read the end of the file in chunks this size until it holds enough lines: logs grow large, tails are small.
READ_CHUNK_BYTES = 8192
# About ten lines in view; the rest of the tail is there to scroll back to.
VIEW_HEIGHT = "180px"


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


def log_html(lines: list[str]) -> str:
    """The lines in a box scrolled to the newest (``column-reverse`` puts the scroll origin at the bottom)."""
    text = html.escape("\n".join(lines)) or "<i>(empty)</i>"
    return (
        f"<div class='hermes-nb-log-view' style='height:{VIEW_HEIGHT};overflow:auto;display:flex;"
        "flex-direction:column-reverse;border:1px solid #ddd;background:#fafafa'>"
        f"<pre style='margin:0;padding:4px;font-size:12px;line-height:1.35'>{text}</pre></div>"
    )
