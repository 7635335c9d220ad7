"""The ``rl_*`` commands as LLM-agent tools: same names and arguments, JSON strings in and out.

Each tool is ``async``, as the Hermes Agent RL training tool's are, so an agent calls it the same way; it
answers ``result.to_dict()`` as JSON, or ``{"error": "..."}`` for a user mistake (``HermesNBError``). The tools are
made from the command table (``hermes_nb.command_table``, the commands with ``tool=True``): ``tools.rl_edit_config``, or
every one by name from ``all_tools()``. Each is built on first use, so importing this module imports no core.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec

from hermes_nb import command_table
from hermes_nb.errors import HermesNBError

P = ParamSpec("P")
Tool = Callable[..., Coroutine[Any, Any, str]]


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)


def json_tool(core: Callable[P, Awaitable[Any]]) -> Callable[P, Coroutine[Any, Any, str]]:
    """Wrap an async core function so that it answers a JSON string and never raises a user error."""

    @functools.wraps(core)
    async def tool(*args: P.args, **kwargs: P.kwargs) -> str:
        from hermes_nb.results import redact

        try:
            result = await core(*args, **kwargs)
        except HermesNBError as exc:
            return _dumps({"error": redact(str(exc))})
        return _dumps(result.to_dict())

    return tool


@functools.cache
def _tool(name: str) -> Tool:
    command = next(command for command in command_table.tools() if command.name == name)
    return json_tool(command.core())


def all_tools() -> dict[str, Tool]:
    """Name -> tool, for agent frameworks that register tools from a mapping (every tool command of the table)."""
    return {command.name: _tool(command.name) for command in command_table.tools()}


def __getattr__(name: str) -> Tool:
    if name not in {command.name for command in command_table.tools()}:
        raise AttributeError(f"module 'hermes_nb.tools' has no attribute {name!r}")
    return _tool(name)
