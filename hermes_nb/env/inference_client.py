"""``ServerManager``: the environment's async client of the OpenAI-compatible inference server.

An environment calls ``await self.server.sample(prompt, n=...)`` and gets the exact token ids and logprobs the
policy sampled (the additive ``prompt_token_ids`` / ``token_ids`` fields of ``hermes_nb.protocol.inference``),
so it never needs a tokenizer of its own. Requests are capped per server (``num_max_requests_at_once``) and
retried with backoff on connection errors and 5xx for a bounded time: the inference server restarts its
sampler when new weights arrive, and a worker should wait through that rather than lose its group.

An endpoint that answers with text only (a hosted provider, or ``rl_test_inference``'s gateway in front of one)
works too: the completions carry the text, the run's tokenizer (``tokenizer_name``) reads the prompt and the
text into token ids, and they are marked ``test_only``, so what is built from them is scored, never trained on.
``sample_chat`` is ``sample`` through ``/v1/chat/completions``. ``sample_tokens`` samples from a prompt given as
token ids (a multi-turn episode's exact transcript: ``hermes_nb.env.episodes``), nothing re-tokenized.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from hermes_nb.env.coalesce import Coalescer
from hermes_nb.env.server_config import APIServerConfig
from hermes_nb.env.text_tokens import TextTokenizer, load_text_tokenizer
from hermes_nb.env.types import SampledBatch, SampledCompletion
from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.inference import (
    ChatChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessage,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    GenerateRequest,
    GenerateResponse,
    HealthResponse,
)

logger = logging.getLogger(__name__)

ResponseT = TypeVar("ResponseT", bound=BaseModel)

# How long one request keeps retrying a server that is down or answering 5xx before giving up: long enough to
# ride out a sampler reload on a CPU, short enough that a dead server surfaces as an error within minutes.
DEFAULT_RETRY_SECONDS = 120.0
# Backoff between retries: starts short (a reload often takes well under a second), doubles, capped.
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0
# 429 is "busy, try later"; 5xx are server faults that a restart may fix. Other 4xx are our request's fault.
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
RETRY_ERRORS = (httpx.TransportError,)
# Concurrent ``sample`` calls with the same settings share one request, up to this many prompts (16 samples
# each on the quickstart: 512 rows, half of what the local server batches at once).
MAX_PROMPTS_PER_REQUEST = 32


class InferenceError(HermesNBError):
    """The inference server refused a request, returned something unusable, or stayed unreachable."""


class InferenceRequestRefused(InferenceError):
    """A 4xx answer: the request itself is wrong (a prompt too long, a bad field), retrying cannot help."""


class SampleSettings(NamedTuple):
    """What must agree for two prompts to share a request."""

    n: int
    max_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]


class _Endpoint:
    """One inference server: its URLs, its key header, and the per-loop client and concurrency limit."""

    def __init__(self, config: APIServerConfig, transport: httpx.AsyncBaseTransport | None) -> None:
        self.config = config
        self.v1_url = config.base_url.rstrip("/")
        # /generate and /health live at the server root, beside /v1.
        self.root_url = self.v1_url.removesuffix("/v1")
        self._transport = transport
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None
        self._limit: asyncio.Semaphore | None = None
        self.in_flight = 0

    def headers(self) -> dict[str, str]:
        name = self.config.api_key_env
        key = os.environ.get(name) if name else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    def bound(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        """The client and limit for the running loop: both are tied to a loop, and a notebook may use several."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._limit is None or self._loop is not loop:
            self._loop = loop
            self._client = httpx.AsyncClient(
                transport=self._transport, timeout=httpx.Timeout(self.config.timeout, connect=10.0)
            )
            self._limit = asyncio.Semaphore(self.config.num_max_requests_at_once)
        return self._client, self._limit

    async def aclose(self) -> None:
        client, self._client, self._loop, self._limit = self._client, None, None, None
        if client is None:
            return
        # RuntimeError: the loop it was bound to is gone, and its sockets went with it.
        with contextlib.suppress(RuntimeError):
            await client.aclose()


