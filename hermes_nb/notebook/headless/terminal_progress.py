"""Progress of a headless notebook execution in a terminal: the code cells, then the training run they started.

``make main`` executes the quickstart without a browser, and its ``%rl_watch --wait`` cell blocks for the whole
run: a job that printed nothing meanwhile would look hung. This shows each code cell as it runs and, once the
notebook has started a run, the run's step / total, held-out accuracy and ETA, read from the run directory (the
only state a run shares). A terminal gets bars redrawn in place (tqdm); a log (CI, a pipe) gets plain lines,
at most one every few seconds for the run, since a line redrawn with carriage returns reads there as one
ever-growing line.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TextIO

from pydantic import BaseModel
from tqdm import tqdm

from hermes_nb.metrics.reader import read_metrics
from hermes_nb.notebook.headless.execution import CellProgress
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_state import RunStateUnreadable, read_run_state
from hermes_nb.results import format_duration
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.runs.table.status import eta_seconds, latest_metrics
from hermes_nb.system.home import run_paths

# The trainer logs a row about every 0.1 s: a read each second keeps the bar current, and reads only new lines.
POLL_S = 1.0
# In a log, the run gets a line this often (and one when its status changes): ~36 lines for a 3-minute run.
LOG_INTERVAL_S = 5.0
# A cell's first line beside the cells bar, cut so that the bar still fits an 80-column terminal.
CELL_LABEL_CHARS = 40
# The cells bar names the cell in its description: a postfix would start with tqdm's ", ".
CELLS_FORMAT = "cells {n_fmt}/{total_fmt} |{bar:20}| {desc}"
RUN_FORMAT = "{desc}: {percentage:3.0f}% |{bar:20}| step {n_fmt}/{total_fmt}{postfix}"


class RunProgress(BaseModel):
    """What the terminal shows of a run: status, step / total, latest held-out accuracy and the ETA."""

    run_id: str
    status: str
    step: int
    total_steps: int
    eval_percent_correct: float | None = None
    eta_seconds: float | None = None

    def details(self) -> list[str]:
        """The parts after step / total: held-out accuracy, the ETA while running, the status otherwise."""
        parts = [] if self.eval_percent_correct is None else [f"held-out {100 * self.eval_percent_correct:.1f}%"]
        if self.status != "running":
            return [*parts, self.status]
        return parts if self.eta_seconds is None else [*parts, f"ETA {format_duration(self.eta_seconds)}"]

    def line(self) -> str:
        return ", ".join([f"run {self.run_id}: step {self.step}/{self.total_steps}", *self.details()])


class RunReader:
    """Reads one run's progress from its directory; each metrics file is read on from where the last read ended."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.paths = run_paths(run_id)
        self._rows: dict[Path, list[MetricsRow]] = {self.paths.metrics: [], self.paths.env_metrics: []}
        self._offsets: dict[Path, int] = dict.fromkeys(self._rows, 0)

    def read(self) -> RunProgress | None:
        """The run's progress now; None until the run's state file exists."""
        try:
            state = read_run_state(self.paths.run_dir)
        except RunStateUnreadable:
            return None
        for path, rows in self._rows.items():
            new_rows, self._offsets[path] = read_metrics(path, self._offsets[path])
            rows.extend(new_rows)
        trainer_rows, env_rows = self._rows[self.paths.metrics], self._rows[self.paths.env_metrics]
        return RunProgress(
            run_id=self.run_id,
            status=state.status,
            step=trainer_rows[-1].step if trainer_rows else 0,
            total_steps=state.total_steps,
            eval_percent_correct=latest_metrics(trainer_rows, env_rows).eval_percent_correct,
            eta_seconds=eta_seconds(state, trainer_rows),
        )


class ProgressDisplay(Protocol):
    def show_cell(self, cell: CellProgress) -> None: ...

    def show_run(self, run: RunProgress) -> None: ...

    def close(self) -> None: ...


