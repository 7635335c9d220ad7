"""The terminal progress of a headless execution: what it reads from a run directory and what it prints."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest
from run_dirs import OTHER_ID, STEP_SECONDS, eval_row, trainer_row, write_rows, write_state

from hermes_nb.notebook.headless.execution import CellProgress
from hermes_nb.notebook.headless.terminal_progress import (
    LOG_INTERVAL_S,
    LogDisplay,
    RunFollower,
    RunProgress,
    RunReader,
    TerminalDisplay,
    display_for,
    show_progress,
)

RUN_ID = "20250101-120000-abcdefghjk"


def running_run(steps: int, total_steps: int = 100) -> None:
    paths = write_state(RUN_ID, "running", total_steps=total_steps)
    write_rows(paths.metrics, [trainer_row(step, 0.5, 0.5, 0.1) for step in range(1, steps + 1)])
    write_rows(paths.env_metrics, [eval_row(5, 0.25)])


def test_the_reader_gives_step_total_held_out_accuracy_and_eta_of_a_running_run() -> None:
    running_run(steps=10)

    progress = RunReader(RUN_ID).read()

    assert progress == RunProgress(
        run_id=RUN_ID,
        status="running",
        step=10,
        total_steps=100,
        eval_percent_correct=0.25,
        eta_seconds=90 * STEP_SECONDS,
    )


def test_the_reader_picks_up_rows_written_after_its_last_read() -> None:
    running_run(steps=10)
    reader = RunReader(RUN_ID)
    reader.read()

    paths = write_state(RUN_ID, "completed", total_steps=100)
    write_rows(paths.metrics, [trainer_row(step, 0.5, 0.5, 0.1) for step in range(11, 101)])
    write_rows(paths.env_metrics, [eval_row(100, 0.75)])
    progress = reader.read()

    assert progress is not None
    assert (progress.step, progress.status, progress.eval_percent_correct) == (100, "completed", 0.75)
    assert progress.eta_seconds is None


def test_the_reader_has_nothing_to_show_before_the_run_writes_its_state() -> None:
    assert RunReader(RUN_ID).read() is None


def test_the_follower_shows_the_newest_run_the_notebook_started() -> None:
    write_state(OTHER_ID, "completed")
    follower = RunFollower(before=set())
    first = follower.poll()
    running_run(steps=3)

    newest = follower.poll()

    assert first is not None and first.run_id == OTHER_ID
    assert newest is not None and newest.run_id == RUN_ID


def test_runs_that_existed_before_the_notebook_are_not_followed() -> None:
    write_state(OTHER_ID, "completed")

    assert RunFollower(before={OTHER_ID}).poll() is None


def test_a_run_line_names_step_total_held_out_accuracy_and_eta_while_running() -> None:
    run = RunProgress(run_id=RUN_ID, status="running", step=40, total_steps=100, eval_percent_correct=0.25)

    assert (
        run.model_copy(update={"eta_seconds": 130.0}).line() == f"run {RUN_ID}: step 40/100, held-out 25.0%, ETA 2m10s"
    )
    assert (
        run.model_copy(update={"status": "completed"}).line() == f"run {RUN_ID}: step 40/100, held-out 25.0%, completed"
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_one_line_per_cell_as_it_starts() -> None:
    stream = io.StringIO()
    display = LogDisplay(stream)

    for number in (1, 2):
        display.show_cell(CellProgress(number=number, total=2, first_line=f"cell{number}()"))
        display.show_cell(CellProgress(number=number, total=2, first_line=f"cell{number}()", done=True))

    assert stream.getvalue().splitlines() == ["cell 1/2: cell1()", "cell 2/2: cell2()"]


def test_a_log_gets_a_run_line_every_interval_and_when_the_status_changes() -> None:
    stream, clock = io.StringIO(), FakeClock()
    display = LogDisplay(stream, clock=clock)
    run = RunProgress(run_id=RUN_ID, status="running", step=1, total_steps=100)

    for step in range(1, 8):  # one poll a second
        clock.now = float(step)
        display.show_run(run.model_copy(update={"step": step}))
    display.show_run(run.model_copy(update={"step": 8, "status": "completed"}))

    steps = [line.split("step ")[1].split("/")[0] for line in stream.getvalue().splitlines()]
    assert steps == ["1", str(1 + int(LOG_INTERVAL_S)), "8"]


def test_a_terminal_gets_bars_with_the_cells_and_the_runs_step_accuracy_and_eta() -> None:
    stream = io.StringIO()
    display = TerminalDisplay(stream)

    display.show_cell(CellProgress(number=3, total=5, first_line="%rl_watch --wait"))
    display.show_run(
        RunProgress(
            run_id=RUN_ID, status="running", step=40, total_steps=100, eval_percent_correct=0.25, eta_seconds=130
        )
    )
    display.close()

    shown = stream.getvalue()
    assert "cells 2/5" in shown and "%rl_watch --wait" in shown
    assert "step 40/100" in shown and "held-out 25.0%" in shown and "ETA 2m10s" in shown


def test_a_terminal_that_reports_no_size_still_gets_its_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    controller, terminal = os.openpty()  # a new pseudo-terminal says 0 x 0, as one under `script` or CI may
    with os.fdopen(terminal, "w", encoding="utf-8") as tty:
        monkeypatch.setattr(sys, "stderr", tty)  # tqdm asks the size of stderr and stdout only, as make main's
        display = TerminalDisplay(sys.stderr)
        display.show_run(RunProgress(run_id=RUN_ID, status="running", step=40, total_steps=100))
        display.close()
    shown = read_all(controller).decode()

    assert "step 40/100" in shown


def read_all(controller: int) -> bytes:
    """What was written to a pseudo-terminal whose other end is closed (a read returns one write at a time)."""
    chunks = []
    try:
        while chunk := os.read(controller, 65536):
            chunks.append(chunk)
    except OSError:  # EIO: nothing more, the terminal end is closed
        pass
    finally:
        os.close(controller)
    return b"".join(chunks)


def test_a_terminal_gets_bars_and_anything_else_gets_lines(tmp_path: Path) -> None:
    controller, terminal = os.openpty()
    with os.fdopen(terminal, "w") as tty, (tmp_path / "log").open("w") as log:
        assert isinstance(display_for(tty), TerminalDisplay)
        assert isinstance(display_for(log), LogDisplay)
    os.close(controller)


class Recorder:
    def __init__(self) -> None:
        self.runs: list[RunProgress] = []
        self.closed = False

    def show_cell(self, cell: CellProgress) -> None:
        return None

    def show_run(self, run: RunProgress) -> None:
        self.runs.append(run)

    def close(self) -> None:
        self.closed = True


def test_the_runs_state_when_the_notebook_ends_is_shown_even_between_polls() -> None:
    display = Recorder()

    with show_progress(before=set(), display=display, poll_s=3600):
        write_state(RUN_ID, "completed", total_steps=10)

    assert [(run.run_id, run.status) for run in display.runs] == [(RUN_ID, "completed")]
    assert display.closed
