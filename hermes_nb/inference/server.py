"""The inference server: OpenAI-compatible completions and chat, ``/generate`` on token ids (hermes-nb's shape and
vLLM's, which atroposlib's ``managed_server`` samples through), vLLM's ``/inference/v1/generate`` (what verifiers'
train client samples through), ``/v1/models`` (with vLLM's ``max_model_len``), ``/health``.

It runs inside the trainer process (uvicorn on a thread, see ``InferenceServer``) and samples from the live policy held
by a ``SamplingEngine`` (``hermes_nb.inference.contract``: native, vLLM or Tinker). ``/health`` answers 503 until the
first policy is published, so a supervisor can wait on it instead of sleeping. Chat requests may carry OpenAI ``tools``:
they are rendered by the model's chat template and the answer is parsed for Hermes-format calls
(``hermes_nb.protocol.tool_calls``). Logprobs are those of the distribution actually sampled from (see
``hermes_nb.inference.sampler``). Completions and chat answer ``stream: true`` as server-sent events
(``hermes_nb.inference.streaming``), the same sample either way.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, TypeVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from hermes_nb.inference.contract import Policy, SamplingEngine
from hermes_nb.inference.sampler import RowResult, SampleRow
from hermes_nb.inference.streaming import SSE_MEDIA_TYPE, chat_chunks, completion_chunks, server_sent_events
from hermes_nb.protocol.auth import require_run_secret
from hermes_nb.protocol.inference import (
    ChatChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatLogprobContent,
    ChatLogprobs,
    ChatResponseMessage,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    FinishReason,
    GeneratedSequence,
    GenerateRequest,
    GenerateResponse,
    HealthResponse,
    ModelCard,
    ModelList,
    NamedToolChoice,
    SamplingParams,
    TokenChoice,
    TokenGenerateRequest,
    TokenGenerateResponse,
    TokenLogprob,
    TokenLogprobs,
    Usage,
    VLLMGenerateRequest,
    VLLMGenerateResponse,
)
from hermes_nb.protocol.tool_calls import parse_tool_calls, template_message
from hermes_nb.system.net import SERVER_KEEP_ALIVE_S

_Body = TypeVar("_Body", bound=BaseModel)
# Any engine: the server reads the policy and samples but never publishes, so the kind of weights an engine takes
# is not its concern.
Engine = SamplingEngine[Any]


def _json(answer: BaseModel) -> Response:
    """``answer`` serialised by pydantic itself: FastAPI's ``jsonable_encoder`` walks every token of a batch in
    Python, while holding the GIL the trainer's step needs (this server runs in the trainer process)."""
    return Response(answer.model_dump_json(), media_type="application/json")


def _policy(engine: Engine) -> Policy:
    policy = engine.policy
    if policy is None:
        raise HTTPException(status_code=503, detail="model is still loading")
    return policy


def _check_prompt(policy: Policy, prompt: list[int], max_tokens: int, field: str) -> None:
    if not prompt:
        raise HTTPException(status_code=400, detail=f"{field}: the prompt is empty (it tokenizes to no tokens)")
    vocab = len(policy.tokenizer)
    if min(prompt) < 0 or max(prompt) >= vocab:
        raise HTTPException(status_code=400, detail=f"{field}: token ids must be in [0, {vocab})")
    limit = getattr(policy.model.config, "max_position_embeddings", None)
    if limit is not None and len(prompt) + max_tokens > limit:
        raise HTTPException(
            status_code=400,
            detail=f"{field}: prompt ({len(prompt)} tokens) + max_tokens ({max_tokens}) exceeds the model's "
            f"context of {limit} tokens",
        )


