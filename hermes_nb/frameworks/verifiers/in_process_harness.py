"""verifiers' ``null`` harness's chat loop, run in the environment's own process (the verifiers Python).

The ``null`` harness runs each episode as a program of its own: a Python interpreter under ``uv`` importing the
openai SDK, ~1.8 s of CPU an episode on two cores, where the episode's own work (a turn or two through the
interception server) is milliseconds. verifiers' harness contract allows the loop in-process ("the interception is
the contract, not the process", ``Harness.launch``): every model call still goes to the rollout's interception
``endpoint`` with its ``secret``, so the train client renders the conversation, samples through the run's
inference server and records the exact tokens on the trace, as it does for the program.

The loop is the program's: a system message (``APPENDS_SYSTEM_PROMPT``), the prompt (text, or messages when an
exchange resumes), then turns until a reply without tool calls. The taskset's MCP tool servers become OpenAI
tools named ``<server>_<tool>`` and each call's result a ``tool`` message, through verifiers' own MCP helpers (the
program bundles the same ones). A model call that fails ends the episode as the program's exit would: a
transport error with verifiers' model-transport exit code, any other with exit code 1 and its traceback, which
``Harness._check_result`` turns into verifiers' own error (or ignores, when a ``@stop`` refused the turn). A
context overflow ends the episode with the transcript so far, as the program does without compaction. Not
carried over: compaction, the tool-interception gate, and the program's ``bash``/``edit``/``search`` tools (the
``null`` harness enables none of them).
"""

from __future__ import annotations

import asyncio
import json
import traceback
import weakref
from contextlib import AsyncExitStack
from typing import Any, cast

import verifiers.v1 as vf
from openai import APIConnectionError, APIStatusError, AsyncOpenAI, DefaultAsyncHttpxClient
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.errors import MODEL_TRANSPORT_ERROR_EXIT_CODE
from verifiers.v1.harnesses.utils.compaction import is_context_overflow
from verifiers.v1.harnesses.utils.mcp import call_mcp, connect_mcp

# The program's bound on listing a tool server's tools.
TOOL_LISTING_TIMEOUT_S = 60.0
# The HTTP client of every episode's model calls, per event loop (an httpx client belongs to the loop it runs on).
# verifiers makes a harness per rollout, and a client per episode would build a TLS context each time (the CA
# bundle loaded), which cost more CPU than the rest of an episode.
_http_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


class InProcessChatConfig(vf.HarnessConfig):
    pass


class InProcessChatHarness(vf.Harness[InProcessChatConfig]):
    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_MCP = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: Any,
    ) -> Any:
        system_prompt, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages.extend(message_to_wire(message) for message in prompt)
        servers = {name: {"url": url, "timeout": self.config.tool_timeout} for name, url in mcp_urls.items()}
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, timeout=None, http_client=shared_http_client())
        try:
            await chat_until_answered(client, ctx.model, messages, servers)
        except APIConnectionError:  # the SDK's name for a transport error
            return vf.ProgramResult(exit_code=MODEL_TRANSPORT_ERROR_EXIT_CODE, stdout="", stderr=traceback.format_exc())
        except APIStatusError as error:
            if is_context_overflow(error):
                return vf.ProgramResult(exit_code=0, stdout="", stderr="")
            return vf.ProgramResult(exit_code=1, stdout="", stderr=traceback.format_exc())
        except Exception:  # the program's crash: its traceback is the harness error's detail
            return vf.ProgramResult(exit_code=1, stdout="", stderr=traceback.format_exc())
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


def shared_http_client() -> Any:
    """This event loop's HTTP client for model calls, made on first use."""
    loop = asyncio.get_running_loop()
    if loop not in _http_clients:
        _http_clients[loop] = DefaultAsyncHttpxClient(timeout=None)
    return _http_clients[loop]


async def chat_until_answered(
    client: AsyncOpenAI, model: str, messages: list[dict[str, Any]], servers: dict[str, dict[str, Any]]
) -> None:
    """Turns until a reply without tool calls; each tool call answered by its MCP server."""
    async with AsyncExitStack() as stack:
        tools, dispatch, connections = await asyncio.wait_for(
            connect_mcp({"mcpServers": servers}, stack), TOOL_LISTING_TIMEOUT_S
        )
        offered: dict[str, Any] = {"tools": tools} if tools else {}
        while True:
            completion = await client.chat.completions.create(model=model, messages=cast(Any, messages), **offered)
            message = completion.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            calls: list[Any] = list(message.tool_calls or [])
            if not calls:
                return
            for call in calls:
                name = call.function.name
                content = await tool_result(name, call.function.arguments, dispatch, connections)
                messages.append({"role": "tool", "tool_call_id": call.id, "name": name, "content": content})


async def tool_result(name: str, arguments: str | None, dispatch: dict[str, Any], connections: dict[str, Any]) -> Any:
    """A tool call's result as the program gives it, errors the model can act on included."""
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError as error:
        return f"error: invalid JSON in tool arguments ({error}); resend the call with valid JSON"
    if not isinstance(parsed, dict):
        return f"error: tool arguments must be a JSON object, got {type(parsed).__name__}; resend as an object"
    if name not in dispatch:
        return f"error: unknown tool {name!r}"
    return await call_mcp(connections, dispatch, name, parsed)
