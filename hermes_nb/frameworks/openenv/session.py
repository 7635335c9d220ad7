"""One OpenEnv session: the WebSocket ``/ws`` of an OpenEnv server, spoken as its wire protocol says.

A plain HTTP ``/reset`` or ``/step`` builds a fresh environment per request, so a multi-step episode needs the
session: one connection holds one environment instance. Messages are JSON ``{"type": ..., "data": ...}``:
``reset`` (data: its keyword arguments, ``seed`` among them) and ``step`` (data: the Action's fields) are answered
with ``{"type": "observation", "data": {"observation", "reward", "done"}}``; ``mcp`` carries a JSON-RPC request
(``tools/list``, ``tools/call`` with ``name`` and ``arguments``) answered by ``{"type": "mcp", "data": <JSON-RPC
response>}``; ``close`` ends the session; any failure is ``{"type": "error", "data": {"message", "code"}}``.

The client needs only the ``websockets`` package (which openenv brings), never openenv itself: the environment
process does not pay openenv's import (gradio, seconds) and no private name of openenv is used.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hermes_nb.errors import HermesNBError
from hermes_nb.frameworks.openenv.rewards import checked_reward
from hermes_nb.protocol.inference import FunctionSpec, ToolSpec

# A step may run an environment's tool or a test suite; a reply slower than this is a server that hangs.
REPLY_TIMEOUT_S = 300.0
# Observations can be large (a page, a board): websockets' 1 MiB default would cut them.
MAX_MESSAGE_BYTES = 64 * 2**20
# Hosts whose sessions are not compressed by default: on loopback, permessage-deflate (websockets' default) saves
# no time and costs both sides CPU on every message (~10 % of each side's, for a one-step episode:
# bench/openenv_floor.py).
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
# OpenEnv's error code when the server holds max_concurrent_envs sessions already.
CAPACITY_REACHED = "CAPACITY_REACHED"


class SessionError(HermesNBError):
    """The OpenEnv server answered an error, or the session broke (the server closed it or died)."""


class ConnectionLost(SessionError):
    """The session's connection is gone: the server could not be reached, or it closed the session (it may have
    died)."""


class CapacityReached(SessionError):
    """The server holds ``max_sessions`` sessions already (its ``max_concurrent_envs``) and refused one more."""

    def __init__(self, message: str, max_sessions: int) -> None:
        super().__init__(message)
        self.max_sessions = max_sessions


class StepResult(BaseModel):
    """One ``observation`` answer: the observation's own fields, its reward (``None``: none this step), done."""

    model_config = ConfigDict(frozen=True)

    observation: dict[str, Any] = Field(default_factory=dict)
    reward: float | None = None
    done: bool = False


class McpTool(BaseModel):
    """One MCP tool as ``tools/list`` lists it."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict, alias="inputSchema")

    def as_tool_spec(self) -> ToolSpec:
        """The tool as a chat request's OpenAI ``tools`` entry."""
        parameters = self.input_schema or {"type": "object", "properties": {}}
        return ToolSpec(function=FunctionSpec(name=self.name, description=self.description, parameters=parameters))


def ws_url(base_url: str) -> str:
    """The session endpoint of the server at ``base_url`` (``http://host:port`` -> ``ws://host:port/ws``)."""
    base = base_url.rstrip("/")
    for http, ws in (("https://", "wss://"), ("http://", "ws://")):
        if base.startswith(http):
            base = ws + base[len(http) :]
    return base + "/ws"


def is_loopback(base_url: str) -> bool:
    return urlsplit(base_url).hostname in LOOPBACK_HOSTS