class ServerManager:
    """Async client over one or more inference servers (requests go to the least busy one)."""

    def __init__(
        self,
        server_configs: Sequence[APIServerConfig],
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        coalesce: bool = True,
        tokenizer_name: str | None = None,
    ) -> None:
        configs = list(server_configs) or [APIServerConfig()]
        self.servers = [_Endpoint(config, transport) for config in configs]
        self.retry_seconds = retry_seconds
        self.coalesce = coalesce
        # Reads text-only answers into token ids (``embedded`` or a model directory); loaded on first need.
        self.tokenizer_name = tokenizer_name
        # Answers that came without token ids: what the environment built from them is test-only.
        self.text_only_answers = 0
        self._coalescer: Coalescer[SampleSettings, str, list[SampledCompletion]] = Coalescer(
            self._sample_prompts, max_items=MAX_PROMPTS_PER_REQUEST
        )
        # Called with (prompt, completions) after each sample(): process mode uses it to show decoded text.
        self.sample_listeners: list[Callable[[str, list[SampledCompletion]], None]] = []

    # ---- the RL call ---------------------------------------------------------------------------------------
    async def sample(
        self,
        prompt: str,
        *,
        n: int = 1,
        max_tokens: int = 16,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: list[str] | None = None,
    ) -> list[SampledCompletion]:
        """``n`` completions of ``prompt`` with the prompt's token ids and each sampled token's logprob.
        Calls made at the same time with the same settings travel as one request (``hermes_nb.env.coalesce``)."""
        settings = SampleSettings(n, max_tokens, temperature, top_p, tuple(stop or ()))
        if self.coalesce:
            completions = await self._coalescer.submit(settings, prompt)
        else:
            [completions] = await self._request_prompts(settings, [prompt])
        for listener in self.sample_listeners:
            listener(prompt, completions)
        return completions

    async def _request_prompts(self, settings: SampleSettings, prompts: list[str]) -> list[list[SampledCompletion]]:
        groups, _ = await self._request_with_version(settings, prompts)
        return groups

    async def _request_with_version(
        self, settings: SampleSettings, prompts: list[str]
    ) -> tuple[list[list[SampledCompletion]], int | None]:
        """``n`` completions of each prompt in one request, and the policy version that produced them."""
        response = await self.completion(
            prompt=prompts if len(prompts) > 1 else prompts[0],
            n=settings.n,
            max_tokens=settings.max_tokens,
            temperature=settings.temperature,
            top_p=settings.top_p,
            stop=list(settings.stop) or None,
            logprobs=1,
        )
        completions = completions_from_response(response, prompts, self._tokenizer_for(response))
        if len(completions) != len(prompts) * settings.n:
            raise InferenceError(
                f"inference server returned {len(completions)} choices for {len(prompts)} prompts x n={settings.n}"
            )
        groups = [completions[i * settings.n : (i + 1) * settings.n] for i in range(len(prompts))]
        return groups, response.policy_version

    async def _sample_prompts(
        self, settings: SampleSettings, prompts: list[str]
    ) -> list[list[SampledCompletion] | BaseException]:
        try:
            return list(await self._request_prompts(settings, prompts))
        except InferenceRequestRefused:
            if len(prompts) == 1:
                raise
        # One bad prompt must not fail the others that happened to share its request: ask one by one.
        return list(await asyncio.gather(*(self._request_one(settings, p) for p in prompts), return_exceptions=True))

    async def _request_one(self, settings: SampleSettings, prompt: str) -> list[SampledCompletion]:
        [completions] = await self._request_prompts(settings, [prompt])
        return completions

    async def sample_tokens(
        self,
        prompt_ids: list[int],
        *,
        n: int = 1,
        max_tokens: int = 16,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: list[str] | None = None,
    ) -> list[SampledCompletion]:
        """``n`` completions of a prompt given as token ids: exactly these ids are sampled from (nothing is
        re-tokenized), and each completion carries its sampled ids and their logprobs. One request; the server
        batches requests that arrive together. See ``sample_tokens_batch`` for the policy version."""
        batch = await self.sample_tokens_batch(
            prompt_ids, n=n, max_tokens=max_tokens, temperature=temperature, top_p=top_p, stop=stop
        )
        return batch.completions

    async def sample_tokens_batch(
        self,
        prompt_ids: list[int],
        *,
        n: int = 1,
        max_tokens: int = 16,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: list[str] | None = None,
    ) -> SampledBatch:
        """``sample_tokens``, with the policy version that sampled the completions (``None``: not said).

        From an endpoint that answers with text only, the completions are the run's tokenizer's reading of the
        text, marked ``test_only``; an endpoint that takes no token-id prompts (a hosted model behind
        ``rl_test_inference``'s gateway) refuses the request (``InferenceRequestRefused``)."""
        response = await self.completion(
            prompt=list(prompt_ids),
            n=n,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            stop=stop or None,
            logprobs=1,
        )
        if _is_text_only(response):
            tokenizer = self._tokenizer_for(response)
            assert tokenizer is not None  # _tokenizer_for returns one for every text-only answer
            choices = sorted(response.choices, key=lambda c: c.index)
            completions = [_text_only(list(prompt_ids), c.text, c.finish_reason, tokenizer) for c in choices]
        else:
            completions = completions_from_response(response)
            if any(c.prompt_token_ids != prompt_ids for c in completions):
                raise InferenceError("inference server sampled from other token ids than the prompt it was sent")
        if len(completions) != n:
            raise InferenceError(f"inference server returned {len(completions)} choices for n={n}")
        return SampledBatch(completions=completions, policy_version=response.policy_version)

    async def sample_chat(
        self,
        messages: Sequence[ChatMessage | dict[str, Any]],
        *,
        n: int = 1,
        max_tokens: int = 16,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: list[str] | None = None,
    ) -> list[SampledCompletion]:
        """``sample`` through ``/v1/chat/completions``: ``n`` answers to ``messages`` (one request, no merging)."""
        response = await self.chat_completion(
            messages, n=n, max_tokens=max_tokens, temperature=temperature, top_p=top_p, stop=stop, logprobs=True
        )
        if response.prompt_token_ids is not None and all(c.token_ids is not None for c in response.choices):
            return [_exact_chat_completion(response.prompt_token_ids, choice) for choice in response.choices]
        tokenizer = self._text_tokenizer()
        self.text_only_answers += 1
        # Only a reading of the conversation: the group is test-only, so the exact chat template does not matter.
        prompt_ids = tokenizer.encode_prompt("\n".join(_content(m) for m in messages))
        return [_text_only(prompt_ids, c.message.content or "", c.finish_reason, tokenizer) for c in response.choices]

    async def sample_batch(
        self,
        prompts: list[str],
        *,
        max_tokens: int = 16,
        temperature: float = 0.0,
        stop: list[str] | None = None,
    ) -> SampledBatch:
        """One completion of each prompt in a single request: the server samples them as one batch, from one
        policy version (what an evaluation needs to measure a single set of weights)."""
        settings = SampleSettings(1, max_tokens, temperature, 1.0, tuple(stop or ()))
        groups, version = await self._request_with_version(settings, prompts)
        return SampledBatch(completions=[completion for [completion] in groups], policy_version=version)

    # ---- OpenAI-compatible and token-level calls -----------------------------------------------------------
    async def completion(self, **kwargs: Any) -> CompletionResponse:
        endpoint = self._pick()
        kwargs.setdefault("model", endpoint.config.model_name)
        request = _validated(CompletionRequest, kwargs)
        return await self._post(endpoint, "/v1/completions", request, CompletionResponse)

    async def chat_completion(
        self, messages: Sequence[ChatMessage | dict[str, Any]], **kwargs: Any
    ) -> ChatCompletionResponse:
        endpoint = self._pick()
        kwargs.setdefault("model", endpoint.config.model_name)
        request = _validated(ChatCompletionRequest, {**kwargs, "messages": list(messages)})
        return await self._post(endpoint, "/v1/chat/completions", request, ChatCompletionResponse)

    async def generate(self, request: GenerateRequest) -> GenerateResponse:
        return await self._post(self._pick(), "/generate", request, GenerateResponse)

    async def health(self) -> HealthResponse:
        """The first server's ``/health`` (one attempt: callers polling for start-up do their own waiting)."""
        endpoint = self.servers[0]
        client, _ = endpoint.bound()
        response = await client.get(endpoint.root_url + "/health", headers=endpoint.headers())
        return _parse(response, HealthResponse, endpoint.root_url + "/health")

    async def aclose(self) -> None:
        for endpoint in self.servers:
            await endpoint.aclose()

    # ---- plumbing ------------------------------------------------------------------------------------------
    def _tokenizer_for(self, response: CompletionResponse) -> TextTokenizer | None:
        """The run's tokenizer when ``response`` is text only (and count it), else None."""
        if not _is_text_only(response):
            return None
        self.text_only_answers += 1
        return self._text_tokenizer()

    def _text_tokenizer(self) -> TextTokenizer:
        if self.tokenizer_name is None:
            raise InferenceError(
                "the inference server answered with text only (no token ids); a tokenizer_name is needed to read it"
            )
        return load_text_tokenizer(self.tokenizer_name)

    def _pick(self) -> _Endpoint:
        return min(self.servers, key=lambda e: e.in_flight / e.config.num_max_requests_at_once)

    async def _post(
        self, endpoint: _Endpoint, path: str, request: BaseModel, response_type: type[ResponseT]
    ) -> ResponseT:
        url = endpoint.root_url + path
        body = request.model_dump(mode="json", exclude_none=True)
        client, limit = endpoint.bound()
        endpoint.in_flight += 1
        try:
            async with limit:
                response = await self._post_with_retries(client, url, body, endpoint.headers())
        finally:
            endpoint.in_flight -= 1
        return _parse(response, response_type, url)

    async def _post_with_retries(
        self, client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
    ) -> httpx.Response:
        deadline = time.monotonic() + self.retry_seconds
        backoff = FIRST_BACKOFF_S
        while True:
            try:
                response = await client.post(url, json=body, headers=headers)
                if response.status_code not in RETRY_STATUS:
                    return response
                problem = f"HTTP {response.status_code}"
            except RETRY_ERRORS as exc:
                problem = f"{type(exc).__name__}: {exc}"
            if time.monotonic() + backoff > deadline:
                raise InferenceError(
                    f"inference server {url} still failing after {self.retry_seconds:.0f} s ({problem})"
                )
            logger.debug("inference %s: %s; retrying in %.1f s", url, problem, backoff)
            # Jitter so that many workers retrying at once do not hit a restarting server in lockstep.
            await asyncio.sleep(backoff * random.uniform(0.5, 1.0))
            backoff = min(backoff * 2, MAX_BACKOFF_S)


