"""The shipped notebooks, executed top to bottom with nbclient on the embedded default, as a user would run them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from hermes_nb.api import rl_get_results, rl_stop_training
from hermes_nb.notebook.headless.execution import error_outputs, execute_notebook, png_outputs
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.runs.table.results import RunResults

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO_ROOT / "notebooks"
QUICKSTART_CONFIG = REPO_ROOT / "configs" / "quickstart.yaml"
# Each cell may wait for a whole run; a hung run must fail the test, not block the suite.
CELL_TIMEOUT_S = 600
# A notebook's test outlasts pytest-timeout's 300 s default: one cell's wait in full after the other cells (each
# notebook's shortened run takes well under CELL_TIMEOUT_S on two busy cores), so a hung cell is reported by
# nbclient, naming the cell, not by pytest-timeout.
NOTEBOOK_TIMEOUT_S = 2 * CELL_TIMEOUT_S
# The main job's own subprocess limit, and a minute to report it.
MAIN_JOB_TIMEOUT_S = 3 * CELL_TIMEOUT_S

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(NOTEBOOK_TIMEOUT_S)]


@pytest.fixture(autouse=True)
def _stop_runs_left_behind() -> Iterator[None]:
    """A notebook that fails mid-run leaves a detached run going; stop it so no process outlives the test."""
    yield
    for run_id in known_run_ids():
        asyncio.run(rl_stop_training(run_id))


# The notebooks as written run for minutes; the suite runs them shorter through their parameters cell.
CUSTOM_STEPS, TRANSFER_STEPS, QUICKSTART_STEPS, ALGORITHMS_STEPS = 8, 6, 20, 6
# The agent notebook's run, shortened: a few steps of small batches and a small held-out set.
AGENT_OVERRIDES = {"total_steps": 3, "steps_per_eval": 3, "eval_items": 16, "group_size": 4, "batch_size": 8}


def execute(name: str, tmp_path: Path, parameters: dict[str, Any]) -> Any:
    execution = execute_notebook(
        NOTEBOOKS / name,
        tmp_path / name,
        cwd=NOTEBOOKS,
        env={"WANDB_MODE": "offline"},
        cell_timeout_s=CELL_TIMEOUT_S,
        parameters=parameters,
    )
    book = nbformat.read(execution.output, as_version=4)
    print(f"{name}: {execution.seconds:.0f} s")  # the measured run time, shown with -s or on failure
    assert execution.ok, f"{execution.error}; executed copy: {execution.output}"
    assert error_outputs(book) == []
    return book


def results_of_every_run() -> list[RunResults]:
    return [asyncio.run(rl_get_results(run_id)) for run_id in known_run_ids()]


def cell_with(book: Any, source: str) -> Any:
    [cell] = [c for c in book.cells if c.cell_type == "code" and source in c.source]
    return cell


def test_the_python3_kernel_is_the_python_running_the_tests(tmp_path: Path) -> None:
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys; print(sys.executable)")])
    nbformat.write(book, tmp_path / "which.ipynb")

    execution = execute_notebook(tmp_path / "which.ipynb", tmp_path / "out.ipynb", cell_timeout_s=120)

    assert execution.ok, execution.error
    [output] = nbformat.read(execution.output, as_version=4).cells[0].outputs
    assert Path(output.text.strip()) == Path(sys.executable)


def test_custom_environment_is_written_listed_selected_and_trained(tmp_path: Path) -> None:
    book = execute("custom_environment.ipynb", tmp_path, {"STEPS": CUSTOM_STEPS})

    assert "double_number" in json.dumps(cell_with(book, "%rl_list").outputs)
    [run] = results_of_every_run()
    assert run.environment == "double_number"
    assert run.status == "completed"
    assert len(run.history) == CUSTOM_STEPS
    assert len(png_outputs(cell_with(book, "%rl_watch --wait"))) == 1


def test_transfer_learning_trains_a_then_b_four_ways_and_tests_task_a(tmp_path: Path) -> None:
    book = execute("transfer_learning.ipynb", tmp_path, {"STEPS": TRANSFER_STEPS})

    runs = results_of_every_run()
    assert len(runs) == 5
    assert all(run.status == "completed" for run in runs), [(r.run_id, r.status) for r in runs]
    assert len(png_outputs(cell_with(book, "%rl_watch $b_from_a $b_from_base --wait"))) == 1
    assert len(png_outputs(cell_with(book, "%rl_watch $b_distilled $b_from_base --wait"))) == 1
    retained = cell_with(book, "labels = {").outputs[0]["data"]["text/plain"]
    assert retained.count("of task A correct") == 3


def test_algorithms_notebook_trains_the_default_and_dr_grpo_and_overlays_them(tmp_path: Path) -> None:
    book = execute("algorithms.ipynb", tmp_path, {"STEPS": ALGORITHMS_STEPS})

    runs = results_of_every_run()
    assert sorted(run.status for run in runs) == ["completed", "completed"], [(r.run_id, r.status) for r in runs]
    assert all(len(run.history) == ALGORITHMS_STEPS for run in runs)
    assert len(png_outputs(cell_with(book, "%rl_watch $default $dr_grpo --wait"))) == 1
    printed = cell_with(book, "results.algorithm.text()").outputs[0]["text"]
    assert all(run.run_id in printed for run in runs)
    health = cell_with(book, "status.health").outputs[0]["text"]
    assert health.count("health:") == 2 and health.count("CPU-s") == 2, health


def test_agent_notebook_trains_opens_the_rollout_viewer_and_compares_base_and_trained(tmp_path: Path) -> None:
    book = execute("agent.ipynb", tmp_path, {"overrides": AGENT_OVERRIDES})

    [run] = results_of_every_run()
    assert run.environment == "calculator_agent"
    assert run.status == "completed", run.error
    assert len(run.history) == AGENT_OVERRIDES["total_steps"]
    assert len(png_outputs(cell_with(book, "%rl_watch $run_id --wait"))) == 1
    samples = json.dumps(cell_with(book, "%rl_samples $run_id").outputs)
    assert "hermes-nb-tool-call" in samples and "calculate" in samples  # a conversation with its tool call
    compared = cell_with(book, "after = await").outputs[0]["data"]["text/plain"]
    assert "embedded-chat" in compared and run.run_id in compared


@pytest.mark.timeout(MAIN_JOB_TIMEOUT_S + 60)
def test_main_job_runs_the_quickstart_to_completion_and_writes_its_plot(tmp_path: Path) -> None:
    # The main job executes notebooks/quickstart.ipynb: one run covers the notebook and the job.
    out = tmp_path / "out"

    job = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "main_job.py"),
            "--out",
            str(out),
            "--total-steps",
            str(QUICKSTART_STEPS),
        ],
        capture_output=True,
        text=True,
        timeout=MAIN_JOB_TIMEOUT_S,
    )

    print(job.stdout)  # the measured run time and the metrics, shown with -s
    assert job.returncode == 0, job.stdout + job.stderr
    executed = nbformat.read(out / "quickstart.ipynb", as_version=4)
    assert error_outputs(executed) == []
    assert len(png_outputs(cell_with(executed, "%rl_watch --wait"))) == 1
    assert (out / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    [run_dir] = (out / "home" / "runs").iterdir()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == QUICKSTART_STEPS
    assert f"run {run_dir.name}: completed" in job.stdout
    assert "final metrics:" in job.stdout and "eval/percent_correct" in job.stdout
