"""Two-step word problems solved with a ``calculate`` tool: a multi-turn agent task for the embedded chat model.

Task: a word problem that takes two arithmetic steps ("Mia has 23 pens. She buys 4 boxes of 12 pens. How many
pens does she have now?"). The policy has one tool, ``calculate(expression)``, which evaluates whole-number
arithmetic (``+ - * /`` and parentheses, parsed with ``ast``, never ``eval``); a bad expression returns an error
text that the policy sees. The reference solution calls the tool for the first step (``4*12``), then for the
second step with the first result (``23+48``), then answers the number alone (``71``).
Reward: 1.0 when the final assistant turn (one that makes no tool call) is exactly the answer, surrounding
whitespace ignored; 0.0 otherwise (``AgentEnv``'s default, so "correct" is defined once, there).
Eval: greedy episodes over ``eval_items`` held-out problems, whose questions hash into the held-out split
(``hermes_nb.env.splits``) and are therefore never training items; reported as ``eval/percent_correct``.
"""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from hermes_nb.env import AgentEnv, AgentEnvConfig, QAItem
from hermes_nb.protocol.inference import ChatMessage, FunctionCall, FunctionSpec, ToolCall, ToolSpec

TOOL_NAME = "calculate"
CALCULATE_TOOL = ToolSpec(
    function=FunctionSpec(
        name=TOOL_NAME,
        description="Whole-number arithmetic: + - * / and parentheses.",
        parameters={
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    )
)
SYSTEM_PROMPT = "Use the calculate tool for each step, then reply with the number only."

# Bounds that keep ``calculate`` cheap whatever the policy writes: a longer expression or a larger intermediate
# value is refused. The task's own numbers stay far below both (results under 2,000, expressions of ~7 chars).
MAX_EXPRESSION_CHARS = 100
MAX_MAGNITUDE = 10**12

NAMES = (
    ("Mia", "she"),
    ("Leo", "he"),
    ("Ava", "she"),
    ("Sam", "he"),
    ("Zoe", "she"),
    ("Ben", "he"),
    ("Ivy", "she"),
    ("Max", "he"),
    ("Lily", "she"),
    ("Omar", "he"),
    ("Nina", "she"),
    ("Tom", "he"),
)
THINGS = ("pens", "apples", "stickers", "cards", "marbles", "books", "cookies", "shells", "coins", "stamps")


@dataclass(frozen=True)
class Problem:
    """A word problem with its two reference steps: ``second`` completes the second expression from the first
    step's result (``"23+{}"`` reads as ``23+48`` once the tool said 48). ``template`` names its kind."""

    question: str
    first: str
    second: str
    template: str


def _boxes(rng: random.Random, name: str, pronoun: str, thing: str) -> Problem:
    have, boxes, per_box = rng.randint(2, 60), rng.randint(2, 9), rng.randint(2, 12)
    question = (
        f"{name} has {have} {thing}. {pronoun.capitalize()} buys {boxes} boxes of {per_box} {thing}. "
        f"How many {thing} does {pronoun} have now?"
    )
    return Problem(question, f"{boxes}*{per_box}", f"{have}+{{}}", "boxes")


def _give_then_buy(rng: random.Random, name: str, pronoun: str, thing: str) -> Problem:
    have = rng.randint(20, 99)
    given, bought = rng.randint(2, have - 1), rng.randint(2, 40)
    question = (
        f"{name} has {have} {thing}. {pronoun.capitalize()} gives away {given} {thing} and then buys {bought} "
        f"more. How many {thing} does {pronoun} have now?"
    )
    return Problem(question, f"{have}-{given}", f"{{}}+{bought}", "give_then_buy")


def _share(rng: random.Random, name: str, pronoun: str, thing: str) -> Problem:
    bags, per_bag = rng.randint(2, 9), rng.randint(2, 12)
    # A friend count that divides the total, so the answer is a whole number (``bags`` itself always does).
    friends = rng.choice([d for d in range(2, 10) if bags * per_bag % d == 0])
    question = (
        f"{name} buys {bags} bags of {per_bag} {thing} and shares them equally among {friends} friends. "
        f"How many {thing} does each friend get?"
    )
    return Problem(question, f"{bags}*{per_bag}", f"{{}}/{friends}", "share")


def _shelf(rng: random.Random, name: str, pronoun: str, thing: str) -> Problem:
    rows, per_row = rng.randint(2, 9), rng.randint(2, 12)
    taken = rng.randint(2, rows * per_row - 1)
    question = (
        f"A shelf holds {rows} rows of {per_row} {thing}. {name} takes {taken} {thing} away. "
        f"How many {thing} are left on the shelf?"
    )
    return Problem(question, f"{rows}*{per_row}", f"{{}}-{taken}", "shelf")


def _times_as_many(rng: random.Random, name: str, pronoun: str, thing: str) -> Problem:
    have, times = rng.randint(2, 40), rng.randint(2, 9)
    other = rng.choice([n for n, _ in NAMES if n != name])
    question = (
        f"{name} has {have} {thing}. {other} has {times} times as many {thing}. How many {thing} do they have together?"
    )
    return Problem(question, f"{have}*{times}", f"{have}+{{}}", "times_as_many")


TEMPLATES: tuple[Callable[[random.Random, str, str, str], Problem], ...] = (
    _boxes,
    _give_then_buy,
    _share,
    _shelf,
    _times_as_many,
)


def generate_problem(rng: random.Random) -> Problem:
    """One word problem from ``rng`` (either side of the train/held-out split)."""
    template = rng.choice(TEMPLATES)
    name, pronoun = rng.choice(NAMES)
    return template(rng, name, pronoun, rng.choice(THINGS))


def reference_steps(problem: Problem) -> tuple[str, str]:
    """The two expressions of the reference solution, the second with the first result filled in."""
    return problem.first, problem.second.format(calculate(problem.first))


def to_item(problem: Problem) -> QAItem:
    """The environment's item: the question, the final number, and for demonstrations the reference steps, the
    template's name and its second step with a blank for the first result."""
    first, second = reference_steps(problem)
    metadata = {"steps": [first, second], "template": problem.template, "second_step": problem.second}
    return QAItem(prompt=problem.question, answer=calculate(second), metadata=metadata)


def generate_item(rng: random.Random) -> QAItem:
    return to_item(generate_problem(rng))


def demonstration(item: QAItem, *, system_prompt: str | None = SYSTEM_PROMPT) -> list[ChatMessage]:
    """The reference conversation for ``item``: question, a tool call per step, each result, the answer."""
    messages = [ChatMessage(role="system", content=system_prompt)] if system_prompt is not None else []
    messages.append(ChatMessage(role="user", content=item.prompt))
    for index, expression in enumerate(item.metadata["steps"]):
        call = ToolCall(
            id=f"call_{index}", function=FunctionCall(name=TOOL_NAME, arguments=expression_json(expression))
        )
        messages.append(ChatMessage(role="assistant", tool_calls=[call]))
        messages.append(ChatMessage(role="tool", content=calculate(expression), tool_call_id=call.id))
    messages.append(ChatMessage(role="assistant", content=item.answer))
    return messages


def expression_json(expression: str) -> str:
    """A tool call's arguments, as OpenAI sends them (a JSON object in a string)."""
    return json.dumps({"expression": expression})


def run_tool(call: FunctionCall) -> str:
    """The result text of one tool call; an unknown tool or bad arguments give an error text the policy reads."""
    if call.name != TOOL_NAME:
        return f"error: unknown tool {call.name!r}; the only tool is {TOOL_NAME}"
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = None
    expression = arguments.get("expression") if isinstance(arguments, dict) else None
    if not isinstance(expression, str):
        return 'error: arguments must be {"expression": "<arithmetic>"}'
    return calculate(expression)


class CalculationError(ValueError):
    """An expression ``calculate`` refuses; its message is what the policy reads."""


_OPERATORS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: _divide(a, b),
}


