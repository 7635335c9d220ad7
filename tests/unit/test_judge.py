"""Model-judged scores (hermes_nb.env.judge) against a loopback stand-in judge: an HTTP server on 127.0.0.1 that
checks the requests it gets (rubric, group, model) and answers deterministic scores."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from judge_standin import STANDIN_MODEL, STANDIN_RUBRIC, StandInJudge

from hermes_nb.env import APIServerConfig
from hermes_nb.env.judge import Judge, JudgeError, with_judge_reasons
from hermes_nb.protocol.metrics import JUDGE_CALLS, JUDGE_COMPLETION_TOKENS, JUDGE_PROMPT_TOKENS
from hermes_nb.protocol.trajectory import JUDGE_REASON_OVERRIDE, ScoredDataGroup

RUBRIC, MODEL = STANDIN_RUBRIC, STANDIN_MODEL


@pytest.fixture
def stand_in() -> Iterator[StandInJudge]:
    judge = StandInJudge()
    yield judge
    judge.close()


def _judge(stand_in: StandInJudge, answers: list[Any], timeout: float = 5.0) -> Judge:
    stand_in.answers = answers
    return Judge(APIServerConfig(base_url=stand_in.url, model_name=MODEL, timeout=timeout), retries=1)


def test_an_absolute_score_sends_the_rubric_task_and_answer_to_the_judges_model(stand_in: StandInJudge) -> None:
    judge = _judge(stand_in, [{"score": 0.75, "reason": "vivid enough"}])
    verdict = asyncio.run(judge.score("Name a bakery.", "Crumb & Co", RUBRIC))
    assert (verdict.score, verdict.reason) == (0.75, "vivid enough")
    (request,) = stand_in.requests
    assert request["path"] == "/v1/chat/completions" and request["model"] == MODEL
    user = request["messages"][-1]["content"]
    assert RUBRIC in user and "Name a bakery." in user and "Crumb & Co" in user


def test_a_relative_ranking_sends_the_whole_group_and_orders_the_scores_by_index(stand_in: StandInJudge) -> None:
    answer = {"scores": [{"index": 1, "score": 0.2, "reason": "dull"}, {"index": 0, "score": 0.9, "reason": "apt"}]}
    judge = _judge(stand_in, [answer])
    verdicts = asyncio.run(judge.rank("Name a bakery.", ["Crumb & Co", "Bakery"], RUBRIC))
    assert [(v.score, v.reason) for v in verdicts] == [(0.9, "apt"), (0.2, "dull")]
    user = stand_in.requests[0]["messages"][-1]["content"]
    assert "Answer 0:\nCrumb & Co" in user and "Answer 1:\nBakery" in user and RUBRIC in user


def test_a_malformed_answer_is_a_judge_error(stand_in: StandInJudge) -> None:
    judge = _judge(stand_in, ["the first one is best"])
    with pytest.raises(JudgeError, match="not the JSON asked for"):
        asyncio.run(judge.score("task", "answer", RUBRIC))


def test_a_ranking_that_misses_a_member_is_a_judge_error(stand_in: StandInJudge) -> None:
    judge = _judge(stand_in, [{"scores": [{"index": 0, "score": 1.0}, {"index": 0, "score": 0.0}]}])
    with pytest.raises(JudgeError, match="index"):
        asyncio.run(judge.rank("task", ["a", "b"], RUBRIC))


def test_a_server_error_is_retried_and_then_scores(stand_in: StandInJudge) -> None:
    judge = _judge(stand_in, [503, {"score": 1, "reason": "fine"}])
    assert asyncio.run(judge.score("task", "answer", RUBRIC)).score == 1.0
    assert len(stand_in.requests) == 2


def test_a_judge_that_times_out_on_every_try_is_a_judge_error(stand_in: StandInJudge) -> None:
    judge = _judge(stand_in, ["sleep", "sleep"], timeout=0.2)
    with pytest.raises(JudgeError, match="after 2 tries"):
        asyncio.run(judge.score("task", "answer", RUBRIC))


def test_calls_and_tokens_are_counted_as_env_metrics(stand_in: StandInJudge) -> None:
    judge = _judge(stand_in, [{"score": 0.5}, {"score": 0.5}])
    asyncio.run(judge.score("t", "a", RUBRIC))
    asyncio.run(judge.score("t", "b", RUBRIC))
    assert judge.metrics() == {JUDGE_CALLS: 2.0, JUDGE_PROMPT_TOKENS: 200.0, JUDGE_COMPLETION_TOKENS: 20.0}


def test_the_judges_reasons_ride_in_the_groups_overrides_beside_its_verdicts() -> None:
    from hermes_nb.env.judge import Verdict

    group = ScoredDataGroup(tokens=[[1, 2], [1, 3]], masks=[[-100, 2], [-100, 3]], scores=[0.9, 0.1])
    group = group.model_copy(update={"overrides": [{"correct": True}, {"correct": False}]})
    reasoned = with_judge_reasons(group, [Verdict(0.9, "apt"), Verdict(0.1, "dull")])
    assert reasoned is not None and reasoned.overrides == [
        {"correct": True, JUDGE_REASON_OVERRIDE: "apt"},
        {"correct": False, JUDGE_REASON_OVERRIDE: "dull"},
    ]
