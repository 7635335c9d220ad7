"""notebooks/sweep.ipynb executed with nbclient, cell by cell, with a kernel restart in the middle of its sweep
(where its markdown asks the user for one): the sweep, being no part of the kernel, goes on and finishes, and the
runs table overlays the four runs labelled by the fields that differ."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.util import run_sync

from hermes_nb.api import rl_stop_sweep, rl_stop_training
from hermes_nb.notebook.headless.execution import (
    KERNEL_START_TIMEOUT_S,
    error_outputs,
    inject_parameters,
    kernel_manager_config,
)
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.runs.sweep_dirs import known_sweep_ids, read_sweep

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "sweep.ipynb"
CELL_TIMEOUT_S = 600
# Four runs of a few steps, two at a time; each run's start-up (three processes) is most of it.
STEPS = 3

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2 * CELL_TIMEOUT_S)]


@pytest.fixture(autouse=True)
def _stop_what_is_left() -> Iterator[None]:
    yield
    for sweep_id in known_sweep_ids():
        asyncio.run(rl_stop_sweep(sweep_id))
    for run_id in known_run_ids():
        asyncio.run(rl_stop_training(run_id))


def _text(cell: nbformat.NotebookNode) -> str:
    return "".join(out.get("text", "") for out in cell.get("outputs", []) if out.get("output_type") == "stream")


def test_the_sweep_survives_a_kernel_restart_and_the_table_labels_runs_by_what_differs(tmp_path: Path) -> None:
    book = nbformat.read(NOTEBOOK, as_version=4)
    inject_parameters(book, {"STEPS": STEPS})
    client = NotebookClient(book, timeout=CELL_TIMEOUT_S, startup_timeout=KERNEL_START_TIMEOUT_S,
                            kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}},
                            config=kernel_manager_config())  # fmt: skip
    started = time.monotonic()
    live_at_restart = None
    with client.setup_kernel(env={**os.environ, "WANDB_MODE": "offline"}):
        for index, cell in enumerate(book.cells):
            if "after-restart" in cell.get("metadata", {}).get("tags", []):
                live_at_restart = not read_sweep(known_sweep_ids()[0]).is_terminal
                assert client.km is not None and client.kc is not None
                run_sync(client.km.restart_kernel)(now=True)
                run_sync(client.kc.wait_for_ready)(timeout=KERNEL_START_TIMEOUT_S)
            client.execute_cell(cell, index)
    nbformat.write(book, tmp_path / "sweep.ipynb")
    print(f"sweep.ipynb: {time.monotonic() - started:.0f} s")
    assert error_outputs(book) == []
    assert live_at_restart is True
    [sweep_id] = known_sweep_ids()
    sweep = read_sweep(sweep_id)
    assert sweep.status == "completed" and all(v.run_id for v in sweep.variants)
    [overlay] = [line for c in book.cells for line in _text(c).splitlines() if line.startswith("overlay:")]
    labels = ["lr=1e-4, group=4", "lr=1e-4, group=8", "lr=3e-4, group=4", "lr=3e-4, group=8"]
    assert overlay == f"overlay: {labels}"
