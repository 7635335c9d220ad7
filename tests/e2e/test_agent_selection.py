"""Selecting the shipped agent environment and pressing Start trains: the chat model it declares it needs
(``AgentEnv.trainer_needs``) is set by the selection, with no config file loaded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from run_helpers import run, wait_for_status

from hermes_nb.api import rl_select_environment, rl_start_training, rl_stop_training
from hermes_nb.runs.run_dirs import known_run_ids

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUN_TIMEOUT_S = 400
# A short run: sizes only (the model is the selection's); a final evaluation on a few held-out items.
SHORT = {"total_steps": 2, "group_size": 2, "batch_size": 4, "eval_items": 4, "wandb.mode": "disabled"}


@pytest.fixture
def stop_runs() -> Iterator[None]:
    yield
    for run_id in known_run_ids():
        run(rl_stop_training(run_id))


def test_selecting_calculator_agent_and_starting_trains_to_completed(stop_runs: None) -> None:
    run(rl_select_environment("calculator_agent"))

    start = run(rl_start_training(**SHORT))

    status = wait_for_status(start.run_id, lambda s: s.status in ("completed", "failed"), RUN_TIMEOUT_S)
    assert status.status == "completed", status.error
    assert status.step == 2
