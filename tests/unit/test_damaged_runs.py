"""A damaged run directory: list, status, results, the plot and resume keep working and say what is damaged.

One test per kind of damage, each through the public calls on one finished run laid out with the writers the
trainer uses (4 steps, checkpoints at steps 2 and 4, four recorded batches), then damaged the way a crash, a
full disk or a user leaves it. Resume starts a real run from the damaged one (stopped again at once): the
checkpoint it chose is in the new run's config.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from PIL import Image
from run_dirs import EVAL_ROWS, TRAINER_ROWS, this_process, write_rows, write_state

from hermes_nb import api
from hermes_nb.config import EnvironmentRef, RunConfig
from hermes_nb.plotting import save_metrics_plot
from hermes_nb.protocol.checkpoints import CheckpointRecord
from hermes_nb.protocol.run_files import TRAINER_STATE_FILE, RunPaths
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.runs.supervision.damage import Damage
from hermes_nb.system.disk import append_record
from hermes_nb.system.home import PROJECT_ROOT
from hermes_nb.trainer.run.checkpoints import record_batch

T = TypeVar("T")
RUN_ID = "20250101-120000-abcdefghjk"
ARITHMETIC = EnvironmentRef(
    name="arithmetic", class_name="ArithmeticEnv", file=str(PROJECT_ROOT / "environments" / "arithmetic.py")
)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def finished_run() -> RunPaths:
    """A stopped 4-step run with nothing wrong: metrics, evals, checkpoints 2 and 4, trajectories, config."""
    paths = write_state(RUN_ID, "stopped", total_steps=4)
    RunConfig(environment=ARITHMETIC, env={"total_steps": 4}).save(paths.config)
    write_rows(paths.metrics, TRAINER_ROWS)
    write_rows(paths.env_metrics, EVAL_ROWS)
    for step in (2, 4):
        directory = paths.checkpoints_dir / f"step_{step}"
        directory.mkdir(parents=True)
        (directory / TRAINER_STATE_FILE).write_bytes(b"state")
        record = CheckpointRecord(step=step, path=str(directory), time=float(step), kind="interval")
        append_record(paths.checkpoints_index, (record.model_dump_json() + "\n").encode())
    group = ScoredDataGroup(tokens=[[1, 2, 3]], masks=[[-100, 2, 3]], scores=[1.0])
    for step in range(1, 5):
        record_batch(paths.run_dir, step, [group])
    return paths


def cut_last_line(path: Path) -> None:
    """What a crash (or a full disk, before hermes-nb cut such lines back) leaves: the last line half written."""
    data = path.read_bytes()
    path.write_bytes(data[: data.rfind(b"\n", 0, len(data) - 1) + 12])


@dataclass
class Seen:
    """What every reader made of the run."""

    listed: list[Damage]
    list_text: str
    status_damaged: list[Damage]
    status_text: str
    status_html: str
    results_damaged: list[Damage]
    results_text: str
    status: str
    step: int
    history_steps: list[int]
    checkpoint_steps: list[int]
    plot_log: str
    resumed_from: str | None
    start_damaged: list[Damage]


def read_everything(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> Seen:
    listing = run(api.rl_list_runs())
    (summary,) = listing.runs
    status = run(api.rl_check_status(RUN_ID))
    results = run(api.rl_get_results(RUN_ID))
    with caplog.at_level(logging.WARNING, logger="hermes_nb.plotting.sources"):
        png = save_metrics_plot([RUN_ID], tmp_path / "plot.png")
    with Image.open(png) as image:
        assert image.size[0] > 100  # the plot was drawn from what could be read
    started = run(api.rl_start_training(resume_from=RUN_ID, total_steps=10))
    try:
        resumed = RunConfig.load(Path(started.run_dir) / "config.yaml").infra.resume_checkpoint
    finally:
        run(api.rl_stop_training(started.run_id))
    return Seen(
        listed=summary.damaged,
        list_text=str(listing),
        status_damaged=status.damaged,
        status_text=str(status),
        status_html=status._repr_html_(),
        results_damaged=results.damaged,
        results_text=str(results),
        status=status.status,
        step=summary.step,
        history_steps=[row["step"] for row in results.history],
        checkpoint_steps=[c.step for c in status.checkpoints],
        plot_log=caplog.text,
        resumed_from=resumed,
        start_damaged=started.damaged,
    )


def said_everywhere(seen: Seen, file: str, problem: str, *, in_listing: bool = True) -> None:
    """Each reader names ``file`` with ``problem`` in its typed result and its text, HTML and log forms."""
    line = f"{file}: {problem}"
    for where, damaged in (("status", seen.status_damaged), ("results", seen.results_damaged)):
        assert any(line in str(d) for d in damaged), f"{where} does not say {line!r}: {damaged}"
    assert any(line in str(d) for d in seen.start_damaged), seen.start_damaged
    for text in (seen.status_text, seen.results_text, seen.status_html, seen.plot_log):
        assert file in text and problem in text
    if in_listing:
        assert any(line in str(d) for d in seen.listed) and problem in seen.list_text


def test_an_undamaged_run_is_said_to_have_nothing_damaged(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    paths = finished_run()
    seen = read_everything(caplog, tmp_path)
    assert seen.listed == seen.status_damaged == seen.results_damaged == seen.start_damaged == []
    assert "damaged" not in seen.status_text + seen.results_text + seen.list_text + seen.plot_log
    assert (seen.status, seen.step, seen.history_steps, seen.checkpoint_steps) == ("stopped", 4, [1, 2, 3, 4], [2, 4])
    assert seen.resumed_from == str(paths.checkpoints_dir / "step_4")


@pytest.mark.parametrize("name", ["metrics.jsonl", "env_metrics.jsonl"])
def test_a_metrics_file_with_its_last_line_cut_short(
    name: str, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    paths = finished_run()
    cut_last_line(paths.run_dir / name)
    seen = read_everything(caplog, tmp_path)
    said_everywhere(seen, name, "its last line is cut short")
    trainer_steps = [1, 2, 3] if name == "metrics.jsonl" else [1, 2, 3, 4]
    assert (seen.status, seen.step, seen.history_steps) == ("stopped", trainer_steps[-1], trainer_steps)
    assert seen.resumed_from == str(paths.checkpoints_dir / "step_4")  # checkpoints are not affected


def test_a_checkpoint_index_with_its_last_line_cut_short(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    paths = finished_run()
    cut_last_line(paths.checkpoints_index)
    seen = read_everything(caplog, tmp_path)
    said_everywhere(seen, "checkpoints.jsonl", "its last line is cut short; the checkpoint it listed is not used")
    assert seen.checkpoint_steps == [2]
    assert seen.resumed_from == str(paths.checkpoints_dir / "step_2")  # the last checkpoint still listed


def test_a_garbage_run_json(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    paths = finished_run()
    paths.state.write_bytes(b"\x00\x17 not json {")
    seen = read_everything(caplog, tmp_path)
    said_everywhere(seen, "run.json", "cannot be read")
    assert "no process of the run is running" in seen.status_text
    # Shown from its other files: nothing of it runs, so it has ended, and it can be resumed.
    assert (seen.status, seen.step, seen.history_steps, seen.checkpoint_steps) == ("unknown", 4, [1, 2, 3, 4], [2, 4])
    assert "arithmetic" in seen.list_text
    assert seen.resumed_from == str(paths.checkpoints_dir / "step_4")


def test_a_listed_checkpoint_whose_directory_is_missing(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    paths = finished_run()
    step_4 = paths.checkpoints_dir / "step_4"
    for file in step_4.iterdir():
        file.unlink()
    step_4.rmdir()
    seen = read_everything(caplog, tmp_path)
    said_everywhere(seen, "step_4", "step 4 is listed but its directory is missing")
    assert seen.checkpoint_steps == [2]
    assert seen.resumed_from == str(paths.checkpoints_dir / "step_2")


def test_a_trajectory_record_with_its_last_batch_cut_short(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    paths = finished_run()
    paths.trajectories.write_bytes(paths.trajectories.read_bytes()[:-9])
    seen = read_everything(caplog, tmp_path)
    said_everywhere(seen, "trajectories.jsonl.gz", "its last batch is cut short; a replay of this run skips it")
    assert (seen.status, seen.history_steps, seen.checkpoint_steps) == ("stopped", [1, 2, 3, 4], [2, 4])
    assert seen.resumed_from == str(paths.checkpoints_dir / "step_4")


def test_a_cut_short_line_of_a_live_run_is_a_line_being_written_not_damage() -> None:
    paths = finished_run()
    write_state(RUN_ID, "running", processes={"supervisor": this_process()})  # its supervisor: this live process
    cut_last_line(paths.metrics)
    status = run(api.rl_check_status(RUN_ID))
    assert status.status == "running" and status.damaged == []