def calculate(expression: str) -> str:
    """The value of a whole-number expression as text, or an ``error: ...`` text saying what was refused."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        return f"error: the expression is longer than {MAX_EXPRESSION_CHARS} characters"
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "error: not an arithmetic expression"
    try:
        return str(_evaluate(tree.body))
    except CalculationError as exc:
        return f"error: {exc}"


def _evaluate(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _bounded(_OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right)))
    raise CalculationError("only whole numbers, + - * / and parentheses are allowed")


def _divide(numerator: int, denominator: int) -> int:
    if denominator == 0:
        raise CalculationError("division by zero")
    if numerator % denominator:
        raise CalculationError(f"{numerator}/{denominator} is not a whole number")
    return numerator // denominator


def _bounded(value: int) -> int:
    if abs(value) > MAX_MAGNITUDE:
        raise CalculationError(f"a value beyond {MAX_MAGNITUDE} in magnitude")
    return value


class CalculatorAgentConfig(AgentEnvConfig):
    # A reference episode is ~195 tokens with the tools block; room for a wordier or longer (wrong) one.
    max_token_length: int = Field(
        default=384, ge=8, le=32768, description="Longest episode (prompt, every turn and tool result), in tokens."
    )


class CalculatorAgentEnv(AgentEnv):
    name = "calculator_agent"
    env_config_cls = CalculatorAgentConfig
    config: CalculatorAgentConfig
    system_prompt: ClassVar[str | None] = SYSTEM_PROMPT

    def generate_problem(self, rng: random.Random) -> QAItem:
        return generate_item(rng)

    def tools(self) -> list[ToolSpec]:
        return [CALCULATE_TOOL]

    async def call_tool(self, call: FunctionCall, item: QAItem) -> str:
        return run_tool(call)


if __name__ == "__main__":
    CalculatorAgentEnv.cli()
