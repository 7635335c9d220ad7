"""Headless execution (``make main``, CI) in a real kernel: what it reports per cell and what the kernel prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from hermes_nb.notebook.headless.execution import CellProgress, execute_notebook

pytestmark = pytest.mark.e2e

# The headless script's own limit; the test's (pytest-timeout) lies above it, so the script's is the one reported.
SCRIPT_TIMEOUT_S = 300

# ipykernel's warning on start when its TCP traffic is in plain text.
TRANSPORT_WARNING = "without encryption"


def write_notebook(path: Path) -> Path:
    cells = [
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_markdown_cell("# not executed"),
        nbformat.v4.new_code_cell("  \n"),
        nbformat.v4.new_code_cell("print(x)\n# second line"),
    ]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    return path


def test_each_code_cell_is_reported_as_it_starts_and_as_it_finishes(tmp_path: Path) -> None:
    reported: list[CellProgress] = []

    execution = execute_notebook(write_notebook(tmp_path / "in.ipynb"), tmp_path / "out.ipynb", on_cell=reported.append)

    assert execution.ok, execution.error
    assert [(c.number, c.total, c.first_line, c.done) for c in reported] == [
        (1, 2, "x = 1", False),
        (1, 2, "x = 1", True),
        (2, 2, "print(x)", False),
        (2, 2, "print(x)", True),
    ]


@pytest.mark.timeout(SCRIPT_TIMEOUT_S + 60)
def test_the_kernel_starts_without_the_plain_text_transport_warning(tmp_path: Path) -> None:
    source = write_notebook(tmp_path / "in.ipynb")
    # The kernel inherits the stderr of the process executing the notebook: run that in a child to read it.
    script = (
        "import sys\n"
        "from hermes_nb.notebook.headless.execution import execute_notebook\n"
        "execution = execute_notebook(sys.argv[1], sys.argv[2])\n"
        "sys.exit(0 if execution.ok else 1)\n"
    )

    job = subprocess.run(
        [sys.executable, "-c", script, str(source), str(tmp_path / "out.ipynb")],
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
    )

    assert job.returncode == 0, job.stderr
    assert TRANSPORT_WARNING not in job.stderr
