"""The ``rl_*`` functions as LLM-agent tools: same names and arguments, JSON strings in and out.

Each tool is ``async``, as the Hermes Agent RL training tool's are, so an agent calls it the same way; it
answers ``result.to_dict()`` as JSON, or ``{"error": "..."}`` for a user mistake (``HermesNBError``). Add a tool
with one line:
``rl_new_thing = json_tool(api.rl_new_thing)``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec

from hermes_nb import api
from hermes_nb.errors import HermesNBError
from hermes_nb.results import Result
from hermes_nb.system.secrets import redact

P = ParamSpec("P")


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)


def json_tool(core: Callable[P, Awaitable[Result]]) -> Callable[P, Coroutine[Any, Any, str]]:
    """Wrap an async core function so that it answers a JSON string and never raises a user error."""

    @functools.wraps(core)
    async def tool(*args: P.args, **kwargs: P.kwargs) -> str:
        try:
            result = await core(*args, **kwargs)
        except HermesNBError as exc:
            return _dumps({"error": redact(str(exc))})
        return _dumps(result.to_dict())

    return tool


rl_list_environments = json_tool(api.rl_list_environments)
rl_select_environment = json_tool(api.rl_select_environment)
rl_get_current_config = json_tool(api.rl_get_current_config)
rl_edit_config = json_tool(api.rl_edit_config)
rl_reset_config = json_tool(api.rl_reset_config)
rl_load_config = json_tool(api.rl_load_config)
rl_start_training = json_tool(api.rl_start_training)
rl_check_status = json_tool(api.rl_check_status)
rl_stop_training = json_tool(api.rl_stop_training)
rl_list_runs = json_tool(api.rl_list_runs)
rl_get_results = json_tool(api.rl_get_results)
rl_tail_logs = json_tool(api.rl_tail_logs)
rl_test_inference = json_tool(api.rl_test_inference)
rl_get_samples = json_tool(api.rl_get_samples)


def all_tools() -> dict[str, Callable[..., Coroutine[Any, Any, str]]]:
    """Name -> tool, for agent frameworks that register tools from a mapping (every ``rl_*`` above)."""
    return {name: value for name, value in globals().items() if name.startswith("rl_") and callable(value)}
