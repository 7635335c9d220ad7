"""The shipped agent environment ``calculator_agent``: a safe ``calculate`` tool, reproducible word problems split
into training and held-out items, and a reference conversation whose steps the tool confirms."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import random
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from hermes_nb.config import EMBEDDED_CHAT_MODEL
from hermes_nb.env.server_config import APIServerConfig
from hermes_nb.env.splits import draw_item, heldout_items, is_heldout
from hermes_nb.env_host.loop import evaluate_once
from hermes_nb.protocol.inference import FunctionCall
from hermes_nb.protocol.metrics import EVAL_FAILED_EPISODES, EVAL_PERCENT_CORRECT
from hermes_nb.system.home import embedded_chat_model_dir, shipped_environments_dir

# The first held-out items of the default evaluation, played through a real server (200 would take too long here);
# pretraining.json records each item's greedy verdict, so the same items are compared.
SERVED_ITEMS = 48
# Greedy decoding in the server's sampler and in the script's batched generate may split a near-tie differently.
MAX_DIFFERENT_VERDICTS = 2


def load() -> ModuleType:
    name = "test_shipped_env_calculator_agent"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, shipped_environments_dir() / "calculator_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


calc = load()


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("4*12", "48"),
        ("23+48", "71"),
        ("60-32", "28"),
        ("24/2", "12"),
        ("(3+4)*2", "14"),
        (" 2 - 5 ", "-3"),
        ("-(2*3)", "-6"),
    ],
)
def test_calculate_evaluates_whole_number_arithmetic(expression: str, value: str) -> None:
    assert calc.calculate(expression) == value


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",  # a call
        "abs(-3)",  # a call of a builtin
        "x + 1",  # a name
        "(1).real",  # an attribute
        "9**9**9",  # a huge power: powers are not arithmetic the tool offers
        "2**3",
        "1.5*2",  # not whole numbers
        "True + 1",
        "'a' * 3",
        "[1, 2]",
        "3 // 2",
        "3 % 2",
        "4*",  # not an expression
        "",
    ],
)
def test_calculate_refuses_anything_else_with_an_error_text(expression: str) -> None:
    assert calc.calculate(expression).startswith("error: ")


def test_calculate_reports_division_by_zero_and_inexact_division() -> None:
    assert calc.calculate("7/0") == "error: division by zero"
    assert calc.calculate("7/2") == "error: 7/2 is not a whole number"


def test_calculate_bounds_the_work_an_expression_can_cause() -> None:
    assert calc.calculate("999999*999999*999999").startswith("error: a value beyond")
    assert calc.calculate("1+" * 200 + "1").startswith("error: the expression is longer")
    assert calc.calculate("(" * 45 + "1" + ")" * 45) == "1"  # nesting within the length limit is fine


def test_run_tool_reads_the_expression_argument_and_explains_bad_calls() -> None:
    assert calc.run_tool(FunctionCall(name="calculate", arguments='{"expression": "4*12"}')) == "48"
    assert calc.run_tool(FunctionCall(name="calculate", arguments='{"expr": "4*12"}')).startswith("error: ")
    assert calc.run_tool(FunctionCall(name="calculate", arguments="4*12")).startswith("error: ")
    assert calc.run_tool(FunctionCall(name="search", arguments="{}")).startswith("error: unknown tool")


def test_the_generator_is_reproducible_and_varied() -> None:
    first = [calc.generate_item(random.Random(7)) for _ in range(3)]
    again = [calc.generate_item(random.Random(7)) for _ in range(3)]
    assert first == again
    rng = random.Random(0)
    questions = {calc.generate_item(rng).prompt for _ in range(500)}
    assert len(questions) > 490


def test_every_item_is_two_steps_the_tool_confirms() -> None:
    rng = random.Random(1)
    for _ in range(300):
        item = calc.generate_item(rng)
        first, second = item.metadata["steps"]
        result = calc.calculate(first)
        assert result.isdigit() and item.metadata["second_step"].format(result) == second  # uses the first result
        assert calc.calculate(second) == item.answer
        assert item.answer.isdigit()


def test_the_generator_draws_every_template() -> None:
    rng = random.Random(2)
    templates = {calc.generate_item(rng).metadata["template"] for _ in range(200)}
    assert templates == {"boxes", "give_then_buy", "share", "shelf", "times_as_many"}


def test_training_and_held_out_items_are_disjoint() -> None:
    rng = random.Random(0)
    train = {draw_item(calc.generate_item, rng, "train").prompt for _ in range(300)}
    heldout = {item.prompt for item in heldout_items(calc.generate_item, 100, seed=0, task_name="calculator_agent")}
    assert not train & heldout
    assert all(is_heldout(prompt) for prompt in heldout)
    assert len(heldout) > 95


def test_the_demonstration_calls_the_tool_per_step_then_answers_the_number() -> None:
    item = calc.generate_item(random.Random(3))
    messages = calc.demonstration(item)
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert messages[0].content == calc.SYSTEM_PROMPT and messages[1].content == item.prompt
    calls = [m.tool_calls[0] for m in messages if m.tool_calls]
    assert [json.loads(c.function.arguments)["expression"] for c in calls] == item.metadata["steps"]
    assert [m.content for m in messages if m.role == "tool"] == [calc.calculate(s) for s in item.metadata["steps"]]
    assert messages[-1].content == item.answer and not messages[-1].tool_calls
    assert calc.demonstration(item, system_prompt=None)[0].role == "user"


def test_the_reward_is_the_exact_final_answer() -> None:
    env = calc.CalculatorAgentEnv(calc.CalculatorAgentConfig())
    item = calc.generate_item(random.Random(3))

    def score(final_answer: str | None) -> float:
        return float(env.score_episode(SimpleNamespace(final_answer=final_answer), item))  # type: ignore[arg-type]

    assert score(f" {item.answer}\n") == 1.0
    assert score(f"{item.answer} pens") == 0.0
    assert score(str(int(item.answer) + 1)) == 0.0
    assert score(None) == 0.0  # no final answer: the turn limit or the token budget ended the episode


def test_the_environment_offers_the_calculate_tool_and_answers_calls_with_it() -> None:
    env = calc.CalculatorAgentEnv(calc.CalculatorAgentConfig())
    item = calc.generate_item(random.Random(3))
    assert [tool.function.name for tool in env.tools()] == ["calculate"]
    call = FunctionCall(name="calculate", arguments=calc.expression_json(item.metadata["steps"][0]))
    assert asyncio.run(env.call_tool(call, item)) == calc.calculate(item.metadata["steps"][0])
    assert [m.role for m in env.initial_messages(item)] == ["system", "user"]


def test_the_shipped_chat_model_plays_held_out_episodes_as_pretraining_measured() -> None:
    pytest.importorskip("transformers")
    import torch
    from agent_episodes import serve_model

    torch.set_num_threads(1)
    record = json.loads((embedded_chat_model_dir() / "pretraining.json").read_text(encoding="utf-8"))
    expected = [verdict == "1" for verdict in record["heldout_correct"][:SERVED_ITEMS]]
    with serve_model(embedded_chat_model_dir()) as served:
        config = calc.CalculatorAgentConfig(eval_items=SERVED_ITEMS, tokenizer_name=EMBEDDED_CHAT_MODEL)
        env = calc.CalculatorAgentEnv(config, [APIServerConfig(base_url=served.url)])
        results = _evaluate(env)
    assert results[EVAL_FAILED_EPISODES] == 0.0
    measured = round(results[EVAL_PERCENT_CORRECT] * SERVED_ITEMS)
    assert abs(measured - sum(expected)) <= MAX_DIFFERENT_VERDICTS
    assert 0 < measured < SERVED_ITEMS  # partial: room for RL, not an unusable model


def _evaluate(env: Any) -> dict[str, float]:
    async def run() -> dict[str, float]:
        try:
            return await evaluate_once(env)
        finally:
            await env.server.aclose()

    return asyncio.run(run())
