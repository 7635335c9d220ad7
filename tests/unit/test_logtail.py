"""Log tails show what a terminal shows: a progress bar is one line, in its last state."""

from __future__ import annotations

from pathlib import Path

from hermes_nb.system.logtail import tail_lines


def test_a_progress_bar_rewritten_with_carriage_returns_is_one_line_in_its_last_state(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    log.write_text("started\nLoading: 0%\rLoading: 50%\rLoading: 100%\nstep 1\n")
    assert tail_lines(log, 10) == ["started", "Loading: 100%", "step 1"]


def test_only_the_newest_lines_come_back_from_a_long_log(tmp_path: Path) -> None:
    log = tmp_path / "env.log"
    log.write_text("".join(f"line {i}\n" for i in range(50_000)))
    assert tail_lines(log, 3) == ["line 49997", "line 49998", "line 49999"]


def test_a_missing_log_has_no_lines(tmp_path: Path) -> None:
    assert tail_lines(tmp_path / "absent.log", 5) == []
