"""``AgentEnv`` against a real inference server: a group trains exactly the tokens the engine sampled (and the
trainer's own datums agree), failed and turn-limited episodes are counted without ending anything, malformed calls
end an episode as a wrong answer, evaluation is greedy on held-out items, and process mode runs agent groups."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import torch
from agent_episodes import (
    ANSWERS,
    HELDOUT_QUESTION,
    MALFORMED_CALL,
    MALFORMED_QUESTION,
    TRAIN_QUESTION,
    CalculatorEnv,
    Served,
    agent_model,
    calculator_env,
    serve_model,
)

from hermes_nb.env import QAItem
from hermes_nb.env_host.loop import process
from hermes_nb.protocol.metrics import (
    ENV_FAILED_EPISODES,
    ENV_TURN_LIMIT_EPISODES,
    ENV_TURNS_MEAN,
    EVAL_FAILED_EPISODES,
    EVAL_PERCENT_CORRECT,
    EVAL_POLICY_STEP,
)
from hermes_nb.protocol.trajectory import MASK_IGNORE, PROMPT_LOGPROB, ScoredDataGroup
from hermes_nb.trainer.step.advantages import group_data

torch.set_num_threads(1)

POLICY_VERSION = 5
T = TypeVar("T")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_model(agent_model(tmp_path_factory.getbasetemp()), version=POLICY_VERSION) as served:
        yield served


@pytest.fixture
def env(served: Served) -> CalculatorEnv:
    served.log.clear()
    return calculator_env(served)


def _item(question: str) -> QAItem:
    return QAItem(prompt=question, answer=ANSWERS[question])


def _run(env: CalculatorEnv, work: Awaitable[T]) -> T:
    """``work`` on a fresh event loop, the environment's HTTP client closed after it (it is bound to the loop)."""

    async def run() -> T:
        try:
            return await work
        finally:
            await env.server.aclose()

    return asyncio.run(run())


async def _group(env: CalculatorEnv, question: str) -> ScoredDataGroup:
    group, backlog = await env.collect_trajectories(_item(question))
    assert group is not None and backlog == []
    return group


def _collect(env: CalculatorEnv, question: str) -> ScoredDataGroup:
    return _run(env, _group(env, question))


def _sampled_spans(tokens: list[int], served: Served) -> list[tuple[int, int, list[float]]]:
    spans = []
    for row, result in served.log.rows():
        start, end = len(row.prompt), len(row.prompt) + len(result.token_ids)
        if tokens[:start] == row.prompt and tokens[start:end] == result.token_ids:
            spans.append((start, end, result.logprobs))
    return spans


def test_a_group_trains_exactly_the_sampled_tokens_and_the_trainers_datums_agree(
    env: CalculatorEnv, served: Served
) -> None:
    group = _collect(env, TRAIN_QUESTION)
    assert group.group_size == 4 and group.inference_logprobs is not None and not group.is_test_only()
    rows = served.log.rows()
    for row, result in rows:  # every prompt the engine sampled from, and its answer, lie along a trained sequence
        end = len(row.prompt) + len(result.token_ids)
        assert any(tokens[:end] == row.prompt + result.token_ids for tokens in group.tokens)
    datums, sent = group_data(group)
    assert len(datums) == 4 and all(sent)
    for tokens, masks, logprobs, datum in zip(group.tokens, group.masks, group.inference_logprobs, datums, strict=True):
        spans = _sampled_spans(tokens, served)
        trained = {p for start, end, _ in spans for p in range(start, end)}
        assert {p for p, m in enumerate(masks) if m != MASK_IGNORE} == trained
        for start, end, sampled_logprobs in spans:
            assert masks[start:end] == tokens[start:end] and logprobs[start:end] == sampled_logprobs
        assert all(logprobs[p] == PROMPT_LOGPROB for p in range(len(tokens)) if p not in trained)
        # The trainer's conversion: position t predicts token t+1, weight 1 exactly on sampled tokens.
        assert datum.input_tokens_T + tokens[-1:] == tokens and datum.target_tokens_T == tokens[1:]
        assert [p + 1 for p, w in enumerate(datum.weights_T) if w == 1.0] == sorted(trained)
        assert all(w in (0.0, 1.0) for w in datum.weights_T)
        assert all(datum.sampling_logprobs_T[p - 1] == logprobs[p] for p in trained)
    # Episodes that sampled the same turns share spans: count each sequence's distinct turns.
    turns = [len({(start, end) for start, end, _ in _sampled_spans(tokens, served)}) for tokens in group.tokens]
    assert max(turns) == 3  # two turns with tool calls, then the answer
    assert group.messages is not None
    answered = [m[-1].content == ANSWERS[TRAIN_QUESTION] for m in group.messages]
    assert group.scores == [float(a) for a in answered] and group.verdicts() == answered


