"""The calculator agent's two-step word problems as a verifiers environment: a ``vf.Toolset`` with a ``calculate``
tool, written as verifiers' own tool tasksets are.

A verifiers environment (``verifiers.v1``) exporting one ``vf.Taskset`` subclass; its id is the module's name
(``calculator_verifiers``). The task, its tool and what "correct" means are ``calculator_agent``'s (imported, so
they are written once): the same task as ``calculator_agent`` and ``calculator_openenv``, in verifiers' shape.

Tool: ``CalculatorToolset`` is served once per environment (``Taskset.toolsets``) as an MCP server, which verifiers
starts as ``python -m calculator_verifiers`` (hence the ``__main__`` block) and offers the harness as the OpenAI
tool ``calculate(expression)``. Episode: the system prompt asks for a tool call per step, then the number alone;
the reward is 1.0 when the last reply, stripped, is exactly the answer, else 0.0; the tool calls made are a metric.
Tasks: problem ``k`` is drawn from seed ``seed + k`` (``num_tasks`` of them).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import verifiers.v1 as vf
from calculator_agent import SYSTEM_PROMPT, calculate, generate_item

__all__ = ["CalculatorTaskset"]


class CalculatorToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None  # the tool is offered as ``calculate``, calculator_agent's name for it

    @vf.tool
    def calculate(self, expression: str) -> str:
        """Whole-number arithmetic: + - * / and parentheses."""
        return calculate(expression)


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
    seed: int = 0
    """Problem k is drawn from seed + k."""
    num_tasks: int = 1000
    """How many problems load."""


class CalculatorTaskset(vf.Taskset[CalculatorTask, CalculatorConfig]):
    @classmethod
    def toolsets(cls, config: CalculatorConfig) -> list[vf.Toolset]:
        return [CalculatorToolset(vf.ToolsetConfig())]

    def load(self) -> Iterator[CalculatorTask]:
        for k in range(self.config.num_tasks):
            item = generate_item(random.Random(self.config.seed + k))
            data = CalculatorData(prompt=item.prompt, system_prompt=SYSTEM_PROMPT, answer=item.answer, id=str(k))
            yield CalculatorTask(data, self.config.task)


if __name__ == "__main__":
    CalculatorToolset.run()