def _validated(model: type[ResponseT], values: dict[str, Any]) -> ResponseT:
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InferenceError(f"{model.__name__}.{where}: {first['msg']} (got {first.get('input')!r})") from None


def _parse(response: httpx.Response, response_type: type[ResponseT], url: str) -> ResponseT:
    if response.status_code >= 400:
        problem = f"inference server {url} answered HTTP {response.status_code}: {_detail(response)}"
        raise InferenceRequestRefused(problem) if response.status_code < 500 else InferenceError(problem)
    try:
        return response_type.model_validate_json(response.content)
    except ValidationError as exc:
        raise InferenceError(f"inference server {url} returned an invalid {response_type.__name__}: {exc}") from None


def _detail(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(data, dict) and "detail" in data:
        return str(data["detail"])[:300]
    return str(data)[:300]


def completions_from_response(
    response: CompletionResponse, prompts: Sequence[str] | None = None, tokenizer: TextTokenizer | None = None
) -> list[SampledCompletion]:
    """One ``SampledCompletion`` per choice, prompt-major. The server's token ids when it sent them (checking
    that any logprobs match them); from a text-only answer, ``tokenizer``'s reading of ``prompts`` and the text."""
    if _is_text_only(response):
        if prompts is None or tokenizer is None:
            raise InferenceError("inference server returned no prompt_token_ids; it must fill this additive field")
        return _text_only_completions(response, prompts, tokenizer)
    prompt_ids_P = response.prompt_token_ids or []
    per_prompt = _choices_per_prompt(response, len(prompt_ids_P))
    return [
        _exact_completion(prompt_ids_P[choice.index // per_prompt], choice)
        for choice in sorted(response.choices, key=lambda c: c.index)
    ]


def _is_text_only(response: CompletionResponse) -> bool:
    return not response.prompt_token_ids or any(choice.token_ids is None for choice in response.choices)


def _choices_per_prompt(response: CompletionResponse, prompts: int) -> int:
    if not prompts or len(response.choices) % prompts:
        raise InferenceError(f"inference server returned {len(response.choices)} choices for {prompts} prompts")
    return len(response.choices) // prompts  # choices are prompt-major: n for the first prompt, then ...


def _exact_completion(prompt_ids: list[int], choice: CompletionChoice) -> SampledCompletion:
    token_ids = choice.token_ids or []
    logprobs_T = choice.logprobs.token_logprobs if choice.logprobs is not None else None
    if logprobs_T is not None and len(logprobs_T) != len(token_ids):
        raise InferenceError(f"choice {choice.index}: {len(logprobs_T)} logprobs for {len(token_ids)} token_ids")
    return SampledCompletion(
        text=choice.text,
        prompt_token_ids=prompt_ids,
        token_ids=token_ids,
        logprobs=logprobs_T,
        finish_reason=choice.finish_reason,
    )


def _exact_chat_completion(prompt_ids: list[int], choice: ChatChoice) -> SampledCompletion:
    token_ids = choice.token_ids or []
    logprobs_T = [c.logprob for c in choice.logprobs.content] if choice.logprobs is not None else None
    if logprobs_T is not None and len(logprobs_T) != len(token_ids):
        raise InferenceError(f"choice {choice.index}: {len(logprobs_T)} logprobs for {len(token_ids)} token_ids")
    return SampledCompletion(
        text=choice.message.content or "",
        prompt_token_ids=prompt_ids,
        token_ids=token_ids,
        logprobs=logprobs_T,
        finish_reason=choice.finish_reason,
    )


def _text_only_completions(
    response: CompletionResponse, prompts: Sequence[str], tokenizer: TextTokenizer
) -> list[SampledCompletion]:
    per_prompt = _choices_per_prompt(response, len(prompts))
    prompt_ids_P = [tokenizer.encode_prompt(prompt) for prompt in prompts]
    return [
        _text_only(prompt_ids_P[choice.index // per_prompt], choice.text, choice.finish_reason, tokenizer)
        for choice in sorted(response.choices, key=lambda c: c.index)
    ]


def _text_only(prompt_ids: list[int], text: str, finish_reason: str, tokenizer: TextTokenizer) -> SampledCompletion:
    return SampledCompletion(
        text=text,
        prompt_token_ids=prompt_ids,
        token_ids=tokenizer.encode_completion(text),
        logprobs=None,
        finish_reason=finish_reason,
        test_only=True,
    )


def _content(message: ChatMessage | dict[str, Any]) -> str:
    return (message.content or "") if isinstance(message, ChatMessage) else str(message.get("content") or "")