class OpenEnvSession:
    """``async with OpenEnvSession(url) as session``: reset, step, list and call tools, closed on exit."""

    def __init__(self, base_url: str, *, timeout_s: float = REPLY_TIMEOUT_S, compress: bool | None = None) -> None:
        """``compress``: offer permessage-deflate; by default only to a server that is not on loopback."""
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.compress = not is_loopback(base_url) if compress is None else compress
        self._connection: Any = None
        self._ids = itertools.count(1)

    async def __aenter__(self) -> OpenEnvSession:
        from websockets.asyncio.client import connect

        try:
            self._connection = await connect(
                ws_url(self.base_url),
                max_size=MAX_MESSAGE_BYTES,
                open_timeout=30,
                compression="deflate" if self.compress else None,
            )
        except OSError as exc:
            raise ConnectionLost(f"the OpenEnv server at {self.base_url} cannot be reached: {exc}") from None
        return self

    @property
    def is_open(self) -> bool:
        return self._connection is not None

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        with contextlib.suppress(Exception):  # the server is gone already: nothing to close
            await connection.send(json.dumps({"type": "close"}))
        await connection.close()

    async def reset(self, **data: Any) -> StepResult:
        return self._result("reset", await self._exchange({"type": "reset", "data": data}, "observation"))

    async def step(self, action: dict[str, Any]) -> StepResult:
        return self._result("step", await self._exchange({"type": "step", "data": action}, "observation"))

    async def list_tools(self) -> list[McpTool]:
        result = await self._mcp("tools/list", {})
        try:
            return [McpTool.model_validate(tool) for tool in result.get("tools", [])]
        except ValidationError as exc:
            raise SessionError(f"the OpenEnv server at {self.base_url} listed a malformed tool: {exc}") from None

    async def list_tools_or_none(self) -> list[McpTool]:
        """``list_tools``, or none for an environment without MCP (OpenEnv answers it with a JSON-RPC error)."""
        data = await self._exchange(self._rpc("tools/list", {}), "mcp")
        if data.get("error"):
            return []
        result = data.get("result")
        tools = result.get("tools", []) if isinstance(result, dict) else []
        try:
            return [McpTool.model_validate(tool) for tool in tools]
        except ValidationError as exc:
            raise SessionError(f"the OpenEnv server at {self.base_url} listed a malformed tool: {exc}") from None

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """The tool's result as the text of a ``tool`` message; an error the tool reports is returned as text
        too (the policy reads it, as a real tool's error), a broken session raises."""
        data = await self._exchange(self._rpc("tools/call", {"name": name, "arguments": arguments}), "mcp")
        if data.get("error"):
            return f"error: {data['error'].get('message', data['error'])}"
        return tool_result_text(data.get("result"))

    async def _mcp(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        data = await self._exchange(self._rpc(method, params), "mcp")
        if data.get("error"):
            raise SessionError(f"the OpenEnv server at {self.base_url} refused {method}: {data['error']}")
        result = data.get("result")
        return result if isinstance(result, dict) else {}

    def _rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"type": "mcp", "data": {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}}

    async def _exchange(self, message: dict[str, Any], expected: str) -> dict[str, Any]:
        """Send ``message``, return the ``data`` of its answer of type ``expected``."""
        import asyncio

        from websockets.exceptions import ConnectionClosed

        if self._connection is None:
            raise SessionError("the OpenEnv session is not open (use it as `async with`)")
        kind = message["type"]
        # A server that refuses the session (full) sends its error and closes: the send may then fail, and the
        # error is still there to read.
        with contextlib.suppress(ConnectionClosed):
            await self._connection.send(json.dumps(message))
        try:
            raw = await asyncio.wait_for(self._connection.recv(), self.timeout_s)
        except ConnectionClosed as exc:
            raise ConnectionLost(
                f"the OpenEnv server at {self.base_url} closed the session during {kind}: {exc}"
            ) from None
        except TimeoutError:
            raise SessionError(
                f"the OpenEnv server at {self.base_url} did not answer {kind} in {self.timeout_s:g} s"
            ) from None
        return self._data(raw, kind, expected)

    def _data(self, raw: str | bytes, kind: str, expected: str) -> dict[str, Any]:
        try:
            answer = json.loads(raw)
        except ValueError:
            raise SessionError(
                f"the OpenEnv server at {self.base_url} answered {kind} with non-JSON: {raw[:200]!r}"
            ) from None
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, dict):
            raise SessionError(f"the OpenEnv server at {self.base_url} answered {kind} without data: {answer!r:.300}")
        if answer.get("type") == "error":
            if data.get("code") == CAPACITY_REACHED and isinstance(data.get("max_sessions"), int):
                raise CapacityReached(self._error_text(kind, data), data["max_sessions"])
            raise SessionError(self._error_text(kind, data))
        if answer.get("type") != expected:
            raise SessionError(f"the OpenEnv server at {self.base_url} answered {kind} with {answer.get('type')!r}")
        return data

    def _error_text(self, kind: str, data: dict[str, Any]) -> str:
        text = f"the OpenEnv environment at {self.base_url} failed in {kind}: {data.get('message', data)}"
        if data.get("errors"):
            text += f" ({json.dumps(data['errors'], default=str)[:500]})"
        if data.get("code") == CAPACITY_REACHED:
            text += (
                f"; the server holds {data.get('max_sessions')} sessions at most (its max_concurrent_envs): lower "
                "env.max_num_workers or env.group_size, or raise the server's limit"
            )
        return text

    def _result(self, kind: str, data: dict[str, Any]) -> StepResult:
        reward = checked_reward(data.get("reward"), f"the OpenEnv server at {self.base_url}, answering {kind}")
        observation = data.get("observation")
        return StepResult(
            observation=observation if isinstance(observation, dict) else {}, reward=reward, done=bool(data.get("done"))
        )


def tool_result_text(result: Any) -> str:
    """An MCP ``tools/call`` result as text: its text content blocks joined, else its structured content or the
    whole result as JSON. OpenEnv answers with the tool's return value itself or with an MCP ``CallToolResult``."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        blocks = result.get("content")
        if isinstance(blocks, list):
            texts = [b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
            if texts:
                return "\n".join(texts)
        for key in ("structured_content", "structuredContent", "data"):
            if result.get(key) is not None:
                value = result[key]
                return value if isinstance(value, str) else json.dumps(value)
    return json.dumps(result, default=str)
