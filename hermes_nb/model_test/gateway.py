"""``rl_test_inference``'s loopback front for the models under test, one route per model.

The environment child talks to ``http://127.0.0.1:PORT/m/<route>`` as it talks to hermes-nb's inference server
(``/v1/completions`` and ``/v1/chat/completions``), so it never sees a provider or a key. A route is either

- an endpoint: each prompt of a request goes to the provider through a ``ProviderClient`` (rate limits, retries,
  chat-only models, ``n`` the provider ignores), and the answer comes back in the inference protocol with text
  only (token ids only where the endpoint sent them): the environment re-tokenizes and marks its groups
  test-only. A chat request's ``tools`` reach the provider, and its ``tool_calls`` come back as they are, so an
  agent environment's episodes run their tools against a hosted model as against a local one; or
- a local model's temporary server, forwarded unchanged (exact token ids and logprobs).

Both count requests, latency and the tokens of ``usage`` in an ``EndpointStats`` the result reports. The server
runs on a daemon thread with its own event loop (uvicorn never touches the caller's loop or signal handlers,
which matters inside a notebook kernel) and is stopped on leaving ``async with``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from hermes_nb.model_test.provider_client import ProviderAnswer, ProviderClient
from hermes_nb.model_test.settings import EndpointSettings, EndpointStats
from hermes_nb.system.net import LOOPBACK, SERVER_KEEP_ALIVE_S

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

# The gateway answers /health-style readiness within this long of starting, or it failed to start.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# A local model's server may take long on a CPU: the environment's own request timeout is what bounds it.
PASSTHROUGH_TIMEOUT_S = 600.0


@dataclass
class _Passthrough:
    upstream: str  # the local server's root URL
    stats: EndpointStats


class Gateway:
    """``async with Gateway() as gateway:`` then ``add_endpoint`` / ``add_local`` give each model its URL."""

    def __init__(self, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._transport = transport  # for the provider clients (tests of this module only)
        self._routes: dict[str, ProviderClient | _Passthrough] = {}
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port = 0

    async def __aenter__(self) -> Gateway:
        await asyncio.to_thread(self._start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self._stop)

    def add_endpoint(self, route: str, settings: EndpointSettings, stats: EndpointStats) -> str:
        """The URL under which the environment reaches the endpoint of ``settings``; ``stats`` counts its traffic."""
        self._routes[route] = ProviderClient(settings, stats, transport=self._transport)
        return self._url(route)

    def add_local(self, route: str, upstream: str, stats: EndpointStats) -> str:
        """The URL under which the environment reaches the local server at ``upstream``."""
        self._routes[route] = _Passthrough(upstream.rstrip("/"), stats)
        return self._url(route)

    def _url(self, route: str) -> str:
        return f"http://{LOOPBACK}:{self.port}/m/{route}"

    # ---- serving ---------------------------------------------------------------------------------------------
    def _start(self) -> None:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((LOOPBACK, 0))  # bound here, so no other process can take the port before uvicorn listens
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            _app(self), log_level="warning", access_log=False, lifespan="on", timeout_keep_alive=SERVER_KEEP_ALIVE_S
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, args=(sock,), name="hermes-nb-gateway", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise RuntimeError(f"the model-test gateway did not start on {LOOPBACK}:{self.port}")
            time.sleep(0.01)  # readiness poll of an in-process flag, not a fixed wait

    def _serve(self, sock: socket.socket) -> None:
        # A loop of its own: asyncio.run may be patched (nest-asyncio2) in a kernel, this thread needs a plain one.
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._server.serve(sockets=[sock]))
        finally:
            loop.close()
            sock.close()

    def _stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)

    async def _close_clients(self) -> None:
        for route in self._routes.values():
            if isinstance(route, ProviderClient):
                with contextlib.suppress(Exception):  # closing a client whose loop is ending may complain
                    await route.aclose()


def _app(gateway: Gateway) -> Starlette:
    # Starlette rather than FastAPI routes: one catch-all route needs no validation layer of its own.
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(timeout=PASSTHROUGH_TIMEOUT_S) as passthrough_client:
            app.state.passthrough = passthrough_client
            yield
            await gateway._close_clients()

    async def forward(request: Request) -> Response:
        route, path = request.path_params["route"], request.path_params["path"]
        target = gateway._routes.get(route)
        if target is None:
            return JSONResponse({"detail": f"no model is tested under /m/{route}"}, status_code=404)
        if isinstance(target, _Passthrough):
            return await _forward(request.app.state.passthrough, target, path, request)
        return await _provider_route(target, path, request)

    return Starlette(routes=[Route("/m/{route}/{path:path}", forward, methods=["GET", "POST"])], lifespan=lifespan)


async def _forward(client: httpx.AsyncClient, target: _Passthrough, path: str, request: Request) -> Response:
    """The request, unchanged, to the local model's server; its answer, unchanged, back."""
    from starlette.responses import JSONResponse, Response

    started = time.monotonic()
    target.stats.requests += 1
    headers = {"content-type": request.headers.get("content-type", "application/json")}
    try:
        upstream = await client.request(
            request.method, f"{target.upstream}/{path}", content=await request.body(), headers=headers
        )
    except httpx.TransportError as exc:  # the server is gone or restarting: the environment retries a 502
        target.stats.server_errors += 1
        return JSONResponse({"detail": f"local model server: {type(exc).__name__}"}, status_code=502)
    if upstream.is_success:
        target.stats.answered += 1
        target.stats.latency_s += time.monotonic() - started
        _count_usage(target.stats, upstream)
    media_type = upstream.headers.get("content-type")
    return Response(content=upstream.content, status_code=upstream.status_code, media_type=media_type)


