"""Widgets reach the core through the synchronous services only: no ``run_sync``, no event loop, no ``rl_*`` command.

A widget's button callback or refresh thread has no loop of its own; ``run_sync`` there re-entered the kernel's
loop to reach code that was synchronous underneath. Read from the source with ``ast``, lazy imports included.
"""

from __future__ import annotations

import ast
from pathlib import Path

from import_graph import PACKAGE_DIR

WIDGETS_DIR = PACKAGE_DIR / "notebook" / "widgets"
# The loop, the sync-over-async wrapper and the async faces of the services (`*/commands.py`, their gathering).
REFUSED_MODULES = ("asyncio", "hermes_nb.syncio", "hermes_nb.api", "nest_asyncio", "nest_asyncio2")
REFUSED_NAMES = ("run_sync",)


def _refused_module(name: str) -> bool:
    return name in REFUSED_MODULES or name.endswith(".commands") or name.split(".")[-1].endswith("_commands")


def reaches_past_services(path: Path) -> list[str]:
    """Each import or name of ``path`` that reaches the core another way than a service: "line: what"."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _refused_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and _refused_module(node.module):
            found.append(f"{node.lineno}: from {node.module}")
        elif isinstance(node, ast.Name) and node.id in REFUSED_NAMES:
            found.append(f"{node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in REFUSED_NAMES:
            found.append(f"{node.lineno}: .{node.attr}")
    return found


def test_no_widget_module_calls_run_sync_or_an_async_command() -> None:
    offenders = {
        path.name: found for path in sorted(WIDGETS_DIR.glob("*.py")) if (found := reaches_past_services(path))
    }
    assert offenders == {}


def test_the_check_finds_a_widget_that_calls_run_sync(tmp_path: Path) -> None:
    widget = tmp_path / "widget.py"
    widget.write_text(
        "def start():\n"
        "    from hermes_nb.runs.commands import rl_start_training\n"
        "    from hermes_nb.syncio import run_sync\n"
        "    return run_sync(rl_start_training())\n"
    )
    found = reaches_past_services(widget)
    assert "2: from hermes_nb.runs.commands" in found and "3: from hermes_nb.syncio" in found
    assert "4: run_sync" in found


def test_the_check_lets_a_widget_call_a_service(tmp_path: Path) -> None:
    widget = tmp_path / "widget.py"
    widget.write_text("from hermes_nb.runs import service\n\n\ndef start():\n    return service.start_training()\n")
    assert reaches_past_services(widget) == []
