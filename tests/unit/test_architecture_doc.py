"""docs/architecture.md's "Where is what" table names every folder and top-level module of hermes_nb, and only those."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = REPO_ROOT / "hermes_nb"
ROW = re.compile(r"^\| `([^`]+)` \|")


def table_entries() -> set[str]:
    text = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Where is what", 1)[1].split("\n## ", 1)[0]
    return {match.group(1) for line in section.splitlines() if (match := ROW.match(line))}


def tree_entries() -> set[str]:
    entries = set()
    for path in PACKAGE.iterdir():
        if path.name.startswith((".", "_")) and path.name != "__init__.py":
            continue
        if path.is_dir() and path.name != "__pycache__":
            entries.add(f"{path.name}/")
        elif path.suffix == ".py":
            entries.add(path.name)
    return entries


def test_the_where_is_what_table_matches_the_package_tree() -> None:
    documented, present = table_entries(), tree_entries()
    assert not present - documented, f"in hermes_nb/ but not in the table: {sorted(present - documented)}"
    assert not documented - present, f"in the table but not in hermes_nb/: {sorted(documented - present)}"
