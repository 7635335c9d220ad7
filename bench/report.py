"""Writing a benchmark's numbers into its own section of ``docs/benchmarks.md``.

Each bench owns one ``## Section``. ``append_run`` adds a dated, fenced block at the end of that section (a
history of runs); ``replace_section`` rewrites the section (a bench whose latest run is the whole story). Both
create the section, with its introduction, when it is missing, and leave every other section untouched.
"""

from __future__ import annotations

import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def run_block(title: str, lines: list[str]) -> str:
    """``<date>, <title>:`` and the lines in a code fence."""
    return f"\n{time.strftime('%Y-%m-%d %H:%M')}, {title}:\n\n```\n" + "\n".join(lines) + "\n```\n"


def _section_bounds(text: str, heading: str) -> tuple[int, int] | None:
    start = text.find(f"\n{heading}\n")
    if start < 0:
        return None
    end = text.find("\n## ", start + len(heading) + 2)
    return start, end if end >= 0 else len(text)


def append_run(heading: str, intro: str, block: str, path: Path = DOCS) -> None:
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    bounds = _section_bounds(text, heading)
    if bounds is None:
        path.write_text(text.rstrip("\n") + f"\n\n{heading}\n\n{intro}" + block, encoding="utf-8")
        return
    start, end = bounds
    section = text[start:end].rstrip("\n") + "\n"
    path.write_text(text[:start] + section + block + text[end:], encoding="utf-8")


def replace_section(heading: str, intro: str, block: str, path: Path = DOCS) -> None:
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    body = f"\n{heading}\n\n{intro}" + block
    bounds = _section_bounds(text, heading)
    if bounds is None:
        path.write_text(text.rstrip("\n") + "\n" + body, encoding="utf-8")
        return
    start, end = bounds
    path.write_text(text[:start] + body + text[end:], encoding="utf-8")
