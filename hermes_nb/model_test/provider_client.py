"""A hosted model's OpenAI-compatible API as providers really behave: the client behind ``rl_test_inference``'s
gateway for each endpoint under test.

Providers answer with text only (no token ids, no logprobs), often ignore ``n`` (one choice per request), may
serve only ``/chat/completions`` (404 or 400 on ``/completions``: the prompt is then sent as one user message,
and ``stats.sent_as_chat`` says so), rate-limit with 429 and ``Retry-After``, time out, fail with 5xx, refuse
(``finish_reason: content_filter``) or answer nothing. A chat request's ``tools`` are passed on, and the calls a
model makes come back as OpenAI ``tool_calls`` (their ``arguments`` sent as an object are read as its JSON). Each
of these is counted in ``EndpointStats`` and none is
fatal: a completion given up on comes back empty, and the environment scores it as it scores an empty answer. A
4xx other than those (a wrong key, an unknown model) is the request's fault and raises ``ProviderRefused``. The
key is read from this process's environment for each request, sent only in the ``Authorization`` header, and
removed from any provider text that is passed on.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from hermes_nb.errors import HermesNBError
from hermes_nb.model_test.settings import EndpointSettings, EndpointStats
from hermes_nb.protocol.inference import FinishReason, SamplingParams, ToolCall
from hermes_nb.protocol.redaction import REDACTED

# A 429 without Retry-After waits this long, doubling for each further 429 of the same request.
FIRST_BACKOFF_S = 1.0
# One request that keeps being rate-limited gives up after this many 429s (each waited out).
MAX_RATE_LIMITED = 8
# Provider text passed on (an error's detail) is cut to this many characters.
DETAIL_CHARS = 300

Api = Literal["completions", "chat"]
Sleep = Callable[[float], Awaitable[None]]


class ProviderRefused(HermesNBError):
    """The provider refused the request itself (4xx other than 429): retrying cannot help."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True)
class ProviderChoice:
    text: str
    finish_reason: FinishReason
    token_ids: list[int] | None = None  # only when the endpoint sends them (hermes-nb's server does)
    prompt_token_ids: list[int] | None = None
    tool_calls: list[ToolCall] | None = None  # a chat answer's calls, in OpenAI's shape


@dataclass(frozen=True)
class ProviderAnswer:
    """``n`` choices of one prompt, and the tokens the provider billed for them."""

    choices: list[ProviderChoice]
    prompt_tokens: int = 0
    completion_tokens: int = 0


GIVEN_UP = ProviderChoice(text="", finish_reason="stop")


@dataclass(frozen=True)
class _Request:
    """One prompt to sample: a plain prompt (``/completions``, or a user message for a chat-only model) or a chat."""

    prompt: str | None
    messages: list[dict[str, Any]] | None
    params: SamplingParams
    tools: list[dict[str, Any]] | None = None  # OpenAI's ``tools`` and ``tool_choice``, sent as given
    tool_choice: str | dict[str, Any] | None = None


