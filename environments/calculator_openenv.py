"""The calculator agent's two-step word problems as an OpenEnv environment: an MCP tool and a multi-step episode.

An OpenEnv server as OpenEnv's own examples write one (``create_app(Env, ActionCls, ObservationCls)``), run as it
is: ``uvicorn calculator_openenv:app`` serves it without hermes-nb's trainer, and hermes-nb trains on it through
the OpenEnv session (``hermes_nb.frameworks.openenv``). The task, its tool and what "correct" means are
``calculator_agent``'s (imported, so they are written once): this is the same task in OpenEnv's shape, so a
short run shows the same learning when the policy sees the same prompt. Two things make it the same, token for
token (the embedded chat model was taught on calculator_agent's exact rendering): the MCP tool offers
``calculator_agent``'s own schema (FastMCP would derive another from the signature: pydantic's, keys sorted, with
``"additionalProperties": false``), and the run gives calculator_agent's system prompt: an OpenEnv server has no
system turn to send, its trainer writes one (OpenEnv's own harness takes a ``system_prompt``), so in hermes-nb it is
``env.system_prompt``: ``await rl_edit_config({"system_prompt": calculator_agent.SYSTEM_PROMPT})``.

Episode: ``reset(seed)`` draws a problem from the seed and answers a ``CalculatorObservation`` whose ``prompt`` is
the question. The policy calls the MCP tool ``calculate(expression)`` (a ``tools/call`` in the session; its
result is a ``tool`` message) as often as it likes, then answers with an ``AnswerAction`` (``message``: the number
alone). That step ends the episode with reward 1.0 when the answer is exactly right (surrounding whitespace
ignored), else 0.0.
"""

from __future__ import annotations

import random
from typing import Any

from calculator_agent import CALCULATE_TOOL, SYSTEM_PROMPT, TOOL_NAME, calculate, generate_item
from fastmcp import FastMCP
from fastmcp.tools import Tool
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

__all__ = ["SYSTEM_PROMPT", "AnswerAction", "CalculatorEnvironment", "CalculatorObservation", "app"]

# Sessions one server holds at once: a run opens group_size x max_num_workers (8 x 16 in configs/agent.yaml).
MAX_CONCURRENT_ENVS = 128


class AnswerAction(Action):
    message: str = Field(description="The final answer: the number alone.")


class CalculatorObservation(Observation):
    prompt: str = Field(default="", description="The word problem, or what the step did.")


def calculate_tool() -> Tool:
    """``calculate`` as an MCP tool, described and shaped as calculator_agent's ``CALCULATE_TOOL``."""
    spec = CALCULATE_TOOL.function
    tool = Tool.from_function(calculate, name=TOOL_NAME, description=spec.description)
    return tool.model_copy(update={"parameters": spec.parameters})


class CalculatorEnvironment(MCPEnvironment):
    """One episode per session; the problem is the reset seed's."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("calculator")
        mcp.add_tool(calculate_tool())
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
