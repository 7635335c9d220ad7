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
program bundles the same ones). A model call is retried as the program's SDK retries it; one that still fails
ends the episode as the program's exit would: a
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

import aiohttp
import httpx
import verifiers.v1 as vf
from openai import APIStatusError
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.errors import MODEL_TRANSPORT_ERROR_EXIT_CODE
from verifiers.v1.harnesses.utils.compaction import is_context_overflow
from verifiers.v1.harnesses.utils.mcp import call_mcp, connect_mcp

# The program's bound on listing a tool server's tools.
TOOL_LISTING_TIMEOUT_S = 60.0
# The openai SDK's retries, which the program runs with: a call that failed in transport, or was answered with one
# of these statuses or a server error, is sent again, twice at most, after a backoff (doubling from 0.5 s, at most
# 8 s), its attempt in the retry header (from which the interception server replays a call it answered already).
MAX_RETRIES = 2
RETRIED_STATUSES = frozenset({408, 409, 429})
FIRST_SERVER_ERROR = 500
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
RETRY_COUNT_HEADER = "x-stainless-retry-count"
# The chat completions route under the rollout's endpoint (an OpenAI base URL), as the program's SDK posts it.
CHAT_COMPLETIONS_ROUTE = "/chat/completions"
# The HTTP session of every episode's model calls, per event loop (an aiohttp session belongs to the loop it was
# made on). verifiers makes a harness per rollout; a client per episode built a TLS context each time (the CA
# bundle loaded), which cost more CPU than the rest of an episode. aiohttp, not the openai SDK over httpx: httpx's
# pool checks every idle connection on each request, and with a worker's episodes in flight that and the SDK's
# request building and response models cost a sixth of the environment's CPU (docs/benchmarks.md).
_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = weakref.WeakKeyDictionary()


class ModelTransportError(Exception):
    """The rollout's endpoint could not be reached, or the connection broke during a model call."""


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
        model_call = ModelCall(endpoint, secret, ctx.model)
        try:
            await chat_until_answered(model_call, messages, servers)
        except ModelTransportError:
            return vf.ProgramResult(exit_code=MODEL_TRANSPORT_ERROR_EXIT_CODE, stdout="", stderr=traceback.format_exc())
        except APIStatusError as error:
            if is_context_overflow(error):
                return vf.ProgramResult(exit_code=0, stdout="", stderr="")
            return vf.ProgramResult(exit_code=1, stdout="", stderr=traceback.format_exc())
        except Exception:  # the program's crash: its traceback is the harness error's detail
            return vf.ProgramResult(exit_code=1, stdout="", stderr=traceback.format_exc())
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


def shared_session() -> aiohttp.ClientSession:
    """This event loop's HTTP session for model calls, made on first use."""
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None or session.closed:
        # No total timeout: the program's SDK waits as long as a model takes.
        session = _sessions[loop] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
    return session


async def close_shared_session() -> None:
    """Close this event loop's session, if one was made (before the loop ends: aiohttp reports one left open)."""
    session = _sessions.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.close()


class ModelCall:
    """One episode's chat completions at the rollout's interception endpoint, as the program's SDK sends them."""

    def __init__(self, endpoint: str, secret: str, model: str) -> None:
        self.url = endpoint.rstrip("/") + CHAT_COMPLETIONS_ROUTE
        self.headers = {"Authorization": f"Bearer {secret}"}
        self.model = model

    async def reply(self, messages: list[dict[str, Any]], tools: list[Any]) -> dict[str, Any]:
        """The first choice's message (its null fields left out). Retried as the SDK retries (``MAX_RETRIES``);
        then a refusal raises the SDK's ``APIStatusError`` (what verifiers reads a context overflow from), a
        broken connection ``ModelTransportError``."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, **({"tools": tools} if tools else {})}
        for attempt in range(MAX_RETRIES + 1):
            headers = {**self.headers, RETRY_COUNT_HEADER: str(attempt)} if attempt else self.headers
            try:
                async with shared_session().post(self.url, json=body, headers=headers) as response:
                    status, text = response.status, await response.text()
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as error:
                if attempt == MAX_RETRIES:
                    raise ModelTransportError(f"POST {self.url}: {error}") from error
            else:
                if attempt == MAX_RETRIES or not is_retried_status(status):
                    break
            await asyncio.sleep(min(FIRST_BACKOFF_S * 2**attempt, MAX_BACKOFF_S))
        if status >= 400:
            raise status_error(self.url, status, text)
        message = json.loads(text)["choices"][0]["message"]
        return {key: value for key, value in message.items() if value is not None}


def is_retried_status(status: int) -> bool:
    return status in RETRIED_STATUSES or status >= FIRST_SERVER_ERROR


def status_error(url: str, status: int, text: str) -> APIStatusError:
    """A refused model call as the openai SDK raises it, so verifiers' own reading of it applies."""
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message", text) if isinstance(error, dict) else text
    # verifiers pins openai<3, whose errors hold an httpx response; hermes-nb's own openai (what mypy reads) is 3.x,
    # built on httpx2.
    response = cast(Any, httpx.Response(status, text=text, request=httpx.Request("POST", url)))
    return APIStatusError(f"Error code: {status} - {message}", response=response, body=error)


async def chat_until_answered(
    model_call: ModelCall, messages: list[dict[str, Any]], servers: dict[str, dict[str, Any]]
) -> None:
    """Turns until a reply without tool calls; each tool call answered by its MCP server."""
    async with AsyncExitStack() as stack:
        tools, dispatch, connections = await asyncio.wait_for(
            connect_mcp({"mcpServers": servers}, stack), TOOL_LISTING_TIMEOUT_S
        )
        while True:
            message = await model_call.reply(messages, tools)
            messages.append(message)
            calls: list[dict[str, Any]] = message.get("tool_calls") or []
            if not calls:
                return
            for call in calls:
                name = call["function"]["name"]
                content = await tool_result(name, call["function"].get("arguments"), dispatch, connections)
                messages.append({"role": "tool", "tool_call_id": call["id"], "name": name, "content": content})


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
