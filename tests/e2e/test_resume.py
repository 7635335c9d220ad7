"""A stopped run resumed: the new run continues from the stop checkpoint, and its curve continues too."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import run, wait_for_status

from hermes_nb.api import rl_get_results, rl_start_training, rl_stop_training
from hermes_nb.config import RunConfig
from hermes_nb.protocol.run_state import read_run_state

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

TIMEOUT = 120.0


def test_a_stopped_run_resumes_from_its_stop_checkpoint_and_the_step_count_continues() -> None:
    first = run(rl_start_training(total_steps=500))
    wait_for_status(first.run_id, lambda s: s.step >= 3, TIMEOUT)
    stopped = run(rl_stop_training(first.run_id))
    stop_step = max(row["step"] for row in run(rl_get_results(first.run_id)).history)
    assert stopped.final_checkpoint is not None and stopped.final_checkpoint.endswith(f"step_{stop_step}")

    resumed = run(rl_start_training(resume_from=first.run_id, total_steps=stop_step + 3))
    status = wait_for_status(resumed.run_id, lambda s: s.is_terminal, TIMEOUT)

    assert status.status == "completed", status.error
    config = RunConfig.load(Path(resumed.run_dir) / "config.yaml")
    assert config.infra.start_step == stop_step
    assert config.infra.resume_checkpoint == stopped.final_checkpoint
    assert read_run_state(Path(resumed.run_dir)).resumed_from == first.run_id
    own_steps = [row.step for row in _rows(Path(resumed.run_dir) / "metrics.jsonl")]
    assert own_steps == [stop_step + 1, stop_step + 2, stop_step + 3]
    history = [row["step"] for row in run(rl_get_results(resumed.run_id)).history]
    assert history == list(range(1, stop_step + 4))


def _rows(path: Path) -> list:  # type: ignore[type-arg]
    from hermes_nb.metrics.reader import read_all_metrics

    return read_all_metrics(path)
