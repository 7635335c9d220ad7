"""The calculator agent's two-step word problems as a verifiers environment: a ``vf.Toolset`` with a ``calculate``
tool, written as verifiers' own tool tasksets are.

A verifiers environment (``verifiers.v1``) exporting one ``vf.Taskset`` subclass; its id is the module's name
(``calculator_verifiers``). The task, its tool, its train/held-out split and what "correct" means are
``calculator_agent``'s (imported, so they are written once): the same task as ``calculator_agent`` and
``calculator_openenv``, in verifiers' shape.

Tool: ``CalculatorToolset`` is served once per environment (``Taskset.toolsets``) as an MCP server, which verifiers
starts as ``python -m calculator_verifiers`` (hence the ``__main__`` block) and offers the harness as the OpenAI
tool ``calculate(expression)``, declared as ``calculator_agent`` declares it (``CALCULATE_TOOL``): the policy reads
the tools block as text, and the MCP SDK would derive another schema from the signature (pydantic's, with titles),
which the shipped chat model, taught on calculator_agent's exact rendering, misreads.
Episode: the system prompt asks for a tool call per step, then the number alone; the reward is 1.0 when the last
reply, stripped, is exactly the answer, else 0.0; the tool calls made are a metric.
Split (a taskset config field, verifiers has no split of its own): ``train`` loads ``num_tasks`` problems of
``calculator_agent``'s training stream for ``seed``, ``held_out`` its held-out items for ``seed`` in its order, so
an evaluation of the first N held-out tasks plays the problems ``calculator_agent``'s evaluation of N items plays.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Literal

import verifiers.v1 as vf
from calculator_agent import CALCULATE_TOOL, SYSTEM_PROMPT, CalculatorAgentEnv, calculate, generate_item
from mcp.server.mcpserver import MCPServer
from mcp.types import Tool

from hermes_nb.env.splits import draw_item, heldout_items

__all__ = ["CalculatorTaskset"]


class CalculatorToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None  # the tool is offered as ``calculate``, calculator_agent's name for it

    @vf.tool
    def calculate(self, expression: str) -> str:
        """Whole-number arithmetic: + - * / and parentheses."""
        return calculate(expression)

    def register(self, mcp: MCPServer) -> None:
        super().register(mcp)
        # MCPServer's handlers call its public list_tools (verifiers' own NeMo Gym toolset advertises its tools so).
        mcp.list_tools = advertised_tools


async def advertised_tools() -> list[Tool]:
    """``calculate`` as calculator_agent declares it: its name, description and parameters, key for key."""
    spec = CALCULATE_TOOL.function
    return [Tool(name=spec.name, description=spec.description, input_schema=spec.parameters)]


class CalculatorData(vf.TaskData):
    answer: str


class CalculatorTask(vf.Task[CalculatorData]):
    @vf.reward(weight=1.0)
    async def exact_answer(self, trace: vf.Trace) -> float:
        return 1.0 if trace.last_reply.strip() == self.data.answer else 0.0

    @vf.metric
    async def tool_calls(self, trace: vf.Trace) -> float:
        return float(sum(len(getattr(message, "tool_calls", None) or []) for message in trace.messages))


class CalculatorConfig(vf.TasksetConfig):
    split: Literal["train", "held_out"] = "train"
    """Which problems load: calculator_agent's training stream, or its held-out items."""
    seed: int = 0
    """The seed of both streams (calculator_agent's env.seed)."""
    num_tasks: int = 1000
    """How many problems load."""


class CalculatorTaskset(vf.Taskset[CalculatorTask, CalculatorConfig]):
    @classmethod
    def toolsets(cls, config: CalculatorConfig) -> list[vf.Toolset]:
        return [CalculatorToolset(vf.ToolsetConfig())]

    def load(self) -> Iterator[CalculatorTask]:
        config = self.config
        if config.split == "held_out":
            task_name = CalculatorAgentEnv.name or CalculatorAgentEnv.__name__
            items = heldout_items(generate_item, config.num_tasks, seed=config.seed, task_name=task_name)
        else:
            rng = random.Random(config.seed)
            items = [draw_item(generate_item, rng, "train") for _ in range(config.num_tasks)]
        for k, item in enumerate(items):
            data = CalculatorData(prompt=item.prompt, system_prompt=SYSTEM_PROMPT, answer=item.answer, id=str(k))
            yield CalculatorTask(data, config.task)


if __name__ == "__main__":
    CalculatorToolset.run()
