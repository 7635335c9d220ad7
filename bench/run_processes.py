"""The processes of a running hermes-nb run, for benches that watch them (``bench/soak.py``, ``bench/process_cpu.py``).

Read from the run directory's ``run.json`` as plain JSON (its ``processes``: role -> pid), so the same code also
watches a run of an older tree put first on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil


def run_processes(run_dir: Path) -> dict[str, psutil.Process]:
    """Every live process of the run: the supervisor's children by their role (``api``, ``trainer``, ...), and what
    each role started (W&B's service and its helpers) as ``role/name/pid``. A process that has ended is left out."""
    state = json.loads((run_dir / "run.json").read_text())
    roles = {record["pid"]: name for name, record in state["processes"].items()}
    found: dict[str, psutil.Process] = {}
    for pid, role in roles.items():
        try:
            process = psutil.Process(pid)
            children = process.children()  # a role's own children: the other roles are not its
        except psutil.NoSuchProcess:
            continue
        found[role] = process
        for child in children:
            if child.pid in roles:
                continue
            for descendant in (child, *child.children(recursive=True)):
                found[f"{role}/{descendant.name()}/{descendant.pid}"] = descendant
    return found
