"""Every module of ``hermes_nb`` imports only its own package and packages on lower floors.

The floors are written once, in docs/architecture.md's "Layers" table; this test reads them there. Imports are
those of ``import_graph.py``: lazy and ``TYPE_CHECKING`` ones included. A ``__main__`` module is a process's entry
point: it stands on its package's floor like any module (entry points that assemble parts from several floors live
above them, in ``processes/``), and nothing may import it.
"""

from __future__ import annotations

import re
from pathlib import Path

from import_graph import PACKAGE_DIR, Edge, import_graph, module_names, write_package

DOC = PACKAGE_DIR.parent / "docs" / "architecture.md"
ROW = re.compile(r"^\| (\d+) \| (.+) \|$")


def floors_in(doc_text: str) -> dict[str, int]:
    """``{"runs/": 8, "config.py": 3, ...}`` from the Layers table."""
    section = doc_text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    floors: dict[str, int] = {}
    for line in section.splitlines():
        match = ROW.match(line.strip())
        if match:
            for entry in re.findall(r"`([^`]+)`", match.group(2)):
                floors[entry] = int(match.group(1))
    return floors


def part_of(module: str, modules: dict[str, Path], package_dir: Path) -> str:
    """The table entry of a module: ``hermes_nb.runs.table.notes`` -> ``runs/``, ``hermes_nb.api`` -> ``api.py``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    top = package_dir / parts[1]
    return f"{parts[1]}/" if top.is_dir() else f"{parts[1]}.py"


def layer_violations(edges: list[Edge], floors: dict[str, int], package_dir: Path) -> list[str]:
    modules = module_names(package_dir)
    problems = []
    for edge in edges:
        if edge.target.endswith(".__main__"):
            problems.append(f"{edge.source} imports the entry point {edge.target} ({edge.where})")
            continue
        source, target = part_of(edge.source, modules, package_dir), part_of(edge.target, modules, package_dir)
        if source == target:
            continue
        if source not in floors or target not in floors:
            missing = source if source not in floors else target
            problems.append(f"{missing} has no floor in docs/architecture.md's Layers table ({edge.where})")
        elif floors[target] >= floors[source]:
            direction = "sideways" if floors[target] == floors[source] else "up"
            problems.append(
                f"{edge.source} (floor {floors[source]}) imports {edge.target} (floor {floors[target]}), "
                f"{direction}, at {edge.where}"
            )
    return sorted(set(problems))


def test_no_module_imports_up_or_sideways() -> None:
    floors = floors_in(DOC.read_text(encoding="utf-8"))
    problems = layer_violations(import_graph(PACKAGE_DIR), floors, PACKAGE_DIR)
    assert not problems, "imports against the floors:\n" + "\n".join(problems)


def test_every_part_of_the_package_has_a_floor() -> None:
    floors = floors_in(DOC.read_text(encoding="utf-8"))
    parts = {part_of(m, module_names(PACKAGE_DIR), PACKAGE_DIR) for m in module_names(PACKAGE_DIR)}
    assert parts - set(floors) == set(), f"without a floor: {sorted(parts - set(floors))}"


LAYERS = "## Layers\n| floor | packages |\n|---|---|\n| 2 | `high/` |\n| 1 | `low/` |\n"


def test_an_upward_import_is_found_even_under_type_checking(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/high/__init__.py": "",
            "pkg/high/a.py": "from pkg.low import b\n",
            "pkg/low/__init__.py": "",
            "pkg/low/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high.a import x\n",
        },
    )
    problems = layer_violations(import_graph(package), floors_in(LAYERS), package)
    assert any("pkg.low.b (floor 1) imports pkg.high.a (floor 2), up" in p for p in problems), problems


def test_a_lazy_upward_import_inside_a_function_is_found(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/high/__init__.py": "",
            "pkg/high/a.py": "",
            "pkg/low/__init__.py": "",
            "pkg/low/b.py": "def later():\n    from pkg.high import a\n",
        },
    )
    problems = layer_violations(import_graph(package), floors_in(LAYERS), package)
    assert any("pkg.low.b (floor 1) imports pkg.high.a (floor 2), up" in p for p in problems)


def test_an_entry_point_imports_only_below_it_and_nothing_imports_it(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/high/__init__.py": "",
            "pkg/high/a.py": "from pkg.low import __main__\n",
            "pkg/low/__init__.py": "",
            "pkg/low/__main__.py": "from pkg.high import a\n",
        },
    )
    problems = layer_violations(import_graph(package), floors_in(LAYERS), package)
    assert "pkg.high.a imports the entry point pkg.low.__main__ (pkg/high/a.py:1)" in problems
    assert "pkg.low.__main__ (floor 1) imports pkg.high.a (floor 2), up, at pkg/low/__main__.py:1" in problems
