"""A tiny chat model that plays known calculator episodes, served for real, and an ``AgentEnv`` over it.

``make_tiny_chat_model``'s random Qwen3 (the shipped chat tokenizer and template) is overfit on three scripted
conversations, token for token as an ``Episode`` builds them: a training question solved with two tool calls and
an answer, a held-out question solved the same way, and a question answered with a malformed tool call. Its
greedy answers are then known, and at a low temperature it follows them nearly always, so the episode tests
run real multi-turn episodes with tool calls through a real ``InferenceServer``. ``SampleLog`` wraps the engine's
``sample`` to record every prompt it really sampled from and what it sampled.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tool_model import overfit

from hermes_nb.env import AgentEnv, AgentEnvConfig, ChatRenderer, QAItem
from hermes_nb.env.server_config import APIServerConfig
from hermes_nb.inference.contract import Policy
from hermes_nb.inference.engine import InferenceEngine
from hermes_nb.inference.sampler import RowResult, SampleRow
from hermes_nb.inference.server import InferenceServer
from hermes_nb.protocol.inference import ChatMessage, FunctionCall, FunctionSpec, ToolCall, ToolSpec
from hermes_nb.system.net import free_port
from hermes_nb.testing import ModelShape, make_tiny_chat_model

SYSTEM_PROMPT = "Solve the problem with the calculate tool, one step at a time. Then reply with the number only."
TOOLS = [
    ToolSpec(
        function=FunctionSpec(
            name="calculate",
            description="Evaluate whole-number arithmetic.",
            parameters={"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
        )
    )
]
# Questions on both sides of the train/held-out split (hermes_nb.env.splits.is_heldout; a test pins the sides).
TRAIN_QUESTION = "Leo has 15 apples. He buys 3 bags of 6 apples. How many apples does he have now?"
HELDOUT_QUESTION = "Mia has 23 pens. She buys 4 boxes of 12 pens. How many pens does she have now?"
MALFORMED_QUESTION = "Ava has 9 cards. She buys 2 packs of 7 cards. How many cards does she have now?"
ANSWERS = {TRAIN_QUESTION: "33", HELDOUT_QUESTION: "71", MALFORMED_QUESTION: "23"}
# What the model is taught to write: two calls then the number; for one question, a call that is not JSON.
STEPS = {
    TRAIN_QUESTION: [("3*6", "18"), ("15+18", "33")],
    HELDOUT_QUESTION: [("4*12", "48"), ("23+48", "71")],
}
MALFORMED_CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": 2*7}\n</tool_call>'
# Memorises the three conversations (~210 tokens each) in ~30 steps, ~3 s on one core.
SHAPE = ModelShape(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4)
# A low temperature: sampled (real logprobs), yet the memorised turns come out nearly every time.
TEMPERATURE = 0.3


def script(question: str) -> list[ChatMessage]:
    """The scripted conversation for ``question``, from the system prompt to the last assistant turn."""
    messages = [ChatMessage(role="system", content=SYSTEM_PROMPT), ChatMessage(role="user", content=question)]
    if question == MALFORMED_QUESTION:
        return [*messages, ChatMessage(role="assistant", content=MALFORMED_CALL)]
    for index, (expression, result) in enumerate(STEPS[question]):
        call = ToolCall(
            id=f"call_{index}",
            function=FunctionCall(name="calculate", arguments=json.dumps({"expression": expression})),
        )
        messages += [
            ChatMessage(role="assistant", content=None, tool_calls=[call]),
            ChatMessage(role="tool", content=result, tool_call_id=call.id),
        ]
    return [*messages, ChatMessage(role="assistant", content=ANSWERS[question])]


def training_pairs(renderer: ChatRenderer, messages: list[ChatMessage]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, turn ids) of each assistant turn of ``messages``, cut as an episode cuts its transcript: the
    first prompt encoded whole, each turn through its eos, then the template's text up to the next turn."""
    pairs: list[tuple[list[int], list[int]]] = []
    ids: list[int] = []
    done = ""  # the text encoded so far
    eos = renderer.eos_token
    for k, message in enumerate(messages):
        if message.role != "assistant":
            continue
        prompt_text = renderer.render(messages[:k], TOOLS, add_generation_prompt=True)
        ids += renderer.encode(prompt_text[len(done) :])
        own = renderer.render(messages[: k + 1], TOOLS)[len(prompt_text) :]
        turn = renderer.encode(own[: own.rfind(eos) + len(eos)])
        pairs.append((list(ids), turn))
        ids += turn
        done = prompt_text + own[: own.rfind(eos) + len(eos)]
    return pairs


