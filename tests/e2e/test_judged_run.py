"""The judge-scored environment (open_answer) trains to completed with the loopback stand-in judge's scores as
its rewards, and the rollout viewer shows the judge's score and reason beside each completion."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from judge_standin import STANDIN_MODEL, STANDIN_RUBRIC, StandInJudge
from run_helpers import run, wait_for_status

from hermes_nb.api import (
    rl_edit_config,
    rl_get_results,
    rl_get_samples,
    rl_select_environment,
    rl_start_training,
    rl_stop_training,
)
from hermes_nb.protocol.health import read_cost
from hermes_nb.protocol.metrics import JUDGE_CALLS
from hermes_nb.protocol.run_files import COST_FILE, ENV_METRICS_FILE
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.system import home

pytestmark = [pytest.mark.e2e]

RUN_TIMEOUT_S = 180
SHORT = {"group_size": 4, "batch_size": 8, "eval_items": 2, "max_num_workers": 2, "wandb.mode": "disabled"}


@pytest.fixture
def stand_in() -> Iterator[StandInJudge]:
    judge = StandInJudge()
    yield judge
    judge.close()
    for run_id in known_run_ids():
        run(rl_stop_training(run_id))


def test_open_answer_trains_to_completed_on_the_judges_scores_with_its_reasons_shown(stand_in: StandInJudge) -> None:
    run(rl_select_environment("open_answer"))
    judge = {"judge_base_url": stand_in.url, "judge_model": STANDIN_MODEL, "rubric": STANDIN_RUBRIC}
    run(rl_edit_config({**SHORT, **judge}))

    start = run(rl_start_training(total_steps=2))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT_S)

    assert status.status == "completed", status.error
    samples = run(rl_get_samples(start.run_id, 1, n=100))
    # The stand-in ranks a group of four 0, 1/3, 2/3, 1 by position, with its reason for each.
    assert {round(s.score, 3) for s in samples.samples} <= {0.0, 0.333, 0.667, 1.0}
    assert all(s.judge_reason and s.judge_reason in str(samples) for s in samples.samples)
    env_rows = home.run_dir(start.run_id) / ENV_METRICS_FILE
    assert any(JUDGE_CALLS in json.loads(line)["values"] for line in env_rows.read_text().splitlines())
    # The judge's calls and tokens are the run's cost too (as of the environment's last metrics row): the stand-in
    # reports 100 prompt and 10 completion tokens a call.
    cost = read_cost(home.run_dir(start.run_id) / COST_FILE)
    assert cost is not None and cost.actual.judge_calls is not None
    assert 0 < cost.actual.judge_calls <= len(stand_in.requests)
    assert cost.actual.judge_tokens == 110 * cost.actual.judge_calls
    assert f"judge {cost.actual.judge_calls} calls" in cost.text()
    assert run(rl_get_results(start.run_id)).status == "completed"