def _stop_strings(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(s for s in stop if s)


def _rows(
    policy: Policy,
    prompts: list[list[int]],
    params: SamplingParams | GenerateRequest,
    extra_stop_ids: list[int] | None = None,
    stop_strings: tuple[str, ...] = (),
) -> list[SampleRow]:
    """``n`` rows per prompt, prompt-major; a request seed gives row k the seed ``seed + k``."""
    stop_ids = policy.eos_ids | frozenset(extra_stop_ids or [])
    rows: list[SampleRow] = []
    for prompt in prompts:
        for _ in range(params.n):
            seed = None if params.seed is None else params.seed + len(rows)
            rows.append(
                SampleRow(
                    prompt=prompt,
                    max_tokens=params.max_tokens,
                    temperature=params.temperature,
                    top_p=params.top_p,
                    stop_token_ids=stop_ids,
                    stop_strings=stop_strings,
                    seed=seed,
                )
            )
    return rows


def _text(policy: Policy, result: RowResult, stop_strings: tuple[str, ...]) -> str:
    """Decoded completion, cut before the first stop string (OpenAI semantics: the stop is not returned)."""
    text = policy.decode(result.token_ids)
    cuts = [text.find(s) for s in stop_strings if s in text]
    return text[: min(cuts)] if cuts else text


def _usage(prompts: list[list[int]], n: int, results: list[RowResult]) -> Usage:
    prompt_tokens = sum(len(p) for p in prompts) * n
    completion_tokens = sum(len(r.token_ids) for r in results)
    return Usage(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )


def _completion_logprobs(policy: Policy, result: RowResult) -> CompletionLogprobs:
    tokens = [policy.tokenizer.decode([t]) for t in result.token_ids]
    offsets, position = [], 0
    for token in tokens:
        offsets.append(position)
        position += len(token)
    return CompletionLogprobs(tokens=tokens, token_logprobs=result.logprobs, text_offset=offsets)


def _encode_prompts(policy: Policy, prompt: str | list[str] | list[int]) -> list[list[int]]:
    if isinstance(prompt, str):
        return [list(policy.tokenizer.encode(prompt))]
    if prompt and all(isinstance(p, int) for p in prompt):
        return [[int(p) for p in prompt]]
    return [list(policy.tokenizer.encode(p)) for p in prompt]


def _rendered_tools(request: ChatCompletionRequest) -> list[dict[str, Any]] | None:
    """The tools the template shows the model: none for ``tool_choice: none``, only the named one for a named
    choice (400 when it is not among ``tools``)."""
    if not request.tools or request.tool_choice == "none":
        return None
    tools = request.tools
    if isinstance(request.tool_choice, NamedToolChoice):
        name = request.tool_choice.function.get("name")
        tools = [t for t in tools if t.function.name == name]
        if not tools:
            raise HTTPException(status_code=400, detail=f"tool_choice: no tool named {name!r} in tools")
    return [t.model_dump(exclude_none=True) for t in tools]


def _chat_prompt(policy: Policy, request: ChatCompletionRequest) -> list[int]:
    messages = [template_message(m) for m in request.messages]
    tools = _rendered_tools(request)
    template = getattr(policy.tokenizer, "chat_template", None)
    if tools is not None and isinstance(template, str) and "tools" not in template:
        raise HTTPException(
            status_code=400, detail="tools: the model's chat template does not render tools, so it would never see them"
        )
    try:
        text = policy.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    except ValueError as exc:  # no chat template
        raise HTTPException(
            status_code=400, detail=f"messages: the model has no usable chat template ({exc})"
        ) from None
    return list(policy.tokenizer.encode(str(text), add_special_tokens=False))


def _chat_choice(
    policy: Policy, request: ChatCompletionRequest, index: int, result: RowResult, stops: tuple[str, ...]
) -> ChatChoice:
    logprobs = None
    if request.logprobs:
        content = [
            ChatLogprobContent(token=policy.tokenizer.decode([t]), logprob=lp)
            for t, lp in zip(result.token_ids, result.logprobs, strict=True)
        ]
        logprobs = ChatLogprobs(content=content)
    text = _text(policy, result, stops)
    message = ChatResponseMessage(content=text)
    finish_reason: FinishReason = result.finish_reason
    if _rendered_tools(request) is not None:
        parsed = parse_tool_calls(text)
        if parsed.tool_calls:
            message = ChatResponseMessage(content=parsed.content, tool_calls=parsed.tool_calls)
            finish_reason = "tool_calls"
    return ChatChoice(
        index=index, message=message, logprobs=logprobs, finish_reason=finish_reason, token_ids=result.token_ids
    )


async def _json_body(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        raise HTTPException(status_code=422, detail="the body is not JSON") from None


def _validated(model: type[_Body], body: Any) -> _Body:
    """``body`` as ``model``; a 422 naming the first field that is wrong, as FastAPI's own validation answers."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


async def _generate(engine: Engine, request: GenerateRequest) -> GenerateResponse:
    policy = _policy(engine)
    for i, prompt in enumerate(request.prompt_token_ids):
        _check_prompt(policy, prompt, request.max_tokens, f"prompt_token_ids[{i}]")
    rows = _rows(policy, request.prompt_token_ids, request, request.stop_token_ids)
    results, version = await engine.sample(rows)
    sequences = [
        GeneratedSequence(
            prompt_index=k // request.n, token_ids=r.token_ids, logprobs=r.logprobs, finish_reason=r.finish_reason
        )
        for k, r in enumerate(results)
    ]
    return GenerateResponse(sequences=sequences, policy_version=version)


async def _vllm_generate(engine: Engine, request: VLLMGenerateRequest) -> VLLMGenerateResponse:
    policy = _policy(engine)
    prompt = request.prompt.prompt_token_ids
    _check_prompt(policy, prompt, request.max_tokens, "prompt.prompt_token_ids")
    stops = _stop_strings(request.stop)
    results, version = await engine.sample(_rows(policy, [prompt], request, stop_strings=stops))
    return VLLMGenerateResponse(
        text=[_text(policy, result, stops) for result in results],
        logprobs=[
            [[{str(token): logprob}] for token, logprob in zip(r.token_ids, r.logprobs, strict=True)] for r in results
        ],
        finish_reasons=[r.finish_reason for r in results],
        policy_version=version,
    )


async def _token_generate(engine: Engine, request: TokenGenerateRequest) -> TokenGenerateResponse:
    """vLLM's ``/inference/v1/generate``: the same sampling as ``/generate``, one prompt, choices in vLLM's shape."""
    policy = _policy(engine)
    params = request.sampling_params
    _check_prompt(policy, request.token_ids, params.max_tokens, "token_ids")
    results, version = await engine.sample(_rows(policy, [request.token_ids], params, params.stop_token_ids))
    choices = [
        TokenChoice(
            index=k,
            token_ids=r.token_ids,
            logprobs=TokenLogprobs(
                content=[
                    TokenLogprob(token=f"token_id:{token}", logprob=logprob)
                    for token, logprob in zip(r.token_ids, r.logprobs, strict=True)
                ]
            ),
            finish_reason=r.finish_reason,
        )
        for k, r in enumerate(results)
    ]
    return TokenGenerateResponse(
        request_id=f"gen-{uuid.uuid4().hex}",
        choices=choices,
        prompt_token_ids=request.token_ids,
        usage=_usage([request.token_ids], params.n, results),
        policy_version=version,
    )


def create_app(engine: Engine) -> FastAPI:
    app = FastAPI(title="hermes-nb inference")
    require_run_secret(app)

    @app.get("/health", response_model=None)
    async def health() -> HealthResponse | JSONResponse:
        policy = engine.policy
        if policy is None:
            return JSONResponse(status_code=503, content={"status": "loading"})
        return HealthResponse(model=policy.name, policy_version=policy.version)

    @app.get("/v1/models")
    async def models() -> ModelList:
        policy = _policy(engine)
        context = getattr(policy.model.config, "max_position_embeddings", None)
        return ModelList(data=[ModelCard(id=policy.name, max_model_len=context)])

    @app.post("/generate", response_model=None)
    async def generate(request: Request) -> Response:
        # Two shapes share vLLM's path: hermes-nb's (prompts as ``prompt_token_ids``) and vLLM's own (one
        # ``prompt: {prompt_token_ids}``), which atroposlib's VLLMServer sends. The body says which it is.
        body = await _json_body(request)
        if isinstance(body, dict) and isinstance(body.get("prompt"), dict):
            return _json(await _vllm_generate(engine, _validated(VLLMGenerateRequest, body)))
        return _json(await _generate(engine, _validated(GenerateRequest, body)))

    @app.post("/inference/v1/generate", response_model=None)
    async def token_generate(request: TokenGenerateRequest) -> Response:
        # vLLM's token-in endpoint, mounted at the root as vLLM mounts it: verifiers' train client renders the
        # conversation itself and samples here, so its trace holds exactly these tokens and logprobs.
        return _json(await _token_generate(engine, request))

    @app.post("/v1/completions", response_model=None)
    async def completions(request: CompletionRequest) -> Response:
        policy = _policy(engine)
        prompts = _encode_prompts(policy, request.prompt)
        for i, prompt in enumerate(prompts):
            _check_prompt(policy, prompt, request.max_tokens, f"prompt[{i}]")
        stops = _stop_strings(request.stop)
        results, version = await engine.sample(_rows(policy, prompts, request, stop_strings=stops))
        choices = []
        for k, result in enumerate(results):
            text = _text(policy, result, stops)
            if request.echo:
                text = policy.decode(prompts[k // request.n]) + text
            logprobs = _completion_logprobs(policy, result) if request.logprobs is not None else None
            choices.append(
                CompletionChoice(
                    index=k,
                    text=text,
                    logprobs=logprobs,
                    finish_reason=result.finish_reason,
                    token_ids=result.token_ids,
                )
            )
        answer = CompletionResponse(
            id=f"cmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=policy.name,
            choices=choices,
            usage=_usage(prompts, request.n, results),
            prompt_token_ids=prompts,
            policy_version=version,
        )
        if not request.stream:
            return _json(answer)
        events = server_sent_events(completion_chunks(answer, request.include_usage))
        return StreamingResponse(events, media_type=SSE_MEDIA_TYPE)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: ChatCompletionRequest) -> Response:
        policy = _policy(engine)
        prompt = _chat_prompt(policy, request)
        _check_prompt(policy, prompt, request.max_tokens, "messages")
        stops = _stop_strings(request.stop)
        results, _version = await engine.sample(_rows(policy, [prompt], request, stop_strings=stops))
        choices = [_chat_choice(policy, request, k, result, stops) for k, result in enumerate(results)]
        answer = ChatCompletionResponse(
            id=f"chatcmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=policy.name,
            choices=choices,
            usage=_usage([prompt], request.n, results),
            prompt_token_ids=prompt,
        )
        if not request.stream:
            return _json(answer)
        return StreamingResponse(
            server_sent_events(chat_chunks(answer, request.include_usage)), media_type=SSE_MEDIA_TYPE
        )

    return app


class InferenceServer:
    """uvicorn serving ``create_app(engine)`` on a daemon thread of this process (127.0.0.1 only)."""

    def __init__(self, engine: Engine, port: int, host: str = "127.0.0.1") -> None:
        import uvicorn

        config = uvicorn.Config(
            create_app(engine),
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            timeout_keep_alive=SERVER_KEEP_ALIVE_S,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="inference-server", daemon=True)
        self.engine = engine
        self.port = port

    def start(self, timeout: float = 30.0) -> None:
        """Start serving; returns once the socket listens (raises if uvicorn could not bind)."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"inference server could not start on port {self.port} (is it in use?)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"inference server did not start on port {self.port} within {timeout:.0f} s")
            time.sleep(0.01)  # readiness poll of an in-process flag, not a fixed wait

    def stop(self, timeout: float = 5.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        self.engine.close()