def make_agent_model(directory: Path) -> Path:
    """The tiny chat model at ``directory``, overfit on the three scripted conversations."""
    path = make_tiny_chat_model(directory, SHAPE)
    renderer = ChatRenderer.from_model_dir(path)
    pairs = [
        pair
        for q in (TRAIN_QUESTION, HELDOUT_QUESTION, MALFORMED_QUESTION)
        for pair in training_pairs(renderer, script(q))
    ]
    overfit(path, pairs)
    return path


_MODELS: dict[str, Path] = {}


def agent_model(base: Path) -> Path:
    """The overfit model, made once per test session (several test files share it)."""
    key = str(base)
    if key not in _MODELS:
        _MODELS[key] = make_agent_model(base / "agent_model")
    return _MODELS[key]


@dataclass
class SampleLog:
    """Every batch the engine really sampled: the rows (their prompts) and what each row got."""

    calls: list[tuple[list[SampleRow], list[RowResult]]] = field(default_factory=list)

    def rows(self) -> list[tuple[SampleRow, RowResult]]:
        return [(row, result) for rows, results in self.calls for row, result in zip(rows, results, strict=True)]

    def clear(self) -> None:
        self.calls.clear()


@dataclass
class Served:
    url: str  # the OpenAI base URL, ending in /v1
    path: Path
    log: SampleLog
    engine: InferenceEngine


@contextmanager
def serve_model(path: Path, version: int = 0) -> Iterator[Served]:
    """A real inference server on loopback over the model at ``path``, its engine's sampling recorded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    engine = InferenceEngine(seed=0)
    log = SampleLog()
    original = engine.sample

    async def recorded(rows: list[SampleRow]) -> tuple[list[RowResult], int]:
        results, policy_version = await original(rows)
        log.calls.append((list(rows), list(results)))
        return results, policy_version

    engine.sample = recorded  # type: ignore[method-assign]
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    engine.publish(
        Policy(model=model, tokenizer=AutoTokenizer.from_pretrained(str(path)), version=version, name="agent")
    )
    server = InferenceServer(engine, free_port())
    server.start()
    try:
        yield Served(f"http://127.0.0.1:{server.port}/v1", path, log, engine)
    finally:
        server.stop()


class CalculatorEnv(AgentEnv):
    """The scripted task: items are the three questions; ``calculate`` evaluates ``a*b`` and ``a+b``."""

    name = "test_calculator"
    system_prompt = SYSTEM_PROMPT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tool_calls: list[FunctionCall] = []
        self.failing_calls = 0  # the next this many calls raise

    def generate_problem(self, rng: random.Random) -> QAItem:
        question = rng.choice([TRAIN_QUESTION, HELDOUT_QUESTION, MALFORMED_QUESTION])
        return QAItem(prompt=question, answer=ANSWERS[question])

    def tools(self) -> list[ToolSpec]:
        return list(TOOLS)

    async def call_tool(self, call: FunctionCall, item: QAItem) -> str:
        self.tool_calls.append(call)
        if self.failing_calls > 0:
            self.failing_calls -= 1
            raise RuntimeError("the tool broke")
        expression = str(json.loads(call.arguments).get("expression", ""))
        left, op, right = expression.partition("*") if "*" in expression else expression.partition("+")
        try:
            return str(int(left) * int(right) if op == "*" else int(left) + int(right))
        except ValueError:
            return f"error: cannot evaluate {expression!r}"


def calculator_env(served: Served, **config: Any) -> CalculatorEnv:
    values = {
        "group_size": 4,
        "max_token_length": 512,
        "max_turns": 4,
        "max_turn_tokens": 48,
        "temperature": TEMPERATURE,
        "tokenizer_name": str(served.path),
        "ensure_scores_are_not_same": False,
        "eval_items": 2,
        **config,
    }
    return CalculatorEnv(AgentEnvConfig(**values), [APIServerConfig(base_url=served.url)])