class TerminalDisplay:
    """Two bars redrawn in place: the code cells executed, then the run's steps."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._cells: Any = None  # tqdm bars, made on first use: the total is known only then
        self._run: Any = None
        # Cells are reported from the thread executing the notebook, the run from the one following it.
        self._lock = threading.Lock()

    def show_cell(self, cell: CellProgress) -> None:
        with self._lock:
            if self._cells is None:
                self._cells = self._bar(total=cell.total, position=0, bar_format=CELLS_FORMAT)
            self._cells.n = cell.number if cell.done else cell.number - 1
            self._cells.set_description_str(cell.first_line[:CELL_LABEL_CHARS])

    def show_run(self, run: RunProgress) -> None:
        with self._lock:
            if self._run is None:
                self._run = self._bar(total=run.total_steps, desc="run", position=1, bar_format=RUN_FORMAT)
            self._run.n = run.step
            self._run.set_postfix_str(", ".join(run.details()))

    def close(self) -> None:
        with self._lock:
            # Top bar first: each bar left in place is drawn on the line the cursor is on, then a newline.
            for bar in (self._cells, self._run):
                if bar is not None:
                    bar.close()

    def _bar(self, **options: Any) -> Any:
        # tqdm asks the terminal for its size, and a pseudo-terminal may say 0 x 0, where tqdm draws nothing;
        # shutil falls back to $COLUMNS / $LINES, then to 80 x 24.
        size = shutil.get_terminal_size()
        return tqdm(file=self._stream, ncols=size.columns, nrows=size.lines, **options)


class LogDisplay:
    """Plain lines: one per code cell as it starts; the run's every ``LOG_INTERVAL_S`` and when its status changes."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._clock = clock
        self._last_line_at: float | None = None
        self._last_status: str | None = None
        self._lock = threading.Lock()

    def show_cell(self, cell: CellProgress) -> None:
        if not cell.done:
            self._print(f"cell {cell.number}/{cell.total}: {cell.first_line}")

    def show_run(self, run: RunProgress) -> None:
        now = self._clock()
        recent = self._last_line_at is not None and now - self._last_line_at < LOG_INTERVAL_S
        if recent and run.status == self._last_status:
            return
        self._last_line_at, self._last_status = now, run.status
        self._print(run.line())

    def close(self) -> None:
        return None

    def _print(self, line: str) -> None:
        with self._lock:
            print(line, file=self._stream, flush=True)


def display_for(stream: TextIO) -> ProgressDisplay:
    """Bars for a terminal, lines for anything else (a CI log, a pipe, a file)."""
    return TerminalDisplay(stream) if stream.isatty() else LogDisplay(stream)


class RunFollower:
    """Follows the newest run that is not in ``before``: the one the notebook started last."""

    def __init__(self, before: set[str]) -> None:
        self.before = before
        self.reader: RunReader | None = None

    def poll(self) -> RunProgress | None:
        run_id = next((run_id for run_id in known_run_ids() if run_id not in self.before), None)
        if run_id is None:
            return None
        if self.reader is None or self.reader.run_id != run_id:
            self.reader = RunReader(run_id)
        return self.reader.read()


@contextmanager
def show_progress(before: set[str], display: ProgressDisplay, poll_s: float = POLL_S) -> Iterator[None]:
    """While the body runs, show the progress of the newest run not in ``before``; close ``display`` after."""
    stop = threading.Event()
    thread = threading.Thread(target=follow, args=(RunFollower(before), display, stop, poll_s), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        display.close()


def follow(follower: RunFollower, display: ProgressDisplay, stop: threading.Event, poll_s: float) -> None:
    """Show the followed run every ``poll_s`` until ``stop``, then once more: its state when the notebook ended."""
    while True:
        stopping = stop.wait(poll_s)
        progress = follower.poll()
        if progress is not None:
            display.show_run(progress)
        if stopping:
            return