class ProviderClient:
    """Samples from one endpoint; use it from one event loop (the gateway's) and ``aclose`` it there."""

    def __init__(
        self,
        settings: EndpointSettings,
        stats: EndpointStats | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.stats = stats or EndpointStats()
        self.stats.sent_as_chat = settings.chat_only
        self._transport = transport
        self._sleep = sleep
        self._client: httpx.AsyncClient | None = None
        self._limit: asyncio.Semaphore | None = None

    async def complete(self, prompt: str, params: SamplingParams) -> ProviderAnswer:
        """``params.n`` completions of ``prompt``."""
        return await self._sample(_Request(prompt=prompt, messages=None, params=params))

    async def chat(
        self,
        messages: list[dict[str, Any]],
        params: SamplingParams,
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> ProviderAnswer:
        """``params.n`` answers to ``messages``, the model offered ``tools``."""
        request = _Request(prompt=None, messages=messages, params=params, tools=tools, tool_choice=tool_choice)
        return await self._sample(request)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # ---- n completions, whether or not the provider honours n ------------------------------------------------
    async def _sample(self, request: _Request) -> ProviderAnswer:
        wanted = request.params.n
        first = await self._answer(request, wanted)
        if first is None:
            return self._gave_up(ProviderAnswer(choices=[]), wanted)
        missing = wanted - len(first.choices)
        if missing <= 0:
            return ProviderAnswer(first.choices[:wanted], first.prompt_tokens, first.completion_tokens)
        # The provider ignored n, as many do: one request per missing completion, all at once.
        more = await asyncio.gather(*(self._answer(request, 1) for _ in range(missing)))
        answers = [first, *(answer for answer in more if answer is not None)]
        merged = ProviderAnswer(
            choices=[choice for answer in answers for choice in answer.choices][:wanted],
            prompt_tokens=sum(a.prompt_tokens for a in answers),
            completion_tokens=sum(a.completion_tokens for a in answers),
        )
        return self._gave_up(merged, wanted)

    def _gave_up(self, answer: ProviderAnswer, wanted: int) -> ProviderAnswer:
        """``answer`` filled up to ``wanted`` with empty completions, counted as failed."""
        failed = wanted - len(answer.choices)
        self.stats.failed_completions += failed
        return ProviderAnswer([*answer.choices, *[GIVEN_UP] * failed], answer.prompt_tokens, answer.completion_tokens)

    async def _answer(self, request: _Request, n: int) -> ProviderAnswer | None:
        """One request for ``n`` choices; a plain prompt goes to chat when the model turns out to be chat-only."""
        chat = request.messages is not None or self.stats.sent_as_chat
        try:
            data = await self._post(_path(chat), self._body(request, n, chat))
        except ProviderRefused as exc:
            if chat or exc.status_code not in (400, 404):
                raise
            data = await self._post_as_chat(request, n, exc)
            chat = True
        return None if data is None else self._read(data, chat)

    async def _post_as_chat(self, request: _Request, n: int, refused: ProviderRefused) -> dict[str, Any] | None:
        """``/completions`` was refused: the model may serve chat only. Chat is kept only if it answers."""
        try:
            data = await self._post(_path(True), self._body(request, n, chat=True))
        except ProviderRefused:
            raise refused from None  # chat fails too: the first refusal is the one that explains it
        self.stats.sent_as_chat = True
        return data

    def _body(self, request: _Request, n: int, chat: bool) -> dict[str, Any]:
        params = request.params
        body: dict[str, Any] = {
            "n": n,
            "max_tokens": max(params.max_tokens, self.settings.min_max_tokens),
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if self.settings.model:
            body["model"] = self.settings.model
        if params.stop:
            body["stop"] = params.stop
        if params.seed is not None:
            body["seed"] = params.seed
        if not chat:
            return {**body, "prompt": request.prompt}
        messages = request.messages or [{"role": "user", "content": request.prompt or ""}]
        if request.tools:
            body["tools"] = request.tools
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice
        return {**body, "messages": messages}

    def _read(self, data: dict[str, Any], chat: bool) -> ProviderAnswer:
        choices = _choices(data, chat)
        for choice in choices:
            if choice.finish_reason == "content_filter":
                self.stats.refusals += 1
            elif not choice.text.strip() and not choice.tool_calls:
                self.stats.empty_answers += 1
        raw_usage = data.get("usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        prompt_tokens, completion_tokens = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
        self.stats.prompt_tokens += prompt_tokens
        self.stats.completion_tokens += completion_tokens
        return ProviderAnswer(choices, prompt_tokens, completion_tokens)

    # ---- one request through rate limits, timeouts and server errors -------------------------------------------
    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """The JSON answer; ``None`` after ``max_attempts`` timeouts or server errors, or too many 429s."""
        failures = rate_limited = 0
        while failures < self.settings.max_attempts and rate_limited < MAX_RATE_LIMITED:
            if failures:
                await self._sleep(FIRST_BACKOFF_S * failures)  # a server in trouble gets a moment before the next try
            try:
                response = await self._send(path, body)
            except httpx.TimeoutException:
                self.stats.timeouts += 1
                failures += 1
                self._note(f"no answer within {self.settings.request_timeout_s:g} s")
                continue
            except httpx.TransportError as exc:
                self.stats.server_errors += 1
                failures += 1
                self._note(f"connection failed ({type(exc).__name__})")
                continue
            if response.status_code == 429:
                rate_limited += 1
                await self._wait_out(response, rate_limited)
                continue
            data = self._data(response)
            if data is not None:
                return data
            failures += 1
        return None

    async def _send(self, path: str, body: dict[str, Any]) -> httpx.Response:
        client, limit = self._bound()
        async with limit:
            self.stats.requests += 1
            started = time.monotonic()
            response = await client.post(self.settings.base_url.rstrip("/") + path, json=body, headers=self._headers())
        if response.is_success:
            self.stats.answered += 1
            self.stats.latency_s += time.monotonic() - started
        return response

    def _data(self, response: httpx.Response) -> dict[str, Any] | None:
        """The body of a 2xx answer; None (counted) for a 5xx or a 2xx that carries an error instead."""
        if 400 <= response.status_code < 500:
            raise ProviderRefused(response.status_code, self._refusal(response))
        data = _json(response)
        if response.status_code < 300 and isinstance(data, dict) and "choices" in data:
            return data
        self.stats.server_errors += 1
        self._note(f"HTTP {response.status_code}: {self._clean(_detail(data, response))}")
        return None

    async def _wait_out(self, response: httpx.Response, times: int) -> None:
        self.stats.rate_limited += 1
        wait = _retry_after(response.headers.get("retry-after"))
        wait = FIRST_BACKOFF_S * 2 ** (times - 1) if wait is None else wait
        wait = min(wait, self.settings.max_retry_after_s)
        self.stats.rate_limit_wait_s += wait
        await self._sleep(wait)

    def _bound(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        if self._client is None or self._limit is None:
            timeout = httpx.Timeout(self.settings.request_timeout_s, connect=min(10.0, self.settings.request_timeout_s))
            self._client = httpx.AsyncClient(transport=self._transport, timeout=timeout)
            self._limit = asyncio.Semaphore(self.settings.max_concurrent_requests)
        return self._client, self._limit

    def _headers(self) -> dict[str, str]:
        key = self._key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _key(self) -> str | None:
        name = self.settings.api_key_env
        return os.environ.get(name) if name else None

    def _refusal(self, response: httpx.Response) -> str:
        detail = self._clean(_detail(_json(response), response))
        message = f"{self.settings.base_url} ({self.settings.model or 'default model'}) answered HTTP "
        message += f"{response.status_code}: {detail}"
        self._note(message)
        return message

    def _note(self, error: str) -> None:
        self.stats.last_error = self._clean(error)

    def _clean(self, text: str) -> str:
        """``text`` without the key (a provider may echo what it was sent), cut short."""
        key = self._key()
        return (text.replace(key, REDACTED) if key else text)[:DETAIL_CHARS]


def _path(chat: bool) -> str:
    return "/chat/completions" if chat else "/completions"


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _detail(data: Any, response: httpx.Response) -> str:
    """The provider's own words: OpenAI's ``{"error": {"message": ...}}``, FastAPI's ``detail``, or the text."""
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if error or data.get("detail"):
            return str(error or data.get("detail"))
    return response.text or response.reason_phrase


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: a number of seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _choices(data: dict[str, Any], chat: bool) -> list[ProviderChoice]:
    prompt_ids = data.get("prompt_token_ids")
    if isinstance(prompt_ids, list) and prompt_ids and isinstance(prompt_ids[0], list):
        prompt_ids = prompt_ids[0]  # /completions: one list per prompt, and one prompt was sent
    choices = [raw for raw in data.get("choices") or [] if isinstance(raw, dict)]
    return [
        ProviderChoice(
            text=_message_text(raw.get("message")) if chat else str(raw.get("text") or ""),
            finish_reason=_finish(raw.get("finish_reason")),
            token_ids=_ints(raw.get("token_ids")),
            prompt_token_ids=_ints(prompt_ids),
            tool_calls=_tool_calls(raw.get("message")) if chat else None,
        )
        for raw in sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c.get("index"), int) else 0)
    ]


def _message_text(message: Any) -> str:
    """A chat message's text: ``content`` may be null (a refusal) or a list of parts."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return str(content or "")


def _tool_calls(message: Any) -> list[ToolCall] | None:
    """A chat message's OpenAI ``tool_calls``; ``None`` when there are none or one is not a function call (the
    answer is then its text alone, as a malformed call is for a local model)."""
    raw = message.get("tool_calls") if isinstance(message, dict) else None
    if not isinstance(raw, list) or not raw:
        return None
    try:
        return [ToolCall.model_validate(_arguments_as_text(call)) for call in raw]
    except ValueError:  # pydantic's ValidationError: a call without a name, or not a function
        return None


def _arguments_as_text(call: Any) -> Any:
    """Some providers send ``arguments`` as an object; OpenAI's shape (and the environment's tools) take its JSON."""
    function = call.get("function") if isinstance(call, dict) else None
    if isinstance(function, dict) and isinstance(function.get("arguments"), dict):
        return {**call, "function": {**function, "arguments": json.dumps(function["arguments"])}}
    return call


def _finish(reason: Any) -> FinishReason:
    """Providers' many names, in the four the environment knows (``None`` and ``eos`` are a normal stop)."""
    if reason in ("length", "max_tokens"):
        return "length"
    if reason in ("content_filter", "tool_calls"):
        return reason
    if reason == "function_call":  # OpenAI's older name
        return "tool_calls"
    return "stop"


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) else 0
