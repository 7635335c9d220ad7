"""The calculator agent's two-step word problems as an OpenEnv environment: an MCP tool and a multi-step episode.

An OpenEnv server as OpenEnv's own examples write one (``create_app(Env, ActionCls, ObservationCls)``), run as it
is: ``uvicorn calculator_openenv:app`` serves it without hermes-nb's trainer, and hermes-nb trains on it through
the OpenEnv session (``hermes_nb.frameworks.openenv``). The task, its tool and what "correct" means are
``calculator_agent``'s (imported, so they are written once): this is the same task in OpenEnv's shape, so a
short run shows the same learning.

Episode: ``reset(seed)`` draws a problem from the seed and answers a ``CalculatorObservation`` whose ``prompt`` is
the question. The policy calls the MCP tool ``calculate(expression)`` (a ``tools/call`` in the session; its
result is a ``tool`` message) as often as it likes, then answers with an ``AnswerAction`` (``message``: the number
alone). That step ends the episode with reward 1.0 when the answer is exactly right (surrounding whitespace
ignored), else 0.0.
"""

from __future__ import annotations

import random
from typing import Any

from calculator_agent import SYSTEM_PROMPT, calculate, generate_item
from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

__all__ = ["SYSTEM_PROMPT", "AnswerAction", "CalculatorEnvironment", "CalculatorObservation", "app"]

# Sessions one server holds at once: a run opens group_size x max_num_workers (8 x 2 in the shipped settings).
MAX_CONCURRENT_ENVS = 64


class AnswerAction(Action):
    message: str = Field(description="The final answer: the number alone.")


class CalculatorObservation(Observation):
    prompt: str = Field(default="", description="The word problem, or what the step did.")


class CalculatorEnvironment(MCPEnvironment):
    """One episode per session; the problem is the reset seed's."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("calculator")

        # Named here: the function's own name would shadow calculator_agent's calculate, which it calls.
        @mcp.tool(name="calculate")
        def calculate_tool(expression: str) -> str:
            """Whole-number arithmetic: + - * / and parentheses."""
            return calculate(expression)

        super().__init__(mcp)
        self._state = State(step_count=0)
        self._answer = ""

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CalculatorObservation:
        item = generate_item(random.Random(seed))
        self._answer = item.answer
        self._state = State(episode_id=episode_id, step_count=0)
        return CalculatorObservation(prompt=item.prompt, reward=0.0, done=False)

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> CalculatorObservation:
        self._state.step_count += 1
        if not isinstance(action, AnswerAction):
            return CalculatorObservation(prompt=f"unknown action {type(action).__name__}", reward=0.0, done=False)
        correct = action.message.strip() == self._answer
        return CalculatorObservation(prompt="correct" if correct else "wrong", reward=float(correct), done=True)

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    CalculatorEnvironment,
    AnswerAction,
    CalculatorObservation,
    env_name="calculator_openenv",
    max_concurrent_envs=MAX_CONCURRENT_ENVS,
)