def test_a_groups_messages_carry_the_tool_calls_and_results(env: CalculatorEnv, served: Served) -> None:
    group = _collect(env, TRAIN_QUESTION)
    assert group.messages is not None
    messages = group.messages[0]
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    call = (messages[2].model_extra or {})["tool_calls"][0]
    assert messages[2].content is None and json.loads(call["function"]["arguments"]) == {"expression": "3*6"}
    assert (messages[3].model_extra or {})["tool_call_id"] == call["id"] and messages[3].content == "18"
    assert messages[-1].content == "33"
    assert [c.arguments for c in env.tool_calls[:1]] == ['{"expression": "3*6"}']


def test_an_episode_that_raises_is_counted_and_left_out_and_the_next_group_is_whole(env: CalculatorEnv) -> None:
    env.failing_calls = 1

    async def two_groups() -> tuple[int, float, int, float]:
        first = await _group(env, TRAIN_QUESTION)
        first_failed = (await env.wandb_log({}))[ENV_FAILED_EPISODES]
        second = await _group(env, TRAIN_QUESTION)
        return first.group_size, first_failed, second.group_size, (await env.wandb_log({}))[ENV_FAILED_EPISODES]

    assert _run(env, two_groups()) == (3, 1.0, 4, 0.0)


def test_when_every_episode_fails_the_group_fails_with_the_first_error(env: CalculatorEnv) -> None:
    env.failing_calls = 1000
    with pytest.raises(RuntimeError, match="the tool broke"):
        _run(env, env.collect_trajectories(_item(TRAIN_QUESTION)))
    assert asyncio.run(env.wandb_log({}))[ENV_FAILED_EPISODES] == 4.0


def test_an_episode_at_max_turns_without_an_answer_scores_zero_and_is_counted(served: Served) -> None:
    env = calculator_env(served, max_turns=1)
    group = _collect(env, TRAIN_QUESTION)
    assert group.scores == [0.0] * 4 and env.tool_calls == []  # the last turn's calls are not run
    metrics = asyncio.run(env.wandb_log({}))
    assert metrics[ENV_TURN_LIMIT_EPISODES] == 4.0 and metrics[ENV_TURNS_MEAN] == 1.0
    assert group.verdicts() == [False] * 4


def test_a_malformed_tool_call_ends_the_episode_as_a_wrong_answer(env: CalculatorEnv) -> None:
    group = _collect(env, MALFORMED_QUESTION)
    assert group.scores == [0.0] * 4 and env.tool_calls == []
    assert group.messages is not None and all(m[-1].content == MALFORMED_CALL for m in group.messages)
    assert asyncio.run(env.wandb_log({}))[ENV_TURNS_MEAN] == 1.0


def test_evaluation_plays_greedy_episodes_on_held_out_items(env: CalculatorEnv, served: Served) -> None:
    assert {item.prompt for item in env.eval_items()} == {HELDOUT_QUESTION}
    assert HELDOUT_QUESTION not in {env.train_item().prompt for _ in range(40)}
    results = _run(env, env.evaluate())
    assert results == {EVAL_PERCENT_CORRECT: 1.0, EVAL_FAILED_EPISODES: 0.0, EVAL_POLICY_STEP: float(POLICY_VERSION)}
    rows = served.log.rows()
    assert len(rows) == 2 * 3 and all(row.temperature == 0.0 for row, _ in rows)  # two items, three turns each


def test_process_mode_writes_agent_groups_and_goes_on_after_a_failed_episode(
    env: CalculatorEnv, tmp_path: Path
) -> None:
    env.failing_calls = 1
    output = tmp_path / "groups.jsonl"
    summary = _run(env, process(env, 3, output))
    assert summary.groups == 3 and summary.failed == 0
    lines = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    sizes = [len(line["group"]["tokens"]) for line in lines]
    assert sorted(sizes) == [3, 4, 4]  # the failed episode left its group one short; the run went on
    for line in lines:
        for sample, messages in zip(line["samples"], line["group"]["messages"], strict=True):
            assert sample["completion"] == messages[-1]["content"]  # the last turn, as sampled
