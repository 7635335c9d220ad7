"""The shipped judge-scored environment (environments/open_answer.py) with a stand-in policy and the loopback
stand-in judge: the judge's scores become the group's rewards, its reasons ride with the group, a failing judge
fails the group (the host counts it as an environment fault), and its calls are counted."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fake_provider import SOLVER, fake_provider, use_key
from judge_standin import STANDIN_MODEL, STANDIN_RUBRIC, StandInJudge

from hermes_nb import api
from hermes_nb.env.judge import JudgeError
from hermes_nb.env.types import SampledBatch, SampledCompletion
from hermes_nb.model_test.runner import rl_test_inference
from hermes_nb.protocol.metrics import EVAL_PERCENT_CORRECT, JUDGE_CALLS
from hermes_nb.protocol.trajectory import JUDGE_REASON_OVERRIDE
from hermes_nb.system.home import shipped_environments_dir

GROUP = 4


def _module() -> Any:
    name = "test_shipped_env_open_answer"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, shipped_environments_dir() / "open_answer.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def _completion(prompt: str, text: str) -> SampledCompletion:
    return SampledCompletion(
        text=text,
        prompt_token_ids=[ord(c) for c in prompt],
        token_ids=[ord(c) for c in text] + [2],
        logprobs=[-0.5] * (len(text) + 1),
        finish_reason="stop",
    )


class Policy:
    """Stands in for the run's inference server: answer ``i`` of a group is ``"answer i"``."""

    async def sample(self, prompt: str, **kwargs: Any) -> list[SampledCompletion]:
        return [_completion(prompt, f"answer {i}") for i in range(kwargs["n"])]

    async def sample_batch(self, prompts: list[str], **kwargs: Any) -> SampledBatch:
        return SampledBatch(completions=[_completion(p, "an answer") for p in prompts])


@pytest.fixture
def stand_in() -> Iterator[StandInJudge]:
    judge = StandInJudge()
    yield judge
    judge.close()


def _env(stand_in: StandInJudge, **fields: Any) -> Any:
    module = _module()
    config = module.OpenAnswerConfig(
        group_size=GROUP,
        rubric=STANDIN_RUBRIC,
        judge_base_url=stand_in.url,
        judge_model=STANDIN_MODEL,
        judge_retries=0,
        **fields,
    )
    env = module.OpenAnswerEnv(config)
    env.server = Policy()
    return env


def test_a_relative_judges_ranking_of_the_group_is_its_rewards_with_reasons(stand_in: StandInJudge) -> None:
    env = _env(stand_in, judge_mode="relative")
    group, _ = asyncio.run(env.collect_trajectories(env.train_item()))
    assert group.scores == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])
    assert [o[JUDGE_REASON_OVERRIDE] for o in group.overrides] == [f"rank {i} of {GROUP}" for i in range(GROUP)]
    (request,) = stand_in.requests
    assert all(f"Answer {i}:\nanswer {i}" in request["messages"][-1]["content"] for i in range(GROUP))


def test_an_absolute_judge_scores_each_completion_alone(stand_in: StandInJudge) -> None:
    env = _env(stand_in, judge_mode="absolute", ensure_scores_are_not_same=False)
    group, _ = asyncio.run(env.collect_trajectories(env.train_item()))
    assert group.scores == [1.0] * GROUP
    assert len(stand_in.requests) == GROUP


def test_a_malformed_judge_answer_fails_the_group_instead_of_scoring_it(stand_in: StandInJudge) -> None:
    env = _env(stand_in)
    stand_in.answers = ["no JSON here"]
    with pytest.raises(JudgeError):
        asyncio.run(env.collect_trajectories(env.train_item()))


def test_the_judges_calls_are_in_the_environments_metrics_and_evaluation_uses_it(stand_in: StandInJudge) -> None:
    env = _env(stand_in, eval_items=3)
    results = asyncio.run(env.evaluate())
    assert results[EVAL_PERCENT_CORRECT] == 1.0
    assert asyncio.run(env.wandb_log({}))[JUDGE_CALLS] == 3.0


def test_without_a_judge_url_the_runs_own_policy_judges(stand_in: StandInJudge) -> None:
    module = _module()
    env = module.OpenAnswerEnv(module.OpenAnswerConfig())
    assert env.judge.endpoint.base_url == env.server_configs[0].base_url
    assert env.judge.endpoint.model_name == env.server_configs[0].model_name


def test_rl_test_inference_runs_the_judged_environment_against_a_hosted_model(
    stand_in: StandInJudge, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_key(monkeypatch)
    asyncio.run(api.rl_select_environment("open_answer"))
    judge = {"judge_base_url": stand_in.url, "judge_model": STANDIN_MODEL, "rubric": STANDIN_RUBRIC}
    asyncio.run(api.rl_edit_config({**judge, "judge_mode": "absolute"}))
    with fake_provider() as (url, _):
        result = asyncio.run(rl_test_inference(num_steps=1, group_size=GROUP, models=[f"{url}#{SOLVER}"]))
    (tested,) = result.results
    assert tested.status == "ok", str(result)
    # The stand-in scores every non-empty answer 1.0: the judge's scores are the test's.
    assert (tested.completions, tested.correct) == (GROUP, GROUP)
    assert len(stand_in.requests) == GROUP