def _count_usage(stats: EndpointStats, response: httpx.Response) -> None:
    try:
        usage = response.json().get("usage") or {}
    except (ValueError, AttributeError):
        return
    stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
    stats.completion_tokens += int(usage.get("completion_tokens") or 0)


async def _provider_route(client: ProviderClient, path: str, request: Request) -> Response:
    from starlette.responses import JSONResponse

    from hermes_nb.model_test.provider_client import ProviderRefused
    from hermes_nb.protocol.inference import ChatCompletionRequest, CompletionRequest

    if path == "v1/models":
        return JSONResponse({"object": "list", "data": [{"id": client.settings.model or "default"}]})
    if request.method != "POST" or path not in ("v1/completions", "v1/chat/completions"):
        return JSONResponse({"detail": f"/{path}: a tested endpoint serves /v1/completions and chat"}, 404)
    try:
        body = await request.json()
        if path == "v1/completions":
            asked: CompletionRequest | ChatCompletionRequest = CompletionRequest.model_validate(body)
            answer = await _completions(client, asked)
        else:
            asked = ChatCompletionRequest.model_validate(body)
            answer = await _chat(client, asked)
    except ValueError as exc:  # a ValidationError, invalid JSON, or token-id prompts
        return JSONResponse({"detail": _first_error(exc)}, status_code=422)
    except ProviderRefused as exc:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status_code)
    if asked.stream:
        return _streamed(answer, path, asked.include_usage)
    return JSONResponse(answer)


def _streamed(answer: dict[str, Any], path: str, include_usage: bool) -> Response:
    """The provider's whole answer as server-sent events, as the run's own inference server streams one."""
    from starlette.responses import StreamingResponse

    from hermes_nb.inference.streaming import SSE_MEDIA_TYPE, chat_chunks, completion_chunks, server_sent_events
    from hermes_nb.protocol.inference import ChatCompletionResponse, CompletionResponse

    if path == "v1/completions":
        chunks = server_sent_events(completion_chunks(CompletionResponse.model_validate(answer), include_usage))
    else:
        chunks = server_sent_events(chat_chunks(ChatCompletionResponse.model_validate(answer), include_usage))
    return StreamingResponse(chunks, media_type=SSE_MEDIA_TYPE)


def _first_error(exc: ValueError) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(exc)


async def _completions(client: ProviderClient, request: Any) -> dict[str, Any]:
    from hermes_nb.protocol.inference import CompletionChoice, CompletionResponse, SamplingParams, Usage

    prompts = [request.prompt] if isinstance(request.prompt, str) else list(request.prompt)
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompt: a tested endpoint takes text prompts, not token ids")
    params = SamplingParams.model_validate(request.model_dump())
    # One request per prompt: hosted providers take one prompt per request.
    answers = await asyncio.gather(*(client.complete(prompt, params) for prompt in prompts))
    choices = [choice for answer in answers for choice in answer.choices]  # prompt-major, as the protocol orders
    exact = all(c.token_ids is not None and c.prompt_token_ids is not None for c in choices)
    response = CompletionResponse(
        id=f"gateway-{time.monotonic_ns()}",
        created=int(time.time()),
        model=client.settings.model or request.model,
        choices=[
            CompletionChoice(
                index=i, text=c.text, finish_reason=c.finish_reason, token_ids=c.token_ids if exact else None
            )
            for i, c in enumerate(choices)
        ],
        usage=_usage(answers, Usage),
        prompt_token_ids=[answer.choices[0].prompt_token_ids or [] for answer in answers] if exact else None,
    )
    return response.model_dump(mode="json", exclude_none=True)


async def _chat(client: ProviderClient, request: Any) -> dict[str, Any]:
    from hermes_nb.protocol.inference import (
        ChatChoice,
        ChatCompletionResponse,
        ChatResponseMessage,
        SamplingParams,
        Usage,
    )

    params = SamplingParams.model_validate(request.model_dump())
    # None fields left out: a provider may refuse ``tool_calls: null`` on a user turn.
    messages = [m.model_dump(exclude_none=True) for m in request.messages]
    tools = [t.model_dump(exclude_none=True) for t in request.tools] if request.tools else None
    tool_choice = request.tool_choice
    if tool_choice is not None and not isinstance(tool_choice, str):
        tool_choice = tool_choice.model_dump()
    answer = await client.chat(messages, params, tools=tools, tool_choice=tool_choice)
    exact = all(c.token_ids is not None and c.prompt_token_ids is not None for c in answer.choices)
    response = ChatCompletionResponse(
        id=f"gateway-{time.monotonic_ns()}",
        created=int(time.time()),
        model=client.settings.model or request.model,
        choices=[
            ChatChoice(
                index=i,
                # OpenAI's shape: no content beside calls made without text.
                message=ChatResponseMessage(
                    content=(c.text or None) if c.tool_calls else c.text, tool_calls=c.tool_calls
                ),
                finish_reason=c.finish_reason,
                token_ids=c.token_ids if exact else None,
            )
            for i, c in enumerate(answer.choices)
        ],
        usage=_usage([answer], Usage),
        prompt_token_ids=answer.choices[0].prompt_token_ids if exact and answer.choices else None,
    )
    return response.model_dump(mode="json", exclude_none=True)


def _usage(answers: list[ProviderAnswer], usage_type: Any) -> Any:
    prompt_tokens = sum(a.prompt_tokens for a in answers)
    completion_tokens = sum(a.completion_tokens for a in answers)
    return usage_type(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )
