"""Execute a notebook top to bottom without a browser (nbclient), as CI and ``make main`` do.

The kernel is ``python3``, which jupyter_client starts with the Python running this code (the kernel spec's
``python`` is replaced by ``sys.executable``), so a notebook executed from a virtual environment sees that
environment's hermes-nb. The executed copy is written even when a cell fails, so its error can be read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

# A cell that waits for a training run (``%rl_watch --wait``) blocks for the whole run; generous, but finite so
# a hung run fails the execution instead of blocking CI forever.
DEFAULT_CELL_TIMEOUT_S = 1800
# nbclient's default (60 s) is too short on two busy cores: a kernel importing torch can take that long.
KERNEL_START_TIMEOUT_S = 180
# Whoever can connect to a kernel's TCP ports on this machine can read its traffic (ipykernel warns so on every
# start). "auto": the kernel manager gives CurveZMQ keys to a kernel whose spec declares support, so its traffic
# is encrypted, and starts any other kernel as before ("required" would refuse to start it).
TRANSPORT_ENCRYPTION = "auto"


class CellProgress(BaseModel):
    """A code cell starting (``done`` False) or finished: its number among the notebook's code cells (from 1)."""

    number: int
    total: int
    first_line: str
    done: bool = False


class NotebookExecution(BaseModel):
    """The outcome of one headless execution."""

    source: str
    output: str
    seconds: float
    error: str | None = None  # the failing cell's error name and value, None when every cell ran

    @property
    def ok(self) -> bool:
        return self.error is None


def execute_notebook(
    source: str | Path,
    output: str | Path,
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    cell_timeout_s: int = DEFAULT_CELL_TIMEOUT_S,
    kernel_name: str = "python3",
    parameters: Mapping[str, Any] | None = None,
    on_cell: Callable[[CellProgress], None] | None = None,
) -> NotebookExecution:
    """Run every cell of ``source`` in a fresh kernel (working directory ``cwd``, default the notebook's own)
    with ``env`` added to this process's environment; write the executed notebook to ``output``.

    ``parameters`` (papermill's convention) are assigned in a cell inserted after the cell tagged ``parameters``,
    so a notebook runs as written by default and a caller (the test suite) can ask for a shorter run.
    ``on_cell`` is called as each code cell starts and as it finishes (``make main`` shows it in the terminal)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    source, output = Path(source), Path(output)
    book = nbformat.read(source, as_version=4)
    if parameters:
        inject_parameters(book, parameters)
    client = NotebookClient(
        book,
        timeout=cell_timeout_s,
        startup_timeout=KERNEL_START_TIMEOUT_S,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(Path(cwd) if cwd else source.parent)}},
        config=kernel_manager_config(),
        **(cell_hooks(book, on_cell) if on_cell else {}),
    )
    started = time.monotonic()
    error: str | None = None
    try:
        client.execute(env={**os.environ, **(env or {})})
    except CellExecutionError as exc:
        error = f"{exc.ename}: {exc.evalue}"
    except (CellTimeoutError, DeadKernelError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.monotonic() - started
    output.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(book, output)
    return NotebookExecution(source=str(source), output=str(output), seconds=round(seconds, 1), error=error)


def kernel_manager_config() -> Any:
    """The kernel manager's settings: transport encryption where this pyzmq can do it."""
    import zmq
    from traitlets.config import Config

    # A libzmq built without libsodium has no CurveZMQ, and the manager refuses "auto" then: stay unencrypted.
    policy = TRANSPORT_ENCRYPTION if zmq.has("curve") else "disabled"
    return Config({"KernelManager": {"transport_encryption": policy}})


def cell_hooks(book: Any, on_cell: Callable[[CellProgress], None]) -> dict[str, Any]:
    """nbclient's hooks before and after each code cell, reporting to ``on_cell``."""
    # The cells nbclient will execute: it skips markdown and empty code cells without calling these hooks.
    runnable = [i for i, cell in enumerate(book.cells) if cell.cell_type == "code" and cell.source.strip()]
    numbers = {index: number for number, index in enumerate(runnable, start=1)}

    def report(cell: Any, cell_index: int, done: bool) -> None:
        first_line = cell.source.strip().splitlines()[0]
        on_cell(CellProgress(number=numbers[cell_index], total=len(runnable), first_line=first_line, done=done))

    return {
        "on_cell_execute": lambda cell, cell_index, **_: report(cell, cell_index, done=False),
        "on_cell_executed": lambda cell, cell_index, **_: report(cell, cell_index, done=True),
    }


def inject_parameters(book: Any, parameters: Mapping[str, Any]) -> None:
    """Insert ``name = value`` assignments after the cell tagged ``parameters`` (an error if there is none)."""
    import nbformat

    tagged = [i for i, cell in enumerate(book.cells) if "parameters" in cell.get("metadata", {}).get("tags", [])]
    if not tagged:
        raise ValueError("parameters: the notebook has no cell tagged 'parameters' to override")
    source = "# Injected parameters\n" + "".join(f"{name} = {value!r}\n" for name, value in parameters.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    book.cells.insert(tagged[0] + 1, cell)


def error_outputs(book: Any) -> list[str]:
    """``ename: evalue`` of every error output in an executed notebook (nbformat node or dict)."""
    return [
        f"{out.get('ename')}: {out.get('evalue')}"
        for cell in book["cells"]
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]


def png_outputs(cell: Any) -> list[str]:
    """The base64 PNGs a cell's outputs hold (display data, results, updated displays)."""
    return [out["data"]["image/png"] for out in cell.get("outputs", []) if "image/png" in out.get("data", {})]
