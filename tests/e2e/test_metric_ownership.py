"""One metric key, one writer, one population: a real run on arithmetic, whose reward is 1 or 0.

Where the reward of a completion is 1 when it is correct and 0 otherwise, the mean reward and the share correct of
one population are the same number. So within each file's rows, ``reward_mean`` and ``percent_correct`` of one
namespace must be equal at every step: ``train/*`` (the trainer's, the trained batch) in ``metrics.jsonl`` and
``env/*`` (the environment's, every completion it sampled) in ``env_metrics.jsonl``; and no key is in both files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import run, wait_for_status

from hermes_nb.api import rl_start_training
from hermes_nb.system import home

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

COMPLETE_TIMEOUT = 180.0
SHORT_RUN = {"total_steps": 4}


def value_rows(path: Path) -> list[tuple[int, dict[str, float]]]:
    return [(row["step"], row["values"]) for row in map(json.loads, path.read_text().splitlines())]


def unequal_steps(rows: list[tuple[int, dict[str, float]]], namespace: str) -> list[tuple[int, float, float]]:
    """The steps where ``<namespace>/reward_mean`` and ``<namespace>/percent_correct`` differ, with both values."""
    reward, correct = f"{namespace}/reward_mean", f"{namespace}/percent_correct"
    return [(step, values[reward], values[correct]) for step, values in rows if values[reward] != values[correct]]


def test_on_a_zero_one_reward_each_files_reward_mean_equals_its_percent_correct_and_no_key_is_in_both() -> None:
    start = run(rl_start_training(**SHORT_RUN))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT)
    assert status.status == "completed", status.error
    run_dir = home.run_dir(start.run_id)
    trainer = value_rows(run_dir / "metrics.jsonl")
    env = [(step, values) for step, values in value_rows(run_dir / "env_metrics.jsonl") if "env/reward_mean" in values]

    trainer_keys = {key for _, values in trainer for key in values}
    env_keys = {key for _, values in value_rows(run_dir / "env_metrics.jsonl") for key in values}
    assert trainer_keys & env_keys == set()
    assert [step for step, _ in trainer] == [1, 2, 3, 4]
    assert len(env) >= SHORT_RUN["total_steps"], "the environment logged no env/reward_mean for some steps"
    assert unequal_steps(trainer, "train") == []
    assert unequal_steps(env, "env") == []
